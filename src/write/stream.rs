//! Writing a body while it arrives: its features are parsed and validated
//! on a thread of their own, a batch at a time ([`read_rows`]), and each
//! batch goes to the database, pipelined, as soon as it is ready
//! ([`write_stream`]), so that the parser and the database work at once and
//! a request holds its batches in flight and its ids, not its body.
//!
//! The transaction commits only once the whole body has been read and found
//! good ([`Verdict`]): a body that turns out invalid, too large or cut short
//! is rolled back, and its answer is the one it would have had whole.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_util::task::AbortOnDropHandle;

use super::copy::{copy_plan, CopyFailed, CopyPlan, Copying, Then};
use super::guard::TxGuard;
use super::idempotency::Idempotency;
use super::insert::{conclude, prepare_inserts, Answer};
use super::keys_ahead::KeysAhead;
use super::pipeline::Flight;
use super::plan::{BatchLimits, Batcher, Plan};
use super::report::{Tally, WriteReport};
use super::{claim_calls, keyed_connection, record_written, Keyed, Strategy, WriteOptions};
use crate::catalog::Collection;
use crate::db::statement::{Naming, Stmt};
use crate::db::Database;
use crate::error::Error;
use crate::feature::stream::{parse_stream, Streamed};
use crate::feature::{FeatureRow, Reading};

/// Batches waiting between the parser and the writer: the parser runs at
/// most this far ahead of the database.
const BATCHES_AHEAD: usize = 4;

/// Batches sent and not yet answered, in [`BatchLimits::max_bytes`]: the
/// writer waits for answers beyond this, so that the connection's buffers
/// stay bounded when the database is slower than the parser.
const BATCHES_IN_FLIGHT: usize = 4;

/// Rows of one batch, with the column sets when they grew.
pub struct Batch {
    /// The rows, in feature order, after those of the batches before.
    pub rows: Vec<FeatureRow>,
    /// Every column set so far, when this batch brought a new one.
    pub shapes: Option<Vec<Vec<usize>>>,
}

/// Whether a write read as it arrived may commit: known once the whole body
/// has been read.
#[derive(Debug)]
pub enum Verdict {
    /// The body was good: commit, under the Idempotency-Key with this
    /// request hash if there is one.
    Commit {
        /// The hash of the whole request (see [`super::idempotency::request_hash`]).
        hash: String,
    },
    /// The body was refused: roll back.
    Abandon,
}

/// Parse and validate the body whose bytes `chunks` bring (after `head`),
/// on a blocking thread: batches of rows go to the receiver while the body is
/// good; the handle answers how it was read.
pub fn read_rows(
    head: Bytes,
    mut chunks: mpsc::Receiver<Bytes>,
    coll: Arc<Collection>,
    how: Reading,
    limits: BatchLimits,
) -> (mpsc::Receiver<Batch>, tokio::task::JoinHandle<Streamed>) {
    let (tx, rx) = mpsc::channel(BATCHES_AHEAD);
    let parse = tokio::task::spawn_blocking(move || {
        let input = std::iter::once(head).chain(std::iter::from_fn(|| chunks.blocking_recv()));
        let mut batcher = Batcher::new(limits);
        let mut known_shapes = 0;
        let mut shapes_grew = None;
        // A writer gone (its request over) refuses the batch: reading goes on.
        let send = |rows, shapes| drop(tx.blocking_send(Batch { rows, shapes }));
        let streamed = parse_stream(input, &coll, &how, &mut |_, row, shapes| {
            // Atomic: a body with an invalid feature hands on no more rows.
            let Ok(row) = row else { return };
            if shapes.len() > known_shapes {
                known_shapes = shapes.len();
                shapes_grew = Some(shapes.to_vec());
            }
            if let Some(rows) = batcher.push(row) {
                send(rows, shapes_grew.take());
            }
        });
        if let (Streamed::Rows(Ok(_)), Some(rows)) = (&streamed, batcher.finish()) {
            send(rows, shapes_grew.take());
        }
        streamed
    });
    (rx, parse)
}

