//! The write path: plan the statements, then write through a pipeline.

mod copy;
pub mod dberror;
pub mod guard;
pub mod idempotency;
mod insert;
pub mod item;
mod keys_ahead;
pub mod pipeline;
pub mod plan;
pub mod report;
pub mod retry;
pub mod sql;
pub mod stream;

use std::sync::Arc;

use tokio_postgres::types::ToSql;
use tokio_util::task::AbortOnDropHandle;

use crate::catalog::Collection;
use crate::db::costs::Costs;
use crate::db::statement::{prepare_in_flight, Naming, Stmt};
use crate::db::Database;
use crate::error::{Error, ErrorKind, FieldError, Refusal};
use crate::write::report::BatchStatus;

use crate::feature::{FeatureRow, ParsedBody};
use crate::read::StoredFeature;
use copy::CopyFailed;
use dberror::feature_error;
use guard::TxGuard;
use idempotency::{Answer, Idempotency, Shown};
use insert::Insert;
use pipeline::{Call, Calls};
pub use plan::BatchLimits;
use plan::Plan;
use report::{BatchReport, Tally, WriteReport};
use retry::Retry;

/// One request's write on one connection: what every strategy needs.
pub struct Job<'a> {
    /// The connection.
    pub client: &'a TxGuard,
    /// The target.
    pub coll: &'a Collection,
    /// Validated rows.
    pub rows: &'a [FeatureRow],
    /// Statements and batches.
    pub plan: &'a Plan,
    /// Pointers name `/features/k` unless the body was one Feature.
    pub single: bool,
    /// The SRID of the rows' geometries.
    pub srid: i32,
    /// The request's Idempotency-Key, claimed and answered in the transaction.
    pub idempotency: Option<Keyed<'a>>,
    /// How its statements are prepared.
    pub naming: Naming,
    /// What writes cost on this database, observed again by this one.
    pub costs: Arc<Costs>,
}

/// An Idempotency-Key with its statements prepared on the job's connection:
/// a prepared statement goes out whole when first polled, so it keeps its
/// place in a pipelined flight.
#[derive(Clone, Copy)]
pub struct Keyed<'a> {
    /// The key.
    pub idem: &'a Idempotency,
    /// EXPIRE, CLAIM and STORE.
    pub statements: &'a [Stmt; 3],
}

/// How writes are carried out.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// How requests are cut into batches.
    pub limits: BatchLimits,
    /// Send a whole request before reading answers; off writes one statement
    /// at a time, for proxies and PostgreSQL-compatible servers that mishandle
    /// pipelining.
    pub pipeline: bool,
    /// INSERT, COPY, or (`auto`) whichever is faster.
    pub strategy: Strategy,
    /// Features from which `auto` uses COPY; `None`: as measured ([`copy_from`]).
    pub copy_threshold: Option<usize>,
}

impl WriteOptions {
    /// Whether a write of `features` features uses COPY where it can, when
    /// that COPY costs `extra_round_trips` more than INSERTs would
    /// ([`copy::CopyPlan::extra_round_trips`]).
    pub fn wants_copy(&self, features: usize, extra_round_trips: u32, db: &Database) -> bool {
        match self.strategy {
            Strategy::Insert => false,
            Strategy::Copy => true,
            Strategy::Auto => features >= self.copy_from(extra_round_trips, features, db),
        }
    }

    /// The number of features from which `auto` uses COPY, for a write of
    /// `features` (whose size says which costs observed apply).
    pub fn copy_from(&self, extra_round_trips: u32, features: usize, db: &Database) -> usize {
        self.copy_threshold
            .unwrap_or_else(|| copy_from(&db.costs().observed(features), extra_round_trips))
    }
}

/// What a COPY costs beyond its rows, round trips aside: the `COPY`
/// statement and the check after it (`make bench` measures about 0.3 ms).
const COPY_START: f64 = 0.3e-3;

/// The number of features from which COPY is the faster strategy, for the
/// costs `observed`: pipelined INSERTs cost one round trip and `n` INSERT
/// rows; COPY as many, `extra_round_trips` more (a defaults query before
/// the rows, an answer to store before COMMIT), its start, and `n` COPY
/// rows. So COPY is faster from `(extra × round trip + start) / (INSERT
/// row − COPY row)` features on; never when a COPY row costs as much as an
/// INSERT row.
pub fn copy_from(observed: &crate::db::costs::Observed, extra_round_trips: u32) -> usize {
    let saved = observed.insert_row - observed.copy_row;
    if saved <= 0.0 {
        return usize::MAX;
    }
    let tie = (f64::from(extra_round_trips) * observed.round_trip + COPY_START) / saved;
    if tie >= usize::MAX as f64 {
        usize::MAX
    } else {
        tie.ceil().max(1.0) as usize
    }
}

