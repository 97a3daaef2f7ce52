//! JSON-FG's `time`: checked as the specification defines it, and mapped
//! onto the columns a collection stores it in (its `time` setting).

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime};
use serde_json::Value;

use super::{problem, Problem};
use crate::catalog::temporal::{Temporal, TimeKind};
use crate::catalog::Collection;
use crate::geometry::MALFORMED;

/// A checked `time`: what it gives, as the text it was given in.
#[derive(Debug, Default, PartialEq)]
pub struct Time {
    /// `date`: an RFC 3339 full-date.
    pub date: Option<String>,
    /// `timestamp`: an RFC 3339 date-time in UTC.
    pub timestamp: Option<String>,
    /// `interval`: its start and end.
    pub interval: Option<Ends>,
}

/// An interval's start and end as given, `None` for `..` (open).
pub type Ends = [Option<String>; 2];

impl Time {
    /// Whether it gives no date, timestamp or interval (only members JSON-FG
    /// does not define): nothing to store.
    pub fn is_empty(&self) -> bool {
        *self == Time::default()
    }
}

/// One column's value taken from `time`.
#[derive(Debug, PartialEq)]
pub struct Cell {
    /// The column.
    pub column: usize,
    /// Where in the feature the value is (`/time/date`, `/time/interval/0`…).
    pub pointer: String,
    /// The value as JSON text: a string, or `null` (no time, an open end).
    pub json: String,
}

/// The problem code of a `time` the collection's columns cannot hold.
pub const UNSTORABLE: &str = "unstorable_time";

/// How `time` (`None`: `"time": null`) is stored in `temporal`'s columns of
/// `coll`: each column's value, and what of `time` they cannot hold (a
/// `timestamp` in date columns, a `date` alone in timestamp columns, an
/// interval where an instant is stored, or an instant beside a stored
/// interval). An instant alone fills both ends of an interval.
pub fn cells(
    time: Option<&Time>,
    temporal: Temporal,
    coll: &Collection,
) -> (Vec<Cell>, Vec<Problem>) {
    let cell = |column: usize, pointer: &str, text: Option<&String>| Cell {
        column,
        pointer: format!("/time{pointer}"),
        json: text.map_or_else(
            || "null".to_owned(),
            |t| Value::from(t.as_str()).to_string(),
        ),
    };
    let Some(time) = time else {
        return (
            temporal.columns().map(|ci| cell(ci, "", None)).collect(),
            Vec::new(),
        );
    };
    let kind = temporal.kind;
    let names = || {
        let names: Vec<&str> = temporal
            .columns()
            .map(|ci| coll.columns[ci].name.as_str())
            .collect();
        names.join("' and '")
    };
    let stored = match kind {
        TimeKind::Date => "dates",
        TimeKind::Timestamp => "timestamps",
    };
    let unstorable = |at: &str, why: String| problem(format!("/time{at}"), UNSTORABLE, why);
    let mut cells = Vec::new();
    let mut problems = Vec::new();
    let instant = match kind {
        TimeKind::Date => time.date.as_ref(),
        TimeKind::Timestamp => time.timestamp.as_ref(),
    };
    let other = match kind {
        TimeKind::Date => ("timestamp", time.timestamp.is_some()),
        TimeKind::Timestamp => ("date", time.date.is_some()),
    };
    match (temporal.end, &time.interval) {
        (None, interval) => {
            if let Some(text) = instant {
                cells.push(cell(
                    temporal.start,
                    &format!("/{}", kind.member()),
                    Some(text),
                ));
            }
            if interval.is_some() {
                problems.push(unstorable(
                    "/interval",
                    format!(
                        "collection '{}' stores an instant in '{}', not an interval: give \"{}\"",
                        coll.id,
                        names(),
                        kind.member()
                    ),
                ));
            }
        }
        (Some(end), Some(ends)) => {
            for (i, (ci, text)) in [(temporal.start, &ends[0]), (end, &ends[1])]
                .into_iter()
                .enumerate()
            {
                match text {
                    Some(t) if end_kind(t) != kind => problems.push(unstorable(
                        &format!("/interval/{i}"),
                        format!(
                            "collection '{}' stores the interval in '{}' as {stored}",
                            coll.id,
                            names()
                        ),
                    )),
                    text => cells.push(cell(ci, &format!("/interval/{i}"), text.as_ref())),
                }
            }
            if instant.is_some() {
                problems.push(unstorable(
                    &format!("/{}", kind.member()),
                    format!(
                        "collection '{}' stores the interval only: give the instant as the interval [t, t], or leave it out",
                        coll.id
                    ),
                ));
            }
        }
        (Some(end), None) => {
            if let Some(text) = instant {
                cells.push(cell(
                    temporal.start,
                    &format!("/{}", kind.member()),
                    Some(text),
                ));
                cells.push(cell(end, &format!("/{}", kind.member()), Some(text)));
            }
        }
    }
    // A date beside a stored timestamp says nothing more: they were checked
    // to meet.
    let implied = kind == TimeKind::Timestamp && instant.is_some();
    if other.1 && !implied {
        problems.push(unstorable(
            &format!("/{}", other.0),
            format!(
                "collection '{}' stores time in '{}' as {stored}: give \"{}\"",
                coll.id,
                names(),
                kind.member()
            ),
        ));
    }
    (cells, problems)
}

