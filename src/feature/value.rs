//! A validated value ready to be bound as a statement parameter.

use bytes::BytesMut;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// One bound parameter. Its variant was chosen from the column type during
/// validation, and the statement casts the parameter to exactly that type.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// `bool`
    Bool(bool),
    /// `int2`
    Int2(i16),
    /// `int4`
    Int4(i32),
    /// `int8`
    Int8(i64),
    /// `float4`
    Float4(f32),
    /// `float8`
    Float8(f64),
    /// `text` (also numeric, cast in SQL).
    Text(String),
    /// `uuid`
    Uuid(uuid::Uuid),
    /// `date`
    Date(NaiveDate),
    /// `timestamp`
    Timestamp(NaiveDateTime),
    /// `timestamptz`
    Timestamptz(DateTime<Utc>),
    /// `json` / `jsonb`: the client's own (validated) JSON text, so that the
    /// column stores exactly what was sent, digits and key order included.
    Json(String),
    /// A one-dimensional array.
    Array(Vec<SqlValue>),
    /// EWKB bytes, bound as `bytea`, `geometry` or `geography`.
    Ewkb(Vec<u8>),
}

impl SqlValue {
    /// Approximate size on the wire, for batching by bytes.
    pub fn wire_size(&self) -> usize {
        match self {
            SqlValue::Null => 0,
            SqlValue::Bool(_) => 1,
            SqlValue::Int2(_) => 2,
            SqlValue::Int4(_) | SqlValue::Float4(_) | SqlValue::Date(_) => 4,
            SqlValue::Int8(_)
            | SqlValue::Float8(_)
            | SqlValue::Timestamp(_)
            | SqlValue::Timestamptz(_) => 8,
            SqlValue::Uuid(_) => 16,
            SqlValue::Text(s) => s.len(),
            SqlValue::Json(text) => text.len(),
            SqlValue::Array(items) => 20 + items.iter().map(|v| 4 + v.wire_size()).sum::<usize>(),
            SqlValue::Ewkb(b) => b.len(),
        }
    }
}

/// The values of `rows` of one shape (each row's as `values` gives them),
/// column by column: one array parameter per column.
pub fn by_column<'a, T>(
    rows: &'a [T],
    values: impl Fn(&'a T) -> &'a [SqlValue],
) -> Vec<Vec<&'a SqlValue>> {
    let width = rows.first().map_or(0, |row| values(row).len());
    (0..width)
        .map(|c| rows.iter().map(|row| &values(row)[c]).collect())
        .collect()
}

impl ToSql for SqlValue {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            SqlValue::Null => Ok(IsNull::Yes),
            SqlValue::Bool(v) => v.to_sql(ty, out),
            SqlValue::Int2(v) => v.to_sql(ty, out),
            SqlValue::Int4(v) => v.to_sql(ty, out),
            SqlValue::Int8(v) => v.to_sql(ty, out),
            SqlValue::Float4(v) => v.to_sql(ty, out),
            SqlValue::Float8(v) => v.to_sql(ty, out),
            SqlValue::Text(v) => v.to_sql(ty, out),
            SqlValue::Uuid(v) => v.to_sql(ty, out),
            SqlValue::Date(v) => v.to_sql(ty, out),
            SqlValue::Timestamp(v) => v.to_sql(ty, out),
            SqlValue::Timestamptz(v) => v.to_sql(ty, out),
            SqlValue::Json(text) => {
                // jsonb's binary format is a version byte, then the text; json's is the text.
                if *ty == Type::JSONB {
                    out.extend_from_slice(&[1]);
                }
                out.extend_from_slice(text.as_bytes());
                Ok(IsNull::No)
            }
            SqlValue::Array(v) => v.to_sql(ty, out),
            // EWKB is the binary input format of bytea, geometry and geography alike.
            SqlValue::Ewkb(v) => {
                out.extend_from_slice(v);
                Ok(IsNull::No)
            }
        }
    }

    /// The insert statement casts every parameter to the type its variant
    /// encodes (`$3::int4`), so the declared type always matches.
    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}