/// Write the batches of `batches` in one transaction as they come, and
/// commit if the `verdict` says so: the report, or `None` when no batch came
/// or the body was refused (everything sent then rolled back).
///
/// The work runs on its own task, aborted when the request is dropped (its
/// [`TxGuard`] then cancels what is in flight). A database failure stops the
/// sending; the batches still coming are read and dropped, so that the body
/// is read to its end and refused as it would have been whole. A streamed
/// write is not run again after a deadlock: its rows are gone.
pub async fn write_stream(
    db: Database,
    coll: Arc<Collection>,
    batches: mpsc::Receiver<Batch>,
    verdict: oneshot::Receiver<Verdict>,
    options: WriteOptions,
    idempotency: Option<Idempotency>,
    srid: i32,
) -> Result<Option<WriteReport>, Error> {
    AbortOnDropHandle::new(tokio::spawn(crate::db::round_trips::carried(async move {
        let stream = Streaming {
            db: &db,
            coll: &coll,
            options,
            srid,
        };
        let report = stream.run(batches, verdict, idempotency).await?;
        if let Some(report) = &report {
            record_written(&coll.id, report);
        }
        Ok(report)
    })))
    .await
    .map_err(|e| Error::task_failed("writing", &e))?
}

/// What every batch of a streamed write shares.
struct Streaming<'a> {
    db: &'a Database,
    coll: &'a Collection,
    options: WriteOptions,
    srid: i32,
}

impl Streaming<'_> {
    async fn run(
        &self,
        mut batches: mpsc::Receiver<Batch>,
        verdict: oneshot::Receiver<Verdict>,
        idempotency: Option<Idempotency>,
    ) -> Result<Option<WriteReport>, Error> {
        // No connection is taken before there is a row to write.
        let Some(first) = batches.recv().await else {
            return Ok(None);
        };
        let mut held = vec![first];
        if let Some((copy, shape)) = self.copy_plan(&mut held, &mut batches).await {
            let (client, keyed) = match keyed_connection(self.db, idempotency.is_some()).await {
                Ok(connected) => connected,
                Err(e) => return abandoned(batches, verdict, e).await,
            };
            let naming = self.db.naming();
            let costs = self.db.costs();
            let copying = Copying::prepare(&client, self.coll, copy, &shape, naming, costs);
            let copied = match copying.await {
                Ok(copying) => {
                    let ahead = (self.db, self.key_block());
                    copy_batches(copying, held, &mut batches, ahead).await
                }
                Err(CopyFailed::Write(e)) => return abandoned(batches, verdict, e).await,
                Err(CopyFailed::Refused(_) | CopyFailed::RowsSkipped) => Copied::Refused(held),
            };
            match copied {
                Copied::All(copying) => {
                    return commit_copy(copying, verdict, idempotency, keyed.as_ref()).await;
                }
                Copied::Failed(e) => return abandoned(batches, verdict, e).await,
                // Refused at its start: the whole body by INSERT, on a
                // connection of its own (see `CopyFailed::Refused`).
                Copied::Refused(back) => held = back,
                // Features of another column set: the rest by INSERT.
                Copied::Reshaped(copying, rest) => {
                    let copied = Some(copying.into_tally());
                    let connected = (client, keyed);
                    let rest = (rest, batches, verdict);
                    return self.insert(connected, copied, rest, idempotency).await;
                }
            }
        }
        let connected = match keyed_connection(self.db, idempotency.is_some()).await {
            Ok(connected) => connected,
            Err(e) => return abandoned(batches, verdict, e).await,
        };
        self.insert(connected, None, (held, batches, verdict), idempotency)
            .await
    }

    /// COPY or not, decided as for a whole body ([`super::Request`]): by
    /// the strategy, and for `auto` by the number of features, known once
    /// the threshold has been reached (batches held until then) or the
    /// body has ended. With the COPY's column set.
    async fn copy_plan(
        &self,
        held: &mut Vec<Batch>,
        batches: &mut mpsc::Receiver<Batch>,
    ) -> Option<(CopyPlan, Vec<usize>)> {
        let options = self.options;
        let copy_allowed = options.pipeline && self.db.naming() != Naming::Unnamed;
        let plan = |held: &[Batch]| {
            let plan = Plan {
                shapes: held.iter().rev().find_map(|b| b.shapes.clone())?,
                batches: Vec::new(),
            };
            let copy = copy_plan(self.coll, &plan, self.srid)?;
            Some((copy, plan.shapes[0].clone()))
        };
        // The COMMIT of a streamed write waits for the body's end whatever
        // the strategy: only the defaults query costs COPY more.
        let extra = |copy: &CopyPlan| copy.extra_round_trips(false);
        let mut rows: usize = held.iter().map(|b| b.rows.len()).sum();
        if options.strategy == Strategy::Auto {
            // A streamed body is large: the costs of large writes decide.
            let extra = extra(&plan(held).filter(|_| copy_allowed)?.0);
            let copy_from = options.copy_from(extra, usize::MAX, self.db);
            while rows < copy_from {
                let Some(batch) = batches.recv().await else {
                    break;
                };
                rows += batch.rows.len();
                held.push(batch);
            }
        }
        let (copy, shape) = plan(held)?;
        let observed = self.db.costs().observed(usize::MAX);
        let copy = copy.keys_for_stream(self.coll, self.key_block(), &observed);
        let wants_copy = match options.strategy {
            Strategy::Auto => rows >= options.copy_from(extra(&copy), usize::MAX, self.db),
            _ => options.wants_copy(rows, extra(&copy), self.db),
        };
        (copy_allowed && wants_copy).then_some((copy, shape))
    }

    /// Keys drawn ahead at a time ([`Copying::keys_ahead`]).
    fn key_block(&self) -> usize {
        KEY_BLOCK_BATCHES * self.options.limits.max_features.max(1)
    }

    /// Write `held`, then the batches still coming, by pipelined INSERTs on
    /// `client`, in a transaction begun here or, after the COPY of the
    /// features before them, already open (`copied`); commit if the verdict
    /// says so.
    async fn insert(
        &self,
        (client, keyed): (TxGuard, Option<[Stmt; 3]>),
        copied: Option<Tally>,
        (held, mut batches, verdict): (
            Vec<Batch>,
            mpsc::Receiver<Batch>,
            oneshot::Receiver<Verdict>,
        ),
        idempotency: Option<Idempotency>,
    ) -> Result<Option<WriteReport>, Error> {
        let limits = self.options.limits;
        let mut sending = match copied {
            Some(tally) => Sending::continuing(&client, self.coll, self.srid, limits, tally),
            None => {
                let mut sending = Sending::new(&client, self.coll, self.srid, limits);
                sending.begin().await;
                sending
            }
        };
        let mut held = held.into_iter();
        loop {
            let batch = match held.next() {
                Some(batch) => batch,
                None => match batches.recv().await {
                    Some(batch) => batch,
                    None => break,
                },
            };
            sending.batch(batch, self.db).await;
        }
        let Some(hash) = judged(verdict).await else {
            sending.roll_back().await;
            return Ok(None);
        };
        let idempotency = idempotency.map(|idem| Idempotency { hash, ..idem });
        sending
            .finish(keyed_by(idempotency.as_ref(), keyed.as_ref()))
            .await
            .map(Some)
    }
}

