//! GeoJSON geometry → EWKB, validated against the target column.
//!
//! Our own encoder because it must keep Z, check what PostGIS would only
//! check later (or never), and say exactly where in the input a problem is.

pub mod crs;
mod encode;
mod northing_first;

pub use crs::Crs;
pub use encode::{encode_ewkb, encode_geometry, GeometryError, GeometryIn, MALFORMED};

/// The SRID of CRS84 and EPSG:4326 input, and of geography columns without one.
pub const WGS84_SRID: i32 = 4326;

/// The geometry types of GeoJSON, as [`GEOJSON_NAMES`] names them.
const GEOJSON_TYPES: [GeometryType; 7] = [
    GeometryType::Point,
    GeometryType::LineString,
    GeometryType::Polygon,
    GeometryType::MultiPoint,
    GeometryType::MultiLineString,
    GeometryType::MultiPolygon,
    GeometryType::GeometryCollection,
];

/// The names of [`GEOJSON_TYPES`] in GeoJSON's `type`.
const GEOJSON_NAMES: [&str; 7] = [
    "Point",
    "LineString",
    "Polygon",
    "MultiPoint",
    "MultiLineString",
    "MultiPolygon",
    "GeometryCollection",
];

/// The OGC simple-feature types GeoJSON can express.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeometryType {
    /// Point
    Point,
    /// LineString
    LineString,
    /// Polygon
    Polygon,
    /// MultiPoint
    MultiPoint,
    /// MultiLineString
    MultiLineString,
    /// MultiPolygon
    MultiPolygon,
    /// GeometryCollection
    GeometryCollection,
    /// A column type GeoJSON cannot fill (curves, surfaces, M coordinates).
    Unsupported,
}

impl GeometryType {
    /// The WKB type code.
    fn wkb_code(self) -> u32 {
        match self {
            Self::Point => 1,
            Self::LineString => 2,
            Self::Polygon => 3,
            Self::MultiPoint => 4,
            Self::MultiLineString => 5,
            Self::MultiPolygon => 6,
            Self::GeometryCollection => 7,
            Self::Unsupported => 0,
        }
    }

    /// The Multi type a single geometry is promoted to.
    fn multi(self) -> Option<Self> {
        match self {
            Self::Point => Some(Self::MultiPoint),
            Self::LineString => Some(Self::MultiLineString),
            Self::Polygon => Some(Self::MultiPolygon),
            _ => None,
        }
    }

    /// The GeoJSON / OGC name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Point => "Point",
            Self::LineString => "LineString",
            Self::Polygon => "Polygon",
            Self::MultiPoint => "MultiPoint",
            Self::MultiLineString => "MultiLineString",
            Self::MultiPolygon => "MultiPolygon",
            Self::GeometryCollection => "GeometryCollection",
            Self::Unsupported => "unsupported",
        }
    }
}

/// What a geometry/geography column accepts, decoded from its PostGIS typmod.
#[derive(Debug, Clone, PartialEq)]
pub struct GeometryColumn {
    /// `geography` rather than `geometry`.
    pub geography: bool,
    /// Required type; `None` accepts any.
    pub kind: Option<GeometryType>,
    /// `Some(true)`: 3D only; `Some(false)`: 2D only; `None`: either.
    pub z: Option<bool>,
    /// Column SRID; 0 when unconstrained.
    pub srid: i32,
}

impl GeometryColumn {
    /// Decode a PostGIS typmod (`-1` means unconstrained).
    pub fn from_typmod(typmod: i32, geography: bool) -> Self {
        let default_srid = if geography { WGS84_SRID } else { 0 };
        if typmod < 0 {
            return GeometryColumn {
                geography,
                kind: None,
                z: None,
                srid: default_srid,
            };
        }
        // Layout from liblwgeom: srid in bits 8..28 (signed), type in 2..7, Z bit 1, M bit 0.
        let srid = ((typmod & 0x0FFF_FF00) - (typmod & 0x1000_0000)) >> 8;
        let type_code = (typmod & 0xFC) >> 2;
        let has_z = typmod & 0x2 != 0;
        let has_m = typmod & 0x1 != 0;
        let kind = match type_code {
            0 => None,
            1 => Some(GeometryType::Point),
            2 => Some(GeometryType::LineString),
            3 => Some(GeometryType::Polygon),
            4 => Some(GeometryType::MultiPoint),
            5 => Some(GeometryType::MultiLineString),
            6 => Some(GeometryType::MultiPolygon),
            7 => Some(GeometryType::GeometryCollection),
            _ => Some(GeometryType::Unsupported),
        };
        GeometryColumn {
            geography,
            kind: if has_m {
                Some(GeometryType::Unsupported)
            } else {
                kind
            },
            z: Some(has_z),
            srid: if srid == 0 { default_srid } else { srid },
        }
    }

    /// The SRID input in SRID `input` must be transformed into, if any.
    pub fn transform_to(&self, input: i32) -> Option<i32> {
        (self.srid > 0 && self.srid != input).then_some(self.srid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geojson_names_match_their_types() {
        for (kind, name) in GEOJSON_TYPES.iter().zip(GEOJSON_NAMES) {
            assert_eq!(kind.name(), name);
        }
    }
}
