//! The validating GeoJSON → little-endian EWKB writer.
//!
//! The geometry is read straight from its JSON text into a compact tree of
//! coordinates (no general JSON values); anything that is not a number or an
//! array inside `coordinates` is kept as a marker, so the encoder can say
//! exactly where it is.

use std::borrow::Cow;
use std::fmt::Write as _;

use smallvec::SmallVec;

use super::{Crs, GeometryColumn, GeometryType, GEOJSON_NAMES, GEOJSON_TYPES};
use crate::json::{Read, Reader};

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

/// A geometry as read from JSON, in the same pass as its feature. Nothing
/// about it is an error while reading: what is wrong is kept, to be reported
/// with its place by the encoder.
#[derive(Default)]
pub struct GeometryIn<'a> {
    /// JSON null (`"geometry": null`).
    pub is_null: bool,
    is_object: bool,
    /// `type`, when it is a string: a GeoJSON geometry type, or (`Err`) another name.
    kind: Option<Result<GeometryType, Cow<'a, str>>>,
    coordinates: Option<Coords>,
    /// `geometries`, when it is an array.
    geometries: Option<Vec<GeometryIn<'a>>>,
    /// The limit on positions this geometry went over while being read (the
    /// rest of it was only checked, not kept).
    too_many: Option<usize>,
}

/// What is left of one geometry's allowance while it is read: a geometry
/// past its limit is kept no further, so its memory is bounded by the
/// limit, not by the body.
struct Budget {
    /// Positions that may still be kept.
    positions: usize,
    /// Coordinate values of any kind (positions, arrays, stray values) that
    /// may still be kept: no valid geometry needs more than about twice its
    /// positions, and nesting or empty arrays must not grow the tree either.
    values: usize,
    exceeded: bool,
}

impl Budget {
    fn new(max_positions: usize) -> Self {
        Budget {
            positions: max_positions,
            values: max_positions.saturating_mul(2).saturating_add(64),
            exceeded: false,
        }
    }

    /// Take one element of an array; `false` once over the limit.
    #[inline(always)]
    fn value(&mut self) -> bool {
        Self::take(&mut self.values, &mut self.exceeded)
    }

    /// Take one position; `false` once over the limit.
    #[inline(always)]
    fn position(&mut self) -> bool {
        Self::take(&mut self.positions, &mut self.exceeded)
    }

    #[inline(always)]
    fn take(left: &mut usize, exceeded: &mut bool) -> bool {
        *exceeded |= *left == 0;
        *left = left.saturating_sub(1);
        !*exceeded
    }
}

impl<'a> GeometryIn<'a> {
    /// The `type` it names when that is no GeoJSON geometry type (a JSON-FG
    /// Polyhedron, Prism or curve, or a mistake).
    pub fn other_type(&self) -> Option<&str> {
        match &self.kind {
            Some(Err(name)) => Some(name),
            _ => None,
        }
    }

    /// Read the next value as a geometry of at most `max_positions`
    /// positions; what is not one is kept to be reported.
    pub fn read(r: &mut Reader<'a>, max_positions: usize) -> Read<Self> {
        let mut budget = Budget::new(max_positions);
        let mut g = GeometryIn::read_within(r, &mut budget)?;
        if budget.exceeded {
            g.too_many = Some(max_positions);
        }
        Ok(g)
    }

    fn read_within(r: &mut Reader<'a>, budget: &mut Budget) -> Read<Self> {
        let mut g = GeometryIn::default();
        if r.null()? {
            g.is_null = true;
            return Ok(g);
        }
        if !r.object()? {
            r.skip()?;
            return Ok(g);
        }
        g.is_object = true;
        let mut first = true;
        while let Some(key) = r.member_named(&mut first, &["type", "coordinates", "geometries"])? {
            match key {
                0 if r.peek() == b'"' => {
                    let kind = r.string_among(&GEOJSON_NAMES)?;
                    g.kind = Some(kind.map(|i| GEOJSON_TYPES[i]));
                }
                0 => {
                    g.kind = None;
                    r.skip()?;
                }
                1 => g.coordinates = Some(Coords::read(r, budget)?),
                2 => g.geometries = GeometryIn::members(r, budget)?,
                _ => r.skip()?,
            }
        }
        Ok(g)
    }

