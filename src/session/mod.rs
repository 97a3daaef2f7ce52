//! Edit sessions: inserts, replaces, updates and deletes across collections
//! in one request, pipelined on one connection, with commit modes.
//!
//! Every statement is sent before any answer is read. `atomic` is one
//! transaction (one round trip warm); `batch` is one transaction per batch,
//! all batches in the same flight (one round trip); `skip` runs each
//! operation under a savepoint and, when one fails, rolls back to it and
//! sends the rest again: two round trips plus one per failing operation.

mod grouped;
pub mod input;
pub mod ogc;
pub mod report;
pub mod stream;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_postgres::types::ToSql;
use tokio_postgres::Error as PgError;
use utoipa::ToSchema;

use crate::catalog::Collection;
use crate::db::statement::{cache_room, prepare_in_flight, Naming, Stmt};
use crate::db::Database;
use crate::error::{Error, ErrorKind, FieldError, Refusal};
use crate::feature::value::SqlValue;
use crate::feature::{FeatureRow, ParsedBody};
use crate::geometry::{Crs, WGS84_SRID};
use crate::read;
use crate::write::guard::TxGuard;
use crate::write::idempotency::Answer;
use crate::write::idempotency::Idempotency;
use crate::write::pipeline::{Call, Calls};
use crate::write::retry::Retry;
use crate::write::sql::{
    change_item_strict, change_where, insert_strict, ItemChange, NO_SUCH_FEATURE,
};
use crate::write::{claim_calls, claim_failed, keyed_connection, store_response_and_commit, Keyed};
use grouped::Group;
use ogc::report::{Names, TransactionResponse};
use report::{Outcome, SessionReport};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Create one feature or a FeatureCollection.
    Insert,
    /// Replace a feature (PUT semantics).
    Replace,
    /// Merge-patch a feature (PATCH semantics).
    Update,
    /// Delete one or more features.
    Delete,
}

/// How a session commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// All or nothing.
    #[default]
    Atomic,
    /// Each batch commits or rolls back on its own.
    Batch,
    /// Every valid operation is written; failing ones are skipped.
    Skip,
}

impl Op {
    /// The operation named `name` in a session body.
    pub fn from_name(name: &str) -> Option<Op> {
        match name {
            "insert" => Some(Op::Insert),
            "replace" => Some(Op::Replace),
            "update" => Some(Op::Update),
            "delete" => Some(Op::Delete),
            _ => None,
        }
    }
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::Atomic, Mode::Batch, Mode::Skip];

    /// Parse the `mode` query parameter.
    pub fn parse(value: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.name() == value)
    }

    /// Its name, as the `mode` query parameter has it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Atomic => "atomic",
            Mode::Batch => "batch",
            Mode::Skip => "skip",
        }
    }
}

/// Which document a session answers with (and stores under an Idempotency-Key).
#[derive(Debug, Clone, Copy)]
pub enum Reply<'a> {
    /// featurepipe's [`SessionReport`].
    Report,
    /// The OGC transaction response ([`ogc::report`]), naming what it reports so.
    Ogc(Names<'a>),
}

/// The document a session answers with: its report, in the body's format.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum SessionAnswer {
    /// To featurepipe's format.
    Report(SessionReport),
    /// To an OGC transaction (`application/ogc-tx+json`).
    Ogc(TransactionResponse),
}

impl Reply<'_> {
    /// The answer for `report` of `operations` and `steps`.
    pub fn document(
        self,
        report: SessionReport,
        operations: &[Operation],
        steps: &[Step],
    ) -> SessionAnswer {
        match self {
            Reply::Report => SessionAnswer::Report(report),
            Reply::Ogc(names) => {
                SessionAnswer::Ogc(ogc::report::response(&report, operations, steps, names))
            }
        }
    }
}