/// How features are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// COPY for requests of at least the threshold, where COPY can be used.
    Auto,
    /// Always pipelined INSERTs.
    Insert,
    /// COPY wherever it can be used (see [`copy::copy_plan`]).
    Copy,
}

impl Strategy {
    /// Every strategy, by the name reports give it.
    pub const ALL: [(&'static str, Strategy); 3] = [
        ("auto", Strategy::Auto),
        ("insert", Strategy::Insert),
        ("copy", Strategy::Copy),
    ];
}

/// Write validated rows in one transaction and return their keys in order.
///
/// The work runs on its own task, aborted when the request is dropped (its
/// client gone or its deadline passed): its [`guard::TxGuard`] then cancels
/// the statement in flight and closes the connection, so the transaction
/// rolls back rather than committing unseen, unless its COMMIT was already
/// sent.
/// A transaction rolled back by a deadlock or a serialization failure is run
/// again (`FEATUREPIPE_RETRIES`).
pub async fn write_features(
    db: Database,
    coll: Arc<Collection>,
    parsed: ParsedBody,
    options: WriteOptions,
    idempotency: Option<Idempotency>,
) -> Result<WriteReport, Error> {
    let ParsedBody {
        single,
        rows,
        shapes,
        srid,
        ..
    } = parsed;
    if rows.is_empty() {
        return Ok(WriteReport {
            strategy: Strategy::Insert,
            ids: report::Ids::Text(Vec::new()),
            batches: Vec::new(),
        });
    }
    AbortOnDropHandle::new(tokio::spawn(crate::db::round_trips::carried(async move {
        let plan = plan::plan(shapes, &rows, options.limits);
        let request = Request {
            coll: &coll,
            rows: &rows,
            plan: &plan,
            single,
            srid,
            idempotency: idempotency.as_ref(),
        };
        // One transaction, rolled back whole on a conflict: safe to run again.
        let report = Retry::of(&db).run(|| request.write(&db, options)).await?;
        record_written(&coll.id, &report);
        Ok(report)
    })))
    .await
    .map_err(|e| Error::task_failed("writing", &e))?
}

/// The metrics and log lines of a write: features written, and each batch
/// (in a span of its own, with its time on the database) by outcome.
fn record_written(collection: &str, report: &WriteReport) {
    let written: usize = report
        .batches
        .iter()
        .filter(|b| b.status == BatchStatus::Committed)
        .map(|b| b.count)
        .sum();
    metrics::counter!("featurepipe_features_written_total", "collection" => collection.to_owned())
        .increment(written as u64);
    for batch in &report.batches {
        let span = tracing::info_span!(
            "batch",
            index = batch.index,
            first_feature = batch.first_feature,
            count = batch.count,
            status = batch.status.name(),
            db_ms = batch.db_ms
        );
        span.in_scope(|| tracing::debug!(collection, "batch written"));
        metrics::counter!(
            "featurepipe_batches_total",
            "collection" => collection.to_owned(),
            "status" => batch.status.name()
        )
        .increment(1);
    }
}

/// What [`write_features`] writes, borrowed for each attempt.
struct Request<'a> {
    coll: &'a Collection,
    rows: &'a [FeatureRow],
    plan: &'a Plan,
    single: bool,
    srid: i32,
    idempotency: Option<&'a Idempotency>,
}