    /// A collection's `geometries`, when it is an array.
    fn members(r: &mut Reader<'a>, budget: &mut Budget) -> Read<Option<Vec<Self>>> {
        if !r.array()? {
            r.skip()?;
            return Ok(None);
        }
        let mut members = Vec::new();
        let mut first = true;
        while r.element(&mut first)? {
            if budget.value() {
                members.push(GeometryIn::read_within(r, budget)?);
            } else {
                r.skip()?;
            }
        }
        Ok(Some(members))
    }
}

/// The contents of `coordinates`: numbers, arrays, or something else (kept to be reported).
enum Coords {
    Num(f64),
    /// An array of one to three numbers, kept inline: most arrays are
    /// positions, and a million points must not cost a million allocations.
    Position([f64; 3], u8),
    List(Vec<Coords>),
    Other(&'static str),
}

impl Coords {
    fn read(r: &mut Reader<'_>, budget: &mut Budget) -> Read<Self> {
        Ok(match r.peek() {
            b'-' | b'0'..=b'9' => Coords::Num(r.number()?),
            b'[' => {
                r.array()?;
                Coords::array(r, budget)?
            }
            b'"' => {
                r.skip()?;
                Coords::Other("a string")
            }
            b't' | b'f' => {
                r.skip()?;
                Coords::Other("a boolean")
            }
            b'n' => {
                r.skip()?;
                Coords::Other("null")
            }
            b'{' => {
                r.skip()?;
                Coords::Other("an object")
            }
            _ => {
                r.skip()?; // fails: not a value
                Coords::Other("not a value")
            }
        })
    }

    /// The elements of an array just entered, counted against `budget`:
    /// past it, the rest is checked and skipped, never kept.
    fn array(r: &mut Reader<'_>, budget: &mut Budget) -> Read<Self> {
        let mut xyz = [0.0; 3];
        let mut n = 0;
        let mut first = true;
        let spilled = loop {
            if !r.element(&mut first)? {
                if n > 0 {
                    budget.position();
                }
                return Ok(match n {
                    0 => Coords::List(Vec::new()),
                    _ => Coords::Position(xyz, n as u8),
                });
            }
            match r.peek() {
                // A position's numbers, read without a value for each.
                b'-' | b'0'..=b'9' if n < 3 => {
                    xyz[n] = r.number()?;
                    n += 1;
                }
                _ if !budget.value() => {
                    return Coords::skip_rest(r, &mut first);
                }
                _ => break Coords::read(r, budget)?,
            }
        };
        let mut items: Vec<Coords> = xyz[..n].iter().map(|&v| Coords::Num(v)).collect();
        items.push(spilled);
        while r.element(&mut first)? {
            if !budget.value() {
                return Coords::skip_rest(r, &mut first);
            }
            items.push(Coords::read(r, budget)?);
        }
        Ok(Coords::List(items))
    }

