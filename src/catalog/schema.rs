//! The JSON Schema of a collection's features, derived from its columns
//! (OGC API - Features Part 5 / Common Part 3, "Returnables and
//! Receivables"): one schema for what is read and what is written, in which
//! `readOnly` marks what clients cannot write. Validation enforces what it
//! publishes (`crate::feature`).

use serde_json::{json, Map, Value};

use super::checks::{Bound, Checks};
use super::temporal::{named_time, Temporal, TimeKind, TIME_QUERYABLE};
use super::{Collection, Column, ColumnType, ScalarType};
use crate::geometry::GeometryType;

/// Every JSON type: what a `json` column, or one of a type featurepipe does
/// not know, may hold.
const ANY_JSON: [&str; 6] = ["array", "boolean", "number", "object", "string", "null"];

/// The schema of one scalar value.
fn scalar(t: ScalarType) -> Value {
    match t {
        ScalarType::Int2 => json!({"type": "integer", "minimum": i16::MIN, "maximum": i16::MAX}),
        ScalarType::Int4 => json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX}),
        ScalarType::Int8 => json!({"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}),
        ScalarType::Float4 | ScalarType::Float8 | ScalarType::Numeric => json!({"type": "number"}),
        ScalarType::Text { max_chars: Some(n) } => json!({"type": "string", "maxLength": n}),
        ScalarType::Text { max_chars: None } => json!({"type": "string"}),
        ScalarType::Bool => json!({"type": "boolean"}),
        ScalarType::Uuid => json!({"type": "string", "format": "uuid"}),
        ScalarType::Date => json!({"type": "string", "format": "date"}),
        ScalarType::Timestamp | ScalarType::Timestamptz => {
            json!({"type": "string", "format": "date-time"})
        }
        ScalarType::Json | ScalarType::Jsonb => json!({"type": ANY_JSON}),
    }
}

/// The `format` OGC API - Features Part 5 gives a geometry of this type.
fn geometry_format(kind: Option<GeometryType>) -> &'static str {
    match kind {
        Some(GeometryType::Point) => "geometry-point",
        Some(GeometryType::LineString) => "geometry-linestring",
        Some(GeometryType::Polygon) => "geometry-polygon",
        Some(GeometryType::MultiPoint) => "geometry-multipoint",
        Some(GeometryType::MultiLineString) => "geometry-multilinestring",
        Some(GeometryType::MultiPolygon) => "geometry-multipolygon",
        Some(GeometryType::GeometryCollection) => "geometry-geometrycollection",
        _ => "geometry-any",
    }
}

/// The schema geojson.org publishes for a geometry of this type.
fn geojson_schema(kind: Option<GeometryType>) -> &'static str {
    match kind {
        Some(GeometryType::Point) => "https://geojson.org/schema/Point.json",
        Some(GeometryType::LineString) => "https://geojson.org/schema/LineString.json",
        Some(GeometryType::Polygon) => "https://geojson.org/schema/Polygon.json",
        Some(GeometryType::MultiPoint) => "https://geojson.org/schema/MultiPoint.json",
        Some(GeometryType::MultiLineString) => "https://geojson.org/schema/MultiLineString.json",
        Some(GeometryType::MultiPolygon) => "https://geojson.org/schema/MultiPolygon.json",
        Some(GeometryType::GeometryCollection) => {
            "https://geojson.org/schema/GeometryCollection.json"
        }
        _ => "https://geojson.org/schema/Geometry.json",
    }
}

/// The schema of a column's values: one type as a string (QGIS and GDAL
/// read no other form), format, length, bounds and the values allowed, and
/// `"nullable": true` (OpenAPI's keyword, an annotation to JSON Schema) where
/// the column may be NULL and features are read with a `null` there. A
/// spatial property has a format and no type.
fn values(col: &Column) -> Value {
    let mut s = match &col.ty {
        ColumnType::Scalar(t) => scalar(*t),
        ColumnType::Array(t) => json!({"type": "array", "items": scalar(*t)}),
        ColumnType::Geometry(g) => json!({"format": geometry_format(g.kind)}),
        ColumnType::Unsupported => json!({"type": ANY_JSON}),
    };
    if !matches!(col.ty, ColumnType::Geometry(_)) {
        constrain(&mut s, &col.checks);
    }
    if !col.not_null {
        s["nullable"] = json!(true);
    }
    s
}

/// Add what the column's constraints allow to the schema of its values.
fn constrain(s: &mut Value, checks: &Checks) {
    if let Some(allowed) = &checks.allowed {
        s["enum"] = json!(allowed);
    }
    if let Some(b) = &checks.minimum {
        bound(s, b, ("minimum", "exclusiveMinimum"), |a, b| a > b);
    }
    if let Some(b) = &checks.maximum {
        bound(s, b, ("maximum", "exclusiveMaximum"), |a, b| a < b);
    }
}