/// One operation of the session: its statements are `steps`.
#[derive(Debug)]
pub struct Operation {
    /// What it does.
    pub op: Op,
    /// Its collection's id (shared: a session of a FeatureCollection has
    /// one operation per feature).
    pub collection: Arc<str>,
    /// Its statements, in the session's list.
    pub steps: Range<usize>,
    /// JSON pointer of what its statements write: `/operations/3/feature`,
    /// or of their list (`/operations/3/features/features`, `/operations/3/ids`).
    pub at: String,
    /// Each statement has its own element under `at`.
    pub indexed: bool,
    /// Skip mode: the operation is invalid (its first problem) and is not sent.
    pub rejected: Option<Box<FieldError>>,
    /// The feature it is, when the session is a FeatureCollection's (`?mode=` on items).
    pub feature: Option<usize>,
    /// The caller may read its collection: told the database's DETAIL lines.
    pub may_read: bool,
}

/// What one statement does.
#[derive(Debug)]
pub enum StepKind {
    /// INSERT writing these columns.
    Insert(Vec<usize>),
    /// Replace, writing these columns (others to their defaults).
    Replace(Vec<usize>),
    /// Update these columns.
    Update(Vec<usize>),
    /// Delete.
    Delete,
    /// Fail as a missing feature: the id cannot be a key.
    Missing,
    /// Update these columns of every feature a filter selects.
    UpdateWhere(Vec<usize>, Box<Selected>),
    /// Delete every feature a filter selects.
    DeleteWhere(Box<Selected>),
}

/// The features an edit by filter selects: the filter's SQL condition, its
/// placeholders after the step's values, and the values it binds.
#[derive(Debug)]
pub struct Selected {
    /// The condition on the table `t`.
    pub condition: String,
    /// What it binds, in order.
    pub values: Vec<Box<dyn ToSql + Sync + Send>>,
}

/// One statement of the session.
#[derive(Debug)]
pub struct Step {
    /// Its table.
    pub coll: Arc<Collection>,
    /// What it does.
    pub kind: StepKind,
    /// The feature's key (all but inserts).
    pub id: Option<String>,
    /// Values of the written columns.
    pub values: Vec<SqlValue>,
    /// ETags the feature must still have.
    pub if_match: Option<Vec<String>>,
    /// The SRID of its geometry.
    pub srid: i32,
}

impl Step {
    fn sql(&self) -> String {
        // The CRS the step's geometry is in, which a change transforms from.
        let crs = match self.srid {
            WGS84_SRID => Crs::crs84(),
            srid => Crs::epsg(srid),
        };
        match &self.kind {
            StepKind::Insert(columns) => insert_strict(&self.coll, columns, self.srid),
            StepKind::Replace(columns) => {
                change_item_strict(&self.coll, ItemChange::Replace(columns), &crs)
            }
            StepKind::Update(columns) => {
                change_item_strict(&self.coll, ItemChange::Update(columns), &crs)
            }
            StepKind::Delete => change_item_strict(&self.coll, ItemChange::Delete, &crs),
            StepKind::Missing => NO_SUCH_FEATURE.to_owned(),
            StepKind::UpdateWhere(columns, selected) => {
                change_where(&self.coll, Some(columns), self.srid, &selected.condition)
            }
            StepKind::DeleteWhere(selected) => {
                change_where(&self.coll, None, self.srid, &selected.condition)
            }
        }
    }
}

/// What a statement answered.
#[derive(Debug)]
pub enum Done {
    /// A control statement (BEGIN, SAVEPOINT, …) succeeded.
    Control,
    /// An insert's new key, as text.
    Key(String),
    /// A replace's or update's new ETag.
    Etag(String),
    /// A delete.
    Deleted,
    /// An edit by filter: the keys of the features it changed, as text.
    Touched(Vec<String>),
    /// A change of many features in one statement: each one's answer, in order.
    Many(Vec<Done>),
}

/// One message of a flight.
#[derive(Clone, Copy)]
enum Msg {
    Sql(&'static str),
    Step(usize),
    /// The statement of [`grouped::Group`] `g`.
    Group(usize),
    /// Forget expired idempotency keys.
    Expire,
    /// Claim the request's idempotency key.
    Claim,
}

/// A session ready to run on one connection.
pub struct Session<'a> {
    client: &'a TxGuard,
    keyed: Option<Keyed<'a>>,
    reply: Reply<'a>,
    operations: &'a [Operation],
    /// The index of `operations[0]` in the whole session (a session read
    /// as it arrives runs a window of it at a time).
    first: usize,
    steps: &'a [Step],
    statements: Vec<Stmt>,
    statement_of: Vec<usize>,
    /// Runs of steps changed by one statement each (atomic sessions).
    groups: Vec<Group>,
    /// The statement of each group.
    group_statement: Vec<usize>,
}

