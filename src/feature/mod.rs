//! GeoJSON request bodies → validated rows for one collection.
//!
//! Everything is checked here, before a connection is taken; every problem is
//! collected with a JSON pointer so a client can fix a whole request at once.

pub mod coerce;
pub mod value;

use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::catalog::{Collection, ColumnType};
use crate::error::{ApiError, FieldError};
use crate::geometry::{encode_ewkb, MALFORMED};
use value::SqlValue;

/// One feature as the columns it writes; left-out columns take their defaults.
#[derive(Debug, Clone)]
pub struct FeatureRow {
    /// Indices into the collection's columns, ascending.
    pub columns: Vec<usize>,
    /// One value per entry of `columns`.
    pub values: Vec<SqlValue>,
}

impl FeatureRow {
    /// Approximate parameter bytes this row sends.
    pub fn wire_size(&self) -> usize {
        self.values.iter().map(SqlValue::wire_size).sum()
    }
}

/// A parsed and validated request body.
#[derive(Debug)]
pub struct ParsedBody {
    /// The body was a single Feature (not a FeatureCollection).
    pub single: bool,
    /// One row per feature, in request order.
    pub rows: Vec<FeatureRow>,
}

/// Parse a Feature or FeatureCollection and validate every feature against `coll`.
pub fn parse_body(body: &[u8], coll: &Collection) -> Result<ParsedBody, ApiError> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-json",
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    let mut v = Validator {
        coll,
        errors: Vec::new(),
    };
    let (single, features): (bool, Vec<(usize, String, &Value)>) =
        match doc.get("type").and_then(Value::as_str) {
            Some("Feature") => (true, vec![(0, String::new(), &doc)]),
            Some("FeatureCollection") => match doc.get("features") {
                Some(Value::Array(fs)) => (
                    false,
                    fs.iter()
                        .enumerate()
                        .map(|(i, f)| (i, format!("/features/{i}"), f))
                        .collect(),
                ),
                _ => {
                    return Err(malformed(
                        "a FeatureCollection needs an array member \"features\"",
                        "/features",
                    ))
                }
            },
            _ => {
                return Err(malformed(
                    "the body must be a GeoJSON Feature or FeatureCollection object",
                    "/type",
                ))
            }
        };
    let rows: Vec<FeatureRow> = features
        .into_iter()
        .filter_map(|(i, pointer, f)| v.feature(i, &pointer, f))
        .collect();
    if v.errors.is_empty() {
        return Ok(ParsedBody { single, rows });
    }
    let (status, kind) = if v.errors.iter().any(|e| e.code == MALFORMED) {
        (StatusCode::BAD_REQUEST, "invalid-geojson")
    } else {
        (StatusCode::UNPROCESSABLE_ENTITY, "validation-failed")
    };
    let features_affected = {
        let mut f: Vec<Option<usize>> = v.errors.iter().map(|e| e.feature).collect();
        f.dedup();
        f.len()
    };
    Err(ApiError::new(
        status,
        kind,
        format!(
            "{} problem(s) in {} feature(s); nothing was written",
            v.errors.len(),
            features_affected
        ),
    )
    .with_errors(v.errors))
}

fn malformed(message: &str, pointer: &str) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid-geojson", message).with_errors(vec![
        FieldError::new(0, pointer.to_owned(), MALFORMED, message),
    ])
}

struct Validator<'a> {
    coll: &'a Collection,
    errors: Vec<FieldError>,
}

