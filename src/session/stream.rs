//! The edit session of a FeatureCollection read as it arrives (`mode=batch`
//! and `mode=skip` on its items): its features are parsed and validated on
//! a thread of their own a window at a time ([`read_windows`]), and each
//! window is written as soon as it is ready ([`carry_out_streamed`]), so
//! that a request holds its windows in flight and its report, not its body.
//!
//! Batch mode sends each batch (BEGIN, its INSERTs, COMMIT) while the next
//! is parsed, pipelined: a batch commits on its own as soon as it has come,
//! before the body has ended. Skip mode is one transaction, as read whole:
//! a window at a time under savepoints, committed only once the whole body
//! has been read and found good ([`Verdict`]).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::Error as PgError;
use tokio_util::task::AbortOnDropHandle;

use super::report::{Outcome, SessionReport, BYTES_PER_RESULT};
use super::{
    check_lead, insert_operation, insert_step, prepare_distinct, Done, Mode, Msg, Operation, Reply,
    Session, Step, SKIP_LEAD,
};
use crate::budget::{Budget, Busy, Exhausted, Held};
use crate::catalog::Collection;
use crate::db::statement::Stmt;
use crate::db::Database;
use crate::error::{Error, ErrorKind};
use crate::feature::stream::{parse_stream, Checked, Streamed};
use crate::feature::value::SqlValue;
use crate::feature::Reading;
use crate::write::guard::TxGuard;
use crate::write::idempotency::Idempotency;
use crate::write::pipeline::Call;
use crate::write::pipeline::Flight;
use crate::write::stream::{judged, Verdict};
use crate::write::{keyed_connection, Keyed};

/// Windows waiting between the parser and the writer: the parser runs at
/// most this far ahead of the database.
const WINDOWS_AHEAD: usize = 4;

/// Batches sent and not yet answered (batch mode): the writer waits for
/// the oldest one's answers beyond this, so that a request's memory stays
/// bounded when the database is slower than the parser.
const BATCHES_IN_FLIGHT: usize = 4;

/// Consecutive features of a body read as it arrives.
pub struct Window {
    /// The index of its first feature.
    first: usize,
    /// Each feature's row or, in skip mode, its first problem.
    features: Vec<Checked>,
    /// Every column set so far, when this window brought a new one.
    shapes: Option<Vec<Vec<usize>>>,
}

/// Parse and validate the body whose bytes `chunks` bring (after `head`)
/// on a blocking thread: windows of `size` features go to the receiver (a
/// batch's or a skip flight's), the last one only when the body was good;
/// the handle answers how it was read.
pub fn read_windows(
    head: Bytes,
    mut chunks: mpsc::Receiver<Bytes>,
    coll: Arc<Collection>,
    how: Reading,
    size: usize,
) -> (mpsc::Receiver<Window>, tokio::task::JoinHandle<Streamed>) {
    let (tx, rx) = mpsc::channel(WINDOWS_AHEAD);
    let size = size.max(1);
    let parse = tokio::task::spawn_blocking(move || {
        let input = std::iter::once(head).chain(std::iter::from_fn(|| chunks.blocking_recv()));
        let mut window = Window::at(0);
        let mut known_shapes = 0;
        // A writer gone (its request over) refuses the window: reading goes on.
        let send = |window| drop(tx.blocking_send(window));
        let streamed = parse_stream(input, &coll, &how, &mut |i, checked, shapes| {
            if shapes.len() > known_shapes {
                known_shapes = shapes.len();
                window.shapes = Some(shapes.to_vec());
            }
            window.features.push(checked);
            if window.features.len() == size {
                send(std::mem::replace(&mut window, Window::at(i + 1)));
            }
        });
        if matches!(streamed, Streamed::Rows(Ok(_))) && !window.features.is_empty() {
            send(window);
        }
        streamed
    });
    (rx, parse)
}

impl Window {
    fn at(first: usize) -> Self {
        Window {
            first,
            features: Vec::new(),
            shapes: None,
        }
    }
}