/// Run a validated session: its report, or, when an atomic session failed
/// (nothing written), the first failure with the report attached.
///
/// An atomic session rolled back by a deadlock or a serialization failure is
/// run again (`FEATUREPIPE_RETRIES`). Batch and skip sessions are not: other
/// batches may have committed after the failed one (running it again would
/// reorder the writes), and in skip mode the transaction went on after
/// rolling back to the operation's savepoint; the report says what failed.
/// A session whose connection was lost after a COMMIT went out is an
/// unknown outcome, in every mode.
pub async fn carry_out(
    db: &Database,
    (operations, steps): (&[Operation], &[Step]),
    mode: Mode,
    batch_size: usize,
    idempotency: Option<&Idempotency>,
    reply: Reply<'_>,
) -> Result<SessionReport, Error> {
    let attempt = || async {
        let work = (operations, steps);
        let report = run(db, work, mode, batch_size, idempotency, reply).await?;
        match report.failure {
            Some(refusal) if mode == Mode::Atomic => {
                let err = rolled_back(refusal, &report);
                Err(err.with_report(&reply.document(report, operations, steps)))
            }
            _ => Ok(report),
        }
    };
    let report = match mode {
        Mode::Atomic => match Retry::of(db).run(attempt).await {
            Err(e) if e.kind() == ErrorKind::Refused(Refusal::Changed) => {
                return Err(told_current(db, e, operations, steps).await)
            }
            done => done?,
        },
        Mode::Batch | Mode::Skip => attempt().await?,
    };
    if report.lost_after_commit() {
        let document = reply.document(report, operations, steps);
        return Err(Error::outcome_unknown().with_report(&document));
    }
    Ok(report)
}

/// An atomic session refused because a feature changed since it was read
/// (`if_match`): told the feature as it is now and its ETag, when the
/// caller may read its collection, so that it can merge without asking
/// again. Read after the session's transaction, as the caller's role.
async fn told_current(
    db: &Database,
    err: Error,
    operations: &[Operation],
    steps: &[Step],
) -> Error {
    let Some(cause) = err.errors().first() else {
        return err;
    };
    let Some(op) = cause.operation.and_then(|k| operations.get(k)) else {
        return err;
    };
    let within = match op.indexed {
        true => cause.feature.unwrap_or(0),
        false => 0,
    };
    let step = steps.get(op.steps.start + within);
    let Some((step, id)) = step.and_then(|s| Some((s, s.id.as_deref()?))) else {
        return err;
    };
    if !op.may_read {
        return err;
    }
    match read::item_as(db, &step.coll, id, &Crs::crs84(), read::Encoding::GeoJson).await {
        Ok(Some(now)) => err.with_current(now.into()),
        // Gone meanwhile, or hidden from the caller's role: as it was.
        _ => err,
    }
}

/// The error of an atomic session that failed: its first failure (of an
/// operation, or at COMMIT), to which the caller attaches the report. A
/// session whose connection was lost after COMMIT was sent may have been
/// written: that is an unknown outcome, never "nothing was written".
fn rolled_back(refusal: Refusal, report: &SessionReport) -> Error {
    if report.lost_after_commit() {
        return Error::outcome_unknown();
    }
    let first = report
        .results
        .iter()
        .find_map(|r| r.error.as_deref().cloned())
        .or_else(|| report.errors.first().cloned())
        .into_iter()
        .collect();
    let detail = "an operation failed; the session was rolled back and nothing was written";
    Error::refused(refusal, detail.into(), first)
}