impl Validator<'_> {
    fn error(&mut self, feature: usize, pointer: String, code: &str, message: impl Into<String>) {
        self.errors
            .push(FieldError::new(feature, pointer, code, message));
    }

    fn feature(&mut self, i: usize, pointer: &str, f: &Value) -> Option<FeatureRow> {
        let Some(obj) = f
            .as_object()
            .filter(|o| o.get("type") == Some(&Value::from("Feature")))
        else {
            self.error(
                i,
                pointer.to_owned(),
                MALFORMED,
                "expected a GeoJSON Feature object",
            );
            return None;
        };
        let errors_before = self.errors.len();
        let mut check_required = true;
        let mut cells: Vec<(usize, SqlValue)> = Vec::new();
        self.geometry(i, pointer, obj, &mut cells);
        let props = match obj.get("properties") {
            Some(Value::Object(p)) => Some(p),
            Some(Value::Null) => None,
            _ => {
                // Unreadable properties: which columns were meant cannot be known.
                check_required = false;
                self.error(
                    i,
                    format!("{pointer}/properties"),
                    MALFORMED,
                    "a Feature needs a member \"properties\" that is an object or null",
                );
                None
            }
        };
        if let Some(props) = props {
            self.properties(i, pointer, props, &mut cells);
        }
        self.key_from_id(i, pointer, obj, &mut cells);
        if check_required {
            self.required(i, pointer, &cells);
        }
        if self.errors.len() > errors_before {
            return None;
        }
        cells.sort_by_key(|(c, _)| *c);
        let (columns, values) = cells.into_iter().unzip();
        Some(FeatureRow { columns, values })
    }

    fn geometry(
        &mut self,
        i: usize,
        pointer: &str,
        obj: &Map<String, Value>,
        cells: &mut Vec<(usize, SqlValue)>,
    ) {
        let gi = self.coll.geometry;
        match obj.get("geometry") {
            None => self.error(
                i,
                format!("{pointer}/geometry"),
                MALFORMED,
                "a Feature needs a member \"geometry\" (an object or null)",
            ),
            Some(Value::Null) => {
                if self.coll.columns[gi].not_null && !self.coll.before_insert_trigger {
                    self.error(
                        i,
                        format!("{pointer}/geometry"),
                        "not_nullable",
                        "the geometry column is NOT NULL",
                    );
                }
                cells.push((gi, SqlValue::Null));
            }
            Some(g) => match encode_ewkb(g, self.coll.geometry_column()) {
                Ok(wkb) => cells.push((gi, SqlValue::Ewkb(wkb))),
                Err(e) => {
                    self.error(
                        i,
                        format!("{pointer}/geometry{}", e.path),
                        e.code,
                        e.message,
                    );
                    cells.push((gi, SqlValue::Null)); // given, though invalid: not also "required"
                }
            },
        }
    }

    fn properties(
        &mut self,
        i: usize,
        pointer: &str,
        props: &Map<String, Value>,
        cells: &mut Vec<(usize, SqlValue)>,
    ) {
        for (name, value) in props {
            let at = format!("{pointer}/properties/{}", escape_pointer(name));
            let Some(ci) = self.coll.column_index(name) else {
                self.error(
                    i,
                    at,
                    "unknown_property",
                    format!("the table has no column '{name}'"),
                );
                continue;
            };
            match self.cell(ci, value) {
                Ok(v) => cells.push((ci, v)),
                Err((code, message, element)) => {
                    let at = match element {
                        Some(e) => format!("{at}/{e}"),
                        None => at,
                    };
                    self.error(i, at, code, message);
                    cells.push((ci, SqlValue::Null)); // given, though invalid: not also "required"
                }
            }
        }
    }

    /// Validate one property value for column `ci`.
    fn cell(
        &self,
        ci: usize,
        value: &Value,
    ) -> Result<SqlValue, (&'static str, String, Option<usize>)> {
        let col = &self.coll.columns[ci];
        if col.generated {
            return Err((
                "read_only",
                format!("'{}' is a generated column and cannot be written", col.name),
                None,
            ));
        }
        if value.is_null() {
            return if col.not_null && !self.coll.before_insert_trigger {
                Err(("not_nullable", format!("'{}' is NOT NULL", col.name), None))
            } else {
                Ok(SqlValue::Null)
            };
        }
        let result = match &col.ty {
            ColumnType::Scalar(t) => coerce::scalar(value, *t),
            ColumnType::Array(t) => coerce::array(value, *t),
            ColumnType::Geometry(_) if ci == self.coll.geometry => {
                return Err((
                    "read_only",
                    "the geometry column is written from the Feature's \"geometry\" member".into(),
                    None,
                ))
            }
            ColumnType::Geometry(_) | ColumnType::Unsupported => {
                return Err((
                    "unsupported_type",
                    format!(
                        "columns of type {} cannot be written by featurepipe",
                        col.type_sql
                    ),
                    None,
                ))
            }
        };
        result.map_err(|e| (e.code, format!("'{}': {}", col.name, e.message), e.element))
    }

    /// A client-keyed table takes its key from the Feature's `id` when no property gives it.
    fn key_from_id(
        &mut self,
        i: usize,
        pointer: &str,
        obj: &Map<String, Value>,
        cells: &mut Vec<(usize, SqlValue)>,
    ) {
        let Some(id) = obj.get("id") else { return };
        if !(id.is_string() || id.is_number()) {
            self.error(
                i,
                format!("{pointer}/id"),
                MALFORMED,
                "a Feature id must be a string or a number",
            );
            return;
        }
        let Some(pk) = self.coll.primary_key else {
            return;
        };
        let key = &self.coll.columns[pk];
        if key.has_default() || key.generated || cells.iter().any(|(c, _)| *c == pk) {
            return; // the database assigns the key; a client id is not a key here
        }
        match self.cell(pk, id) {
            Ok(v) => cells.push((pk, v)),
            Err((code, message, _)) => self.error(i, format!("{pointer}/id"), code, message),
        }
    }

    /// Columns that are NOT NULL without a default must be given (unless a trigger may fill them).
    fn required(&mut self, i: usize, pointer: &str, cells: &[(usize, SqlValue)]) {
        if self.coll.before_insert_trigger {
            return;
        }
        for (ci, col) in self.coll.columns.iter().enumerate() {
            if col.not_null
                && !col.has_default()
                && !col.generated
                && !cells.iter().any(|(c, _)| *c == ci)
            {
                let at = if ci == self.coll.geometry {
                    format!("{pointer}/geometry")
                } else {
                    format!("{pointer}/properties/{}", escape_pointer(&col.name))
                };
                self.error(
                    i,
                    at,
                    "required",
                    format!("'{}' is NOT NULL and has no default", col.name),
                );
            }
        }
    }
}

/// Escape a member name for a JSON pointer (RFC 6901).
pub fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}
