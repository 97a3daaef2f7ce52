//! PUT, PATCH and DELETE of one feature, and PUT creating one with a client
//! key. Each is a single statement: the row is locked, the preconditions are
//! checked and the change is made in one round trip. Under an
//! Idempotency-Key the statement runs in a transaction that also claims the
//! key, left open until the response is stored with it ([`KeyedItem`]).

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::db::statement::{prepare, Stmt};

use super::dberror::feature_error;
use super::guard::TxGuard;
use super::idempotency::{Answer, Idempotency};
use super::pipeline::{Call, Calls};
use super::retry::Retry;
use super::sql::{change_item, insert_item, ItemChange};
use super::{claim_calls, claim_failed, prepare_keyed, store_response_and_commit, Keyed};
use crate::catalog::Collection;
use crate::db::Database;
use crate::error::Error;
use crate::feature::value::SqlValue;
use crate::read::{Rendering, StoredFeature};

/// `If-Match`, `If-Unmodified-Since` and `If-None-Match`, as given.
#[derive(Debug, Default, Clone)]
pub struct Precondition {
    /// `If-Match`: entity tags without quotes (`*` for any); `None` when not given.
    pub if_match: Option<Vec<String>>,
    /// Compared with the last-modified column, to the second.
    pub if_unmodified_since: Option<DateTime<Utc>>,
    /// `If-None-Match`: entity tags without quotes (`*` for any); `None` when not given.
    pub if_none_match: Option<Vec<String>>,
}

impl Precondition {
    /// The tags as the change statement takes them (its `$2`): `If-Match`'s
    /// as they are, `If-None-Match`'s marked with `!` (no tag starts with one).
    fn tags(&self) -> Option<Vec<String>> {
        if self.if_match.is_none() && self.if_none_match.is_none() {
            return None;
        }
        let mut tags = self.if_match.clone().unwrap_or_default();
        if self.if_match.as_ref().is_some_and(Vec::is_empty) {
            // If-Match that names no tag matches nothing.
            tags.push(String::new());
        }
        tags.extend(self.if_none_match.iter().flatten().map(|t| format!("!{t}")));
        Some(tags)
    }
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

/// A database error about this one feature: its class, with the constraint and column.
fn item_error(coll: &Collection, err: &tokio_postgres::Error) -> Error {
    let (refusal, field) = feature_error(Some(coll), Some(0), "", err);
    let detail = format!("the feature was not written: {}", field.message);
    Error::refused(refusal, detail, vec![field])
}

/// A change made under an Idempotency-Key whose transaction is still open,
/// holding the claimed key: [`KeyedItem::commit`] stores the response with
/// it; dropping it rolls both back, and the key is free again.
pub struct KeyedItem {
    client: TxGuard,
    statements: [Stmt; 3],
    idem: Idempotency,
}

/// What a change did, and its open transaction when keyed.
pub struct Changed {
    /// What happened to the feature.
    pub outcome: Outcome,
    /// The open transaction of a keyed change.
    pub keyed: Option<KeyedItem>,
}

impl KeyedItem {
    /// Undo the change and free the key, keeping the connection for the pool.
    pub async fn rollback(self) {
        crate::db::round_trips::round_trip();
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.client.set_open(false);
        }
    }

    /// Store the answer under the key and COMMIT, in one round trip.
    pub async fn commit(self, answer: &Answer) -> Result<(), Error> {
        let keyed = Keyed {
            idem: &self.idem,
            statements: &self.statements,
        };
        store_response_and_commit(&self.client, keyed, answer)
            .await
            .map_err(|e| match e.as_db_error() {
                Some(_) => Error::database("storing the response under the Idempotency-Key", &e),
                // Lost with the COMMIT sent: the change may stand. A retry
                // with the same key is answered from what was stored.
                None => Error::outcome_unknown(),
            })?;
        self.client.set_open(false);
        Ok(())
    }
}

