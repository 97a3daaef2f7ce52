//! Strict coercion of a JSON property value into a column's SQL type.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::value::RawValue;
use serde_json::{Number, Value};

use super::value::SqlValue;
use crate::catalog::ScalarType;

/// Why a value does not fit: a code and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct CoerceError {
    /// Machine-readable code.
    pub code: &'static str,
    /// Explanation naming the expected type.
    pub message: String,
    /// Index within an array value, when the problem is an element.
    pub element: Option<usize>,
}

fn err(code: &'static str, message: impl Into<String>) -> CoerceError {
    CoerceError {
        code,
        message: message.into(),
        element: None,
    }
}

fn type_error(expected: &str, got: &Value) -> CoerceError {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    err("invalid_type", format!("expected {expected}, got {got}"))
}

/// Parse a value of the body. Its syntax was checked when the body was read,
/// but numbers beyond f64 and lone UTF-16 surrogates (`"\ud800"`) fail only now.
fn parse(raw: &str) -> Result<Value, CoerceError> {
    serde_json::from_str(raw).map_err(unreadable)
}

fn unreadable(e: serde_json::Error) -> CoerceError {
    let message = e.to_string();
    let message = message.split(" at line ").next().unwrap_or(&message);
    if message.contains("out of range") {
        err("out_of_range", format!("{message}: beyond any number type"))
    } else {
        err("invalid_text", format!("not representable text: {message}"))
    }
}

/// Coerce a non-null scalar, given as its (valid) JSON text.
pub fn scalar(text: &str, ty: ScalarType) -> Result<SqlValue, CoerceError> {
    match ty {
        // A JSON number's own text is exact; parsing it as f64 could lose digits.
        ScalarType::Numeric if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
            Ok(SqlValue::Text(text.to_owned()))
        }
        ScalarType::Text { max_chars } if text.starts_with('"') => {
            // The body's syntax is checked already, and valid JSON holds no raw
            // control character: without a backslash, the text between the
            // quotes is the string itself, and it has no NUL.
            let s = match &text[1..text.len() - 1] {
                plain if !plain.contains('\\') => plain.to_owned(),
                _ => checked_nul(serde_json::from_str(text).map_err(unreadable)?)?,
            };
            checked_length(s, max_chars).map(SqlValue::Text)
        }
        ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8 => match plain_integer(text) {
            Some(v) => ranged_integer(v, ty),
            None => scalar_value(&parse(text)?, ty),
        },
        // Checked as a value, sent as the text it was: a value would round
        // long numbers to f64 and reorder or merge an object's keys.
        ScalarType::Json | ScalarType::Jsonb => {
            if contains_nul(&parse(text)?) {
                return Err(err(
                    "invalid_text",
                    "JSON text for the database cannot contain \\u0000",
                ));
            }
            Ok(SqlValue::Json(text.to_owned()))
        }
        _ => scalar_value(&parse(text)?, ty),
    }
}

/// A JSON number written as a plain integer that fits an i64 (no fraction or exponent).
fn plain_integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut value: i64 = 0;
    for b in digits.bytes() {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + i64::from(digit);
    }
    Some(if digits.len() < text.len() {
        -value
    } else {
        value
    })
}

/// An integer for an integer column, range-checked.
fn ranged_integer(v: i64, ty: ScalarType) -> Result<SqlValue, CoerceError> {
    let (min, max, name) = match ty {
        ScalarType::Int2 => (i16::MIN.into(), i16::MAX.into(), "smallint"),
        ScalarType::Int4 => (i32::MIN.into(), i32::MAX.into(), "integer"),
        _ => (i64::MIN, i64::MAX, "bigint"),
    };
    if v < min || v > max {
        return Err(err(
            "out_of_range",
            format!("{v} is out of range for {name}"),
        ));
    }
    Ok(match ty {
        ScalarType::Int2 => SqlValue::Int2(v as i16),
        ScalarType::Int4 => SqlValue::Int4(v as i32),
        _ => SqlValue::Int8(v),
    })
}