/// The Idempotency-Key (if any) with its statements on the connection.
fn keyed_by<'a>(
    idempotency: Option<&'a Idempotency>,
    statements: Option<&'a [Stmt; 3]>,
) -> Option<Keyed<'a>> {
    idempotency
        .zip(statements)
        .map(|(idem, statements)| Keyed { idem, statements })
}

/// The hash to commit under, once the whole body has been read; `None`
/// when it was refused (or the request is over): nothing is to stay.
pub async fn judged(verdict: oneshot::Receiver<Verdict>) -> Option<String> {
    match verdict.await {
        Ok(Verdict::Commit { hash }) => Some(hash),
        Ok(Verdict::Abandon) | Err(_) => None,
    }
}

/// Batches of COPY rows per `COPY` statement at most: a segment takes the
/// batches that are ready when it starts.
const SEGMENT_BATCHES: usize = 16;

/// How a COPY of batches as they came ended.
enum Copied<'a> {
    /// Every batch copied.
    All(Copying<'a>),
    /// Refused by the database (and rolled back): the answer, unless the
    /// body is refused too.
    Failed(Error),
    /// COPY refused at its start, nothing sent: these batches, again.
    Refused(Vec<Batch>),
    /// The features before these batches copied; these bring a column set
    /// the COPY does not have.
    Reshaped(Copying<'a>, Vec<Batch>),
}

/// Keys drawn ahead a block of this many batches at a time (see
/// [`Copying::keys_ahead`]): a few milliseconds of the database's work.
const KEY_BLOCK_BATCHES: usize = 4;

/// COPY `held` (and the batches ready) as a first segment, which shows
/// whether the database takes this COPY at all; then the batches as they
/// come: in one COPY when their keys need nothing between batches or are
/// drawn ahead (on a connection of `db`'s, in blocks of `block`), else a
/// segment at a time, each segment's keys drawn in the flight before it.
async fn copy_batches<'a>(
    mut copying: Copying<'a>,
    mut pending: Vec<Batch>,
    batches: &mut mpsc::Receiver<Batch>,
    (db, block): (&Database, usize),
) -> Copied<'a> {
    loop {
        if pending.is_empty() {
            match batches.recv().await {
                Some(batch) => pending.push(batch),
                None => return Copied::All(copying),
            }
        }
        if !copying.is_empty() {
            let ahead = match copying.streams_rows() {
                true => None,
                false => copying.keys_ahead(db, block).await,
            };
            if copying.streams_rows() || ahead.is_some() {
                return copy_rest(copying, pending.remove(0), batches, ahead).await;
            }
        }
        while pending.len() < SEGMENT_BATCHES {
            match batches.try_recv() {
                Ok(batch) => pending.push(batch),
                Err(_) => break,
            }
        }
        let reshaped = pending.iter().position(reshapes);
        let later = reshaped.map(|k| pending.split_off(k));
        if !pending.is_empty() {
            let lengths: Vec<usize> = pending.iter().map(|b| b.rows.len()).collect();
            let shapes = pending[0].shapes.clone();
            let rows: Vec<FeatureRow> = pending.drain(..).flat_map(|b| b.rows).collect();
            match copying
                .segment(&rows, &lengths, false, None, Then::StayOpen)
                .await
            {
                Ok(()) => {}
                Err(CopyFailed::Refused(e)) => {
                    tracing::debug!("COPY refused ({e}); writing by INSERT");
                    return Copied::Refused(rebatched(rows, &lengths, shapes));
                }
                Err(failed) => return Copied::Failed(stream_failed(failed)),
            }
        }
        if let Some(later) = later {
            return Copied::Reshaped(copying, later);
        }
    }
}

