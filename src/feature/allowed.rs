//! Whether a value is one its column's constraints allow, as far as the
//! catalog could read them ([`Checks`]): the values the schema publishes as
//! `enum`, `minimum` and `maximum`. The database checks every constraint
//! anyway; a value is refused here only when it certainly breaks one.

use std::cmp::Ordering;

use serde_json::Value;

use super::value::SqlValue;
use crate::catalog::checks::{Bound, Checks};

/// How many allowed values a message lists.
const LISTED: usize = 20;

/// The code and explanation of what `value` breaks, if it breaks anything.
pub fn violation(checks: &Checks, value: &SqlValue) -> Option<(&'static str, String)> {
    if let Some(allowed) = &checks.allowed {
        if !is_allowed(allowed, value) {
            let message = match allowed.is_empty() {
                true => format!(
                    "{} is not allowed: the constraints allow no value",
                    shown(value)
                ),
                false => format!("{} is not one of {}", shown(value), listed(allowed)),
            };
            return Some(("not_in_enum", message));
        }
    }
    let magnitude = Magnitude::of(value)?;
    let below = checks
        .minimum
        .as_ref()
        .filter(|b| magnitude.beyond(b, true));
    let above = checks
        .maximum
        .as_ref()
        .filter(|b| magnitude.beyond(b, false));
    let need = match (below, above) {
        (Some(b), _) if b.exclusive => format!("greater than {}", b.value),
        (Some(b), _) => format!("at least {}", b.value),
        (None, Some(b)) if b.exclusive => format!("less than {}", b.value),
        (None, Some(b)) => format!("at most {}", b.value),
        (None, None) => return None,
    };
    Some((
        "out_of_range",
        format!("{} is out of range: it must be {need}", shown(value)),
    ))
}

fn is_allowed(allowed: &[Value], value: &SqlValue) -> bool {
    match value {
        SqlValue::Text(s) => allowed.iter().any(|a| a.as_str() == Some(s)),
        SqlValue::Int2(v) => allowed.iter().any(|a| a.as_i64() == Some(i64::from(*v))),
        SqlValue::Int4(v) => allowed.iter().any(|a| a.as_i64() == Some(i64::from(*v))),
        SqlValue::Int8(v) => allowed.iter().any(|a| a.as_i64() == Some(*v)),
        _ => true,
    }
}

/// A number as it is compared with a bound.
#[derive(Debug, Clone, Copy)]
enum Magnitude {
    /// An integer column's value: compared exactly.
    Integer(i64),
    /// A floating-point column's value: compared as PostgreSQL compares it.
    Float(f64),
    /// A `numeric` value (its decimal text) rounded to the nearest double:
    /// only a value clearly beyond the bound is certainly beyond it.
    Decimal(f64),
}

impl Magnitude {
    fn of(value: &SqlValue) -> Option<Self> {
        Some(match value {
            SqlValue::Int2(v) => Magnitude::Integer((*v).into()),
            SqlValue::Int4(v) => Magnitude::Integer((*v).into()),
            SqlValue::Int8(v) => Magnitude::Integer(*v),
            SqlValue::Float4(v) => Magnitude::Float((*v).into()),
            SqlValue::Float8(v) => Magnitude::Float(*v),
            SqlValue::Text(decimal) => Magnitude::Decimal(decimal.parse().ok()?),
            _ => return None,
        })
    }

