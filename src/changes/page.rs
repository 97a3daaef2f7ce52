//! The queries of a change feed: the position "now", and one page of
//! changes since a cursor with each changed feature as it is when read.
//! Each is one statement, so that the snapshot whose horizon bounds the
//! page is the one its features are read in.

use tokio_postgres::Row;

use tokio_postgres::types::ToSql;

use super::cursor::{collection_hash, Cursor};
use super::{Change, Follow, Page};
use crate::catalog::Collection;
use crate::db::statement::prepare;
use crate::db::Database;
use crate::error::{Error, ErrorKind};
use crate::geometry::Crs;
use crate::read::filter::Filter;
use crate::read::{sql as read_sql, Encoding, StoredFeature};

/// The horizon of this statement's snapshot: every transaction below it has
/// finished (committed or rolled back), and no later one can log below it.
const HORIZON: &str = "SELECT pg_snapshot_xmin(s) AS h, pg_snapshot_xmax(s) AS top \
                       FROM pg_current_snapshot() AS s";

/// `(SELECT FROM <table> LIMIT 0)`: naming the table makes the database
/// check, before anything runs, that the role may read it (else 42501).
fn readable(coll: &Collection) -> String {
    format!("(SELECT FROM {} LIMIT 0)", coll.qualified_name())
}

/// The position "now" (the horizon) and the feed's epoch; `$1` the table's oid.
fn now_sql(coll: &Collection) -> String {
    format!(
        "WITH horizon AS MATERIALIZED ({HORIZON}) \
         SELECT h.h::text, f.epoch FROM horizon AS h \
           LEFT JOIN featurepipe.change_feeds AS f ON f.relid = $1::int8::oid \
           LEFT JOIN {} AS readable ON true",
        readable(coll)
    )
}