/// What every window of a streamed session shares.
pub struct Streaming {
    /// The database.
    pub db: Database,
    /// The collection the features go to.
    pub coll: Arc<Collection>,
    /// Batch or skip.
    pub mode: Mode,
    /// Operations per batch (batch mode) or per flight (skip mode).
    pub batch_size: usize,
    /// The SRID of the body's geometries.
    pub srid: i32,
    /// The caller may read the collection: told the database's DETAIL lines.
    pub may_read: bool,
    /// The memory bodies share, in which the report's results are counted
    /// as they grow (one per feature, which for small features outweighs
    /// the body).
    pub budget: Budget,
}

/// Run the session of the features `windows` bring, as they come: its
/// report, or `None` when no window came (the body was not streamed, had
/// no features, or was refused before its first window) or, in skip mode,
/// when the `verdict` refused the body (everything rolled back). Batch mode
/// does not wait for the verdict: what it committed stays committed.
///
/// The work runs on its own task, aborted when the request is dropped (its
/// [`TxGuard`] then cancels what is in flight). A connection lost after a
/// COMMIT went out is an unknown outcome, as for a session read whole.
pub async fn carry_out_streamed(
    streaming: Streaming,
    windows: mpsc::Receiver<Window>,
    verdict: oneshot::Receiver<Verdict>,
    idempotency: Option<Idempotency>,
    room: Held,
) -> Result<Option<SessionReport>, Error> {
    let task = async move {
        let report = match streaming.mode {
            Mode::Skip => streaming.skip(windows, verdict, idempotency, room).await?,
            _ => streaming.batches(windows, room).await?,
        };
        match report {
            Some(report) if report.lost_after_commit() => {
                Err(Error::outcome_unknown().with_report(&report))
            }
            report => Ok(report),
        }
    };
    AbortOnDropHandle::new(tokio::spawn(crate::db::round_trips::carried(task)))
        .await
        .map_err(|e| Error::task_failed("writing", &e))?
}

impl Streaming {
    /// Grow `room` (the body's head's, then the report's so far) by the
    /// results of `window`'s features, kept until the report is made.
    async fn count(&self, room: &mut Held, window: &Window) -> Result<(), Error> {
        let bytes = window.features.len().saturating_mul(BYTES_PER_RESULT);
        self.budget.hold_more(room, bytes).await.map_err(|e| {
            let first = window.first;
            match e {
                Exhausted::Busy(Busy(wait)) => Error::unavailable(format!(
                    "other requests fill the memory set aside for bodies and reports \
                     (FEATUREPIPE_BODY_MEMORY) for longer than {wait:?}, at feature {first}; retry later"
                )),
                Exhausted::Beyond => Error::new(
                    ErrorKind::TooManyFeatures,
                    format!(
                        "the report of {first} features and more, one result each, would need more than \
                         the memory set aside for bodies and reports (FEATUREPIPE_BODY_MEMORY); \
                         send fewer features per request, or use mode=atomic, whose answer is their ids"
                    ),
                ),
            }
        })
    }

    /// The operations and statements of `window`, the statements' indices
    /// from 0; `shapes` are the column sets known so far.
    fn session_of(
        &self,
        window: Window,
        shapes: &mut Vec<Vec<usize>>,
    ) -> (Range<usize>, Vec<Operation>, Vec<Step>) {
        if let Some(grown) = window.shapes {
            *shapes = grown;
        }
        let ops = window.first..window.first + window.features.len();
        let mut operations = Vec::with_capacity(ops.len());
        let mut steps = Vec::with_capacity(ops.len());
        let mut step = 0;
        let id: Arc<str> = self.coll.id.as_str().into();
        for (i, checked) in ops.clone().zip(window.features) {
            let refused = match checked {
                Ok(row) => {
                    steps.push(insert_step(&self.coll, shapes, row, self.srid));
                    None
                }
                Err(e) => Some(e),
            };
            operations.push(insert_operation(&id, i, refused, &mut step, self.may_read));
        }
        (ops, operations, steps)
    }

