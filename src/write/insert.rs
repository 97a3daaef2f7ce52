//! Pipelined INSERTs: BEGIN, every INSERT (each with its own Sync) and COMMIT
//! are sent before any answer is read; the answers are read back in order.
//! Warm, a whole request costs one database round trip.

use tokio_postgres::types::ToSql;
use tokio_postgres::Error as PgError;

use std::time::Instant;

use crate::catalog::Collection;
use crate::db::costs::Cost;
use crate::db::statement::{cache_room, prepare_in_flight, Naming, Stmt};

use super::guard::TxGuard;
use super::pipeline::{Call, Calls};
use super::report::{Tally, WriteReport};
use super::{sql, write_failed, Job, Keyed};
use crate::error::Error;

/// One request's INSERTs on one connection.
pub struct Insert<'a> {
    /// The connection, rows and batches.
    pub job: Job<'a>,
    /// Send everything at once; when false, one statement at a time.
    pub pipeline: bool,
    /// A COPY of this request lost rows to a trigger the catalog does not
    /// know of (created since start-up): COMMIT waits for every answer.
    pub skipping_trigger: bool,
}

/// An INSERT's answer: its key, or `None` when no row was inserted.
pub type Answer = Result<Option<String>, PgError>;

impl Insert<'_> {
    /// Write all rows in one transaction; ids in feature order, or a failure report.
    pub async fn run(self) -> Result<WriteReport, Error> {
        let statements = self.prepare().await?;
        // A BEFORE INSERT trigger may skip a row (RETURN NULL) without an error:
        // then COMMIT must wait until every answer has been seen.
        // So must it when the response is to be stored before it (Idempotency-Key).
        let commit_queued = self.pipeline
            && !self.job.coll.before_insert_trigger
            && !self.skipping_trigger
            && self.job.idempotency.is_none();
        let mut calls = Calls::new(self.calls(&statements, commit_queued));
        let mut tally = Tally::new(
            &self.job.plan.batches,
            self.job.coll.integer_key(),
            self.job.rows.len(),
        );
        self.job.client.set_open(true);
        let sent = Instant::now();
        if self.pipeline {
            calls.send_all().await;
        }
        // A COMMIT refused by a connection closed before the flight never
        // reached the server: nothing was written.
        let commit_sent = commit_queued && !calls.last_refused_at_send();
        if let Some(Err(e)) = calls.next().await {
            if commit_sent && e.as_db_error().is_none() {
                // Lost with the whole flight, COMMIT included, sent.
                return Err(super::outcome_unknown(&tally));
            }
            return Err(Error::database("starting the transaction", &e));
        }
        if self.pipeline {
            // BEGIN is answered at once: its answer takes a round trip.
            self.job.costs.observe(Cost::RoundTrip, 0, sent.elapsed());
        }
        if self.job.idempotency.is_some() {
            for _ in 0..2 {
                if let Some(Err(e)) = calls.next().await {
                    return Err(super::claim_failed(&e));
                }
            }
        }
        for feature in 0..self.job.rows.len() {
            let answer = calls.next().await.expect("one answer per feature");
            tally.record(feature, answer);
            if !self.pipeline && tally.failure.is_some() {
                break;
            }
        }
        // The rows' time: up to the last INSERT's answer, not COMMIT's (its
        // flush to disk is the request's, whatever its size).
        let rows_took = sent.elapsed();
        let queued = match commit_queued {
            // After a failure the queued COMMIT comes back as a ROLLBACK.
            true => Some((calls.next().await.expect("COMMIT was queued"), commit_sent)),
            false => None,
        };
        drop(calls);
        let job = &self.job;
        let rows = job.rows.len();
        let (keyed, single) = (job.idempotency, job.single);
        let written = conclude(job.client, job.coll, single, keyed, tally, queued).await;
        if self.pipeline && written.is_ok() {
            job.costs.observe_rows(Cost::InsertRow, rows, rows_took);
        }
        written
    }

    /// BEGIN, one INSERT per feature, and COMMIT if `commit`: not sent until polled.
    /// An INSERT answers its key, or `None` when no row was inserted.
    fn calls<'s>(&'s self, statements: &'s [Stmt], commit: bool) -> Vec<Call<'s, Answer>> {
        let mut calls: Vec<Call<'s, Answer>> = Vec::with_capacity(self.job.rows.len() + 2);
        calls.push(Box::pin(async move {
            self.job.client.batch_execute("BEGIN").await.map(|()| None)
        }));
        if let Some(idem) = self.job.idempotency {
            calls.extend(
                super::claim_calls(idem, self.job.client).map(|call| {
                    Box::pin(async move { call.await.map(|_| None) }) as Call<'s, Answer>
                }),
            );
        }
        for row in self.job.rows {
            let statement = &statements[row.shape];
            calls.push(Box::pin(async move {
                let params: Vec<&(dyn ToSql + Sync)> = row.values.iter().map(|v| v as _).collect();
                statement
                    .query_opt(self.job.client, &params)
                    .await
                    .map(|r| r.map(|r| r.get(0)))
            }));
        }
        if commit {
            calls.push(Box::pin(async move {
                self.job.client.batch_execute("COMMIT").await.map(|()| None)
            }));
        }
        calls
    }

    /// Prepare one INSERT per shape, all in one round trip.
    async fn prepare(&self) -> Result<Vec<Stmt>, Error> {
        let job = &self.job;
        prepare_inserts(job.client, job.coll, &job.plan.shapes, job.srid, job.naming).await
    }
}