/// Run a validated session in `mode`, with batches of at most `batch_size`
/// statements; under a key, the response stored is `reply`'s document.
async fn run(
    db: &Database,
    (operations, steps): (&[Operation], &[Step]),
    mode: Mode,
    batch_size: usize,
    idempotency: Option<&Idempotency>,
    reply: Reply<'_>,
) -> Result<SessionReport, Error> {
    let (client, statements) = keyed_connection(db, idempotency.is_some()).await?;
    // Other modes take each operation on its own (savepoints, batches).
    let groups = match mode {
        Mode::Atomic => grouped::groups(steps),
        Mode::Batch | Mode::Skip => Vec::new(),
    };
    let work = (operations, steps, groups);
    let mut session = Session::prepare(&client, db.naming(), work, reply).await?;
    session.keyed = idempotency
        .zip(statements.as_ref())
        .map(|(idem, statements)| Keyed { idem, statements });
    // Skip mode is one transaction: one batch.
    let batches = match mode {
        Mode::Skip => std::iter::once(0..operations.len()).collect(),
        _ => batches(operations, batch_size),
    };
    let mut outcome = Outcome::new(operations, &batches);
    match mode {
        Mode::Atomic => session.atomic(&batches, &mut outcome, mode).await?,
        Mode::Batch => session.batched(&batches, &mut outcome).await?,
        Mode::Skip => session.skipping(batch_size, &mut outcome).await?,
    }
    Ok(outcome.report(mode))
}

/// A FeatureCollection for `coll` as one insert operation per feature
/// (invalid features, set aside in skip mode, as rejected operations).
pub fn inserts(
    coll: &Arc<Collection>,
    parsed: ParsedBody,
    may_read: bool,
) -> (Vec<Operation>, Vec<Step>) {
    let ParsedBody {
        rows,
        shapes,
        rejected,
        row_features,
        srid,
        ..
    } = parsed;
    let n = rows.len() + rejected.len();
    let mut rejected = rejected.into_iter().peekable();
    let id: Arc<str> = coll.id.as_str().into();
    let mut operations = Vec::with_capacity(n);
    let mut step = 0;
    for i in 0..n {
        let refused = rejected.next_if(|(f, _)| *f == i).map(|(_, e)| e);
        debug_assert!(refused.is_some() || row_features.is_empty() || row_features[step] == i);
        operations.push(insert_operation(&id, i, refused, &mut step, may_read));
    }
    let steps = rows
        .into_iter()
        .map(|row| insert_step(coll, &shapes, row, srid))
        .collect();
    (operations, steps)
}

/// The insert operation of feature `i` of a FeatureCollection: its one
/// statement is `*step` (then counted), or it was `refused` as invalid.
fn insert_operation(
    collection: &Arc<str>,
    i: usize,
    refused: Option<Box<FieldError>>,
    step: &mut usize,
    may_read: bool,
) -> Operation {
    let steps = match refused {
        Some(_) => *step..*step,
        None => {
            *step += 1;
            *step - 1..*step
        }
    };
    Operation {
        op: Op::Insert,
        collection: collection.clone(),
        steps,
        at: format!("/features/{i}"),
        indexed: false,
        rejected: refused.map(|mut e| {
            e.operation = Some(i);
            e
        }),
        feature: Some(i),
        may_read,
    }
}

/// The INSERT of `row`, whose columns are one of `shapes`.
fn insert_step(coll: &Arc<Collection>, shapes: &[Vec<usize>], row: FeatureRow, srid: i32) -> Step {
    Step {
        coll: coll.clone(),
        kind: StepKind::Insert(shapes[row.shape].clone()),
        id: None,
        values: row.values,
        if_match: None,
        srid,
    }
}

/// The end of the window of operations from `from` holding at most `size`
/// statements (at least one operation).
fn window_end(operations: &[Operation], from: usize, size: usize) -> usize {
    let mut count = 0;
    for (k, op) in operations.iter().enumerate().skip(from) {
        count += op.steps.len().max(1);
        if k > from && count > size {
            return k;
        }
    }
    operations.len()
}

/// Operations in groups of at most `size` statements (an operation is never split).
fn batches(operations: &[Operation], size: usize) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let mut from = 0;
    while from < operations.len() {
        let end = window_end(operations, from, size);
        batches.push(from..end);
        from = end;
    }
    batches
}