/// Replace, update or delete the feature keyed `id` if `pre` holds; the
/// geometry in `values` is in `rendering`'s CRS, and the outcome's feature
/// as `rendering` has it. With `key`, the
/// change is left uncommitted with the key claimed.
#[allow(clippy::too_many_arguments)]
pub async fn change(
    db: &Database,
    coll: &Collection,
    id: &str,
    change: ItemChange<'_>,
    values: &[SqlValue],
    pre: &Precondition,
    rendering: &Rendering,
    key: Option<&Idempotency>,
) -> Result<Changed, Error> {
    if !coll.could_be_key(id) {
        return Ok(Changed {
            outcome: Outcome::Missing,
            keyed: None,
        });
    }
    let tags = pre.tags();
    let leading: [&(dyn ToSql + Sync); 3] = [&id, &tags, &pre.if_unmodified_since];
    let sql = change_item(coll, change, rendering);
    let (row, keyed) = match key {
        Some(idem) => {
            let (row, keyed) = keyed_query_one(db, coll, &sql, &leading, values, idem).await?;
            (row, Some(keyed))
        }
        None => (query_one(db, coll, &sql, &leading, values).await?, None),
    };
    let existed: bool = row.get(0);
    let held: Option<bool> = row.get(1);
    let done: Option<bool> = row.get(2);
    let outcome = match (existed, held, done) {
        // Preconditions are evaluated only when the request would otherwise
        // succeed (RFC 9110 13.2.1): a missing feature is missing.
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
    };
    Ok(Changed { outcome, keyed })
}

/// Create the feature keyed `id` (PUT on a collection whose keys clients
/// choose; geometry in `rendering`'s CRS), answered as `rendering` has it;
/// in the keyed change's transaction when there is one.
pub async fn create(
    db: &Database,
    coll: &Collection,
    id: &str,
    columns: &[usize],
    values: &[SqlValue],
    rendering: &Rendering,
    keyed: Option<&KeyedItem>,
) -> Result<StoredFeature, Error> {
    let sql = insert_item(coll, columns, rendering);
    let row = match keyed {
        Some(keyed) => {
            let params = params(&[&id], values);
            let answer = match prepare(&keyed.client, &sql, db.naming()).await {
                Ok(statement) => {
                    crate::db::round_trips::round_trip();
                    statement.query_one(&keyed.client, &params).await
                }
                Err(e) => Err(e),
            };
            answer.map_err(|e| item_error(coll, &e))?
        }
        None => query_one(db, coll, &sql, &[&id], values).await?,
    };
    Ok(StoredFeature::from(row))
}

/// `leading` then `values`, as statement parameters.
fn params<'a>(
    leading: &[&'a (dyn ToSql + Sync)],
    values: &'a [SqlValue],
) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params = leading.to_vec();
    params.extend(values.iter().map(|v| v as &(dyn ToSql + Sync)));
    params
}

/// Like [`query_one`], in a transaction that first claims `idem`'s key; all
/// in one round trip (once the statements are prepared on the connection),
/// the transaction left open.
async fn keyed_query_one(
    db: &Database,
    coll: &Collection,
    sql: &str,
    leading: &[&(dyn ToSql + Sync)],
    values: &[SqlValue],
    idem: &Idempotency,
) -> Result<(Row, KeyedItem), Error> {
    let params = params(leading, values);
    Retry::of(db)
        .run(|| async {
            let client = TxGuard::new(db.connection().await?, db.connector()).writing(db.costs());
            let statements = prepare_keyed(&client, db.naming()).await?;
            let statement = prepare(&client, sql, db.naming())
                .await
                .map_err(|e| item_error(coll, &e))?;
            client.set_open(true);
            let keyed = Keyed {
                idem,
                statements: &statements,
            };
            let [expire, claim] = claim_calls(keyed, &client);
            let calls: Vec<Call<'_, Result<Option<Row>, tokio_postgres::Error>>> = vec![
                Box::pin(async { client.batch_execute("BEGIN").await.map(|()| None) }),
                Box::pin(async { expire.await.map(|_| None) }),
                Box::pin(async { claim.await.map(|_| None) }),
                Box::pin(async { statement.query_one(&client, &params).await.map(Some) }),
            ];
            let mut calls = Calls::new(calls);
            calls.send_all().await;
            let begun = calls.next().await.expect("queued");
            let expired = calls.next().await.expect("queued");
            let claimed = calls.next().await.expect("queued");
            let row = calls.next().await.expect("queued");
            drop(calls);
            begun.map_err(|e| Error::database("beginning the transaction", &e))?;
            expired.map_err(|e| Error::database("forgetting expired keys", &e))?;
            claimed.map_err(|e| claim_failed(&e))?;
            let row = row
                .map_err(|e| item_error(coll, &e))?
                .expect("query_one answers a row");
            Ok((
                row,
                KeyedItem {
                    client,
                    statements,
                    idem: idem.clone(),
                },
            ))
        })
        .await
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
) -> Result<Row, Error> {
    let params = params(leading, values);
    Retry::of(db)
        .run(|| async {
            let client = db.connection().await?;
            let answer = match prepare(&client, sql, db.naming()).await {
                Ok(statement) => {
                    crate::db::round_trips::round_trip();
                    statement.query_one(&client, &params).await
                }
                Err(e) => Err(e),
            };
            answer.map_err(|e| item_error(coll, &e))
        })
        .await
}