/// Prepare one INSERT per column set of `shapes`, all in one round trip.
///
/// Statements are cached per connection, up to [`STATEMENT_CACHE_LIMIT`](crate::db::statement::STATEMENT_CACHE_LIMIT):
/// clients whose features each leave out different properties would
/// otherwise grow the cache (here and in the server) without bound.
pub async fn prepare_inserts(
    client: &TxGuard,
    coll: &Collection,
    shapes: &[Vec<usize>],
    srid: i32,
    naming: Naming,
) -> Result<Vec<Stmt>, Error> {
    let room = cache_room(client);
    let prepares: Vec<Call<'_, Result<Stmt, PgError>>> = shapes
        .iter()
        .enumerate()
        .map(|(n, shape)| {
            Box::pin(async move {
                let sql = sql::insert(coll, shape, srid);
                prepare_in_flight(client, &sql, naming.within(room, n)).await
            }) as Call<'_, _>
        })
        .collect();
    let mut calls = Calls::new(prepares);
    calls.send_all().await;
    let mut statements = Vec::with_capacity(shapes.len());
    while let Some(prepared) = calls.next().await {
        statements.push(prepared.map_err(|e| Error::database("preparing the insert", &e))?);
    }
    Ok(statements)
}

/// How a pipelined write of INSERTs ends once the answers to its INSERTs are
/// in: with the answer of the COMMIT `queued` behind them (and whether it
/// was sent), or without one, by ROLLBACK after a failure, else by storing
/// the answer under the key (if any) and COMMIT.
pub async fn conclude(
    client: &TxGuard,
    coll: &Collection,
    single: bool,
    keyed: Option<Keyed<'_>>,
    mut tally: Tally,
    queued: Option<(Answer, bool)>,
) -> Result<WriteReport, Error> {
    let (commit_queued, commit_sent) = (queued.is_some(), queued.as_ref().is_some_and(|q| q.1));
    let commit = match queued {
        Some((commit, _)) => commit,
        None => {
            if tally.failure.is_some() {
                crate::db::round_trips::round_trip();
                if client.batch_execute("ROLLBACK").await.is_ok() {
                    client.set_open(false);
                }
                return Err(write_failed(coll, single, &tally));
            }
            tally.add_to_last();
            let report = WriteReport {
                strategy: super::Strategy::Insert,
                batches: tally.reports(true),
                ids: tally.ids.clone(),
            };
            super::store_and_commit(client, keyed, &report)
                .await
                .map(|()| None)
        }
    };
    // Answered by the server: the transaction is over either way.
    if commit
        .as_ref()
        .map_or_else(|e| e.as_db_error().is_some(), |_| true)
    {
        client.set_open(false);
    }
    if commit_queued {
        tally.add_to_last();
    }
    // The connection was lost after the queued COMMIT was sent and before
    // any statement failed: the server may have committed.
    let lost_before_commit_answer = commit_sent
        && tally
            .failure
            .as_ref()
            .is_some_and(|f| f.error.as_ref().is_some_and(|e| e.as_db_error().is_none()));
    // A trigger created since start-up (the catalog did not know it) skipped
    // a row, and the queued COMMIT has kept the others: say so.
    let skipped_and_committed = commit_queued
        && commit.is_ok()
        && tally.failure.as_ref().is_some_and(|f| f.error.is_none());
    match commit {
        _ if lost_before_commit_answer => Err(super::outcome_unknown(&tally)),
        _ if skipped_and_committed => Err(super::skipped_after_commit(&tally)),
        _ if tally.failure.is_some() => Err(write_failed(coll, single, &tally)),
        // A deferred constraint fails at COMMIT, with no statement to blame.
        Err(error) => Err(super::commit_failed(coll, &error, &tally)),
        Ok(_) => Ok(WriteReport {
            strategy: super::Strategy::Insert,
            batches: tally.reports(true),
            ids: tally.ids,
        }),
    }
}