/// Whether `batch` brings a column set the COPY does not have.
fn reshapes(batch: &Batch) -> bool {
    batch.shapes.as_ref().is_some_and(|s| s.len() > 1)
}

/// COPY `next` and the batches still coming in one COPY (with keys drawn
/// `ahead`, if given), up to the end of the body or a batch of another
/// column set.
async fn copy_rest<'a>(
    mut copying: Copying<'a>,
    next: Batch,
    batches: &mut mpsc::Receiver<Batch>,
    ahead: Option<KeysAhead>,
) -> Copied<'a> {
    if reshapes(&next) {
        return Copied::Reshaped(copying, vec![next]);
    }
    let mut later = None;
    let copied = {
        let rest = futures_util::stream::unfold(
            (&mut *batches, &mut later),
            |(batches, later)| async move {
                let batch = batches.recv().await?;
                if reshapes(&batch) {
                    *later = Some(batch);
                    return None;
                }
                Some((batch.rows, (batches, later)))
            },
        );
        let rows = futures_util::stream::once(async { next.rows }).chain(rest);
        copying.stream(std::pin::pin!(rows), ahead).await
    };
    match (copied, later) {
        (Ok(()), None) => Copied::All(copying),
        (Ok(()), Some(later)) => Copied::Reshaped(copying, vec![later]),
        (Err(failed), _) => Copied::Failed(stream_failed(failed)),
    }
}

/// The answer for a COPY of a streamed body that failed (and was rolled back).
fn stream_failed(failed: CopyFailed) -> Error {
    match failed {
        CopyFailed::Write(e) => e,
        CopyFailed::Refused(e) => Error::database("copying", &e),
        CopyFailed::RowsSkipped => Error::internal(
            "a BEFORE INSERT trigger that featurepipe's catalog does not know of \
             skipped rows of the COPY; nothing was written. Retry once the catalog \
             has been reloaded (SIGHUP or NOTIFY featurepipe_reload)",
        ),
    }
}

