//! The columns a collection's JSON-FG `time` is stored in (the settings
//! file's `time`), as ldproxy's temporal properties: one date or timestamp
//! column for an instant, two for an interval.

use super::settings::TimeColumns;
use super::{Collection, ColumnType, ScalarType};

/// What a temporal column holds: JSON-FG tells dates and timestamps apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeKind {
    /// `date`: a day.
    Date,
    /// `timestamp` (taken as UTC) or `timestamptz`.
    Timestamp,
}

impl TimeKind {
    /// The kind of column `ci`'s values, if they are dates or timestamps.
    pub fn of(coll: &Collection, ci: usize) -> Option<TimeKind> {
        match coll.columns[ci].ty {
            ColumnType::Scalar(ScalarType::Date) => Some(TimeKind::Date),
            ColumnType::Scalar(ScalarType::Timestamp | ScalarType::Timestamptz) => {
                Some(TimeKind::Timestamp)
            }
            _ => None,
        }
    }

    /// JSON-FG's name of an instant of this kind (`date`, `timestamp`).
    pub fn member(self) -> &'static str {
        match self {
            TimeKind::Date => "date",
            TimeKind::Timestamp => "timestamp",
        }
    }
}

/// Where a collection's `time` is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Temporal {
    /// The instant's column, or the interval's start.
    pub start: usize,
    /// The interval's end; `None` for an instant. NULL in either is an open end.
    pub end: Option<usize>,
    /// Whether they hold dates or timestamps.
    pub kind: TimeKind,
}

impl Temporal {
    /// The columns, start first.
    pub fn columns(self) -> impl Iterator<Item = usize> {
        std::iter::once(self.start).chain(self.end)
    }

    /// The `x-ogc-role` (OGC API - Features Part 5) of column `ci`, if it
    /// is one of these.
    pub fn role(self, ci: usize) -> Option<&'static str> {
        match self.end {
            None if ci == self.start => Some("primary-instant"),
            Some(_) if ci == self.start => Some("primary-interval-start"),
            Some(end) if ci == end => Some("primary-interval-end"),
            _ => None,
        }
    }
}

/// The queryable name (OGC API - Features Part 3) of a collection's `time`.
pub const TIME_QUERYABLE: &str = "time";

/// The collection's `time` setting, where a filter names it: by
/// [`TIME_QUERYABLE`], where no column is called so.
pub fn named_time(coll: &Collection, name: &str) -> Option<Temporal> {
    (name == TIME_QUERYABLE && coll.column_index(name).is_none())
        .then_some(coll.time)
        .flatten()
}

/// The columns `setting` names in `coll`: each a column of type date,
/// timestamp or timestamptz, an interval's two distinct and of one kind.
pub fn resolve(coll: &Collection, setting: &TimeColumns) -> Result<Temporal, String> {
    let id = &coll.id;
    let column = |name: &str| {
        let ci = coll
            .column_index(name)
            .ok_or_else(|| format!("'{id}': time names '{name}', which is not a column"))?;
        let kind = TimeKind::of(coll, ci).ok_or_else(|| {
            format!(
                "'{id}': time names '{name}', which is of type {}, not date, timestamp or timestamptz",
                coll.columns[ci].type_sql
            )
        })?;
        Ok::<_, String>((ci, kind))
    };
    match setting {
        TimeColumns::Instant(name) => {
            let (start, kind) = column(name)?;
            Ok(Temporal {
                start,
                end: None,
                kind,
            })
        }
        TimeColumns::Interval([start, end]) => {
            let ((s, s_kind), (e, e_kind)) = (column(start)?, column(end)?);
            if s == e {
                return Err(format!(
                    "'{id}': time names '{start}' as both the start and the end; an instant is time = \"{start}\""
                ));
            }
            if s_kind != e_kind {
                return Err(format!(
                    "'{id}': time's '{start}' and '{end}' must both be dates or both timestamps, as JSON-FG's interval ends are"
                ));
            }
            Ok(Temporal {
                start: s,
                end: Some(e),
                kind: s_kind,
            })
        }
    }
}
