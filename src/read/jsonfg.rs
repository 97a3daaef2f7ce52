//! Features read as JSON-FG: the primary geometry as `place` in the asked
//! CRS and as `geometry` in WGS 84, and `time` from the collection's
//! temporal columns, assembled by PostgreSQL as GeoJSON features are
//! ([`super::sql::feature_columns`]).

use super::sql::{col, feature_object, geometry_in, Shown};
use crate::catalog::temporal::Temporal;
use crate::catalog::{Collection, ColumnType, ScalarType};
use crate::geometry::crs::CRS84;
use crate::geometry::Crs;

/// `<feature json>, <etag>, <last modified>` of the row `t` as a JSON-FG
/// feature, `place` in `crs`. In CRS84 `place` is null and the geometry is
/// `geometry`'s alone (JSON-FG /req/core/place-geometries). The temporal
/// columns are `time`, and not also properties (as ldproxy has them).
pub fn feature_columns(coll: &Collection, crs: &Crs, shown: Shown<'_>) -> String {
    let wgs84 = format!(
        "ST_AsGeoJSON({}, 15, 0)::json",
        geometry_in(coll, &Crs::crs84())
    );
    let place = match crs.uri.as_str() {
        CRS84 => "NULL::json".to_owned(),
        _ => format!("ST_AsGeoJSON({}, 15, 0)::json", geometry_in(coll, crs)),
    };
    let (time, mut shown_elsewhere) = match coll.time {
        Some(t) => (time(coll, t), t.columns().collect()),
        None => ("NULL::json".to_owned(), Vec::new()),
    };
    shown_elsewhere.extend_from_slice(shown.hidden);
    let shown = Shown {
        hidden: &shown_elsewhere,
        ..shown
    };
    feature_object(
        coll,
        &format!("'time', {time}, 'place', {place}, 'geometry', {wgs84}"),
        shown,
    )
}

/// JSON-FG's `time` of the row `t`: null when its columns are; an instant
/// as `date` or `timestamp`, an interval with `..` for a NULL (or infinite,
/// or unwritable) end.
fn time(coll: &Collection, t: Temporal) -> String {
    let member = t.kind.member();
    match t.end {
        None => {
            let text = text(coll, t.start);
            format!("CASE WHEN {text} IS NOT NULL THEN json_build_object('{member}', {text}) END")
        }
        Some(end) => format!(
            "CASE WHEN {s} IS NOT NULL OR {e} IS NOT NULL THEN json_build_object('interval', \
             json_build_array(COALESCE({st}, '..'), COALESCE({et}, '..'))) END",
            s = col(coll, t.start),
            e = col(coll, end),
            st = text(coll, t.start),
            et = text(coll, end),
        ),
    }
}

/// Column `ci`'s value as JSON-FG writes it: a full-date, or a timestamp
/// in UTC with `Z` (a `timestamp` column's values are taken as UTC, as
/// featurepipe writes them); NULL when it is NULL, infinite or out of
/// RFC 3339's four-digit years (a BC date would read "… BC").
fn text(coll: &Collection, ci: usize) -> String {
    let c = col(coll, ci);
    // Cast to the base type: the column may be of a domain over it. JSON's
    // text of a date or timestamp is ISO 8601 whatever DateStyle says, with
    // no trailing zeros of fractional seconds.
    let (value, zone) = match coll.columns[ci].ty {
        ColumnType::Scalar(ScalarType::Date) => (format!("{c}::date"), ""),
        ColumnType::Scalar(ScalarType::Timestamp) => (format!("{c}::timestamp"), " || 'Z'"),
        _ => (format!("({c}::timestamptz AT TIME ZONE 'UTC')"), " || 'Z'"),
    };
    format!(
        "CASE WHEN {value} >= '0001-01-01' AND {value} < '10000-01-01' \
         THEN (to_json({value}) #>> '{{}}'){zone} END"
    )
}