/// `rows` cut again into batches of `lengths`, the first with `shapes`.
fn rebatched(
    mut rows: Vec<FeatureRow>,
    lengths: &[usize],
    mut shapes: Option<Vec<Vec<usize>>>,
) -> Vec<Batch> {
    let mut batches: Vec<Batch> = lengths
        .iter()
        .rev()
        .map(|&n| Batch {
            rows: rows.split_off(rows.len() - n),
            shapes: None,
        })
        .collect();
    batches.reverse();
    if let Some(first) = batches.first_mut() {
        first.shapes = shapes.take();
    }
    batches
}

/// Commit a COPY of every batch if the verdict says so, under the
/// Idempotency-Key (claimed now that the request's hash is known).
async fn commit_copy(
    copying: Copying<'_>,
    verdict: oneshot::Receiver<Verdict>,
    idempotency: Option<Idempotency>,
    statements: Option<&[Stmt; 3]>,
) -> Result<Option<WriteReport>, Error> {
    let Some(hash) = judged(verdict).await else {
        copying.rollback().await;
        return Ok(None);
    };
    let idempotency = idempotency.map(|idem| Idempotency { hash, ..idem });
    let keyed = keyed_by(idempotency.as_ref(), statements);
    if let Some(keyed) = keyed {
        copying.claim(keyed).await?;
    }
    copying.commit(keyed).await.map(Some)
}

/// A streamed write that failed before its first batch was sent: the
/// batches still coming are dropped, and the body's refusal, if it is
/// refused, is the answer.
async fn abandoned(
    mut batches: mpsc::Receiver<Batch>,
    verdict: oneshot::Receiver<Verdict>,
    error: Error,
) -> Result<Option<WriteReport>, Error> {
    while batches.recv().await.is_some() {}
    match verdict.await {
        Ok(Verdict::Commit { .. }) => Err(error),
        _ => Ok(None),
    }
}

/// The INSERTs of a streamed write, sent as batches come.
struct Sending<'a> {
    client: &'a TxGuard,
    coll: &'a Collection,
    srid: i32,
    limits: BatchLimits,
    flight: Flight<'a, Answer>,
    statements: Vec<Stmt>,
    shapes: Vec<Vec<usize>>,
    tally: Tally,
    /// BEGIN has been answered.
    begun: bool,
    /// A failure before any INSERT (BEGIN, preparing): nothing more is sent.
    failed: Option<Error>,
    /// Features come, INSERTs sent, and INSERTs answered (INSERT `k` is
    /// feature `k`: sending stops at the first failure).
    features: usize,
    sent: usize,
    answered: usize,
    /// The end (in features) and size of each batch not answered yet.
    in_flight: VecDeque<(usize, usize)>,
    bytes_in_flight: usize,
}

impl<'a> Sending<'a> {
    fn new(client: &'a TxGuard, coll: &'a Collection, srid: i32, limits: BatchLimits) -> Self {
        Sending {
            client,
            coll,
            srid,
            limits,
            flight: Flight::default(),
            statements: Vec::new(),
            shapes: Vec::new(),
            tally: Tally::new(&[], coll.integer_key(), 0),
            begun: false,
            failed: None,
            features: 0,
            sent: 0,
            answered: 0,
            in_flight: VecDeque::new(),
            bytes_in_flight: 0,
        }
    }

    /// INSERTs of the features after those a COPY wrote in the
    /// transaction already open, whose ids and batches `tally` holds.
    fn continuing(
        client: &'a TxGuard,
        coll: &'a Collection,
        srid: i32,
        limits: BatchLimits,
        tally: Tally,
    ) -> Self {
        let copied = tally.ids.len();
        Sending {
            begun: true,
            features: copied,
            sent: copied,
            answered: copied,
            tally,
            ..Sending::new(client, coll, srid, limits)
        }
    }

    /// Whether nothing more is to be sent.
    fn stopped(&self) -> bool {
        self.failed.is_some() || self.tally.failure.is_some()
    }

    async fn begin(&mut self) {
        self.client.set_open(true);
        let client = self.client;
        self.flight
            .send(Box::pin(async move {
                client.batch_execute("BEGIN").await.map(|()| None)
            }))
            .await;
    }