    /// Check the rest of an array over the budget without keeping it (the
    /// cursor is on an element): the geometry is refused as a whole.
    fn skip_rest(r: &mut Reader<'_>, first: &mut bool) -> Read<Self> {
        r.skip()?;
        while r.element(first)? {
            r.skip()?;
        }
        Ok(Coords::List(Vec::new()))
    }
}

/// Encode the CRS84 GeoJSON geometry object in `json` as EWKB for `column`.
pub fn encode_ewkb(json: &str, column: &GeometryColumn) -> Result<Vec<u8>, GeometryError> {
    let mut r = Reader::new(json);
    let geometry = GeometryIn::read(&mut r, usize::MAX)
        .and_then(|g| r.end().map(|()| g))
        // Without the position, which is relative to this geometry only.
        .map_err(|_| {
            let what = r.error().message();
            Encoder::default().malformed(format!("not a GeoJSON geometry: {what}"))
        })?;
    encode_geometry(&geometry, column, &Crs::crs84())
}

/// The largest x or y a position may have, in any CRS: no CRS reaches 10⁹
/// of its units on Earth (the equator is 4·10⁷ m, 1.3·10⁸ ft, 360°). PROJ
/// cannot transform a position far beyond, and one stored would fail every
/// read in another CRS (CRS84, the default), and the collection's extent.
pub const MAX_COORDINATE: f64 = 1e9;

/// Encode a geometry read with its feature, in `crs`, as EWKB for `column`.
/// The EWKB carries the SRID of `crs` and x/y in easting, northing order.
pub fn encode_geometry(
    geometry: &GeometryIn<'_>,
    column: &GeometryColumn,
    crs: &Crs,
) -> Result<Vec<u8>, GeometryError> {
    let mut enc = Encoder {
        srid: crs.srid,
        swap_xy: crs.lat_first,
        ..Encoder::default()
    };
    if let Some(limit) = geometry.too_many {
        return Err(enc.invalid(
            "too_many_positions",
            format!(
                "more positions than the limit of {limit} (FEATUREPIPE_MAX_POSITIONS); \
                 the geometry was read no further"
            ),
        ));
    }
    let kind = enc.kind(geometry)?;
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
    let dims = first_dims(geometry).unwrap_or(match column.z {
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
    // A point's size is known (25 bytes in 2D with its SRID), and a request
    // may hold a million of them: allocate exactly. Others shrink at the end.
    let point = kind == GeometryType::Point && !promote;
    enc.out = Vec::with_capacity(if point { 9 + 8 * dims } else { 64 });
    if promote {
        enc.header(kind.multi().unwrap_or(kind), true);
        enc.count(1);
        enc.geometry(geometry, kind, false)?;
    } else {
        enc.geometry(geometry, kind, true)?;
    }
    if !point {
        // Rows are held until written: give back what doubling over-reserved.
        enc.out.shrink_to_fit();
    }
    Ok(enc.out)
}

/// Number of values in the first position found, if any (2 or 3 when valid).
fn first_dims(geometry: &GeometryIn<'_>) -> Option<usize> {
    fn in_coords(c: &Coords) -> Option<usize> {
        let items = match c {
            Coords::Position(_, n) => return Some(*n as usize),
            Coords::List(items) => items,
            _ => return None,
        };
        match items.first()? {
            Coords::List(_) | Coords::Position(..) => items.iter().find_map(in_coords),
            _ => Some(items.len()),
        }
    }
    match &geometry.geometries {
        Some(members) => members.iter().find_map(first_dims),
        None => geometry.coordinates.as_ref().and_then(in_coords),
    }
}

enum Seg {
    Key(&'static str),
    Index(usize),
}

#[derive(Default)]
struct Encoder {
    out: Vec<u8>,
    z: bool,
    srid: i32,
    /// Input positions are (y, x): written as (x, y).
    swap_xy: bool,
    /// Where in the geometry the encoder is, for errors; inline, because
    /// every geometry uses it and a million points must not allocate for it.
    path: SmallVec<[Seg; 8]>,
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

    fn kind(&self, geometry: &GeometryIn<'_>) -> Result<GeometryType, GeometryError> {
        if !geometry.is_object {
            return Err(self.malformed("a geometry must be a GeoJSON geometry object or null"));
        }
        match &geometry.kind {
            Some(Ok(kind)) => Ok(*kind),
            Some(Err(name)) => {
                Err(self.malformed(format!("'{name}' is not a GeoJSON geometry type")))
            }
            None => Err(self.malformed("a geometry needs a string member \"type\"")),
        }
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
            self.out.extend_from_slice(&self.srid.to_le_bytes());
        }
    }

    fn count(&mut self, n: usize) {
        self.out.extend_from_slice(&(n as u32).to_le_bytes());
    }

    fn geometry(
        &mut self,
        geometry: &GeometryIn<'_>,
        kind: GeometryType,
        top: bool,
    ) -> Result<(), GeometryError> {
        self.header(kind, top);
        if kind == GeometryType::GeometryCollection {
            self.path.push(Seg::Key("geometries"));
            let members = geometry.geometries.as_ref().ok_or_else(|| {
                self.malformed("a GeometryCollection needs an array \"geometries\"")
            })?;
            self.count(members.len());
            for (i, member) in members.iter().enumerate() {
                self.path.push(Seg::Index(i));
                let member_kind = self.kind(member)?;
                self.geometry(member, member_kind, false)?;
                self.path.pop();
            }
            self.path.pop();
            return Ok(());
        }
        self.path.push(Seg::Key("coordinates"));
        let coords = geometry
            .coordinates
            .as_ref()
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

    fn array<'c>(&self, coords: &'c Coords) -> Result<&'c [Coords], GeometryError> {
        match coords {
            Coords::List(items) => Ok(items),
            Coords::Position(..) => {
                // Numbers where arrays belong: blame the first, as for a list.
                let mut e = self.malformed("coordinates must be arrays, not a number");
                e.path.push_str("/0");
                Err(e)
            }
            Coords::Num(_) => Err(self.malformed("coordinates must be arrays, not a number")),
            Coords::Other(what) => {
                Err(self.malformed(format!("coordinates must be arrays, not {what}")))
            }
        }
    }

    fn parts(
        &mut self,
        coords: &Coords,
        part: GeometryType,
        body: impl Fn(&mut Self, &Coords) -> Result<(), GeometryError>,
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

    fn point(&mut self, coords: &Coords) -> Result<(), GeometryError> {
        if matches!(coords, Coords::List(items) if items.is_empty()) {
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
    fn position(&mut self, value: &Coords) -> Result<[f64; 3], GeometryError> {
        if let Coords::Position(xyz, n) = value {
            self.check_len(*n as usize)?;
            self.check_reach(xyz)?;
            return Ok(self.write_position(*xyz));
        }
        let arr = self.array(value)?;
        self.check_len(arr.len())?;
        let mut xyz = [0.0; 3];
        for (i, v) in arr.iter().enumerate() {
            // On error the path is left pushed: the error carries it and encoding stops.
            self.path.push(Seg::Index(i));
            let n = match v {
                Coords::Num(n) => *n,
                Coords::List(_) | Coords::Position(..) => {
                    return Err(self.malformed("coordinates must be numbers, not an array"))
                }
                Coords::Other(what) => {
                    return Err(self.malformed(format!("coordinates must be numbers, not {what}")))
                }
            };
            self.path.pop();
            xyz[i] = n;
        }
        self.check_reach(&xyz)?;
        Ok(self.write_position(xyz))
    }

    /// x and y within [`MAX_COORDINATE`] of the origin.
    fn check_reach(&self, xyz: &[f64; 3]) -> Result<(), GeometryError> {
        if xyz[0].abs() <= MAX_COORDINATE && xyz[1].abs() <= MAX_COORDINATE {
            return Ok(());
        }
        Err(self.invalid(
            "invalid_coordinates",
            format!(
                "a coordinate beyond ±{MAX_COORDINATE:e}: no CRS reaches that far, and \
                 such a position could not be transformed into another CRS"
            ),
        ))
    }

    /// A position has 2 or 3 numbers, as many as the geometry's others.
    fn check_len(&self, len: usize) -> Result<(), GeometryError> {
        let want = if self.z { 3 } else { 2 };
        if !(2..=3).contains(&len) {
            return Err(self.malformed(format!("a position has 2 or 3 numbers, not {len}")));
        }
        if len != want {
            return Err(self.invalid(
                "dimension_mismatch",
                format!("a position has {len} numbers, the geometry's others have {want}"),
            ));
        }
        Ok(())
    }

    /// Write a checked position, x first.
    fn write_position(&mut self, mut xyz: [f64; 3]) -> [f64; 3] {
        if self.swap_xy {
            xyz.swap(0, 1);
        }
        let n = if self.z { 3 } else { 2 };
        for v in &xyz[..n] {
            self.out.extend_from_slice(&v.to_le_bytes());
        }
        xyz
    }

    fn linestring(&mut self, coords: &Coords) -> Result<(), GeometryError> {
        self.line(coords, 2).map(|_| ())
    }

    /// A LineString or ring body: a count then positions; returns the end positions.
    fn line(&mut self, value: &Coords, min: usize) -> Result<Vec<[f64; 3]>, GeometryError> {
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

    fn polygon(&mut self, coords: &Coords) -> Result<(), GeometryError> {
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
    use serde_json::{json, Value};

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

    fn s(v: Value) -> String {
        v.to_string()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02X}")).collect()
    }

    #[test]
    fn point_2d_is_ewkb_with_srid() {
        let wkb =
            encode_ewkb(&s(json!({"type":"Point","coordinates":[1.0, 2.0]})), &any()).unwrap();
        // Same bytes as PostGIS: SELECT 'SRID=4326;POINT(1 2)'::geometry
        assert_eq!(
            hex(&wkb),
            "0101000020E6100000000000000000F03F0000000000000040"
        );
    }

    #[test]
    fn point_3d_sets_z_flag() {
        let wkb = encode_ewkb(&s(json!({"type":"Point","coordinates":[1, 2, 3]})), &any()).unwrap();
        assert_eq!(
            hex(&wkb),
            "01010000A0E6100000000000000000F03F00000000000000400000000000000840"
        );
    }

    #[test]
    fn lat_first_input_is_written_x_first_with_its_srid() {
        let mut r = Reader::new(r#"{"type":"Point","coordinates":[2, 1]}"#);
        let g = GeometryIn::read(&mut r, usize::MAX).unwrap();
        let epsg4326 = Crs {
            uri: String::new(),
            srid: 4326,
            lat_first: true,
        };
        let wkb = encode_geometry(&g, &any(), &epsg4326).unwrap();
        assert_eq!(
            hex(&wkb),
            "0101000020E6100000000000000000F03F0000000000000040"
        );
        let utm = Crs {
            uri: String::new(),
            srid: 25832,
            lat_first: false,
        };
        let wkb = encode_geometry(&g, &any(), &utm).unwrap();
        // SELECT 'SRID=25832;POINT(2 1)'::geometry
        assert_eq!(
            hex(&wkb),
            "0101000020E86400000000000000000040000000000000F03F"
        );
    }

    #[test]
    fn single_promoted_to_multi() {
        let wkb = encode_ewkb(
            &s(json!({"type":"Point","coordinates":[1, 2]})),
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
            &s(json!({"type":"LineString","coordinates":[[0,0],[1,1]]})),
            &col(GeometryType::Point, false),
        )
        .unwrap_err();
        assert_eq!(e.code, "geometry_type_mismatch");
        assert!(!e.is_malformed());
    }

    #[test]
    fn dimension_mismatch_against_column_and_within_geometry() {
        let e = encode_ewkb(
            &s(json!({"type":"Point","coordinates":[1, 2, 3]})),
            &col(GeometryType::Point, false),
        )
        .unwrap_err();
        assert_eq!(e.code, "dimension_mismatch");
        let e = encode_ewkb(
            &s(json!({"type":"LineString","coordinates":[[0,0,0],[1,1]]})),
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
        let e = encode_ewkb(&open.to_string(), &any()).unwrap_err();
        assert_eq!(
            (e.code, e.path.as_str()),
            ("unclosed_ring", "/coordinates/0")
        );
        let short = json!({"type":"Polygon","coordinates":[[[0,0],[1,0],[0,0]]]});
        let e = encode_ewkb(&short.to_string(), &any()).unwrap_err();
        assert_eq!(e.code, "too_few_positions");
        let ok = json!({"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,0]]]});
        assert!(encode_ewkb(&ok.to_string(), &any()).is_ok());
    }

    #[test]
    fn linestring_needs_two_positions() {
        let e = encode_ewkb(
            &s(json!({"type":"LineString","coordinates":[[0,0]]})),
            &any(),
        )
        .unwrap_err();
        assert_eq!(e.code, "too_few_positions");
    }

    #[test]
    fn malformed_inputs_point_at_the_problem() {
        let e = encode_ewkb(&s(json!({"type":"Pointy","coordinates":[0,0]})), &any()).unwrap_err();
        assert!(e.is_malformed());
        let e = encode_ewkb(
            &s(json!({"type":"MultiPoint","coordinates":[[0,0],[1,"x"]]})),
            &any(),
        )
        .unwrap_err();
        assert_eq!(e.path, "/coordinates/1/1");
        assert!(e.is_malformed());
        let e =
            encode_ewkb(&s(json!({"type":"Point","coordinates":[0,0,0,0]})), &any()).unwrap_err();
        assert!(e.is_malformed());
    }

    #[test]
    fn numbers_beyond_f64_are_malformed() {
        let e = encode_ewkb(r#"{"type":"Point","coordinates":[1e400, 0]}"#, &any()).unwrap_err();
        assert!(e.is_malformed());
        assert!(e.message.contains("out of range"), "{}", e.message);
    }

    #[test]
    fn collection_paths_reach_members() {
        let v = json!({"type":"GeometryCollection","geometries":[
            {"type":"Point","coordinates":[0,0]},
            {"type":"LineString","coordinates":[[0,0]]}
        ]});
        let e = encode_ewkb(&v.to_string(), &any()).unwrap_err();
        assert_eq!(e.path, "/geometries/1/coordinates");
    }

    /// Positions and values kept in a geometry read from its text.
    fn kept(g: &GeometryIn<'_>) -> (usize, usize) {
        fn walk(c: &Coords, n: &mut (usize, usize)) {
            n.1 += 1;
            match c {
                Coords::Position(..) => n.0 += 1,
                Coords::List(items) => items.iter().for_each(|c| walk(c, n)),
                Coords::Num(_) | Coords::Other(_) => {}
            }
        }
        let mut n = (0, 0);
        g.coordinates.iter().for_each(|c| walk(c, &mut n));
        for member in g.geometries.iter().flatten() {
            let (p, v) = kept(member);
            n = (n.0 + p, n.1 + v + 1);
        }
        n
    }

    #[test]
    fn reading_stops_keeping_a_geometry_at_its_position_limit() {
        let line = |n: usize, wrap: &str| {
            let positions = vec!["[1.5,2]"; n].join(",");
            let mut text = format!(r#"{{"type":"LineString","coordinates":[{positions}]}}"#);
            if wrap == "collection" {
                text = format!(r#"{{"type":"GeometryCollection","geometries":[{text},{text}]}}"#);
            }
            text
        };
        let read = |text: &str, limit: usize| {
            let text = text.to_owned();
            let mut r = Reader::new(&text);
            let g = GeometryIn::read(&mut r, limit).unwrap();
            r.end().unwrap();
            (g.too_many, kept(&g))
        };
        assert_eq!(read(&line(5, ""), 5), (None, (5, 6)));
        // 100 000 positions, a limit of 10: the tree holds at most one more.
        let (too_many, (positions, values)) = read(&line(100_000, ""), 10);
        assert_eq!(too_many, Some(10));
        assert!(positions <= 11 && values <= 12, "{positions} {values}");
        let (too_many, (positions, _)) = read(&line(6, "collection"), 10);
        assert_eq!((too_many, positions <= 11), (Some(10), true));
        // Empty arrays and nesting are no position, but are kept no further either.
        let empties = format!(
            r#"{{"type":"MultiPoint","coordinates":[{}]}}"#,
            vec!["[]"; 100_000].join(",")
        );
        let (too_many, (_, values)) = read(&empties, 10);
        assert_eq!(too_many, Some(10));
        assert!(values <= 2 * 10 + 64 + 1, "{values}");
        // Skipped text is still checked.
        let mut r = Reader::new(r#"{"type":"LineString","coordinates":[[0,0],[1,1],[2,]]}"#);
        assert!(GeometryIn::read(&mut r, 1).is_err());
        // And the encoder refuses it, naming the limit.
        let text = line(100, "");
        let mut r = Reader::new(&text);
        let g = GeometryIn::read(&mut r, 10).unwrap();
        let e = encode_geometry(&g, &any(), &Crs::crs84()).unwrap_err();
        assert_eq!((e.code, e.path.as_str()), ("too_many_positions", ""));
        assert!(e.message.contains("limit of 10"), "{}", e.message);
    }

    #[test]
    fn typmod_decoding() {
        // geometry(PointZ, 3857): typmod as stored by PostGIS
        let typmod = (3857 << 8) | (1 << 2) | 0x2;
        let c = GeometryColumn::from_typmod(typmod, false);
        assert_eq!(c.kind, Some(GeometryType::Point));
        assert_eq!(c.z, Some(true));
        assert_eq!(c.srid, 3857);
        assert_eq!(c.transform_to(4326), Some(3857));
        assert_eq!(c.transform_to(3857), None);
        let m = GeometryColumn::from_typmod((4326 << 8) | (1 << 2) | 0x1, false);
        assert_eq!(m.kind, Some(GeometryType::Unsupported));
    }
}