/// Whether an interval's end (not `..`) is a date or a timestamp.
fn end_kind(text: &str) -> TimeKind {
    match text.len() {
        10 => TimeKind::Date,
        _ => TimeKind::Timestamp,
    }
}

/// One end of a time: an instant or an interval's bound, as the span of
/// timestamps it covers (a date covers its day).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: NaiveDateTime,
    end: NaiveDateTime,
    date: bool,
}

fn day(date: NaiveDate) -> Span {
    Span {
        start: date.and_time(NaiveTime::MIN),
        end: date
            .and_hms_nano_opt(23, 59, 59, 999_999_999)
            .unwrap_or_default(),
        date: true,
    }
}

/// `YYYY-MM-DD` (RFC 3339 full-date) of year 0001 or later.
fn date(text: &str) -> Option<Span> {
    let digits = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    digits
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .map(day)
        .filter(from_year_one)
}

/// RFC 3339's year 0000 is 1 BC to PostgreSQL, which reads it back as no
/// RFC 3339 text: such times are refused rather than stored.
fn from_year_one(span: &Span) -> bool {
    span.start.year() >= 1
}

/// An RFC 3339 date-time in UTC (`Z`), as JSON-FG's timestamps are.
fn timestamp(text: &str) -> Option<Span> {
    let b = text.as_bytes();
    let shaped = b.len() >= 20 && b[10] == b'T' && text.ends_with('Z');
    let t = shaped
        .then(|| DateTime::parse_from_rfc3339(text).ok())
        .flatten()?
        .naive_utc();
    Some(Span {
        start: t,
        end: t,
        date: false,
    })
    .filter(from_year_one)
}