impl Request<'_> {
    /// One attempt: a connection, one transaction, COMMIT or ROLLBACK; by
    /// COPY where it can be used, else (or if COPY wrote nothing where
    /// INSERT may) by pipelined INSERTs.
    async fn write(&self, db: &Database, options: WriteOptions) -> Result<WriteReport, Error> {
        // COPY has no per-statement pipelining to switch off: keep it to
        // pipelined mode; and it needs a named statement.
        let copy_allowed = options.pipeline && db.naming() != Naming::Unnamed;
        let keyed = self.idempotency.is_some();
        let wants_copy = |copy: &copy::CopyPlan| {
            copy_allowed
                && options.wants_copy(
                    self.rows.len(),
                    copy.extra_round_trips(copy::commit_waits(self.coll, keyed)),
                    db,
                )
        };
        let mut skipping_trigger = false;
        let observed = db.costs().observed(self.rows.len());
        let copy = copy::copy_plan(self.coll, self.plan, self.srid)
            .map(|copy| copy.cheapest_keys(self.coll, self.rows.len(), &observed));
        if let Some(copy) = copy.filter(wants_copy) {
            let (client, keyed) = keyed_connection(db, self.idempotency.is_some()).await?;
            match (copy::Copy {
                job: self.job(&client, keyed.as_ref(), db),
                copy,
            })
            .run()
            .await
            {
                Ok(report) => return Ok(report),
                Err(CopyFailed::Write(e)) => return Err(e),
                // The same request must get the same answer at any size.
                Err(CopyFailed::Refused(e)) => {
                    tracing::debug!(collection = %self.coll.id, "COPY refused ({e}); writing by INSERT");
                }
                Err(CopyFailed::RowsSkipped) => {
                    tracing::warn!(collection = %self.coll.id, "COPY lost rows to a trigger the catalog does not know; writing by INSERT");
                    skipping_trigger = true;
                }
            }
        }
        let (client, keyed) = keyed_connection(db, self.idempotency.is_some()).await?;
        Insert {
            job: self.job(&client, keyed.as_ref(), db),
            pipeline: options.pipeline,
            skipping_trigger,
        }
        .run()
        .await
    }

    /// The write on `client`.
    fn job<'a>(
        &'a self,
        client: &'a TxGuard,
        keyed: Option<&'a [Stmt; 3]>,
        db: &Database,
    ) -> Job<'a> {
        Job {
            client,
            coll: self.coll,
            rows: self.rows,
            plan: self.plan,
            single: self.single,
            srid: self.srid,
            idempotency: self
                .idempotency
                .zip(keyed)
                .map(|(idem, statements)| Keyed { idem, statements }),
            naming: db.naming(),
            costs: db.costs().clone(),
        }
    }
}

/// A connection of `db` for a write, with the Idempotency-Key's statements
/// prepared on it (before any transaction, which a failure could leave
/// aborted) when the write is `keyed`.
pub(crate) async fn keyed_connection(
    db: &Database,
    keyed: bool,
) -> Result<(TxGuard, Option<[Stmt; 3]>), Error> {
    let client = TxGuard::new(db.connection().await?, db.connector()).writing(db.costs());
    let statements = match keyed {
        true => Some(prepare_keyed(&client, db.naming()).await?),
        false => None,
    };
    Ok((client, statements))
}

/// Prepare EXPIRE, CLAIM and STORE (cached on the connection) in one round trip.
pub(crate) async fn prepare_keyed(client: &TxGuard, naming: Naming) -> Result<[Stmt; 3], Error> {
    let sqls = [idempotency::EXPIRE, idempotency::CLAIM, idempotency::STORE];
    let calls: Vec<Call<'_, Result<Stmt, tokio_postgres::Error>>> = sqls
        .iter()
        .map(|sql| Box::pin(prepare_in_flight(client, sql, naming)) as Call<'_, _>)
        .collect();
    let mut calls = Calls::new(calls);
    calls.send_all().await;
    let mut prepared = Vec::with_capacity(3);
    while let Some(statement) = calls.next().await {
        prepared.push(statement.map_err(|e| Error::database("preparing the idempotency key", &e))?);
    }
    Ok(prepared.try_into().expect("three statements"))
}

/// Forget expired keys, then claim this one: two statements, not sent until polled.
pub(crate) fn claim_calls<'a>(
    keyed: Keyed<'a>,
    client: &'a TxGuard,
) -> [Call<'a, Result<(), tokio_postgres::Error>>; 2] {
    let [expire, claim, _] = keyed.statements;
    let idem = keyed.idem;
    let role = idem.role.as_deref();
    [
        Box::pin(async move {
            let ttl = idem.ttl.as_secs_f64();
            as_service(client, role, expire.execute(client, &[&ttl])).await
        }),
        Box::pin(async move {
            let params: [&(dyn ToSql + Sync); 2] = [&idem.key, &idem.hash];
            as_service(client, role, claim.execute(client, &params)).await
        }),
    ]
}

