//! The validating GeoJSON → little-endian EWKB writer.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::{GeometryColumn, GeometryType, INPUT_SRID};

const EWKB_Z: u32 = 0x8000_0000;
const EWKB_SRID: u32 = 0x2000_0000;

/// A problem with one geometry, located by a JSON pointer relative to the geometry.
#[derive(Debug, Clone, PartialEq)]
pub struct GeometryError {
    /// Pointer relative to the geometry object, e.g. `/coordinates/0/3`.
    pub path: String,
    /// Machine-readable code.
    pub code: &'static str,
    /// Explanation.
    pub message: String,
}

/// The code of input that is not GeoJSON at all (400), as opposed to GeoJSON
/// the column cannot take (422).
pub const MALFORMED: &str = "invalid_geojson";

impl GeometryError {
    /// The input is not valid GeoJSON.
    pub fn is_malformed(&self) -> bool {
        self.code == MALFORMED
    }
}

/// Encode a GeoJSON geometry object as EWKB (SRID 4326) for `column`.
pub fn encode_ewkb(value: &Value, column: &GeometryColumn) -> Result<Vec<u8>, GeometryError> {
    let mut enc = Encoder {
        out: Vec::with_capacity(64),
        z: false,
        path: Vec::new(),
    };
    let obj = enc.object(value)?;
    let kind = enc.kind(obj)?;
    let promote = match column.kind {
        None => false,
        Some(GeometryType::Unsupported) => {
            return Err(enc.invalid(
                "unsupported_column_type",
                "the geometry column's type (curves, surfaces or M coordinates) cannot be written from GeoJSON",
            ))
        }
        Some(want) if want == kind => false,
        Some(want) if kind.multi() == Some(want) => true,
        Some(want) => {
            return Err(enc.invalid(
                "geometry_type_mismatch",
                format!("{} given, the column takes {}", kind.name(), want.name()),
            ))
        }
    };
    let dims = first_dims(obj).unwrap_or(match column.z {
        Some(true) => 3,
        _ => 2,
    });
    match (column.z, dims) {
        (Some(false), 3) => {
            return Err(enc.invalid(
                "dimension_mismatch",
                "3D coordinates given, the column is 2D",
            ))
        }
        (Some(true), 2) => {
            return Err(enc.invalid(
                "dimension_mismatch",
                "2D coordinates given, the column is 3D",
            ))
        }
        _ => {}
    }
    enc.z = dims == 3;
    if promote {
        enc.header(kind.multi().unwrap_or(kind), true);
        enc.count(1);
        enc.geometry(obj, kind, false)?;
    } else {
        enc.geometry(obj, kind, true)?;
    }
    Ok(enc.out)
}

/// Number of values in the first position found, if any (2 or 3 when valid).
fn first_dims(obj: &Map<String, Value>) -> Option<usize> {
    fn in_coords(v: &Value) -> Option<usize> {
        let arr = v.as_array()?;
        match arr.first()? {
            Value::Array(_) => arr.iter().find_map(in_coords),
            _ => Some(arr.len()),
        }
    }
    match obj.get("geometries") {
        Some(Value::Array(geoms)) => geoms
            .iter()
            .filter_map(Value::as_object)
            .find_map(first_dims),
        _ => obj.get("coordinates").and_then(in_coords),
    }
}

enum Seg {
    Key(&'static str),
    Index(usize),
}

struct Encoder {
    out: Vec<u8>,
    z: bool,
    path: Vec<Seg>,
}

impl Encoder {
    fn error(&self, code: &'static str, message: String) -> GeometryError {
        let mut path = String::new();
        for seg in &self.path {
            match seg {
                Seg::Key(k) => write!(path, "/{k}"),
                Seg::Index(i) => write!(path, "/{i}"),
            }
            .expect("writing to a String cannot fail");
        }
        GeometryError {
            path,
            code,
            message,
        }
    }

    fn malformed(&self, message: impl Into<String>) -> GeometryError {
        self.error(MALFORMED, message.into())
    }