    /// Batch mode: each window a batch of its own transaction, sent as it
    /// comes while earlier ones are answered.
    async fn batches(
        &self,
        mut windows: mpsc::Receiver<Window>,
        mut room: Held,
    ) -> Result<Option<SessionReport>, Error> {
        // No connection is taken before there is a feature to write.
        let Some(first) = windows.recv().await else {
            return Ok(None);
        };
        let client =
            TxGuard::new(self.db.connection().await?, self.db.connector()).writing(self.db.costs());
        let mut sending = Batches {
            client: &client,
            flight: Flight::default(),
            in_flight: VecDeque::new(),
            outcome: Outcome::new(&[], &[]),
            started: Instant::now(),
            lost: false,
        };
        let mut shapes = Vec::new();
        let mut next = Some(first);
        // A report outgrowing the budget stops the batches; what was
        // committed stays so, and is told.
        let mut outgrown = None;
        while let Some(window) = next {
            if let Err(e) = self.count(&mut room, &window).await {
                outgrown = Some(e);
                break;
            }
            let (ops, operations, steps) = self.session_of(window, &mut shapes);
            let b = sending.outcome.batches();
            sending
                .outcome
                .grow(&operations, std::slice::from_ref(&ops));
            // After a lost connection the rest is only reported (not written).
            if !sending.lost {
                sending.send(&self.db, (b, ops), operations, steps).await?;
            }
            next = windows.recv().await;
        }
        while !sending.in_flight.is_empty() {
            sending.settle_oldest().await?;
        }
        client.set_open(false);
        let report = sending.outcome.report(Mode::Batch);
        match outgrown {
            Some(e) => Err(e.with_report(&report)),
            None => Ok(Some(report)),
        }
    }

    /// Skip mode: one transaction, a window at a time under savepoints as a
    /// session read whole runs it; committed, under the Idempotency-Key
    /// (claimed now that the request's hash is known), once the verdict
    /// says the whole body was good.
    async fn skip(
        &self,
        mut windows: mpsc::Receiver<Window>,
        verdict: oneshot::Receiver<Verdict>,
        idempotency: Option<Idempotency>,
        mut room: Held,
    ) -> Result<Option<SessionReport>, Error> {
        let Some(first) = windows.recv().await else {
            return Ok(None);
        };
        let naming = self.db.naming();
        let (client, statements) = keyed_connection(&self.db, idempotency.is_some()).await?;
        let mut outcome = Outcome::new(&[], &[]);
        let mut lead = SKIP_LEAD.map(Msg::Sql).to_vec();
        let mut shapes = Vec::new();
        client.set_open(true);
        let started = Instant::now();
        let mut next = Some(first);
        while let Some(window) = next {
            // Refused: the transaction is rolled back as the connection goes.
            self.count(&mut room, &window).await?;
            let (ops, operations, steps) = self.session_of(window, &mut shapes);
            outcome.grow(&operations, &[]);
            if lead
                .first()
                .is_some_and(|msg| !matches!(msg, Msg::Sql("BEGIN")))
            {
                // A failure is still to be undone: before anything new is prepared.
                let session =
                    Session::prepare(&client, naming, (&[], &[], Vec::new()), Reply::Report)
                        .await?;
                session.send_lead(&mut lead).await?;
            }
            let mut session = Session::prepare(
                &client,
                naming,
                (&operations, &steps, Vec::new()),
                Reply::Report,
            )
            .await?;
            session.first = ops.start;
            session
                .skip_through(self.batch_size, &mut outcome, &mut lead)
                .await?;
            next = windows.recv().await;
        }
        let Some(hash) = judged(verdict).await else {
            if client.batch_execute("ROLLBACK").await.is_ok() {
                client.set_open(false);
            }
            return Ok(None);
        };
        let all = 0..outcome.operations();
        outcome.grow(&[], std::slice::from_ref(&all));
        let idempotency = idempotency.map(|idem| Idempotency { hash, ..idem });
        let mut session =
            Session::prepare(&client, naming, (&[], &[], Vec::new()), Reply::Report).await?;
        session.keyed = idempotency
            .as_ref()
            .zip(statements.as_ref())
            .map(|(idem, statements)| Keyed { idem, statements });
        if session.keyed.is_some() {
            lead.extend([Msg::Expire, Msg::Claim]);
        }
        session.skip_commit(lead, &mut outcome, started).await?;
        Ok(Some(outcome.report(Mode::Skip)))
    }
}