/// Run an idempotency `statement` as the service's own role when the
/// request runs as its caller's `role` (`[auth] set_role`): the functions
/// are the service's alone (migration 6), so that no caller's role can read,
/// forge or expire other callers' keys. The switch there and back goes out
/// in the same flight as the statement (all three are sent when first
/// polled); `SET LOCAL`, so the transaction's end undoes it whatever happens.
pub(crate) async fn as_service<T>(
    client: &TxGuard,
    role: Option<&str>,
    statement: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let Some(role) = role else {
        return statement.await;
    };
    // The name comes from a verified credential; quoting keeps it a name.
    let back = format!("SET LOCAL ROLE {}", crate::db::quote_ident(role));
    let (to_service, done, to_caller) = futures_util::join!(
        client.batch_execute("SET LOCAL ROLE NONE"),
        statement,
        client.batch_execute(&back),
    );
    to_service?;
    let done = done?;
    to_caller.map(|()| done)
}

/// The key is taken: another request with it has just written (or is writing).
pub(crate) fn claim_failed(e: &tokio_postgres::Error) -> Error {
    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
        Error::new(
            ErrorKind::IdempotencyKeyInUse,
            "another request with this Idempotency-Key was running; retry to get its response",
        )
    } else {
        Error::database("claiming the idempotency key", e)
    }
}

/// Store the answer under the key (if any) and COMMIT, both in one flight.
/// The answer is made here, in the transaction: what is stored is what the
/// client is sent (see [`idempotency::Respond`]).
async fn store_and_commit(
    client: &TxGuard,
    keyed: Option<Keyed<'_>>,
    report: &WriteReport,
) -> Result<(), tokio_postgres::Error> {
    let Some(keyed) = keyed else {
        crate::db::round_trips::round_trip();
        return client.batch_execute("COMMIT").await;
    };
    let answer = match &keyed.idem.respond {
        Some(respond) => {
            let feature = match respond.shows(report) {
                Some(shown) => read_back(client, &shown).await?,
                None => None,
            };
            respond.answer(report, feature.as_ref()).await
        }
        None => Answer::json(201, report),
    };
    store_response_and_commit(client, keyed, &answer).await
}

/// The feature `shown` as the write's transaction sees it; `None` when it
/// cannot be read (a role that may insert but not select): the answer then
/// does without it, and the write stands. Under a savepoint, so that a
/// refused read leaves the transaction usable.
async fn read_back(
    client: &TxGuard,
    shown: &Shown,
) -> Result<Option<StoredFeature>, tokio_postgres::Error> {
    let calls: Vec<Call<'_, Result<Option<StoredFeature>, tokio_postgres::Error>>> = vec![
        Box::pin(async {
            client
                .batch_execute("SAVEPOINT featurepipe_read")
                .await
                .map(|()| None)
        }),
        Box::pin(crate::read::item_in(
            client,
            &shown.coll,
            &shown.id,
            &shown.rendering,
        )),
    ];
    let mut calls = Calls::new(calls);
    calls.send_all().await;
    calls.next().await.expect("queued")?;
    match calls.next().await.expect("queued") {
        Ok(feature) => Ok(feature),
        Err(e) if e.as_db_error().is_some() => {
            tracing::debug!(error = %e, "the created feature could not be read back");
            crate::db::round_trips::round_trip();
            client
                .batch_execute("ROLLBACK TO SAVEPOINT featurepipe_read")
                .await
                .map(|()| None)
        }
        Err(e) => Err(e),
    }
}

/// Store an answer under the key and COMMIT, both in one flight.
pub(crate) async fn store_response_and_commit(
    client: &TxGuard,
    keyed: Keyed<'_>,
    answer: &Answer,
) -> Result<(), tokio_postgres::Error> {
    let (idem, store) = (keyed.idem, &keyed.statements[2]);
    let status = i32::from(answer.status);
    let headers = serde_json::Value::Object(answer.headers.clone());
    let calls: Vec<Call<'_, Result<(), tokio_postgres::Error>>> = vec![
        Box::pin(async {
            let params: [&(dyn ToSql + Sync); 5] =
                [&idem.key, &status, &answer.body, &answer.location, &headers];
            as_service(client, idem.role.as_deref(), store.execute(client, &params)).await
        }),
        Box::pin(async { client.batch_execute("COMMIT").await }),
    ];
    let mut calls = Calls::new(calls);
    calls.send_all().await;
    let stored = calls.next().await.expect("queued");
    let committed = calls.next().await.expect("queued");
    stored.and(committed)
}