/// Check a `time` value (JSON-FG /req/core/instant, interval,
/// instant-and-interval, utc); `None` for null.
pub fn parse(raw: &str) -> Result<Option<Time>, Problem> {
    let invalid =
        |at: &str, message: String| problem(format!("/time{at}"), "invalid_time", message);
    let value: Value = serde_json::from_str(raw).unwrap_or(Value::Bool(false));
    let members = match value {
        Value::Null => return Ok(None),
        Value::Object(members) if !members.is_empty() => members,
        _ => {
            return Err(problem(
                "/time",
                MALFORMED,
                "\"time\" is null or an object with a date, a timestamp or an interval",
            ))
        }
    };
    let mut time = Time::default();
    let mut spans: Vec<(&str, Span)> = Vec::new();
    // Both instants are read alike: by name, with their parser.
    let read_date: fn(&str) -> Option<Span> = date;
    let instants = [
        (
            "date",
            read_date,
            "an RFC 3339 full-date (YYYY-MM-DD) of year 0001 or later",
            &mut time.date,
        ),
        (
            "timestamp",
            timestamp,
            "an RFC 3339 date-time in UTC (…T…Z) of year 0001 or later",
            &mut time.timestamp,
        ),
    ];
    for (name, read, what, given) in instants {
        let Some(v) = members.get(name) else {
            continue;
        };
        let span = v
            .as_str()
            .and_then(read)
            .ok_or_else(|| invalid(&format!("/{name}"), format!("{v} is not {what}")))?;
        spans.push((name, span));
        *given = v.as_str().map(str::to_owned);
    }
    if let Some(v) = members.get("interval") {
        let (span, ends) = interval(v).map_err(|(at, m)| invalid(&at, m))?;
        spans.push(("interval", span));
        time.interval = Some(ends);
    }
    // /req/core/instant-and-interval: all that is given describes one time.
    for (i, (a, x)) in spans.iter().enumerate() {
        for (b, y) in &spans[i + 1..] {
            if x.start > y.end || y.start > x.end {
                return Err(problem(
                    "/time",
                    "inconsistent_time",
                    format!("the {a} and the {b} do not meet: they must describe the same time"),
                ));
            }
        }
    }
    Ok(Some(time))
}