/// Every distinct statement of `sqls` prepared on `client`, all in one
/// round trip (cached per connection), and which one each of `sqls` is.
async fn prepare_distinct(
    client: &TxGuard,
    naming: Naming,
    all: impl Iterator<Item = String>,
) -> Result<(Vec<Stmt>, Vec<usize>), Error> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut sqls = Vec::new();
    let statement_of = all
        .map(|sql| {
            *index.entry(sql.clone()).or_insert_with(|| {
                sqls.push(sql);
                sqls.len() - 1
            })
        })
        .collect();
    // As for inserts: a bounded cache per connection, decided before any is added.
    let room = cache_room(client);
    let prepares: Vec<Call<'_, Result<Stmt, PgError>>> = sqls
        .iter()
        .enumerate()
        .map(|(n, sql)| {
            Box::pin(prepare_in_flight(client, sql, naming.within(room, n))) as Call<'_, _>
        })
        .collect();
    let mut calls = Calls::new(prepares);
    calls.send_all().await;
    let mut statements = Vec::with_capacity(sqls.len());
    while let Some(prepared) = calls.next().await {
        statements.push(prepared.map_err(|e| Error::database("preparing the session", &e))?);
    }
    Ok((statements, statement_of))
}

impl<'a> Session<'a> {
    /// Prepare every distinct statement of the steps and `groups`, all in
    /// one round trip (cached per connection).
    async fn prepare(
        client: &'a TxGuard,
        naming: Naming,
        (operations, steps, groups): (&'a [Operation], &'a [Step], Vec<Group>),
        reply: Reply<'a>,
    ) -> Result<Session<'a>, Error> {
        let sqls = steps.iter().map(Step::sql);
        let all = sqls.chain(groups.iter().map(|g| g.sql.clone()));
        let (statements, mut statement_of) = prepare_distinct(client, naming, all).await?;
        let group_statement = statement_of.split_off(steps.len());
        Ok(Session {
            client,
            keyed: None,
            reply,
            operations,
            first: 0,
            steps,
            statements,
            statement_of,
            groups,
            group_statement,
        })
    }

    /// Send a flight of messages and read every answer, in order.
    /// The answers, and whether the last message went out (a connection
    /// already closed refuses it unsent).
    async fn flight(&self, msgs: &[Msg]) -> (Vec<Result<Done, PgError>>, bool) {
        let calls: Vec<Call<'_, Result<Done, PgError>>> =
            msgs.iter()
                .map(|msg| match msg {
                    Msg::Sql(sql) => Box::pin(async move {
                        self.client.batch_execute(sql).await.map(|()| Done::Control)
                    }) as Call<'_, _>,
                    Msg::Step(i) => Box::pin(self.step(*i)),
                    Msg::Group(g) => Box::pin(self.group(*g)),
                    Msg::Expire | Msg::Claim => Box::pin(self.claim(matches!(msg, Msg::Claim))),
                })
                .collect();
        let mut calls = Calls::new(calls);
        calls.send_all().await;
        let last_sent = !calls.last_refused_at_send();
        let mut answers = Vec::with_capacity(msgs.len());
        while let Some(answer) = calls.next().await {
            answers.push(answer);
        }
        (answers, last_sent)
    }

    /// Forget expired keys (`claim` false) or claim the request's key.
    async fn claim(&self, claim: bool) -> Result<Done, PgError> {
        let keyed = self.keyed.expect("claims are sent for keyed sessions only");
        // Both made, one polled: a future not polled sends nothing.
        let [expire, claim_key] = claim_calls(keyed, self.client);
        match claim {
            true => claim_key.await?,
            false => expire.await?,
        }
        Ok(Done::Control)
    }

    /// Execute statement `i`.
    async fn step(&self, i: usize) -> Result<Done, PgError> {
        let step = &self.steps[i];
        let statement = &self.statements[self.statement_of[i]];
        let none: Option<chrono::DateTime<chrono::Utc>> = None;
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(step.values.len() + 3);
        if let Some(id) = &step.id {
            params.push(id);
            if !matches!(step.kind, StepKind::Missing) {
                params.push(&step.if_match);
                params.push(&none);
            }
        }
        if !matches!(step.kind, StepKind::Missing) {
            params.extend(step.values.iter().map(|v| v as &(dyn ToSql + Sync)));
        }
        if let StepKind::UpdateWhere(_, selected) | StepKind::DeleteWhere(selected) = &step.kind {
            params.extend(
                selected
                    .values
                    .iter()
                    .map(|v| v.as_ref() as &(dyn ToSql + Sync)),
            );
            let rows = statement.query(self.client, &params).await?;
            return Ok(Done::Touched(rows.iter().map(|r| r.get(0)).collect()));
        }
        // Every other statement answers one row or raises; reading rows (not
        // `query_one`) keeps a surprise from becoming a client-side error
        // while the server's transaction goes on.
        let rows = statement.query(self.client, &params).await?;
        let row = rows.first();
        Ok(match (&step.kind, row) {
            (StepKind::Insert(_), Some(row)) => Done::Key(row.get(0)),
            (StepKind::Replace(_) | StepKind::Update(_), Some(row)) => Done::Etag(row.get(3)),
            _ => Done::Deleted,
        })
    }

    fn step_msgs(&self, ops: Range<usize>, msgs: &mut Vec<Msg>) {
        for op in &self.operations[ops] {
            msgs.extend(op.steps.clone().map(Msg::Step));
        }
    }

    /// One transaction: BEGIN, every statement, COMMIT in one flight. With an
    /// Idempotency-Key, the key is claimed after BEGIN and the response stored
    /// before COMMIT, which then waits for the answers (one more round trip).
    /// Runs of the same change go as one statement each ([`grouped`]); when
    /// one fails, the transaction is sent again a statement a feature, to
    /// name the failing one.
    async fn atomic(
        &self,
        batches: &[Range<usize>],
        outcome: &mut Outcome,
        mode: Mode,
    ) -> Result<(), Error> {
        let grouped = !self.groups.is_empty();
        if grouped && self.atomic_flight(batches, outcome, mode, true).await? {
            return Ok(());
        }
        self.atomic_flight(batches, outcome, mode, false)
            .await
            .map(drop)
    }

    /// [`Session::atomic`]'s transaction, its runs of changes `grouped` or
    /// not: false when a group failed and the transaction was rolled back.
    async fn atomic_flight(
        &self,
        batches: &[Range<usize>],
        outcome: &mut Outcome,
        mode: Mode,
        grouped: bool,
    ) -> Result<bool, Error> {
        let mut msgs = vec![Msg::Sql("BEGIN")];
        if self.keyed.is_some() {
            msgs.extend([Msg::Expire, Msg::Claim]);
        }
        match grouped {
            true => self.grouped_msgs(&mut msgs),
            false => self.step_msgs(0..self.operations.len(), &mut msgs),
        }
        if self.keyed.is_none() {
            msgs.push(Msg::Sql("COMMIT"));
        }
        self.client.set_open(true);
        let started = Instant::now();
        let (answers, commit_sent) = self.flight(&msgs).await;
        let answers = match grouped::expand(&msgs, &self.groups, answers) {
            Some(answers) => answers,
            None => {
                // Aborted: a queued COMMIT has ended it; else end it here.
                if self.keyed.is_some() {
                    let rollback = self.flight(&[Msg::Sql("ROLLBACK")]).await.0.pop();
                    check_control(rollback, "rolling back")?;
                }
                self.client.set_open(false);
                return Ok(false);
            }
        };
        let mut answers = answers.into_iter();
        let everything = 0..self.operations.len();
        match answers.next() {
            // Lost with the whole flight, COMMIT included, sent.
            Some(Err(e)) if self.keyed.is_none() && commit_sent && e.as_db_error().is_none() => {
                self.client.set_open(false);
                outcome.lost_with_commit(everything, 0..batches.len());
                return Ok(true);
            }
            begin => check_control(begin, "starting the transaction")?,
        }
        if self.keyed.is_some() {
            check_control(answers.next(), "forgetting expired idempotency keys")?;
            if let Some(Err(e)) = answers.next() {
                return Err(claim_failed(&e));
            }
        }
        for (b, batch) in batches.iter().enumerate() {
            for k in batch.clone() {
                outcome.record(k, &self.operations[k], &mut answers, self.steps);
            }
            outcome.batch_time(b, started.elapsed());
        }
        let commit = match self.keyed {
            None => answers.next(),
            Some(_) if outcome.failed() => self.flight(&[Msg::Sql("ROLLBACK")]).await.0.pop(),
            Some(keyed) => {
                self.store_and_commit(keyed, outcome, mode, batches.len())
                    .await;
                return Ok(true);
            }
        };
        self.client.set_open(false);
        outcome.finish_transaction(everything, commit, 0..batches.len());
        Ok(true)
    }

    /// Store the report under the key and COMMIT (one flight). Committed if
    /// COMMIT succeeds: the stored report says so.
    async fn store_and_commit(
        &self,
        keyed: Keyed<'_>,
        outcome: &mut Outcome,
        mode: Mode,
        batches: usize,
    ) {
        let everything = 0..outcome.operations();
        outcome.finish_transaction(everything.clone(), Some(Ok(Done::Control)), 0..batches);
        let report = outcome.clone().report(mode);
        let document = self.reply.document(report, self.operations, self.steps);
        let answer = Answer::json(200, &document);
        let stored = store_response_and_commit(self.client, keyed, &answer).await;
        self.client.set_open(false);
        if let Err(e) = stored {
            outcome.finish_transaction(everything, Some(Err(e)), 0..batches);
        }
    }

    /// One transaction per batch, every batch in the same flight.
    async fn batched(&self, batches: &[Range<usize>], outcome: &mut Outcome) -> Result<(), Error> {
        let mut msgs = Vec::new();
        for batch in batches {
            msgs.push(Msg::Sql("BEGIN"));
            self.step_msgs(batch.clone(), &mut msgs);
            msgs.push(Msg::Sql("COMMIT"));
        }
        self.client.set_open(true);
        let started = Instant::now();
        let (answers, commits_sent) = self.flight(&msgs).await;
        let mut answers = answers.into_iter();
        for (b, batch) in batches.iter().enumerate() {
            let sent = Sent {
                batch: (b, batch.clone()),
                operations: self.operations,
                first: self.first,
                steps: self.steps,
                commits_sent,
                started,
            };
            if !sent.settle(outcome, &mut answers)? {
                break;
            }
        }
        self.client.set_open(false);
        Ok(())
    }

    /// Each operation under a savepoint, in windows of about `window`
    /// statements; after a failure, roll back to its savepoint and go on with
    /// the next operation. COMMIT once everything has been answered.
    async fn skipping(&self, window: usize, outcome: &mut Outcome) -> Result<(), Error> {
        let mut lead = SKIP_LEAD.map(Msg::Sql).to_vec();
        if self.keyed.is_some() {
            lead.extend([Msg::Expire, Msg::Claim]);
        }
        self.client.set_open(true);
        let started = Instant::now();
        self.skip_through(window, outcome, &mut lead).await?;
        self.skip_commit(lead, outcome, started).await
    }

    /// Send this session's operations as [`Session::skipping`] does, the
    /// flights led by `lead`; `lead` is left with what the next flight must
    /// begin with (undoing a failure at the end).
    async fn skip_through(
        &self,
        window: usize,
        outcome: &mut Outcome,
        lead: &mut Vec<Msg>,
    ) -> Result<(), Error> {
        const UNDO: [&str; 2] = [
            "ROLLBACK TO SAVEPOINT featurepipe_op",
            "RELEASE SAVEPOINT featurepipe_op",
        ];
        let mut from = 0;
        while from < self.operations.len() {
            let end = window_end(self.operations, from, window);
            let leading = std::mem::take(lead);
            let mut msgs = leading.clone();
            for op in self.operations[from..end]
                .iter()
                .filter(|op| op.rejected.is_none())
            {
                msgs.push(Msg::Sql("SAVEPOINT featurepipe_op"));
                msgs.extend(op.steps.clone().map(Msg::Step));
                msgs.push(Msg::Sql("RELEASE SAVEPOINT featurepipe_op"));
            }
            let mut answers = self.flight(&msgs).await.0.into_iter();
            check_lead(&leading, &mut answers, "continuing the session")?;
            let start = from;
            from = end;
            for k in start..end {
                let op = &self.operations[k];
                if op.rejected.is_some() {
                    outcome.record(self.first + k, op, &mut answers, self.steps);
                    continue;
                }
                check_control(answers.next(), "taking a savepoint")?;
                if !outcome.record(self.first + k, op, &mut answers, self.steps) {
                    // What followed in this window was refused (25P02): undo
                    // this operation alone and go on after it.
                    outcome.skipped();
                    *lead = UNDO.map(Msg::Sql).to_vec();
                    from = k + 1;
                    break;
                }
                check_control(answers.next(), "releasing a savepoint")?;
            }
        }
        Ok(())
    }

    /// End a skip session: `lead` (undoing the last failure, claiming the
    /// key), then COMMIT, or under a key the report stored and COMMIT.
    async fn skip_commit(
        &self,
        lead: Vec<Msg>,
        outcome: &mut Outcome,
        started: Instant,
    ) -> Result<(), Error> {
        let mut msgs = lead.clone();
        if self.keyed.is_none() {
            msgs.push(Msg::Sql("COMMIT"));
        }
        let (answers, commit_sent) = self.flight(&msgs).await;
        let mut answers = answers.into_iter();
        let everything = 0..outcome.operations();
        if let Err(lost) = check_lead(&lead, &mut answers, "undoing the last failure") {
            if self.keyed.is_some() || !commit_sent || !self.client.is_closed() {
                return Err(lost);
            }
            // Lost with the COMMIT sent: what was written may be committed.
            self.client.set_open(false);
            outcome.lost_with_commit(everything, 0..1);
            return Ok(());
        }
        outcome.batch_time(0, started.elapsed());
        if let Some(keyed) = self.keyed {
            self.store_and_commit(keyed, outcome, Mode::Skip, 1).await;
            return Ok(());
        }
        let commit = answers.next();
        self.client.set_open(false);
        outcome.finish_transaction(everything, commit, 0..1);
        Ok(())
    }
}