    /// Send the INSERTs of `batch`, then take the answers that have arrived
    /// (waiting for some when too many bytes are in flight).
    async fn batch(&mut self, batch: Batch, db: &Database) {
        let first = self.features;
        self.features += batch.rows.len();
        self.tally.add_batch(first..self.features);
        if self.stopped() {
            return; // not attempted
        }
        if let Some(shapes) = batch.shapes {
            let new = &shapes[self.shapes.len()..];
            // Waits for the answers before it: a new column set is rare.
            match prepare_inserts(self.client, self.coll, new, self.srid, db.naming()).await {
                Ok(statements) => self.statements.extend(statements),
                Err(e) => {
                    self.failed = Some(e);
                    return;
                }
            }
            self.shapes = shapes;
        }
        let bytes: usize = batch.rows.iter().map(FeatureRow::wire_size).sum();
        self.sent += batch.rows.len();
        for row in batch.rows {
            let statement = self.statements[row.shape].clone();
            let client = self.client;
            self.flight
                .send(Box::pin(async move {
                    let params: Vec<&(dyn ToSql + Sync)> =
                        row.values.iter().map(|v| v as _).collect();
                    statement
                        .query_opt(client, &params)
                        .await
                        .map(|r| r.map(|r| r.get(0)))
                }))
                .await;
        }
        self.in_flight.push_back((self.sent, bytes));
        self.bytes_in_flight += bytes;
        while let Some(answer) = self.flight.arrived() {
            self.record(answer);
        }
        let most = BATCHES_IN_FLIGHT * self.limits.max_bytes.max(1);
        while self.bytes_in_flight > most && !self.stopped() {
            match self.flight.next().await {
                Some(answer) => self.record(answer),
                None => break,
            }
        }
    }

    /// Take the next answer: BEGIN's, then one per feature in order.
    fn record(&mut self, answer: Answer) {
        if !self.begun {
            self.begun = true;
            if let Err(e) = answer {
                self.failed = Some(Error::database("starting the transaction", &e));
            }
            return;
        }
        self.tally.record(self.answered, answer);
        self.answered += 1;
        while self
            .in_flight
            .front()
            .is_some_and(|&(end, _)| end <= self.answered)
        {
            let (_, bytes) = self.in_flight.pop_front().expect("checked");
            self.bytes_in_flight -= bytes;
        }
    }

    /// Read every answer still due.
    async fn answers(&mut self) {
        let due = self.sent - self.answered + usize::from(!self.begun);
        for _ in 0..due {
            match self.flight.next().await {
                Some(answer) => self.record(answer),
                None => break,
            }
            // After a failure before the INSERTs, none of them were sent.
            if self.failed.is_some() {
                break;
            }
        }
    }

    /// Undo everything sent.
    async fn roll_back(&mut self) {
        self.flight = Flight::default(); // the answers still due are not read
        crate::db::round_trips::round_trip();
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.client.set_open(false);
        }
    }

    /// Commit the body found good: COMMIT queued behind the INSERTs where
    /// that is safe (no key to store, no trigger that may skip a row), else
    /// sent once every answer has been seen.
    async fn finish(mut self, keyed: Option<Keyed<'a>>) -> Result<WriteReport, Error> {
        if let Some(keyed) = keyed.filter(|_| !self.stopped()) {
            let [expire, claim] = claim_calls(keyed, self.client);
            for call in [expire, claim] {
                self.flight
                    .send(Box::pin(async move { call.await.map(|()| None) }))
                    .await;
            }
        }
        let commit_sent = keyed.is_none() && !self.coll.before_insert_trigger && !self.stopped();
        if commit_sent {
            let client = self.client;
            self.flight
                .send(Box::pin(async move {
                    client.batch_execute("COMMIT").await.map(|()| None)
                }))
                .await;
        }
        self.answers().await;
        if let Some(e) = self.failed.take() {
            self.roll_back().await;
            return Err(e);
        }
        if keyed.is_some() && self.tally.failure.is_none() {
            for _ in 0..2 {
                if let Some(Err(e)) = self.flight.next().await {
                    self.roll_back().await;
                    return Err(super::claim_failed(&e));
                }
            }
        }
        let queued = match commit_sent {
            // After a failure the queued COMMIT comes back as a ROLLBACK.
            true => Some((self.flight.next().await.expect("COMMIT was queued"), true)),
            false => None,
        };
        self.flight = Flight::default();
        conclude(self.client, self.coll, false, keyed, self.tally, queued).await
    }
}