fn scalar_value(value: &Value, ty: ScalarType) -> Result<SqlValue, CoerceError> {
    match ty {
        ScalarType::Int2 | ScalarType::Int4 | ScalarType::Int8 => {
            integer(value, ty).and_then(|v| ranged_integer(v, ty))
        }
        ScalarType::Float8 => float(value, f64::MAX).map(SqlValue::Float8),
        ScalarType::Float4 => float(value, f32::MAX.into()).map(|v| SqlValue::Float4(v as f32)),
        ScalarType::Numeric => numeric(value).map(SqlValue::Text),
        ScalarType::Text { .. } => Err(type_error("a string", value)),
        ScalarType::Bool => value
            .as_bool()
            .map(SqlValue::Bool)
            .ok_or_else(|| type_error("a boolean", value)),
        ScalarType::Uuid => {
            let s = value
                .as_str()
                .ok_or_else(|| type_error("a UUID string", value))?;
            uuid::Uuid::parse_str(s)
                .map(SqlValue::Uuid)
                .map_err(|_| err("invalid_uuid", format!("'{s}' is not a UUID")))
        }
        ScalarType::Date => {
            let s = value
                .as_str()
                .ok_or_else(|| type_error("a date string (YYYY-MM-DD)", value))?;
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map(SqlValue::Date)
                .map_err(|_| {
                    err(
                        "invalid_date",
                        format!("'{s}' is not an RFC 3339 full-date (YYYY-MM-DD)"),
                    )
                })
        }
        ScalarType::Timestamp => timestamp(value).map(SqlValue::Timestamp),
        ScalarType::Timestamptz => {
            let s = value
                .as_str()
                .ok_or_else(|| type_error("an RFC 3339 date-time string", value))?;
            DateTime::parse_from_rfc3339(s)
                .map(|t| SqlValue::Timestamptz(t.with_timezone(&Utc)))
                .map_err(|_| {
                    err(
                        "invalid_timestamp",
                        format!("'{s}' is not an RFC 3339 date-time with offset, e.g. 2024-05-01T12:00:00Z"),
                    )
                })
        }
        ScalarType::Json | ScalarType::Jsonb => unreachable!("scalar() sends JSON as its text"),
    }
}

/// Coerce a JSON array, given as its (valid) JSON text, into a
/// one-dimensional SQL array (null elements allowed).
pub fn array(raw: &str, elem: ScalarType) -> Result<SqlValue, CoerceError> {
    let items: Vec<&RawValue> = serde_json::from_str(raw)
        .map_err(|_| parse(raw).map_or_else(|e| e, |v| type_error("an array", &v)))?;
    let nested_allowed = matches!(elem, ScalarType::Json | ScalarType::Jsonb);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = |e: CoerceError| CoerceError {
                element: Some(i),
                ..e
            };
            match item.get() {
                "null" => Ok(SqlValue::Null),
                t if t.starts_with('[') && !nested_allowed => Err(at(err(
                    "invalid_type",
                    "only one-dimensional arrays are supported",
                ))),
                text => scalar(text, elem).map_err(at),
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(SqlValue::Array)
}

/// 2^53: integers below it in magnitude are exact in an f64.
const F64_EXACT: f64 = 9_007_199_254_740_992.0;

/// An integral JSON number as an i64 (range-checked by the caller).
fn integer(value: &Value, ty: ScalarType) -> Result<i64, CoerceError> {
    let name = match ty {
        ScalarType::Int2 => "smallint",
        ScalarType::Int4 => "integer",
        _ => "bigint",
    };
    let n = value
        .as_number()
        .ok_or_else(|| type_error(&format!("an integer ({name})"), value))?;
    let v = match n.as_i64() {
        Some(v) => v,
        // 3.0 and 1e3 are integral; 2.5 is not. Only values an f64 holds
        // exactly (|v| < 2^53) are taken, so no digit is silently changed.
        None => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < F64_EXACT => f as i64,
            Some(f) if f.fract() == 0.0 => {
                return Err(err(
                    "out_of_range",
                    format!("{n} is out of range for {name}"),
                ))
            }
            _ => {
                return Err(err(
                    "invalid_type",
                    format!("expected an integer ({name}), got {n}"),
                ))
            }
        },
    };
    Ok(v)
}

fn float(value: &Value, max: f64) -> Result<f64, CoerceError> {
    let n = value
        .as_number()
        .ok_or_else(|| type_error("a number", value))?;
    match n.as_f64() {
        Some(f) if f.is_finite() && f.abs() <= max => Ok(f),
        _ => Err(err(
            "out_of_range",
            format!("{n} is out of range for the column's floating-point type"),
        )),
    }
}

/// Strings must be decimal numbers (JSON numbers are taken as their text by [`scalar`]).
fn numeric(value: &Value) -> Result<String, CoerceError> {
    match value {
        Value::String(s) if is_decimal(s) => Ok(s.clone()),
        Value::String(s) => Err(err(
            "invalid_numeric",
            format!("'{s}' is not a decimal number"),
        )),
        other => Err(type_error("a number", other)),
    }
}

