//! Pipelined INSERTs: every statement of a batch is sent before any answer is
//! read, each with its own Sync, and the answers are read back in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::Object;
use futures_util::stream::{FuturesOrdered, StreamExt};
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::dberror::{api_error, feature_error, request_error};
use super::plan::{plan, BatchLimits, Plan};
use super::report::{BatchReport, BatchStatus, FeatureRun, WriteReport};
use super::sql;
use crate::catalog::Collection;
use crate::db::Database;
use crate::error::ApiError;
use crate::feature::FeatureRow;

/// Prepared statements kept per connection; further ones live for one request.
const STATEMENT_CACHE_LIMIT: usize = 64;

/// Insert validated rows in one transaction and return their keys in order.
///
/// The work runs on its own task: if the client goes away mid-request, the
/// transaction still ends in a COMMIT or ROLLBACK instead of being abandoned.
pub async fn insert_features(
    db: Database,
    coll: Arc<Collection>,
    rows: Vec<FeatureRow>,
    single: bool,
    limits: BatchLimits,
) -> Result<WriteReport, ApiError> {
    if rows.is_empty() {
        return Ok(WriteReport {
            ids: Vec::new(),
            batches: Vec::new(),
        });
    }
    tokio::spawn(async move {
        let plan = plan(&rows, limits);
        let guard = TxGuard::new(db.connection().await?);
        Write {
            client: &guard,
            coll: &coll,
            rows: &rows,
            plan: &plan,
            single,
        }
        .run()
        .await
    })
    .await
    .map_err(|e| ApiError::internal(format!("the write task failed: {e}")))?
}

/// A pooled connection that is discarded, not returned, if dropped inside a transaction.
struct TxGuard {
    client: Option<Object>,
    open: AtomicBool,
}

impl TxGuard {
    fn new(client: Object) -> Self {
        TxGuard {
            client: Some(client),
            open: AtomicBool::new(false),
        }
    }

    fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
    }
}

impl std::ops::Deref for TxGuard {
    type Target = Object;
    fn deref(&self) -> &Object {
        self.client.as_ref().expect("present until drop")
    }
}

impl Drop for TxGuard {
    fn drop(&mut self) {
        if let (true, Some(client)) = (*self.open.get_mut(), self.client.take()) {
            // Closing the connection ends the transaction on the server.
            drop(Object::take(client));
        }
    }
}

struct Write<'a> {
    client: &'a TxGuard,
    coll: &'a Collection,
    rows: &'a [FeatureRow],
    plan: &'a Plan,
    single: bool,
}

/// The statement that failed first, and why.
struct Failure {
    batch: usize,
    feature: usize,
    error: tokio_postgres::Error,
}