/// How a skip session begins: deferred constraints are checked per
/// statement, so that a failure belongs to its operation instead of rolling
/// back everything at COMMIT.
const SKIP_LEAD: [&str; 2] = ["BEGIN", "SET CONSTRAINTS ALL IMMEDIATE"];

/// One batch of a batch-mode session sent (BEGIN, its statements, COMMIT),
/// its answers to read.
struct Sent<'s> {
    /// Its number, and its operations in the whole session.
    batch: (usize, Range<usize>),
    /// Operations from `first` on, holding the batch's.
    operations: &'s [Operation],
    first: usize,
    /// The statements the operations' steps index.
    steps: &'s [Step],
    /// Its COMMIT (and every later batch's) went out.
    commits_sent: bool,
    /// When the session was sent.
    started: Instant,
}

impl Sent<'_> {
    /// Read the batch's answers into `outcome`; `false` when the connection
    /// was lost with its COMMIT sent: its fate and every later batch's is
    /// unknown, and nothing more is read.
    fn settle(
        &self,
        outcome: &mut Outcome,
        answers: &mut impl Iterator<Item = Result<Done, PgError>>,
    ) -> Result<bool, Error> {
        let (b, batch) = self.batch.clone();
        match answers.next() {
            // Lost with this and every later batch's COMMIT sent.
            Some(Err(e)) if self.commits_sent && e.as_db_error().is_none() => {
                let later = batch.start..outcome.operations();
                outcome.lost_with_commit(later, b..outcome.batches());
                return Ok(false);
            }
            begin => check_control(begin, "starting a batch")?,
        }
        for k in batch.clone() {
            outcome.record(k, &self.operations[k - self.first], answers, self.steps);
        }
        outcome.batch_time(b, self.started.elapsed());
        let commit = answers.next();
        outcome.finish_transaction(batch, commit, b..b + 1);
        Ok(true)
    }
}

/// The answers to the control statements `lead` leads a flight with; a key
/// another request holds is a 409.
fn check_lead(
    lead: &[Msg],
    answers: &mut impl Iterator<Item = Result<Done, PgError>>,
    doing: &str,
) -> Result<(), Error> {
    for msg in lead {
        match (msg, answers.next()) {
            (Msg::Claim, Some(Err(e))) => return Err(claim_failed(&e)),
            (_, answer) => check_control(answer, doing)?,
        }
    }
    Ok(())
}

/// A control statement's answer: a lost connection or a refusal ends the request.
fn check_control(answer: Option<Result<Done, PgError>>, doing: &str) -> Result<(), Error> {
    match answer {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(Error::database(doing, &e)),
        None => Err(Error::internal(format!("no answer while {doing}"))),
    }
}