/// One page: `$1` the table's oid, `$2, $3, $4` the cursor's position,
/// `$5` the limit. The first columns describe the page (on every row, and
/// on the one row of an empty page); then one row per changed feature, at
/// the position of its last change in the page: its id as items answer it,
/// and the feature as it is now (none: deleted, or hidden from the role by
/// row-level security).
///
/// Only changes of transactions below the horizon are read: those can no
/// longer change, and any later one logs above it. A log entry holds the
/// keys of one statement: only the entries the page can reach are unnested
/// (those with at most `$4 + $5` keys before them, `$4` of which the
/// cursor may have delivered). `more`: the limit cut the page short;
/// `held_back`: the first transaction whose changes are logged but not
/// below the horizon (committed, or still open), if any.
///
/// With a `filter` (its values from `$6` on), a changed feature that does
/// not match it reads as gone.
fn page_sql(coll: &Collection, crs: &Crs, encoding: Encoding, filter: Option<&str>) -> String {
    let pk = coll.primary_key.expect("feeds are of tables with a key");
    // Cast once, and compared in the key's type, so that its index serves.
    let key_type = &coll.columns[pk].exact_type_sql;
    let mut key = format!("{} = l.k", read_sql::col(coll, pk));
    if let Some(filter) = filter {
        key = format!("{key} AND {filter}");
    }
    format!(
        "WITH horizon AS MATERIALIZED ({HORIZON}),
         logged AS MATERIALIZED (
             SELECT c.tx, c.seq, coalesce(c.keys, ARRAY[c.key]) AS keys
               FROM featurepipe.changes AS c
              WHERE c.relid = $1::int8::oid AND (c.tx, c.seq) >= ($2::text::xid8, $3::int8)
                AND c.tx < (SELECT h FROM horizon)
              ORDER BY c.tx, c.seq LIMIT $5::int8 + 2),
         counted AS (
             SELECT l.tx, l.seq, l.keys,
                    coalesce(sum(cardinality(l.keys)) OVER (ORDER BY l.tx, l.seq
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
               FROM logged AS l),
         entries AS MATERIALIZED (
             SELECT c.tx, c.seq, u.at::int4 AS at, u.key
               FROM counted AS c, unnest(c.keys) WITH ORDINALITY AS u(key, at)
              WHERE c.before <= $4::int8 + $5::int8
                AND (c.tx, c.seq, u.at) > ($2::text::xid8, $3::int8, $4::int8)
              ORDER BY c.tx, c.seq, u.at LIMIT $5::int8 + 1),
         page AS MATERIALIZED (
             SELECT e.tx, e.seq, e.at, e.key FROM entries AS e
              ORDER BY e.tx, e.seq, e.at LIMIT $5::int8),
         latest AS (
             SELECT DISTINCT ON (p.k) p.k, p.tx, p.seq, p.at
               FROM (SELECT p.key::{key_type} AS k, p.tx, p.seq, p.at FROM page AS p) AS p
              ORDER BY p.k, p.tx DESC, p.seq DESC, p.at DESC),
         meta AS (
             SELECT h.h, h.top, f.epoch, f.pruned_below,
                    (SELECT count(*) FROM entries) > $5::int8 AS more,
                    (SELECT min(c.tx) FROM featurepipe.changes AS c
                      WHERE c.relid = $1::int8::oid AND c.tx >= h.h
                        AND (c.tx, c.seq) > ($2::text::xid8, $3::int8))::text AS held_back,
                    last.tx AS last_tx, last.seq AS last_seq, last.at AS last_at
               FROM horizon AS h
               LEFT JOIN featurepipe.change_feeds AS f ON f.relid = $1::int8::oid
               LEFT JOIN (SELECT p.tx, p.seq, p.at FROM page AS p
                           ORDER BY p.tx DESC, p.seq DESC, p.at DESC LIMIT 1) AS last ON true)
         SELECT m.h::text, m.top::text, m.epoch, m.pruned_below::text, m.more, m.held_back,
                m.last_tx::text, m.last_seq, m.last_at, to_json(l.k)::text,
                f.feature, f.etag, f.last_modified
           FROM meta AS m
           LEFT JOIN (latest AS l LEFT JOIN LATERAL (
                 {select} WHERE {key}) AS f(feature, etag, last_modified) ON true) ON true
          ORDER BY l.tx, l.seq, l.at",
        select = read_sql::select_features(coll, crs, encoding),
    )
}

/// A transaction id as PostgreSQL prints an `xid8`.
fn xid(row: &Row, column: usize) -> Option<u64> {
    row.get::<_, Option<String>>(column)
        .map(|text| text.parse().expect("xid8 prints as a number"))
}

/// The feed's epoch on `row`, or 503 when the table's feed is not registered.
fn epoch(row: &Row, column: usize, coll: &Collection) -> Result<i32, Error> {
    row.get::<_, Option<i32>>(column).ok_or_else(|| {
        Error::new(
            ErrorKind::FeedNotInstalled,
            format!(
                "the change feed of '{}' is not installed any more; it is again when the catalog is next read",
                coll.id
            ),
        )
    })
}

/// The hash a cursor of the feed of `coll`, filtered by `filter`, carries:
/// a cursor follows one collection, with one filter. Without a filter,
/// the collection's id alone (the cursors given before filters were).
fn feed_hash(coll: &Collection, filter: Option<&Filter>) -> u32 {
    match filter {
        None => collection_hash(&coll.id),
        Some(f) => collection_hash(&format!(
            "{}\n{}\n{}\n{}",
            coll.id,
            f.lang.name(),
            f.given,
            f.crs.as_deref().unwrap_or("")
        )),
    }
}

/// The cursor for "now", for a new client to take before downloading the collection.
pub async fn now(
    db: &Database,
    coll: &Collection,
    filter: Option<&Filter>,
    relid: u32,
) -> Result<Cursor, Error> {
    let client = db.connection().await?;
    let statement = prepare(&client, &now_sql(coll), db.naming())
        .await
        .map_err(|e| Error::reading("preparing the change feed's query", &e))?;
    crate::db::round_trips::round_trip();
    let row = statement
        .query_one(&client, &[&i64::from(relid)])
        .await
        .map_err(|e| Error::reading("reading the change feed", &e))?;
    Ok(Cursor {
        collection: feed_hash(coll, filter),
        relid,
        epoch: epoch(&row, 1, coll)?,
        tx: xid(&row, 0).expect("a snapshot has a horizon"),
        seq: 0,
        at: 0,
    })
}

/// A 400 or 410 when `cursor` cannot be followed in the feed of `coll`
/// (the table `relid` now), before any query.
pub fn check_cursor(
    cursor: &Cursor,
    coll: &Collection,
    filter: Option<&Filter>,
    relid: u32,
) -> Result<(), Error> {
    if cursor.collection != feed_hash(coll, filter) {
        return Err(Error::new(
            ErrorKind::InvalidCursor,
            format!(
                "'since' is a cursor of another collection than '{}', or of another filter (a cursor follows the filter it was given with)",
                coll.id
            ),
        ));
    }
    if cursor.relid != relid {
        return Err(expired(
            coll,
            "the collection's table was made again since this cursor was given",
        ));
    }
    Ok(())
}

/// 410: the client downloads the collection again, and follows from a new cursor.
fn expired(coll: &Collection, why: &str) -> Error {
    Error::new(
        ErrorKind::CursorExpired,
        format!(
            "{why}: download the collection '{}' again, taking a new cursor (GET …/changes without since) first",
            coll.id
        ),
    )
}

/// The changes of `follow.coll` (table `relid`) after `cursor`, at most
/// `follow.limit` keys' worth; and the first transaction of those logged
/// later but held back (an older transaction still open, or its own).
pub async fn since(
    db: &Database,
    follow: Follow<'_>,
    relid: u32,
    cursor: Cursor,
) -> Result<(Page, Option<u64>), Error> {
    let coll = follow.coll;
    let client = db.connection().await?;
    let (condition, values) = match follow.filter {
        Some(filter) => {
            let (sql, values) = filter.sql(6);
            (Some(sql), values)
        }
        None => (None, Vec::new()),
    };
    let sql = page_sql(coll, follow.crs, follow.encoding, condition.as_deref());
    let statement = prepare(&client, &sql, db.naming())
        .await
        .map_err(|e| Error::reading("preparing the change feed's query", &e))?;
    crate::db::round_trips::round_trip();
    let position = cursor.tx.to_string();
    let (relid_param, at) = (i64::from(relid), i64::from(cursor.at));
    let mut params: Vec<&(dyn ToSql + Sync)> =
        vec![&relid_param, &position, &cursor.seq, &at, &follow.limit];
    params.extend(values.iter().map(|v| v.as_ref() as &(dyn ToSql + Sync)));
    let rows = statement
        .query(&client, &params)
        .await
        .map_err(|e| match follow.filter {
            // A filter that fails on a value (an invalid date) is the client's.
            Some(_) => crate::read::read_error("reading the change feed", &e),
            None => Error::reading("reading the change feed", &e),
        })?;
    let meta = rows
        .first()
        .expect("the page's description is always a row");
    let horizon = xid(meta, 0).expect("a snapshot has a horizon");
    let top = xid(meta, 1).expect("a snapshot has an xmax");
    if epoch(meta, 2, coll)? != cursor.epoch {
        return Err(expired(
            coll,
            "the change feed started again (it was installed again, or the table truncated) since this cursor was given",
        ));
    }
    if cursor.tx < xid(meta, 3).unwrap_or(0) {
        return Err(expired(
            coll,
            "the changes after this cursor are older than the feed's history (FEATUREPIPE_CHANGES_RETENTION)",
        ));
    }
    if cursor.tx > top {
        return Err(Error::new(
            ErrorKind::InvalidCursor,
            "'since' names a position the feed has not reached: it is not a cursor this service gave",
        ));
    }
    let more: bool = meta.get(4);
    let held_back = xid(meta, 5);
    // A page that is not cut short ends at the horizon: every change below
    // it is in this page or an earlier one.
    let (tx, seq, at) = match (more, xid(meta, 6)) {
        (true, Some(last)) => (last, meta.get(7), meta.get(8)),
        _ => (horizon, 0, 0),
    };
    let next = Cursor {
        tx,
        seq,
        at,
        ..cursor
    }
    .max_position(cursor);
    let changes = rows
        .iter()
        .filter_map(|row| {
            let id: String = row.get::<_, Option<String>>(9)?;
            let feature = row.get::<_, Option<String>>(10).map(|json| StoredFeature {
                json,
                etag: row.get(11),
                last_modified: row.get(12),
            });
            Some(Change { id, feature })
        })
        .collect();
    let page = Page {
        changes,
        cursor: next,
        more,
    };
    Ok((page, held_back))
}

impl Cursor {
    /// The later of the two positions.
    fn max_position(self, other: Cursor) -> Cursor {
        if (self.tx, self.seq, self.at) >= (other.tx, other.seq, other.at) {
            self
        } else {
            other
        }
    }
}