    fn invalid(&self, code: &'static str, message: impl Into<String>) -> GeometryError {
        self.error(code, message.into())
    }

    fn object<'v>(&self, value: &'v Value) -> Result<&'v Map<String, Value>, GeometryError> {
        value
            .as_object()
            .ok_or_else(|| self.malformed("a geometry must be a GeoJSON geometry object or null"))
    }

    fn kind(&self, obj: &Map<String, Value>) -> Result<GeometryType, GeometryError> {
        let name = obj
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| self.malformed("a geometry needs a string member \"type\""))?;
        GeometryType::from_geojson(name)
            .ok_or_else(|| self.malformed(format!("'{name}' is not a GeoJSON geometry type")))
    }

    fn header(&mut self, kind: GeometryType, top: bool) {
        let mut code = kind.wkb_code();
        if self.z {
            code |= EWKB_Z;
        }
        if top {
            code |= EWKB_SRID;
        }
        self.out.push(1); // little endian
        self.out.extend_from_slice(&code.to_le_bytes());
        if top {
            self.out.extend_from_slice(&INPUT_SRID.to_le_bytes());
        }
    }

    fn count(&mut self, n: usize) {
        self.out.extend_from_slice(&(n as u32).to_le_bytes());
    }

    fn geometry(
        &mut self,
        obj: &Map<String, Value>,
        kind: GeometryType,
        top: bool,
    ) -> Result<(), GeometryError> {
        self.header(kind, top);
        if kind == GeometryType::GeometryCollection {
            self.path.push(Seg::Key("geometries"));
            let geoms = obj
                .get("geometries")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    self.malformed("a GeometryCollection needs an array \"geometries\"")
                })?;
            self.count(geoms.len());
            for (i, g) in geoms.iter().enumerate() {
                self.path.push(Seg::Index(i));
                let member = self.object(g)?;
                let member_kind = self.kind(member)?;
                self.geometry(member, member_kind, false)?;
                self.path.pop();
            }
            self.path.pop();
            return Ok(());
        }
        self.path.push(Seg::Key("coordinates"));
        let coords = obj
            .get("coordinates")
            .ok_or_else(|| self.malformed("a geometry needs a member \"coordinates\""))?;
        match kind {
            GeometryType::Point => self.point(coords)?,
            GeometryType::LineString => self.linestring(coords)?,
            GeometryType::Polygon => self.polygon(coords)?,
            GeometryType::MultiPoint => self.parts(coords, GeometryType::Point, Self::point)?,
            GeometryType::MultiLineString => {
                self.parts(coords, GeometryType::LineString, Self::linestring)?
            }
            GeometryType::MultiPolygon => {
                self.parts(coords, GeometryType::Polygon, Self::polygon)?
            }
            GeometryType::GeometryCollection | GeometryType::Unsupported => {
                unreachable!("handled above or never parsed from GeoJSON")
            }
        }
        self.path.pop();
        Ok(())
    }

    fn array<'v>(&self, value: &'v Value) -> Result<&'v Vec<Value>, GeometryError> {
        value
            .as_array()
            .ok_or_else(|| self.malformed("coordinates must be arrays"))
    }

    fn parts(
        &mut self,
        coords: &Value,
        part: GeometryType,
        body: impl Fn(&mut Self, &Value) -> Result<(), GeometryError>,
    ) -> Result<(), GeometryError> {
        let parts = self.array(coords)?;
        self.count(parts.len());
        for (i, p) in parts.iter().enumerate() {
            self.path.push(Seg::Index(i));
            self.header(part, false);
            body(self, p)?;
            self.path.pop();
        }
        Ok(())
    }

    fn point(&mut self, coords: &Value) -> Result<(), GeometryError> {
        if self.array(coords)?.is_empty() {
            // POINT EMPTY is NaN coordinates in WKB.
            let n = if self.z { 3 } else { 2 };
            for _ in 0..n {
                self.out.extend_from_slice(&f64::NAN.to_le_bytes());
            }
            return Ok(());
        }
        self.position(coords).map(|_| ())
    }

    /// Write one position; returns it for ring-closure checks.
    fn position(&mut self, value: &Value) -> Result<[f64; 3], GeometryError> {
        let arr = self.array(value)?;
        let want = if self.z { 3 } else { 2 };
        if arr.len() < 2 || arr.len() > 3 {
            return Err(self.malformed(format!("a position has 2 or 3 numbers, not {}", arr.len())));
        }
        if arr.len() != want {
            return Err(self.invalid(
                "dimension_mismatch",
                format!(
                    "a position has {} numbers, the geometry's others have {want}",
                    arr.len()
                ),
            ));
        }
        let mut xyz = [0.0; 3];
        for (i, v) in arr.iter().enumerate() {
            // On error the path is left pushed: the error carries it and encoding stops.
            self.path.push(Seg::Index(i));
            // A number too large for f64 (1e999) has no finite value.
            let n = match v.as_f64() {
                Some(n) if n.is_finite() => n,
                _ if v.is_number() => {
                    return Err(self.invalid(
                        "non_finite_coordinate",
                        "coordinates must be finite numbers",
                    ))
                }
                _ => return Err(self.malformed("coordinates must be numbers")),
            };
            self.path.pop();
            xyz[i] = n;
            self.out.extend_from_slice(&n.to_le_bytes());
        }
        Ok(xyz)
    }

    fn linestring(&mut self, coords: &Value) -> Result<(), GeometryError> {
        self.line(coords, 2).map(|_| ())
    }

    /// A LineString or ring body: a count then positions; returns the end positions.
    fn line(&mut self, value: &Value, min: usize) -> Result<Vec<[f64; 3]>, GeometryError> {
        let arr = self.array(value)?;
        if !arr.is_empty() && arr.len() < min {
            let what = if min == 2 {
                "a LineString"
            } else {
                "a linear ring"
            };
            return Err(self.invalid(
                "too_few_positions",
                format!("{what} needs at least {min} positions, {} given", arr.len()),
            ));
        }
        self.count(arr.len());
        let mut ends = Vec::with_capacity(2);
        for (i, p) in arr.iter().enumerate() {
            self.path.push(Seg::Index(i));
            let xyz = self.position(p)?;
            if i == 0 || i + 1 == arr.len() {
                ends.push(xyz);
            }
            self.path.pop();
        }
        Ok(ends)
    }

    fn polygon(&mut self, coords: &Value) -> Result<(), GeometryError> {
        let rings = self.array(coords)?;
        self.count(rings.len());
        for (i, ring) in rings.iter().enumerate() {
            self.path.push(Seg::Index(i));
            let ends = self.line(ring, 4)?;
            if ends.len() == 2 && ends[0] != ends[1] {
                return Err(self.invalid(
                    "unclosed_ring",
                    "a linear ring's first and last positions must be identical",
                ));
            }
            self.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn any() -> GeometryColumn {
        GeometryColumn::from_typmod(-1, false)
    }

    fn col(kind: GeometryType, z: bool) -> GeometryColumn {
        GeometryColumn {
            geography: false,
            kind: Some(kind),
            z: Some(z),
            srid: 4326,
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02X}")).collect()
    }

    #[test]
    fn point_2d_is_ewkb_with_srid() {
        let wkb = encode_ewkb(&json!({"type":"Point","coordinates":[1.0, 2.0]}), &any()).unwrap();
        // Same bytes as PostGIS: SELECT 'SRID=4326;POINT(1 2)'::geometry
        assert_eq!(
            hex(&wkb),
            "0101000020E6100000000000000000F03F0000000000000040"
        );
    }

    #[test]
    fn point_3d_sets_z_flag() {
        let wkb = encode_ewkb(&json!({"type":"Point","coordinates":[1, 2, 3]}), &any()).unwrap();
        assert_eq!(
            hex(&wkb),
            "01010000A0E6100000000000000000F03F00000000000000400000000000000840"
        );
    }

    #[test]
    fn single_promoted_to_multi() {
        let wkb = encode_ewkb(
            &json!({"type":"Point","coordinates":[1, 2]}),
            &col(GeometryType::MultiPoint, false),
        )
        .unwrap();
        // SELECT 'SRID=4326;MULTIPOINT(1 2)'::geometry
        assert_eq!(
            hex(&wkb),
            "0104000020E6100000010000000101000000000000000000F03F0000000000000040"
        );
    }

    #[test]
    fn type_mismatch_is_reported() {
        let e = encode_ewkb(
            &json!({"type":"LineString","coordinates":[[0,0],[1,1]]}),
            &col(GeometryType::Point, false),
        )
        .unwrap_err();
        assert_eq!(e.code, "geometry_type_mismatch");
        assert!(!e.is_malformed());
    }

    #[test]
    fn dimension_mismatch_against_column_and_within_geometry() {
        let e = encode_ewkb(
            &json!({"type":"Point","coordinates":[1, 2, 3]}),
            &col(GeometryType::Point, false),
        )
        .unwrap_err();
        assert_eq!(e.code, "dimension_mismatch");
        let e = encode_ewkb(
            &json!({"type":"LineString","coordinates":[[0,0,0],[1,1]]}),
            &any(),
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            ("dimension_mismatch", "/coordinates/1")
        );
    }

    #[test]
    fn ring_rules() {
        let open = json!({"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]});
        let e = encode_ewkb(&open, &any()).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            ("unclosed_ring", "/coordinates/0")
        );
        let short = json!({"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]});
        let e = encode_ewkb(&short, &any()).unwrap_err();
        assert_eq!(e.code, "too_few_positions");
        let ok = json!({"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]});
        assert!(encode_ewkb(&ok, &any()).is_ok());
    }

    #[test]
    fn linestring_needs_two_positions() {
        let e =
            encode_ewkb(&json!({"type":"LineString","coordinates":[[0,0]]}), &any()).unwrap_err();
        assert_eq!(e.code, "too_few_positions");
    }

    #[test]
    fn malformed_inputs_point_at_the_problem() {
        let e = encode_ewkb(&json!({"type":"Pointy","coordinates":[0,0]}), &any()).unwrap_err();
        assert!(e.is_malformed());
        let e = encode_ewkb(
            &json!({"type":"MultiPoint","coordinates":[[0,0],[1,"x"]]}),
            &any(),
        )
        .unwrap_err();
        assert_eq!(e.path, "/coordinates/1/1");
        assert!(e.is_malformed());
        let e = encode_ewkb(&json!({"type":"Point","coordinates":[0,0,0,0]}), &any()).unwrap_err();
        assert!(e.is_malformed());
    }

    #[test]
    fn non_finite_coordinates_rejected() {
        let v: Value =
            serde_json::from_str(r#"{"type":"Point","coordinates":[1e400, 0]}"#).unwrap();
        let e = encode_ewkb(&v, &any()).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            ("non_finite_coordinate", "/coordinates/0")
        );
    }

    #[test]
    fn collection_paths_reach_members() {
        let v = json!({"type":"GeometryCollection","geometries":[
            {"type":"Point","coordinates":[0,0]},
            {"type":"LineString","coordinates":[[0,0]]}
        ]});
        let e = encode_ewkb(&v, &any()).unwrap_err();
        assert_eq!(e.path, "/geometries/1/coordinates");
    }

    #[test]
    fn typmod_decoding() {
        // geometry(PointZ, 3857): typmod as stored by PostGIS
        let typmod = (3857 << 8) | (1 << 2) | 0x2;
        let c = GeometryColumn::from_typmod(typmod, false);
        assert_eq!(c.kind, Some(GeometryType::Point));
        assert_eq!(c.z, Some(true));
        assert_eq!(c.srid, 3857);
        assert_eq!(c.transform_to(), Some(3857));
        let m = GeometryColumn::from_typmod((4326 << 8) | (1 << 2) | 0x1, false);
        assert_eq!(m.kind, Some(GeometryType::Unsupported));
    }
}
