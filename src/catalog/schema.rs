//! The JSON Schema of a collection's features, derived from its columns
//! (OGC API - Features Part 5 conventions: `x-ogc-role`, `readOnly`).

use serde_json::{json, Map, Value};

use super::{Collection, ColumnType, ScalarType};
use crate::geometry::GeometryType;

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
        ScalarType::Json | ScalarType::Jsonb => json!({}),
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

/// The JSON Schema of the features of `coll`, published at `id`.
pub fn feature_schema(coll: &Collection, id: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (ci, col) in coll.columns.iter().enumerate() {
        let mut s = match &col.ty {
            ColumnType::Scalar(t) => scalar(*t),
            ColumnType::Array(t) => json!({"type": "array", "items": scalar(*t)}),
            ColumnType::Geometry(g) => json!({"format": geometry_format(g.kind)}),
            ColumnType::Unsupported => json!({}),
        };
        s["title"] = json!(col.name);
        s["description"] = json!(format!("column of type {}", col.type_sql));
        if ci == coll.geometry {
            s["x-ogc-role"] = json!("primary-geometry");
        }
        if Some(ci) == coll.primary_key {
            s["x-ogc-role"] = json!("id");
        }
        let read_only = col.generated
            || col.ty == ColumnType::Unsupported
            || (Some(ci) == coll.primary_key && col.has_default())
            || !coll.is_writable();
        if read_only {
            s["readOnly"] = json!(true);
        }
        if col.not_null && !col.has_default() && !col.generated {
            required.push(col.name.clone());
        }
        properties.insert(col.name.clone(), s);
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": id,
        "type": "object",
        "title": coll.id,
        "description": coll.description,
        "properties": properties,
        "required": required,
        // Unknown properties are refused with `unknown_property`.
        "additionalProperties": false,
    })
}