impl Write<'_> {
    async fn run(self) -> Result<WriteReport, ApiError> {
        let statements = self.prepare().await?;
        let mut ids = Vec::with_capacity(self.rows.len());
        let mut db_ms = Vec::with_capacity(self.plan.batches.len());
        for (b, range) in self.plan.batches.iter().enumerate() {
            let started = Instant::now();
            let sends: FuturesOrdered<_> = range
                .clone()
                .map(|r| self.execute(&statements[self.plan.shape_of[r]], &self.rows[r]))
                .collect();
            let results: Vec<_> = if b == 0 {
                // BEGIN travels in the same flight as the first batch.
                self.client.set_open(true);
                let (begin, results) = tokio::join!(
                    self.client.batch_execute("BEGIN"),
                    sends.collect::<Vec<_>>()
                );
                begin.map_err(|e| request_error("starting the transaction", &e))?;
                results
            } else {
                sends.collect().await
            };
            db_ms.push(millis(started));
            if let Some(failure) = self.collect_ids(b, range.start, results, &mut ids) {
                return Err(self.fail(failure, &db_ms).await);
            }
        }
        let started = Instant::now();
        let commit = self.client.batch_execute("COMMIT").await;
        self.client.set_open(false);
        if let Some(last) = db_ms.last_mut() {
            *last = ((*last + millis(started)) * 1000.0).round() / 1000.0;
        }
        if let Err(e) = commit {
            // A deferred constraint fails at COMMIT, with no statement to blame.
            let (status, field) = feature_error(self.coll, None, "", &e);
            return Err(api_error(
                status,
                "the database refused to commit; nothing was written".into(),
            )
            .with_errors(vec![field])
            .with_batches(self.reports(&db_ms, None)));
        }
        Ok(WriteReport {
            ids,
            batches: self
                .reports(&db_ms, None)
                .into_iter()
                .map(|b| BatchReport {
                    status: BatchStatus::Committed,
                    ..b
                })
                .collect(),
        })
    }

    /// Prepare one INSERT per shape, all in one round trip.
    ///
    /// Statements are cached per connection, up to [`STATEMENT_CACHE_LIMIT`]:
    /// clients whose features each leave out different properties would
    /// otherwise grow the cache (here and in the server) without bound.
    async fn prepare(&self) -> Result<Vec<Statement>, ApiError> {
        let prepares: FuturesOrdered<_> = self
            .plan
            .shapes
            .iter()
            .map(|shape| async move {
                let sql = sql::insert(self.coll, shape);
                if self.client.statement_cache.size() < STATEMENT_CACHE_LIMIT {
                    self.client.prepare_cached(&sql).await
                } else {
                    self.client.prepare(&sql).await
                }
            })
            .collect();
        prepares
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| request_error("preparing the insert", &e))
    }

    async fn execute(
        &self,
        statement: &Statement,
        row: &FeatureRow,
    ) -> Result<Row, tokio_postgres::Error> {
        let params: Vec<&(dyn ToSql + Sync)> = row.values.iter().map(|v| v as _).collect();
        self.client.query_one(statement, &params).await
    }

    /// Record the keys of a batch; return the first real failure, if any.
    ///
    /// After a failed statement every later one in the transaction fails with
    /// 25P02; those are "not written", not errors of their own.
    fn collect_ids(
        &self,
        batch: usize,
        first: usize,
        results: Vec<Result<Row, tokio_postgres::Error>>,
        ids: &mut Vec<Value>,
    ) -> Option<Failure> {
        let integer = self.coll.integer_key();
        let mut failure: Option<Failure> = None;
        for (offset, result) in results.into_iter().enumerate() {
            match result {
                Ok(row) => ids.push(key_value(row.get(0), integer)),
                Err(error) => {
                    let aborted = error.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION);
                    if failure.is_none() || (!aborted && failure_is_aborted(&failure)) {
                        failure = Some(Failure {
                            batch,
                            feature: first + offset,
                            error,
                        });
                    }
                }
            }
        }
        failure
    }

    /// Roll back and describe the failure.
    async fn fail(&self, failure: Failure, db_ms: &[f64]) -> ApiError {
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.client.set_open(false);
        }
        let at = if self.single {
            String::new()
        } else {
            format!("/features/{}", failure.feature)
        };
        let (status, field) = feature_error(self.coll, Some(failure.feature), &at, &failure.error);
        let detail = format!(
            "feature {} was rejected by the database: {}; nothing was written",
            failure.feature, field.message
        );
        api_error(status, detail)
            .with_errors(vec![field])
            .with_batches(self.reports(db_ms, Some(&failure)))
    }

    /// Batch reports: those sent are rolled back (until committed), the rest not attempted.
    fn reports(&self, db_ms: &[f64], failure: Option<&Failure>) -> Vec<BatchReport> {
        self.plan
            .batches
            .iter()
            .enumerate()
            .map(|(b, range)| {
                let failed_here = failure.filter(|f| f.batch == b);
                let after = failed_here
                    .map(|f| f.feature + 1..range.end)
                    .filter(|r| !r.is_empty());
                BatchReport {
                    index: b,
                    first_feature: range.start,
                    count: range.len(),
                    status: if b < db_ms.len() {
                        BatchStatus::RolledBack
                    } else {
                        BatchStatus::NotAttempted
                    },
                    db_ms: db_ms.get(b).copied().unwrap_or(0.0),
                    failed_feature: failed_here.map(|f| f.feature),
                    not_written: after.map(|r| FeatureRun {
                        first: r.start,
                        count: r.len(),
                    }),
                }
            })
            .collect()
    }
}

fn failure_is_aborted(failure: &Option<Failure>) -> bool {
    failure
        .as_ref()
        .is_some_and(|f| f.error.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION))
}

/// Milliseconds since `started`, to the microsecond.
fn millis(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e6).round() / 1000.0
}

/// Keys come back as text; integer keys are reported as JSON numbers.
fn key_value(key: Option<String>, integer: bool) -> Value {
    match key {
        None => Value::Null,
        Some(k) if integer => k
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::String(k)),
        Some(k) => Value::String(k),
    }
}