/// Whether the decimal `text` (JSON number syntax) is a value of a `numeric`
/// of this `scale` as it is, i.e. PostgreSQL would not round it. Text that
/// is no plain decimal (`NaN`, `Infinity`) is left to PostgreSQL.
pub fn exact_at_scale(text: &str, scale: i32) -> bool {
    let unsigned = text.trim_start_matches(['-', '+']);
    let (mantissa, exp) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => match e.parse::<i64>() {
            Ok(e) => (m, e),
            Err(_) => return true,
        },
        None => (unsigned, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !(int.chars().chain(frac.chars())).all(|c| c.is_ascii_digit()) {
        return true;
    }
    let digits = format!("{int}{frac}");
    let significant = digits.trim_end_matches('0');
    if significant.trim_start_matches('0').is_empty() {
        return true; // zero
    }
    // The power of ten of the last non-zero digit.
    let trailing_zeros = (digits.len() - significant.len()) as i64;
    let last = exp - frac.len() as i64 + trailing_zeros;
    last >= -i64::from(scale)
}

fn is_decimal(s: &str) -> bool {
    s.parse::<Number>().is_ok() || matches!(s, "NaN" | "Infinity" | "-Infinity")
}

/// PostgreSQL text cannot hold NUL.
fn checked_nul(s: String) -> Result<String, CoerceError> {
    if s.contains('\0') {
        return Err(err(
            "invalid_text",
            "text cannot contain the NUL character \\u0000",
        ));
    }
    Ok(s)
}

fn checked_length(s: String, max_chars: Option<usize>) -> Result<String, CoerceError> {
    if let Some(max) = max_chars {
        let len = s.chars().count();
        if len > max {
            return Err(err(
                "too_long",
                format!("{len} characters given, the column takes at most {max}"),
            ));
        }
    }
    Ok(s)
}

/// `timestamp without time zone`: a local date-time, or an RFC 3339 one converted to UTC.
fn timestamp(value: &Value) -> Result<NaiveDateTime, CoerceError> {
    let s = value
        .as_str()
        .ok_or_else(|| type_error("a date-time string", value))?;
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| DateTime::parse_from_rfc3339(s).map(|t| t.naive_utc()))
        .map_err(|_| {
            err(
                "invalid_timestamp",
                format!(
                    "'{s}' is not a date-time such as 2024-05-01T12:00:00 or 2024-05-01T12:00:00Z"
                ),
            )
        })
}

fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(text: impl ToString) -> String {
        text.to_string()
    }

    #[test]
    fn integers_are_integral_and_in_range() {
        assert_eq!(
            scalar(&raw(json!(7)), ScalarType::Int4),
            Ok(SqlValue::Int4(7))
        );
        assert_eq!(
            scalar(&raw(json!(7.0)), ScalarType::Int2),
            Ok(SqlValue::Int2(7))
        );
        assert_eq!(
            scalar(&raw(json!(2.5)), ScalarType::Int4).unwrap_err().code,
            "invalid_type"
        );
        assert_eq!(
            scalar(&raw(json!(40000)), ScalarType::Int2)
                .unwrap_err()
                .code,
            "out_of_range"
        );
        assert_eq!(
            scalar(&raw(json!("7")), ScalarType::Int8).unwrap_err().code,
            "invalid_type"
        );
        assert_eq!(
            scalar(&raw("1e30"), ScalarType::Int8).unwrap_err().code,
            "out_of_range"
        );
    }

    #[test]
    fn no_integer_is_silently_changed() {
        assert_eq!(
            scalar(&raw("-9223372036854775809"), ScalarType::Int8)
                .unwrap_err()
                .code,
            "out_of_range"
        );
        assert_eq!(
            scalar(&raw("9007199254740993.0"), ScalarType::Int8)
                .unwrap_err()
                .code,
            "out_of_range"
        );
        assert_eq!(
            scalar(&raw("1e3"), ScalarType::Int4),
            Ok(SqlValue::Int4(1000))
        );
    }

    #[test]
    fn lone_surrogates_are_invalid_text() {
        let lone = raw(r#""\ud800""#);
        let ty = ScalarType::Text { max_chars: None };
        assert_eq!(scalar(&lone, ty).unwrap_err().code, "invalid_text");
        assert_eq!(
            scalar(&lone, ScalarType::Uuid).unwrap_err().code,
            "invalid_text"
        );
    }

    #[test]
    fn numbers_beyond_f64_are_out_of_range() {
        assert_eq!(
            scalar(&raw("1e400"), ScalarType::Float8).unwrap_err().code,
            "out_of_range"
        );
        assert_eq!(
            scalar(&raw("1e400"), ScalarType::Int4).unwrap_err().code,
            "out_of_range"
        );
        assert_eq!(
            scalar(&raw("1e400"), ScalarType::Numeric),
            Ok(SqlValue::Text("1e400".into()))
        );
    }

    #[test]
    fn numeric_keeps_exact_digits() {
        assert_eq!(
            scalar(&raw("12345678901234567890.123456789"), ScalarType::Numeric),
            Ok(SqlValue::Text("12345678901234567890.123456789".into()))
        );
        assert_eq!(
            scalar(&raw(json!("0.10")), ScalarType::Numeric),
            Ok(SqlValue::Text("0.10".into()))
        );
        assert!(scalar(&raw(json!("ten")), ScalarType::Numeric).is_err());
    }

    #[test]
    fn exactness_at_a_scale() {
        for (text, scale, exact) in [
            ("1.23", 2, true),
            ("1.230", 2, true),
            ("1.234", 2, false),
            ("-1.234", 2, false),
            ("12.34e-1", 2, false),
            ("1234e-3", 3, true),
            ("1.5e1", 0, true),
            ("0.000", 0, true),
            ("150", -2, false),
            ("1500", -2, true),
            ("NaN", 2, true),
        ] {
            assert_eq!(exact_at_scale(text, scale), exact, "{text} at {scale}");
        }
    }

    #[test]
    fn text_length_counts_characters() {
        let ty = ScalarType::Text { max_chars: Some(3) };
        assert!(scalar(&raw(json!("äöü")), ty).is_ok());
        assert_eq!(
            scalar(&raw(json!("abcd")), ty).unwrap_err().code,
            "too_long"
        );
        assert_eq!(
            scalar(&raw(json!("a\u{0}")), ty).unwrap_err().code,
            "invalid_text"
        );
    }

    #[test]
    fn temporal_types() {
        assert!(scalar(&raw(json!("2024-02-29")), ScalarType::Date).is_ok());
        assert!(scalar(&raw(json!("2023-02-29")), ScalarType::Date).is_err());
        assert!(scalar(
            &raw(json!("2024-05-01T12:00:00+02:00")),
            ScalarType::Timestamptz
        )
        .is_ok());
        assert!(scalar(&raw(json!("2024-05-01T12:00:00")), ScalarType::Timestamptz).is_err());
        assert!(scalar(&raw(json!("2024-05-01T12:00:00.5")), ScalarType::Timestamp).is_ok());
        assert!(scalar(&raw(json!("2024-05-01T12:00:00Z")), ScalarType::Timestamp).is_ok());
    }

    #[test]
    fn uuid_bool_json() {
        assert!(scalar(
            &raw(json!("67e55044-10b1-426f-9247-bb680e5fe0c8")),
            ScalarType::Uuid
        )
        .is_ok());
        assert!(scalar(&raw(json!("nope")), ScalarType::Uuid).is_err());
        assert_eq!(
            scalar(&raw(json!(1)), ScalarType::Bool).unwrap_err().code,
            "invalid_type"
        );
        assert!(scalar(&raw(json!({"a": [1, "b"]})), ScalarType::Jsonb).is_ok());
        assert!(scalar(&raw(json!({"a": "\u{0}"})), ScalarType::Jsonb).is_err());
        let exact = r#"{"b": 12345678901234567890123, "a": 3.14159265358979323846, "b": 1}"#;
        assert_eq!(
            scalar(exact, ScalarType::Json),
            Ok(SqlValue::Json(exact.to_owned()))
        );
    }

    #[test]
    fn arrays_report_the_element() {
        assert_eq!(
            array(&raw(json!([1, null, 3])), ScalarType::Int4),
            Ok(SqlValue::Array(vec![
                SqlValue::Int4(1),
                SqlValue::Null,
                SqlValue::Int4(3)
            ]))
        );
        let e = array(&raw(json!([1, "x"])), ScalarType::Int4).unwrap_err();
        assert_eq!(e.element, Some(1));
        assert!(array(&raw(json!([[1]])), ScalarType::Int4).is_err());
    }
}