/// Put bound `b` under `(inclusive, exclusive)` keyword, unless the type's
/// own bound there is tighter (`tighter(type's, b)`).
fn bound(
    s: &mut Value,
    b: &Bound,
    (inclusive, exclusive): (&str, &str),
    tighter: fn(f64, f64) -> bool,
) {
    let value = b.value.as_f64().unwrap_or(f64::NAN);
    let own = s.get(inclusive).and_then(Value::as_f64);
    if own.is_some_and(|own| tighter(own, value)) {
        return;
    }
    let Some(s) = s.as_object_mut() else { return };
    if b.exclusive {
        s.remove(inclusive);
        s.insert(exclusive.into(), Value::Number(b.value.clone()));
    } else {
        s.insert(inclusive.into(), Value::Number(b.value.clone()));
    }
}

/// The JSON Schema of the features of `coll`, published at `id`: the
/// returnables and the receivables in one (`readOnly` where they differ).
pub fn feature_schema(coll: &Collection, id: &str) -> Value {
    let mut properties = Map::new();
    for (ci, col) in coll.columns.iter().enumerate() {
        let mut s = values(col);
        s["title"] = json!(col.name);
        s["description"] = json!(format!("column of type {}", col.type_sql));
        if ci == coll.geometry {
            s["x-ogc-role"] = json!("primary-geometry");
        }
        if Some(ci) == coll.primary_key {
            s["x-ogc-role"] = json!("id");
        }
        if let Some(role) = coll.time.and_then(|t| t.role(ci)) {
            s["x-ogc-role"] = json!(role);
        }
        if !coll.is_writable() || coll.read_only(ci).is_some() {
            s["readOnly"] = json!(true);
        }
        properties.insert(col.name.clone(), s);
    }
    let required: Vec<&str> = (0..coll.columns.len())
        .filter(|&ci| coll.required(ci))
        .map(|ci| coll.columns[ci].name.as_str())
        .collect();
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": id,
        "type": "object",
        "title": coll.title.as_deref().unwrap_or(&coll.id),
        "properties": properties,
        "required": required,
        // Unknown properties are refused with `unknown_property`.
        "additionalProperties": false,
    });
    // No `"description": null`: JSON Schema takes only a string there.
    if let Some(description) = &coll.description {
        schema["description"] = json!(description);
    }
    schema
}

/// The queryables of `coll` (OGC API - Features Part 3), the `columns` a
/// filter may name, published at `id`: each with one type as a string (no
/// `"null"`: a filter compares values, and clients such as QGIS read only
/// a single type), the geometry by its format and role.
pub fn queryables_schema(
    coll: &Collection,
    columns: impl Iterator<Item = usize>,
    id: &str,
) -> Value {
    let mut properties = Map::new();
    for ci in columns {
        let col = &coll.columns[ci];
        let mut s = match &col.ty {
            ColumnType::Scalar(t) => {
                let full = scalar(*t);
                let mut s = json!({"type": full["type"]});
                if let Some(format) = full.get("format") {
                    s["format"] = format.clone();
                }
                s
            }
            ColumnType::Array(t) => {
                json!({"type": "array", "items": {"type": scalar(*t)["type"]}})
            }
            // The GeoJSON schema too: QGIS takes a queryable for the
            // geometry only by its `$ref`.
            ColumnType::Geometry(g) => json!({
                "$ref": geojson_schema(g.kind),
                "format": geometry_format(g.kind),
                "x-ogc-role": "primary-geometry",
            }),
            _ => continue,
        };
        s["title"] = json!(col.name);
        if let Some(role) = coll.time.and_then(|t| t.role(ci)) {
            s["x-ogc-role"] = json!(role);
        }
        properties.insert(col.name.clone(), s);
    }
    if let Some(time) = named_time(coll, TIME_QUERYABLE) {
        properties.insert(TIME_QUERYABLE.into(), time_queryable(coll, time));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": id,
        "type": "object",
        "title": coll.title.as_deref().unwrap_or(&coll.id),
        "properties": properties,
        "additionalProperties": false,
    })
}

/// The queryable of the collection's `time` setting: an instant (a date or
/// a timestamp), or an interval of two, for the temporal functions.
fn time_queryable(coll: &Collection, time: Temporal) -> Value {
    let format = match time.kind {
        TimeKind::Date => "date",
        TimeKind::Timestamp => "date-time",
    };
    let instant = json!({"type": "string", "format": format});
    let name = |ci: usize| coll.columns[ci].name.as_str();
    match time.end {
        None => {
            let mut s = instant;
            s["title"] = json!(TIME_QUERYABLE);
            s["description"] = json!(format!("the feature's time, column {}", name(time.start)));
            s
        }
        Some(end) => json!({
            "type": "array",
            "items": instant,
            "minItems": 2,
            "maxItems": 2,
            "title": TIME_QUERYABLE,
            "description": format!(
                "the feature's time interval, columns {} to {} (a NULL end is open), for the temporal functions",
                name(time.start),
                name(end)
            ),
        }),
    }
}