/// The error for a write whose statement for one feature failed.
fn write_failed(coll: &Collection, single: bool, tally: &Tally) -> Error {
    let failure = tally.failure.as_ref().expect("called on failure");
    let at = if single {
        String::new()
    } else {
        format!("/features/{}", failure.feature)
    };
    let (refusal, field) = match &failure.error {
        Some(error) => feature_error(Some(coll), Some(failure.feature), &at, error),
        None => (
            Refusal::Unfit,
            FieldError::new(
                failure.feature,
                at,
                "skipped_by_trigger",
                "a BEFORE INSERT trigger returned NULL: this feature would not be written",
            ),
        ),
    };
    let detail = format!(
        "feature {} was rejected by the database: {}; nothing was written",
        failure.feature, field.message
    );
    Error::refused(refusal, detail, vec![field]).with_batches(&tally.reports(false))
}

/// The error for a write the database refused without naming a feature
/// (deferred constraints at COMMIT, foreign keys checked after a COPY), or
/// whose connection was lost before COMMIT was sent.
fn refused(coll: &Collection, error: &tokio_postgres::Error, batches: Vec<BatchReport>) -> Error {
    let (refusal, field) = feature_error(Some(coll), None, "", error);
    let detail = if error.as_db_error().is_some() {
        "the database refused the write; nothing was written"
    } else {
        "the connection to the database was lost before COMMIT; nothing was written"
    };
    Error::refused(refusal, detail.into(), vec![field]).with_batches(&batches)
}

/// The error for a COMMIT that failed: refused by the server (nothing was
/// written), or unanswered because the connection was lost (unknown).
fn commit_failed(coll: &Collection, error: &tokio_postgres::Error, tally: &Tally) -> Error {
    match error.as_db_error() {
        Some(_) => refused(coll, error, tally.reports(false)),
        None => outcome_unknown(tally),
    }
}

/// The error for a pipelined write whose COMMIT kept every row but one a
/// BEFORE INSERT trigger unknown to the catalog skipped: the service's
/// fault (its catalog is older than the trigger), reported as it happened.
fn skipped_after_commit(tally: &Tally) -> Error {
    let feature = tally.failure.as_ref().map_or(0, |f| f.feature);
    Error::internal(format!(
        "a BEFORE INSERT trigger created since featurepipe started skipped feature \
         {feature} (the first it skipped); the other features were committed. Restart featurepipe so that it \
         knows the trigger"
    ))
    .with_batches(&tally.reports(true))
}

/// The error for a write whose connection was lost after COMMIT was sent
/// and before its answer: every batch's fate is unknown.
fn outcome_unknown(tally: &Tally) -> Error {
    let batches: Vec<BatchReport> = tally
        .reports(true)
        .into_iter()
        .map(|b| BatchReport {
            status: BatchStatus::Unknown,
            ..b
        })
        .collect();
    Error::outcome_unknown().with_batches(&batches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::costs::Observed;

    fn costs(round_trip_ms: f64, insert_us: f64, copy_us: f64) -> Observed {
        Observed {
            round_trip: round_trip_ms * 1e-3,
            insert_row: insert_us * 1e-6,
            copy_row: copy_us * 1e-6,
            ..Observed::default()
        }
    }

    #[test]
    fn copy_is_chosen_where_it_pays_for_its_start_and_round_trips() {
        // In one flight, far or near: once the rows saved pay for its start.
        assert_eq!(copy_from(&costs(0.5, 40.0, 10.0), 0), 10);
        assert_eq!(copy_from(&costs(50.0, 40.0, 10.0), 0), 10);
        // Next to the database, with a defaults query first: a few dozen.
        assert_eq!(copy_from(&costs(0.5, 40.0, 10.0), 1), 27);
        // 50 ms away, with the defaults query and an answer to store: 2 × 50 ms / 30 µs.
        assert_eq!(copy_from(&costs(50.0, 40.0, 10.0), 2), 3344);
        // Never when a COPY row is no cheaper.
        assert_eq!(copy_from(&costs(0.1, 10.0, 10.0), 0), usize::MAX);
        assert_eq!(copy_from(&costs(0.0, 1e9, 10.0), 0), 1);
    }
}
