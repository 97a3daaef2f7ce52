//! Pipelined INSERTs: BEGIN, the INSERTs (each with its own Sync) and COMMIT
//! are sent before any answer is read; the answers are read back in order.
//! Warm, a whole request costs one database round trip.
//!
//! A request of many features sends one INSERT per run of features that
//! write the same columns within a batch, its values bound as arrays
//! ([`sql::insert_many`]): the database then runs one statement (and a
//! change feed's trigger once) per batch rather than per feature. When
//! such a statement fails, the request is written again one statement a
//! feature, which names the failing feature and field.

use std::ops::Range;

use tokio_postgres::types::ToSql;
use tokio_postgres::Error as PgError;

use std::time::Instant;

use crate::catalog::Collection;
use crate::db::costs::Cost;
use crate::db::statement::{cache_room, prepare_in_flight, Naming, Stmt};
use crate::feature::value::by_column;
use crate::feature::FeatureRow;

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

/// A statement's answer: the key of each feature it wrote, in order
/// (`None` where no row was inserted); none for BEGIN and COMMIT.
type Answers = Result<Vec<Option<String>>, PgError>;

/// How one attempt at the write ended.
enum Attempt {
    /// With this answer.
    Done(Result<WriteReport, Error>),
    /// A statement of many features failed (and was rolled back): write
    /// them again one statement a feature, to name the failing one, with
    /// COMMIT waiting for every answer (a trigger may have skipped some).
    OneByOne,
}

impl Insert<'_> {
    /// Write all rows in one transaction; ids in feature order, or a failure report.
    pub async fn run(self) -> Result<WriteReport, Error> {
        // Each shape's INSERT of many rows, made once: `None` when one
        // feature a statement is what this request takes.
        let job = &self.job;
        // Not on Citus: it routes the rows of one INSERT to their shards
        // and answers their keys shard by shard, not in the rows' order.
        let many = (self.pipeline
            && !job.coll.distributed
            && !job.coll.before_insert_trigger
            && !self.skipping_trigger
            && job.rows.len() > 1)
            .then(|| {
                job.plan
                    .shapes
                    .iter()
                    .map(|shape| sql::insert_many(job.coll, shape, job.srid))
                    .collect::<Option<Vec<String>>>()
            })
            .flatten();
        match self.attempt(many.as_deref(), self.skipping_trigger).await {
            Attempt::Done(written) => written,
            Attempt::OneByOne => {
                tracing::debug!(collection = %self.job.coll.id, "a statement of many features failed; writing them one by one");
                match self.attempt(None, true).await {
                    Attempt::Done(written) => written,
                    Attempt::OneByOne => unreachable!("one by one is not tried again"),
                }
            }
        }
    }

    /// One transaction of the rows, many to a statement where they write
    /// the same columns (by the INSERTs `many`, one per shape), else one a
    /// feature; COMMIT queued behind them unless a `skipping_trigger` may
    /// skip rows.
    async fn attempt(&self, many: Option<&[String]>, skipping_trigger: bool) -> Attempt {
        let job = &self.job;
        let prepared = match many {
            Some(sqls) => prepare_all(job.client, sqls, job.naming).await,
            None => {
                prepare_inserts(job.client, job.coll, &job.plan.shapes, job.srid, job.naming).await
            }
        };
        let many = many.is_some();
        let statements = match prepared {
            Ok(statements) => statements,
            Err(e) => return Attempt::Done(Err(e)),
        };
        // A BEFORE INSERT trigger may skip a row (RETURN NULL) without an error:
        // then COMMIT must wait until every answer has been seen.
        // So must it when the response is to be stored before it (Idempotency-Key).
        let commit_queued = self.pipeline
            && !self.job.coll.before_insert_trigger
            && !skipping_trigger
            && self.job.idempotency.is_none();
        let units = units(self.job.rows, &self.job.plan.batches, many);
        let mut calls = Calls::new(self.calls(&statements, &units, many, commit_queued));
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
                return Attempt::Done(Err(super::outcome_unknown(&tally)));
            }
            return Attempt::Done(Err(Error::database("starting the transaction", &e)));
        }
        if self.pipeline {
            // BEGIN is answered at once: its answer takes a round trip.
            self.job.costs.observe(Cost::RoundTrip, 0, sent.elapsed());
        }
        if self.job.idempotency.is_some() {
            for _ in 0..2 {
                if let Some(Err(e)) = calls.next().await {
                    return Attempt::Done(Err(super::claim_failed(&e)));
                }
            }
        }
        let mut again = false;
        for unit in &units {
            match calls.next().await.expect("one answer per statement") {
                Ok(keys) => {
                    for (feature, key) in unit.clone().zip(keys) {
                        tally.record(feature, Ok(key));
                    }
                }
                Err(e) => {
                    again |= many && tally.failure.is_none() && e.as_db_error().is_some();
                    tally.record(unit.start, Err(e));
                }
            }
            if !self.pipeline && tally.failure.is_some() {
                break;
            }
        }
        // The rows' time: up to the last INSERT's answer, not COMMIT's (its
        // flush to disk is the request's, whatever its size).
        let rows_took = sent.elapsed();
        let queued = match commit_queued {
            // After a failure the queued COMMIT comes back as a ROLLBACK.
            true => {
                let commit = calls.next().await.expect("COMMIT was queued");
                Some((commit.map(|_| None), commit_sent))
            }
            false => None,
        };
        drop(calls);
        let rows = job.rows.len();
        let (keyed, single) = (job.idempotency, job.single);
        let written = conclude(job.client, job.coll, single, keyed, tally, queued).await;
        // Written again only once the server has ended the transaction
        // (its COMMIT or ROLLBACK answered): not on a connection lost since.
        if again && written.is_err() && !job.client.is_open() && !job.client.is_closed() {
            return Attempt::OneByOne;
        }
        if self.pipeline && written.is_ok() {
            job.costs.observe_rows(Cost::InsertRow, rows, rows_took);
        }
        Attempt::Done(written)
    }

    /// BEGIN, one INSERT per unit of features (its values bound as arrays
    /// when `many`), and COMMIT if `commit`: not sent until polled.
    fn calls<'s>(
        &'s self,
        statements: &'s [Stmt],
        units: &'s [Range<usize>],
        many: bool,
        commit: bool,
    ) -> Vec<Call<'s, Answers>> {
        let client = self.job.client;
        let mut calls: Vec<Call<'s, Answers>> = Vec::with_capacity(units.len() + 4);
        calls.push(Box::pin(async move {
            client.batch_execute("BEGIN").await.map(|()| Vec::new())
        }));
        if let Some(idem) = self.job.idempotency {
            calls.extend(super::claim_calls(idem, client).map(|call| {
                Box::pin(async move { call.await.map(|()| Vec::new()) }) as Call<'s, Answers>
            }));
        }
        for unit in units {
            let rows = &self.job.rows[unit.clone()];
            let statement = &statements[rows[0].shape];
            calls.push(match rows {
                [row] if !many => Box::pin(async move {
                    let params: Vec<&(dyn ToSql + Sync)> =
                        row.values.iter().map(|v| v as _).collect();
                    let answer = statement.query_opt(client, &params).await?;
                    Ok(vec![answer.map(|r| r.get(0))])
                }),
                rows => Box::pin(async move {
                    let columns = by_column(rows, |row| &row.values);
                    let params: Vec<&(dyn ToSql + Sync)> = columns.iter().map(|c| c as _).collect();
                    let answer = statement.query(client, &params).await?;
                    Ok(answer.iter().map(|r| Some(r.get(0))).collect())
                }),
            });
        }
        if commit {
            calls.push(Box::pin(async move {
                client.batch_execute("COMMIT").await.map(|()| Vec::new())
            }));
        }
        calls
    }
}