    /// Whether the value is certainly below a lower bound (`lower`), or
    /// above an upper one.
    fn beyond(self, bound: &Bound, lower: bool) -> bool {
        let b = bound.value.as_f64().unwrap_or(f64::NAN);
        let (order, exact) = match (self, bound.value.as_i64()) {
            (Magnitude::Integer(v), Some(b)) => (Some(v.cmp(&b)), true),
            (Magnitude::Integer(v), None) => ((v as f64).partial_cmp(&b), false),
            (Magnitude::Float(v), _) => (v.partial_cmp(&b), true),
            (Magnitude::Decimal(v), _) => (v.partial_cmp(&b), false),
        };
        let outside = if lower {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        match order {
            Some(Ordering::Equal) => bound.exclusive && exact,
            Some(o) => o == outside,
            None => false,
        }
    }
}

fn shown(value: &SqlValue) -> String {
    match value {
        SqlValue::Text(s) => format!("'{s}'"),
        SqlValue::Int2(v) => v.to_string(),
        SqlValue::Int4(v) => v.to_string(),
        SqlValue::Int8(v) => v.to_string(),
        SqlValue::Float4(v) => v.to_string(),
        SqlValue::Float8(v) => v.to_string(),
        _ => "the value".into(),
    }
}

/// The allowed values as a message lists them: `'a', 'b'` or `1, 2`.
fn listed(allowed: &[Value]) -> String {
    let mut shown: Vec<String> = allowed
        .iter()
        .take(LISTED)
        .map(|v| match v {
            Value::String(s) => format!("'{s}'"),
            other => other.to_string(),
        })
        .collect();
    if allowed.len() > LISTED {
        shown.push(format!("… ({} in all)", allowed.len()));
    }
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bound(value: Value, exclusive: bool) -> Option<Bound> {
        Some(Bound {
            value: serde_json::from_value(value).unwrap(),
            exclusive,
        })
    }

    fn code(checks: &Checks, value: SqlValue) -> Option<&'static str> {
        violation(checks, &value).map(|(code, _)| code)
    }

    #[test]
    fn enums_of_strings_and_integers() {
        let kinds = Checks {
            allowed: Some(vec![json!("a"), json!("b")]),
            ..Checks::default()
        };
        assert_eq!(code(&kinds, SqlValue::Text("a".into())), None);
        let (code, message) = violation(&kinds, &SqlValue::Text("c".into())).unwrap();
        assert_eq!(
            (code, message.as_str()),
            ("not_in_enum", "'c' is not one of 'a', 'b'")
        );
        let numbers = Checks {
            allowed: Some(vec![json!(1), json!(-2)]),
            ..Checks::default()
        };
        assert_eq!(violation(&numbers, &SqlValue::Int2(-2)), None);
        assert_eq!(
            violation(&numbers, &SqlValue::Int8(3)).map(|v| v.0),
            Some("not_in_enum")
        );
    }

    #[test]
    fn bounds_refuse_only_what_is_certainly_beyond() {
        let range = Checks {
            minimum: bound(json!(0), true),
            maximum: bound(json!(10), false),
            ..Checks::default()
        };
        assert_eq!(code(&range, SqlValue::Int4(10)), None);
        assert_eq!(code(&range, SqlValue::Int4(0)), Some("out_of_range"));
        assert_eq!(code(&range, SqlValue::Int4(11)), Some("out_of_range"));
        assert_eq!(code(&range, SqlValue::Float8(0.0)), Some("out_of_range"));
        assert_eq!(code(&range, SqlValue::Float8(1e-300)), None);
        // numeric: 0 and 0.000…1 are one double; the database decides.
        let tiny = SqlValue::Text("0.0000000000000000000000000000000000000000001e-300".into());
        assert_eq!(code(&range, tiny), None);
        assert_eq!(
            code(&range, SqlValue::Text("-0.5".into())),
            Some("out_of_range")
        );
        assert_eq!(
            code(&range, SqlValue::Text("10.000001".into())),
            Some("out_of_range")
        );
        assert_eq!(code(&range, SqlValue::Text("NaN".into())), None);
        let (_, message) = violation(&range, &SqlValue::Int4(11)).unwrap();
        assert_eq!(message, "11 is out of range: it must be at most 10");
        // Below a fractional bound.
        let half = Checks {
            maximum: bound(json!(2.5), true),
            ..Checks::default()
        };
        assert_eq!(code(&half, SqlValue::Int2(2)), None);
        assert_eq!(code(&half, SqlValue::Int2(3)), Some("out_of_range"));
    }
}
