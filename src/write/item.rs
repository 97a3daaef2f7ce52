//! PUT, PATCH and DELETE of one feature, and PUT creating one with a client
//! key. Each is a single statement: the row is locked, the preconditions are
//! checked and the change is made in one round trip.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::dberror::{feature_error, refusal};
use super::sql::{change_item, insert_item, ItemChange};
use crate::catalog::Collection;
use crate::db::Database;
use crate::error::ApiError;
use crate::feature::value::SqlValue;
use crate::geometry::Crs;
use crate::read::StoredFeature;

/// `If-Match` and `If-Unmodified-Since`, as given.
#[derive(Debug, Default, Clone)]
pub struct Precondition {
    /// Entity tags without quotes (`*` for any); `None` when not given.
    pub if_match: Option<Vec<String>>,
    /// Compared with the last-modified column, to the second.
    pub if_unmodified_since: Option<DateTime<Utc>>,
    /// `If-None-Match: *`: only if there is no such feature yet (PUT creating).
    pub only_create: bool,
}

/// What happened to the feature.
#[derive(Debug)]
pub enum Outcome {
    /// No feature has this key.
    Missing,
    /// The feature exists but a precondition does not hold: nothing changed.
    PreconditionFailed,
    /// Changed; the feature as stored now (`None` after a delete).
    Done(Option<StoredFeature>),
    /// The preconditions held, but a trigger (or a row security policy) skipped the change.
    SkippedByTrigger,
}

/// A database error about this one feature: its status, with the constraint and column.
fn item_error(coll: &Collection, err: &tokio_postgres::Error) -> ApiError {
    let (status, field) = feature_error(Some(coll), Some(0), "", err);
    let detail = format!("the feature was not written: {}", field.message);
    refusal(status, detail, vec![field])
}

/// Replace, update or delete the feature keyed `id` if `pre` holds; the
/// geometry in `values` and in the outcome is in `crs`.
pub async fn change(
    db: &Database,
    coll: &Collection,
    id: &str,
    change: ItemChange<'_>,
    values: &[SqlValue],
    pre: &Precondition,
    crs: &Crs,
) -> Result<Outcome, ApiError> {
    if !coll.could_be_key(id) {
        return Ok(Outcome::Missing);
    }
    // If-None-Match: * matches no existing feature: an empty tag list.
    let if_match = match pre.only_create {
        true => Some(Vec::new()),
        false => pre.if_match.clone(),
    };
    let leading: [&(dyn ToSql + Sync); 3] = [&id, &if_match, &pre.if_unmodified_since];
    let sql = change_item(coll, change, crs);
    let row = query_one(db, coll, &sql, &leading, values).await?;
    let existed: bool = row.get(0);
    let held: Option<bool> = row.get(1);
    let done: Option<bool> = row.get(2);
    Ok(match (existed, held, done) {
        // If-Match names a current representation; there is none (RFC 9110 13.1.1).
        (false, ..) if pre.if_match.is_some() && !pre.only_create => Outcome::PreconditionFailed,
        (false, ..) => Outcome::Missing,
        (true, Some(false) | None, _) => Outcome::PreconditionFailed,
        (true, Some(true), None) => Outcome::SkippedByTrigger,
        (true, Some(true), Some(_)) => {
            Outcome::Done(row.get::<_, Option<String>>(3).map(|json| StoredFeature {
                json,
                etag: row.get(4),
                last_modified: row.get(5),
            }))
        }
    })
}

/// Create the feature keyed `id` (PUT on a collection whose keys clients choose).
pub async fn create(
    db: &Database,
    coll: &Collection,
    id: &str,
    columns: &[usize],
    values: &[SqlValue],
    crs: &Crs,
) -> Result<StoredFeature, ApiError> {
    let sql = insert_item(coll, columns, crs);
    query_one(db, coll, &sql, &[&id], values)
        .await
        .map(StoredFeature::from)
}

/// Run `sql` (prepared once per connection) with `leading` then `values` as
/// parameters. One statement is its own transaction: rolled back whole on a
/// conflict, so it is run again (`FEATUREPIPE_RETRIES`).
async fn query_one(
    db: &Database,
    coll: &Collection,
    sql: &str,
    leading: &[&(dyn ToSql + Sync)],
    values: &[SqlValue],
) -> Result<Row, ApiError> {
    let mut params = leading.to_vec();
    params.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
    db.retry()
        .run(|| async {
            let client = db.connection().await?;
            let answer = match client.prepare_cached(sql).await {
                Ok(statement) => client.query_one(&statement, &params).await,
                Err(e) => Err(e),
            };
            answer.map_err(|e| item_error(coll, &e))
        })
        .await
}