/// An interval's span and its ends (`None` for `..`, open).
fn interval(v: &Value) -> Result<(Span, Ends), (String, String)> {
    let ends = match v.as_array() {
        Some(ends) if ends.len() == 2 => ends,
        _ => {
            return Err((
                "/interval".into(),
                "an interval is an array of its start and its end".into(),
            ))
        }
    };
    let mut bounds = [None, None];
    let mut texts = [None, None];
    for (i, end) in ends.iter().enumerate() {
        let text = end.as_str().unwrap_or("");
        if text == ".." {
            continue;
        }
        bounds[i] = Some(date(text).or_else(|| timestamp(text)).ok_or_else(|| {
            (
                format!("/interval/{i}"),
                format!(
                    "{end} is not '..', a full-date or a date-time in UTC, of year 0001 or later"
                ),
            )
        })?);
        texts[i] = Some(text.to_owned());
    }
    if let [Some(start), Some(end)] = bounds {
        if start.date != end.date {
            return Err((
                "/interval".into(),
                "an interval's ends are both dates or both timestamps".into(),
            ));
        }
        if start.start > end.start {
            return Err(("/interval".into(), "the start is after the end".into()));
        }
    }
    let span = Span {
        start: bounds[0].map_or(NaiveDateTime::MIN, |s| s.start),
        end: bounds[1].map_or(NaiveDateTime::MAX, |s| s.end),
        date: false,
    };
    Ok((span, texts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Column, ColumnType, ScalarType};
    use crate::geometry::GeometryColumn;

    /// `t (id, a, b, geom)`, its time in `a` (and `b`) of `kind`.
    fn stored(kind: TimeKind, interval: bool) -> (Collection, Temporal) {
        let ty = match kind {
            TimeKind::Date => ScalarType::Date,
            TimeKind::Timestamp => ScalarType::Timestamptz,
        };
        let columns = vec![
            Column::new("id", ColumnType::Scalar(ScalarType::Int4)),
            Column::new("a", ColumnType::Scalar(ty)),
            Column::new("b", ColumnType::Scalar(ty)),
            Column::new(
                "geom",
                ColumnType::Geometry(GeometryColumn::from_typmod(-1, false)),
            ),
        ];
        let end = interval.then_some(2);
        let temporal = Temporal {
            start: 1,
            end,
            kind,
        };
        (Collection::new("t", columns, 3), temporal)
    }

    /// (column, pointer, JSON) of each cell, and the pointers of the problems.
    fn mapped(
        raw: &str,
        kind: TimeKind,
        interval: bool,
    ) -> (Vec<(usize, String, String)>, Vec<String>) {
        let (coll, temporal) = stored(kind, interval);
        let time = parse(raw).unwrap();
        let (cells, problems) = cells(time.as_ref(), temporal, &coll);
        (
            cells
                .into_iter()
                .map(|c| (c.column, c.pointer, c.json))
                .collect(),
            problems.into_iter().map(|p| p.pointer).collect(),
        )
    }

    fn cell(column: usize, pointer: &str, json: &str) -> (usize, String, String) {
        (column, pointer.to_owned(), json.to_owned())
    }

    #[test]
    fn times_map_onto_the_columns_that_can_hold_them() {
        use TimeKind::{Date, Timestamp};
        let t = r#"{"timestamp": "2024-01-02T10:00:00Z"}"#;
        assert_eq!(
            mapped(t, Timestamp, false),
            (
                vec![cell(1, "/time/timestamp", r#""2024-01-02T10:00:00Z""#)],
                vec![]
            )
        );
        // An instant fills both ends of an interval.
        assert_eq!(
            mapped(t, Timestamp, true).0,
            [
                cell(1, "/time/timestamp", r#""2024-01-02T10:00:00Z""#),
                cell(2, "/time/timestamp", r#""2024-01-02T10:00:00Z""#)
            ]
        );
        // `..` and null are NULL.
        assert_eq!(
            mapped(r#"{"interval": ["2024-01-01", ".."]}"#, Date, true),
            (
                vec![
                    cell(1, "/time/interval/0", r#""2024-01-01""#),
                    cell(2, "/time/interval/1", "null")
                ],
                vec![]
            )
        );
        assert_eq!(
            mapped("null", Date, true).0,
            [cell(1, "/time", "null"), cell(2, "/time", "null")]
        );
        // What the columns cannot hold is a problem where it was given.
        for (raw, kind, interval, at) in [
            (r#"{"date": "2024-01-02"}"#, Timestamp, false, "/time/date"),
            (t, Date, true, "/time/timestamp"),
            (
                r#"{"interval": ["2024-01-01", "2024-01-02"]}"#,
                Date,
                false,
                "/time/interval",
            ),
            (
                r#"{"interval": ["2024-01-01", "2024-01-02"]}"#,
                Timestamp,
                true,
                "/time/interval/0",
            ),
            (
                r#"{"date": "2024-01-01", "interval": ["2024-01-01", ".."]}"#,
                Date,
                true,
                "/time/date",
            ),
        ] {
            let (_, problems) = mapped(raw, kind, interval);
            assert_eq!(problems.first().map(String::as_str), Some(at), "{raw}");
        }
    }

    #[test]
    fn the_specifications_times_are_valid() {
        for t in [
            r#"{"date": "1969-07-20"}"#,
            r#"{"timestamp": "1969-07-20T20:17:40Z"}"#,
            r#"{"interval": ["1969-07-16", "1969-07-24"]}"#,
            r#"{"interval": ["1969-07-16T05:32:00Z", "1969-07-24T16:50:35Z"]}"#,
            r#"{"interval": ["2014-04-24T10:50:18Z", ".."]}"#,
            r#"{"date": "1969-07-20", "timestamp": "1969-07-20T20:17:40Z", "interval": ["1969-07-16", ".."]}"#,
        ] {
            assert!(!parse(t).unwrap().unwrap().is_empty(), "{t}");
        }
        assert_eq!(parse("null").unwrap(), None);
    }

    #[test]
    fn invalid_times_are_told_where() {
        for (t, at) in [
            (r#"{"date": "1969-7-20"}"#, "/time/date"),
            (
                r#"{"timestamp": "1969-07-20T20:17:40+02:00"}"#,
                "/time/timestamp",
            ),
            (
                r#"{"interval": ["1969-07-24", "1969-07-16"]}"#,
                "/time/interval",
            ),
            (r#"{"interval": ["1969-07-16", "x"]}"#, "/time/interval/1"),
            (
                r#"{"interval": ["1969-07-16", "1969-07-24T00:00:00Z"]}"#,
                "/time/interval",
            ),
            (
                r#"{"date": "1969-07-21", "timestamp": "1969-07-20T20:17:40Z"}"#,
                "/time",
            ),
            (r#"{}"#, "/time"),
            (r#""1969""#, "/time"),
        ] {
            assert_eq!(parse(t).unwrap_err().pointer, at, "{t}");
        }
    }
}