/// The features each INSERT writes: runs of one shape within a batch when
/// `many`, else one feature each.
fn units(rows: &[FeatureRow], batches: &[Range<usize>], many: bool) -> Vec<Range<usize>> {
    if !many {
        return (0..rows.len()).map(|f| f..f + 1).collect();
    }
    let mut units = Vec::new();
    for batch in batches {
        let mut start = batch.start;
        for f in batch.clone().skip(1) {
            if rows[f].shape != rows[start].shape {
                units.push(start..f);
                start = f;
            }
        }
        units.push(start..batch.end);
    }
    units
}

/// Prepare one INSERT per column set of `shapes`, all in one round trip.
pub async fn prepare_inserts(
    client: &TxGuard,
    coll: &Collection,
    shapes: &[Vec<usize>],
    srid: i32,
    naming: Naming,
) -> Result<Vec<Stmt>, Error> {
    let sqls: Vec<String> = shapes
        .iter()
        .map(|shape| sql::insert(coll, shape, srid))
        .collect();
    prepare_all(client, &sqls, naming).await
}

/// Prepare `sqls`, all in one round trip.
///
/// Statements are cached per connection, up to [`STATEMENT_CACHE_LIMIT`](crate::db::statement::STATEMENT_CACHE_LIMIT):
/// clients whose features each leave out different properties would
/// otherwise grow the cache (here and in the server) without bound.
async fn prepare_all(
    client: &TxGuard,
    sqls: &[String],
    naming: Naming,
) -> Result<Vec<Stmt>, Error> {
    let room = cache_room(client);
    let prepares: Vec<Call<'_, Result<Stmt, PgError>>> = sqls
        .iter()
        .enumerate()
        .map(|(n, sql)| {
            Box::pin(async move { prepare_in_flight(client, sql, naming.within(room, n)).await })
                as Call<'_, _>
        })
        .collect();
    let mut calls = Calls::new(prepares);
    calls.send_all().await;
    let mut statements = Vec::with_capacity(sqls.len());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::value::SqlValue;

    fn rows(shapes: &[usize]) -> Vec<FeatureRow> {
        shapes
            .iter()
            .map(|&shape| FeatureRow {
                shape,
                values: vec![SqlValue::Int4(shape as i32)],
            })
            .collect()
    }

    #[test]
    fn runs_of_one_shape_within_a_batch_share_a_statement() {
        let rows = rows(&[0, 0, 1, 1, 1, 0, 0, 0]);
        let batches = [0..4, 4..8];
        assert_eq!(units(&rows, &batches, true), [0..2, 2..4, 4..5, 5..8]);
        let one_each: Vec<_> = (0..8).map(|f| f..f + 1).collect();
        assert_eq!(units(&rows, &batches, false), one_each);
    }

    #[test]
    fn columns_are_bound_as_one_array_each() {
        let rows = [
            FeatureRow {
                shape: 0,
                values: vec![SqlValue::Int4(1), SqlValue::Null],
            },
            FeatureRow {
                shape: 0,
                values: vec![SqlValue::Int4(2), SqlValue::Text("b".into())],
            },
        ];
        let columns = by_column(&rows, |row| &row.values);
        assert_eq!(columns.len(), 2);
        assert!(matches!(
            columns[0][..],
            [SqlValue::Int4(1), SqlValue::Int4(2)]
        ));
        assert!(matches!(
            columns[1][..],
            [SqlValue::Null, SqlValue::Text(_)]
        ));
    }
}