/// The batches of a batch-mode session on their way.
struct Batches<'c> {
    client: &'c TxGuard,
    flight: Flight<'c, Result<Done, PgError>>,
    /// Batches sent and not answered yet, oldest first.
    in_flight: VecDeque<InFlight>,
    outcome: Outcome,
    started: Instant,
    /// The connection was lost: nothing more is sent.
    lost: bool,
}

/// A batch sent: what reading its answers needs.
struct InFlight {
    batch: (usize, Range<usize>),
    operations: Vec<Operation>,
    /// Its statements, their values gone with the requests.
    steps: Vec<Step>,
}

impl<'c> Batches<'c> {
    /// Send batch `b` (the operations `ops` of the session): BEGIN, its
    /// INSERTs, COMMIT; then read the oldest batch's answers while too many
    /// are in flight.
    async fn send(
        &mut self,
        db: &Database,
        batch: (usize, Range<usize>),
        operations: Vec<Operation>,
        mut steps: Vec<Step>,
    ) -> Result<(), Error> {
        let client = self.client;
        // Cached on the connection after the first batch: no round trip.
        let sqls = steps.iter().map(Step::sql);
        let (statements, statement_of) = prepare_distinct(client, db.naming(), sqls).await?;
        client.set_open(true);
        self.flight.send(control(client, "BEGIN")).await;
        for (step, &s) in steps.iter_mut().zip(&statement_of) {
            let values = std::mem::take(&mut step.values);
            let insert = insert(client, statements[s].clone(), values);
            self.flight.send(insert).await;
        }
        self.flight.send(control(client, "COMMIT")).await;
        self.in_flight.push_back(InFlight {
            batch,
            operations,
            steps,
        });
        while self.in_flight.len() > BATCHES_IN_FLIGHT && !self.lost {
            self.settle_oldest().await?;
        }
        Ok(())
    }

    /// Read the answers of the oldest batch in flight into the outcome.
    async fn settle_oldest(&mut self) -> Result<(), Error> {
        let Some(sent) = self.in_flight.pop_front() else {
            return Ok(());
        };
        if self.lost {
            return Ok(()); // reported unknown already
        }
        let due = sent.steps.len() + 2;
        let mut answers = Vec::with_capacity(due);
        for _ in 0..due {
            answers.extend(self.flight.next().await);
        }
        let settling = super::Sent {
            first: sent.batch.1.start,
            batch: sent.batch,
            operations: &sent.operations,
            steps: &sent.steps,
            commits_sent: true,
            started: self.started,
        };
        self.lost = !settling.settle(&mut self.outcome, &mut answers.into_iter())?;
        if self.lost {
            self.client.set_open(false);
        }
        Ok(())
    }
}

/// A control statement (BEGIN, COMMIT) as a request of a flight.
fn control<'c>(client: &'c TxGuard, sql: &'static str) -> Call<'c, Result<Done, PgError>> {
    Box::pin(async move { client.batch_execute(sql).await.map(|()| Done::Control) })
}

/// An INSERT of `values` by `statement`, answering the new key.
fn insert(
    client: &TxGuard,
    statement: Stmt,
    values: Vec<SqlValue>,
) -> Call<'_, Result<Done, PgError>> {
    Box::pin(async move {
        let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        // One row or an error (`insert_strict`): read as rows, as a session does.
        let rows = statement.query(client, &params).await?;
        Ok(match rows.first() {
            Some(row) => Done::Key(row.get(0)),
            None => Done::Control,
        })
    })
}

impl Session<'_> {
    /// Send `lead` alone, and check its answers.
    async fn send_lead(&self, lead: &mut Vec<Msg>) -> Result<(), Error> {
        let leading = std::mem::take(lead);
        let mut answers = self.flight(&leading).await.0.into_iter();
        check_lead(&leading, &mut answers, "undoing a failure")
    }
}
