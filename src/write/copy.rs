//! The COPY fast path: binary COPY with every key known, or read back, in
//! feature order.
//!
//! Keys come from the features themselves, from COPY itself (a key whose
//! default draws from a sequence: read back after the rows by
//! `featurepipe.copied_keys`, migration 8), or else from ONE defaults query
//! before the rows (`SELECT <key default> FROM generate_series(1, n)`,
//! volatile defaults once per row). The other columns left out take their
//! defaults from COPY itself.
//!
//! The rows follow the `COPY` statement in the same flight, without waiting
//! for the server to accept it (`copy_in_pipelined`, vendor/README.md). Warm
//! and without an Idempotency-Key, a request whose keys need no defaults
//! query costs one round trip: BEGIN, the COPY with its rows, the check that
//! every row was written (`CHECK_COPIED`) and COMMIT in one
//! flight. A failed check fails the transaction, so that COMMIT rolls back.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{CopyInSink, Error as PgError, Statement};

use super::guard::TxGuard;
use super::keys_ahead::{DrawQuery, KeysAhead};
use super::pipeline::{Call, Calls};
use super::plan::Plan;
use super::report::{Failure, Ids, Tally, WriteReport};
use super::{refused, write_failed, Job, Keyed};
use crate::catalog::{key, Collection, ColumnType, Identity, ScalarType};
use std::sync::Arc;
use std::time::Instant;

use crate::db::costs::{Cost, Costs, Observed};
use crate::db::statement::{cache_room, prepare_named, Naming};
use crate::db::{quote_ident, Database};
use crate::error::Error;
use crate::feature::value::SqlValue;
use crate::feature::FeatureRow;

/// What a COPY of one request writes.
#[derive(Debug, PartialEq)]
pub struct CopyPlan {
    /// Column indices, in COPY order: the features' columns, then the key if
    /// the defaults query draws it.
    pub columns: Vec<usize>,
    /// The key column the features give or that is drawn for them: the key,
    /// or of a key of several columns the one the features leave to its
    /// default ([`Collection::key_drawn`]).
    pub key: usize,
    /// Where the keys come from.
    pub keys: KeySource,
}

/// Where the keys of a COPY's rows come from.
#[derive(Debug, PartialEq)]
pub enum KeySource {
    /// The features give them.
    Given,
    /// COPY draws them from the sequence of the key's default, and they are
    /// read back after the rows (`featurepipe.copied_keys`): the sequence's
    /// name as the default names it, or `None` for the column's own
    /// (identity or serial) sequence.
    Sequence(Option<String>),
    /// The defaults query draws them before the rows are sent: a flight of
    /// its own.
    Drawn,
}

impl CopyPlan {
    /// Keys drawn by the defaults query before `rows` rows rather than read
    /// back after them, where its round trip and its draws cost less than
    /// reading them back (`featurepipe.copied_keys`, an index scan that
    /// checks each row's xmin, as `observed` by writes that ran alone): for
    /// large requests next to the database.
    pub fn cheapest_keys(self, coll: &Collection, rows: usize, observed: &Observed) -> Self {
        // On Citus keys are never read back: the rows are on the workers.
        if coll.distributed {
            return self.drawn_first();
        }
        let read_back = rows as f64 * observed.read_back_row;
        let drawn_first = observed.round_trip + rows as f64 * DRAW_ROW;
        match drawn_first < read_back {
            true => self.drawn_first(),
            false => self,
        }
    }

    /// For a body written as it arrives: keys drawn ahead in blocks of
    /// `block` rows ([`Copying::keys_ahead`]) rather than read back after
    /// all its rows, where a block's round trip takes well under what COPY
    /// takes for its rows (half), so that the drawing keeps ahead of the
    /// rows.
    pub fn keys_for_stream(self, coll: &Collection, block: usize, observed: &Observed) -> Self {
        match coll.distributed || 2.0 * observed.round_trip < block as f64 * observed.copy_row {
            true => self.drawn_first(),
            false => self,
        }
    }

    /// Keys COPY would draw from a sequence drawn before the rows instead.
    fn drawn_first(mut self) -> Self {
        if matches!(self.keys, KeySource::Sequence(_)) {
            self.keys = KeySource::Drawn;
            self.columns.push(self.key);
        }
        self
    }

    /// The round trips this COPY costs beyond the one a pipelined INSERT
    /// costs (statements prepared): the defaults query's flight, and when
    /// COMMIT waits for the COPY's answer (`commit_waits`: an
    /// Idempotency-Key's answer is stored first, or Citus's count of the
    /// rows is read) the flight that commits.
    pub fn extra_round_trips(&self, commit_waits: bool) -> u32 {
        u32::from(self.keys == KeySource::Drawn) + u32::from(commit_waits)
    }
}

/// The database's time per key the defaults query draws from a sequence
/// (`nextval` in `generate_series`, about 0.3 µs next to the database): a
/// key read back costs that and the search for it.
const DRAW_ROW: f64 = 0.3e-6;

/// Whether this request can be written by COPY, and how.
///
/// Needs: one column set for all features (COPY has one column list); no
/// `BEFORE INSERT` trigger on the table or its partitions (it could change
/// the key, or skip the row); no row-level security (COPY FROM refuses it
/// for the roles its policies apply to); no SRID transform and no
/// `numeric` (those need SQL around the value); a key the features give or a
/// default can produce, of a type we can report (each column of a key of
/// several, whose features give all but one at most).
pub fn copy_plan(coll: &Collection, plan: &Plan, input_srid: i32) -> Option<CopyPlan> {
    let [shape] = plan.shapes.as_slice() else {
        return None;
    };
    let pk = coll.key_drawn(shape)?;
    let key = &coll.columns[pk];
    let reportable = |ci: &usize| {
        matches!(
            coll.columns[*ci].ty,
            ColumnType::Scalar(
                ScalarType::Int2
                    | ScalarType::Int4
                    | ScalarType::Int8
                    | ScalarType::Text { .. }
                    | ScalarType::Uuid
            )
        )
    };
    let key_type_ok = reportable(&pk) && coll.composite_key.iter().all(reportable);
    let copyable = |c: &usize| match &coll.columns[*c].ty {
        ColumnType::Geometry(g) => g.transform_to(input_srid).is_none(),
        ColumnType::Scalar(t) => *t != ScalarType::Numeric,
        // A binary array names its element type: text[] cannot fill varchar[] or char(n)[],
        // which the catalog does not tell apart from text[].
        ColumnType::Array(t) => !matches!(t, ScalarType::Numeric | ScalarType::Text { .. }),
        ColumnType::Unsupported => false,
    };
    if coll.before_insert_trigger
        || coll.row_security
        || !key_type_ok
        || !shape.iter().all(copyable)
    {
        return None;
    }
    let mut columns = shape.clone();
    let keys = if shape.contains(&pk) {
        KeySource::Given
    } else if !key.has_default() {
        return None;
    } else if let Some(sequence) = key_sequence(coll, pk) {
        KeySource::Sequence(sequence)
    } else {
        columns.push(pk);
        KeySource::Drawn
    };
    Some(CopyPlan {
        columns,
        key: pk,
        keys,
    })
}

/// The sequence a single-column integer key draws from, when that is all
/// its default does: `Some(None)` for an identity (or a default the catalog
/// does not show), `Some(Some(name))` for `nextval('name'::regclass)`.
/// `None` for a column of a key of several, whose keys are never read back.
fn key_sequence(coll: &Collection, pk: usize) -> Option<Option<String>> {
    let key = &coll.columns[pk];
    if !coll.integer_key() {
        return None;
    }
    if key.identity != Identity::None {
        return Some(None);
    }
    let literal = key
        .default
        .as_deref()?
        .strip_prefix("nextval('")?
        .strip_suffix("'::regclass)")?;
    unquote_literal(literal).map(Some)
}

/// A SQL string literal's content (a quote in it is doubled), or `None`
/// when a lone quote ends it early (the default is then more than a call).
fn unquote_literal(quoted: &str) -> Option<String> {
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        if c == '\'' && chars.next() != Some('\'') {
            return None;
        }
        out.push(c);
    }
    Some(out)
}

/// The binary type of a column, as the COPY writer encodes it.
fn copy_type(ty: &ColumnType) -> Type {
    let scalar = |t: &ScalarType| match t {
        ScalarType::Int2 => (Type::INT2, Type::INT2_ARRAY),
        ScalarType::Int4 => (Type::INT4, Type::INT4_ARRAY),
        ScalarType::Int8 => (Type::INT8, Type::INT8_ARRAY),
        ScalarType::Float4 => (Type::FLOAT4, Type::FLOAT4_ARRAY),
        ScalarType::Float8 => (Type::FLOAT8, Type::FLOAT8_ARRAY),
        ScalarType::Numeric | ScalarType::Text { .. } => (Type::TEXT, Type::TEXT_ARRAY),
        ScalarType::Bool => (Type::BOOL, Type::BOOL_ARRAY),
        ScalarType::Uuid => (Type::UUID, Type::UUID_ARRAY),
        ScalarType::Date => (Type::DATE, Type::DATE_ARRAY),
        ScalarType::Timestamp => (Type::TIMESTAMP, Type::TIMESTAMP_ARRAY),
        ScalarType::Timestamptz => (Type::TIMESTAMPTZ, Type::TIMESTAMPTZ_ARRAY),
        ScalarType::Json => (Type::JSON, Type::JSON_ARRAY),
        ScalarType::Jsonb => (Type::JSONB, Type::JSONB_ARRAY),
    };
    match ty {
        ColumnType::Scalar(t) => scalar(t).0,
        ColumnType::Array(t) => scalar(t).1,
        // EWKB is geometry's and geography's binary input format: sent as is.
        ColumnType::Geometry(_) | ColumnType::Unsupported => Type::BYTEA,
    }
}

/// One request's COPY on one connection.
pub struct Copy<'a> {
    /// The connection, rows and batches.
    pub job: Job<'a>,
    /// What to copy.
    pub copy: CopyPlan,
}

/// An answer in a COPY's flights, by what it answers.
enum Opened {
    Begun(Result<(), PgError>),
    /// Claiming the Idempotency-Key.
    Claimed(Result<(), PgError>),
    /// Keys drawn by the defaults query.
    Drawn(Result<Ids, PgError>),
    /// The COPY was sent (its sink, or why not, is in the flight's slot).
    Started,
    /// The check that every row was copied, with the keys read back for
    /// keys COPY drew.
    Checked(Result<Option<Ids>, PgError>),
    Committed(Result<(), PgError>),
}

/// The answers of a COPY's flight, in the order sent.
struct Answers {
    /// BEGIN and the claim: the first failure.
    opening: Result<(), Error>,
    /// That failure was the connection's, not the server's answer.
    opening_lost: bool,
    drawn: Option<Ids>,
    checked: Option<Result<Option<Ids>, PgError>>,
    committed: Option<Result<(), PgError>>,
    /// When the check answered.
    checked_at: Option<Instant>,
    /// To time BEGIN's answer, the first of the request: a round trip.
    sent: Option<Instant>,
}

impl Answers {
    /// Before any answer; `sent`: the flight begins the transaction.
    fn new(sent: Option<Instant>) -> Self {
        Answers {
            opening: Ok(()),
            opening_lost: false,
            drawn: None,
            checked: None,
            committed: None,
            checked_at: None,
            sent,
        }
    }

    /// Every answer of `calls`, in order.
    async fn read(mut self, calls: &mut Calls<'_, Opened>, costs: &Costs) -> Self {
        while let Some(answer) = calls.next().await {
            match answer {
                Opened::Begun(begun) => {
                    if let Some(sent) = self.sent.take() {
                        // BEGIN is answered at once: its answer takes a round trip.
                        costs.observe(Cost::RoundTrip, 0, sent.elapsed());
                    }
                    if let Err(e) = begun {
                        self.fail(&e, Error::database("starting the COPY", &e));
                    }
                }
                Opened::Claimed(Err(e)) => self.fail(&e, super::claim_failed(&e)),
                Opened::Claimed(Ok(())) => {}
                Opened::Drawn(Ok(keys)) => self.drawn = Some(keys),
                Opened::Drawn(Err(e)) => self.fail(&e, Error::database("drawing the keys", &e)),
                Opened::Started => {}
                Opened::Checked(checked) => {
                    self.checked = Some(checked);
                    self.checked_at = Some(Instant::now());
                }
                Opened::Committed(committed) => self.committed = Some(committed),
            }
        }
        self
    }

    /// Keep the first failure of the opening statements: `error`, for `cause`.
    fn fail(&mut self, cause: &PgError, error: Error) {
        if self.opening.is_ok() {
            self.opening = Err(error);
            self.opening_lost = cause.as_db_error().is_none();
        }
    }
}

/// Why a COPY wrote nothing.
pub enum CopyFailed {
    /// The write failed: the answer for the client.
    Write(Error),
    /// COPY was refused at its start (say, a role that may INSERT but not
    /// draw keys from the sequence): rolled back, INSERT may still do it.
    Refused(PgError),
    /// The COPY ended with fewer rows than were sent (a trigger the catalog
    /// does not know of skipped some) and was rolled back: INSERT, waiting
    /// for every answer before COMMIT, can name the feature.
    RowsSkipped,
}

impl From<Error> for CopyFailed {
    fn from(e: Error) -> Self {
        CopyFailed::Write(e)
    }
}

/// Errors that refuse a COPY where an INSERT may succeed: "COPY FROM not
/// supported with row-level security" (0A000), and no right to `nextval`
/// or to the checks' schema and functions (42501), which an INSERT does
/// not need.
fn copy_refused(e: &PgError) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::FEATURE_NOT_SUPPORTED || *c == SqlState::INSUFFICIENT_PRIVILEGE
    })
}

/// The check functions' error: the rows written are not the rows sent.
fn rows_skipped(e: &PgError) -> bool {
    e.code().is_some_and(|c| c.code() == "FPCPY")
}

/// Whether a COPY's COMMIT waits for its answer rather than going in its
/// flight. Under an Idempotency-Key (`keyed`) the answer is stored before
/// COMMIT, and it holds the ids. On Citus COMMIT waits for the COPY's own
/// count of its rows: the check that goes ahead of COMMIT on one server
/// reads counters the workers' rows never touch (and Citus allows no
/// trigger that could drop a row there).
pub fn commit_waits(coll: &Collection, keyed: bool) -> bool {
    keyed || coll.distributed
}

/// Whether the COPY's flight ends the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// More follows: segments, or an answer to store before COMMIT.
    StayOpen,
    /// COMMIT in the same flight, after the check that every row was copied.
    Commit,
}

impl Copy<'_> {
    /// Write all rows in one transaction; ids in feature order, or why not.
    pub async fn run(self) -> Result<WriteReport, CopyFailed> {
        let job = &self.job;
        let shape = &job.plan.shapes[0];
        let mut copying = Copying::prepare(
            job.client, job.coll, self.copy, shape, job.naming, &job.costs,
        )
        .await?;
        let batches: Vec<usize> = job.plan.batches.iter().map(|b| b.len()).collect();
        let then = match commit_waits(job.coll, job.idempotency.is_some()) {
            true => Then::StayOpen,
            false => Then::Commit,
        };
        copying
            .segment(job.rows, &batches, job.single, job.idempotency, then)
            .await?;
        match then {
            Then::Commit => Ok(copying.committed()),
            Then::StayOpen => Ok(copying.commit(job.idempotency).await?),
        }
    }
}

/// A COPY under way on one connection, one `COPY` statement per segment of
/// rows (a whole request, or what a streamed body has ready): its statements
/// prepared, the keys of each segment given, drawn in the flight before it,
/// or read back in its own.
pub struct Copying<'a> {
    client: &'a TxGuard,
    coll: &'a Collection,
    copy_statement: Statement,
    /// The defaults query drawing keys ([`KeySource::Drawn`]), prepared.
    draw: Option<(Statement, DrawQuery)>,
    /// What follows the rows: `featurepipe.copied_keys` for keys COPY
    /// draws, else `CHECK_COPIED`.
    check_statement: Statement,
    /// Where the transaction's count of rows inserted starts, for the checks.
    begins_statement: Statement,
    /// Where the keys come from.
    keys: KeySource,
    /// The binary type of each column copied.
    types: Vec<Type>,
    /// The key column given or drawn ([`CopyPlan::key`]).
    key: usize,
    key_type: ScalarType,
    /// Where the features give the key among their columns, if they do.
    key_at: Option<usize>,
    /// Of a key of several columns, where the features give each among
    /// their columns (`None`: the one drawn): a row's id is made of them.
    id_parts: Option<Vec<Option<usize>>>,
    /// Ids, batches and the failure so far.
    tally: Tally,
    /// Rows copied so far.
    copied: usize,
    /// What writes cost on this database, observed again by this one.
    costs: Arc<Costs>,
}

/// The rows this session has inserted into the table `$1` (its leaf
/// partitions, when partitioned), as `featurepipe.inserted_rows` (migration
/// 8) counts them, written out: a call to the function, and the SQL
/// functions that wrapped it, cost PostgreSQL about 100 µs a request,
/// planning and `SET search_path` included, and 32 clients wait on that.
/// Without counters (track_counts off) the function counts the rows.
macro_rules! inserted_rows {
    () => {
        "(CASE WHEN current_setting('track_counts')::boolean \
         THEN coalesce((SELECT sum(pg_stat_get_xact_tuples_inserted(relid)) \
                          FROM pg_partition_tree($1::text::regclass) WHERE isleaf), \
                       pg_stat_get_xact_tuples_inserted($1::text::regclass)) \
         ELSE featurepipe.inserted_rows($1::text::regclass) END)::int8"
    };
}

/// Note where the transaction's count of rows inserted into `$1` starts,
/// before its first COPY (`featurepipe.copy_begins`, written out).
const COPY_BEGINS: &str = concat!(
    "SELECT set_config('featurepipe.copy_base', ",
    inserted_rows!(),
    "::text, true)"
);

/// Check that the transaction inserted `$2` rows into `$1` in all, or fail
/// it with FPCPY (`featurepipe.check_copied`, written out).
const CHECK_COPIED: &str = concat!(
    "SELECT CASE WHEN copied IS DISTINCT FROM $2::int8 THEN featurepipe.fail('FPCPY', \
     format('COPY into %s wrote %s rows in all, not %s', $1::text::regclass, copied, $2::int8)) END \
     FROM (SELECT ",
    inserted_rows!(),
    " - nullif(current_setting('featurepipe.copy_base', true), '')::int8 AS copied) AS counted"
);

/// The same, then the keys the last `$5` rows drew from the key `$2`'s
/// sequence `$3` (its own when null), in row order (migration 8).
const COPIED_KEYS: &str = "SELECT featurepipe.copied_keys($1::text::regclass, $2::text, \
     coalesce($3::text, pg_get_serial_sequence($1::text, $2::text))::regclass, $4::int8, $5::int4)";

impl<'a> Copying<'a> {
    /// Prepare the COPY of the rows of `shape` (and the queries around
    /// it), in one round trip unless cached.
    pub async fn prepare(
        client: &'a TxGuard,
        coll: &'a Collection,
        copy: CopyPlan,
        shape: &[usize],
        naming: Naming,
        costs: &Arc<Costs>,
    ) -> Result<Copying<'a>, CopyFailed> {
        let pk = copy.key;
        // Prepared up front so that each is later sent as a single message,
        // in the order polled; cached within the same per-connection bound
        // as INSERTs, prepared for this request beyond it.
        let copy_sql = copy_sql(coll, &copy.columns);
        let check_sql = match copy.keys {
            KeySource::Sequence(_) => COPIED_KEYS,
            KeySource::Given | KeySource::Drawn => CHECK_COPIED,
        };
        let draw = (copy.keys == KeySource::Drawn).then(|| draw_query(coll, pk));
        let room = cache_room(client);
        let naming = |n| naming.within(room, n);
        let mut prepares: Vec<Call<'_, Result<Statement, PgError>>> = vec![
            Box::pin(prepare_named(client, &copy_sql, naming(0))),
            Box::pin(prepare_named(client, check_sql, naming(1))),
            Box::pin(prepare_named(client, COPY_BEGINS, naming(2))),
        ];
        if let Some(draw) = &draw {
            prepares.push(Box::pin(prepare_named(client, &draw.sql, naming(3))));
        }
        let mut prepares = Calls::new(prepares);
        prepares.send_all().await;
        let mut statements = Vec::with_capacity(4);
        while let Some(prepared) = prepares.next().await {
            statements.push(prepared.map_err(|e| match copy_refused(&e) {
                // A role without USAGE on the schema featurepipe (the checks').
                true => CopyFailed::Refused(e),
                false => Error::database("preparing the COPY", &e).into(),
            })?);
        }
        drop(prepares);
        let draw = draw.and_then(|query| Some((statements.pop()?, query)));
        let begins_statement = statements.pop().expect("prepared");
        let check_statement = statements.pop().expect("prepared");
        let copy_statement = statements.pop().expect("prepared");
        let types = copy
            .columns
            .iter()
            .map(|&c| copy_type(&coll.columns[c].ty))
            .collect();
        let key_type = match coll.columns[pk].ty {
            ColumnType::Scalar(t) => t,
            _ => unreachable!("copy_plan checked the key type"),
        };
        let key_at = shape.iter().position(|&c| c == pk);
        let id_parts = (coll.primary_key.is_none()).then(|| {
            (coll.composite_key.iter())
                .map(|&ci| shape.iter().position(|&c| c == ci))
                .collect()
        });
        Ok(Copying {
            client,
            coll,
            copy_statement,
            draw,
            check_statement,
            begins_statement,
            keys: copy.keys,
            types,
            key: pk,
            key_type,
            key_at,
            id_parts,
            tally: Tally::new(&[], coll.integer_key(), 0),
            copied: 0,
            costs: costs.clone(),
        })
    }

    /// Copy `rows`, the features after those copied so far, in one COPY;
    /// `batches` are their batches' lengths, for the report. The first
    /// segment begins the transaction and claims the Idempotency-Key
    /// (`keyed`) in its first flight; `then` says whether COMMIT follows in
    /// the flight of the rows. A failure rolls back.
    pub async fn segment(
        &mut self,
        rows: &[FeatureRow],
        batches: &[usize],
        single: bool,
        keyed: Option<Keyed<'_>>,
        then: Then,
    ) -> Result<(), CopyFailed> {
        let first = self.copied;
        let mut start = first;
        for len in batches {
            self.tally.add_batch(start..start + len);
            start += len;
        }
        let client = self.client;
        let checking = then == Then::Commit || matches!(self.keys, KeySource::Sequence(_));
        let mut opening: Vec<Call<'_, Opened>> = Vec::new();
        if first == 0 {
            client.set_open(true);
            opening.push(Box::pin(async {
                Opened::Begun(client.batch_execute("BEGIN").await)
            }));
            if let Some(keyed) = keyed {
                opening.extend(super::claim_calls(keyed, client).map(|call| {
                    Box::pin(async move { Opened::Claimed(call.await) }) as Call<'_, _>
                }));
            }
            if checking {
                opening.push(self.count_begins());
            }
        }
        let sent = (first == 0).then(Instant::now);
        // Keys the defaults query draws go into the rows: that query's answer
        // is awaited (with BEGIN's and the claim's) before the rows are sent.
        let mut answers = Answers::new(sent);
        if self.draw.is_some() {
            opening.push(self.draw_keys(rows.len()));
            let mut calls = Calls::new(std::mem::take(&mut opening));
            calls.send_all().await;
            answers = answers.read(&mut calls, &self.costs).await;
            drop(calls);
            if let Err(e) = std::mem::replace(&mut answers.opening, Ok(())) {
                self.rollback().await;
                return Err(e.into());
            }
        }
        let drawn = answers.drawn.take();
        // The keys known before the rows are sent.
        match (&drawn, &self.keys) {
            _ if self.id_parts.is_some() => self.composite_ids(rows, drawn.as_ref()),
            (Some(keys), _) => self.tally.ids.extend(keys),
            (None, KeySource::Given) => {
                let at = self.key_at.expect("copy_plan: the features give the key");
                for row in rows {
                    self.tally.ids.push_text(key_text(&row.values[at]));
                }
            }
            (None, _) => {}
        }

        // The flight of the rows: (BEGIN, the claim,) the COPY and its rows,
        // the check (with the keys read back), (COMMIT).
        let slot = std::sync::Mutex::new(None);
        let mut flight = opening;
        let (copy_statement, started) = (&self.copy_statement, &slot);
        flight.push(Box::pin(async move {
            let sink = client.copy_in_pipelined(copy_statement).await;
            *started.lock().unwrap_or_else(|e| e.into_inner()) = Some(sink);
            Opened::Started
        }));
        if checking {
            flight.push(self.check(rows.len()));
        }
        if then == Then::Commit {
            flight.push(Box::pin(async {
                Opened::Committed(client.batch_execute("COMMIT").await)
            }));
        }
        let mut calls = Calls::new(flight);
        calls.send_all().await;
        let commit_sent = then == Then::Commit && !calls.last_refused_at_send();
        let sink = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        let copying = Instant::now();
        // The rows go out while the answers before them are read.
        let sending = send_rows(
            sink.expect("polled when sent"),
            &self.types,
            rows,
            batches,
            drawn.as_ref().map(|keys| (keys, self.key_type)),
        );
        let reading = answers.read(&mut calls, &self.costs);
        let ((copied, marks), answers) = futures_util::future::join(sending, reading).await;
        drop(calls);
        // The rows' time: up to the COPY's end (the last mark), not the
        // check's or COMMIT's (its flush to disk is the request's).
        let rows_took = marks.last().map(|end| end.duration_since(copying));
        // Keys read back: the time between the COPY's answer and the check's.
        let read_back = match (&self.keys, marks.last(), answers.checked_at) {
            (KeySource::Sequence(_), Some(end), Some(at)) => {
                Some(at.saturating_duration_since(*end))
            }
            _ => None,
        };
        for mark in marks {
            self.tally.mark_batch_at(mark);
        }
        self.copied += rows.len();
        // Answered by the server: the transaction is over either way.
        let ended = answers.committed.as_ref().is_some_and(|c| {
            c.as_ref()
                .map_or_else(|e| e.as_db_error().is_some(), |_| true)
        });
        if ended {
            client.set_open(false);
        }
        let outcome = self.judge(answers, copied, rows.len(), (first, single), commit_sent);
        match &outcome {
            Ok(()) => {
                if let Some(took) = rows_took {
                    self.costs.observe_rows(Cost::CopyRow, rows.len(), took);
                }
                if let Some(took) = read_back.filter(|_| rows.len() >= 50) {
                    let per_key = took.as_secs_f64() / rows.len() as f64;
                    let per_key = std::time::Duration::from_secs_f64(per_key);
                    self.costs.observe(Cost::ReadBackRow, rows.len(), per_key);
                }
            }
            Err(_) if !ended => self.rollback().await,
            Err(_) => {}
        }
        outcome
    }

    /// Whether no row has been copied yet.
    pub fn is_empty(&self) -> bool {
        self.copied == 0
    }

    /// Whether later rows need nothing between batches (their keys given,
    /// or drawn by COPY itself): the rest of a body can then go in one
    /// COPY whose rows are sent as they come ([`Copying::stream`]). Not
    /// for a key of several columns, whose ids are made a segment at a time.
    pub fn streams_rows(&self) -> bool {
        self.keys != KeySource::Drawn && self.id_parts.is_none()
    }

    /// The ids of `rows`, of a key of several columns: the values the rows
    /// give, and the one `drawn`, as the database would join them.
    fn composite_ids(&mut self, rows: &[FeatureRow], drawn: Option<&Ids>) {
        let parts = self.id_parts.as_deref().unwrap_or_default();
        for (i, row) in rows.iter().enumerate() {
            let drawn = drawn.map(|keys| key_param(keys, i, self.key_type));
            let values = parts.iter().map(|at| match at {
                Some(at) => key_text(&row.values[*at]),
                None => key_text(drawn.as_ref().expect("copy_plan: one part drawn")),
            });
            self.tally.ids.push_text(key::joined(values));
        }
    }

    /// Keys drawn ahead in blocks of `block` on a connection of their own,
    /// so that the rest of a body can go in one COPY all the same: when
    /// the defaults query draws keys from a sequence and a connection is
    /// free now.
    pub async fn keys_ahead(&self, db: &Database, block: usize) -> Option<KeysAhead> {
        key_sequence(self.coll, self.key)?;
        let (_, query) = self.draw.clone()?;
        KeysAhead::start(db, query, block).await
    }

    /// Copy the batches `batches` hands over, after the rows copied so
    /// far, in one COPY whose rows go out as each batch comes: nothing is
    /// awaited until the last, then the keys COPY drew are read back (a
    /// round trip). A COPY the server refuses midway is known only then:
    /// the rows sent after the refusal were sent for nothing. A failure
    /// rolls back.
    pub async fn stream(
        &mut self,
        batches: impl Stream<Item = Vec<FeatureRow>> + Unpin,
        ahead: Option<KeysAhead>,
    ) -> Result<(), CopyFailed> {
        let first = self.copied;
        let sink = self.client.copy_in_pipelined(&self.copy_statement).await;
        let keys = match ahead {
            Some(ahead) => FedKeys::Ahead(ahead, self.key_type),
            None => FedKeys::Given(self.key_at),
        };
        let (copied, sent) = feed(sink, &self.types, (first, keys), &mut self.tally, batches).await;
        let check = matches!(self.keys, KeySource::Sequence(_)).then(|| self.check(sent));
        self.copied += sent;
        let outcome = match copied {
            Err(Unfed::Copy(e)) => Err(self.copy_failed(e, first, false).into()),
            Err(Unfed::Keys(e)) => Err(e.into()),
            Ok(count) if count != sent as u64 => Err(CopyFailed::RowsSkipped),
            Ok(_) => match check {
                Some(check) => {
                    crate::db::round_trips::round_trip();
                    match check.await {
                        Opened::Checked(Ok(Some(keys))) => {
                            self.tally.ids.extend(&keys);
                            Ok(())
                        }
                        Opened::Checked(Err(e)) if rows_skipped(&e) => Err(CopyFailed::RowsSkipped),
                        Opened::Checked(Err(e)) => {
                            Err(Error::database("reading the keys back", &e).into())
                        }
                        _ => unreachable!("a check answers Checked with keys"),
                    }
                }
                None => Ok(()),
            },
        };
        if outcome.is_err() {
            self.rollback().await;
        }
        outcome
    }

    /// The defaults query drawing `n` keys.
    fn draw_keys(&self, n: usize) -> Call<'a, Opened> {
        let client = self.client;
        let (statement, query) = self.draw.clone().expect("keys drawn");
        let integer = self.coll.columns[self.key].is_integer();
        Box::pin(async move {
            let n = n as i32;
            let row = client.query_one(&statement, &query.params(&n)).await;
            Opened::Drawn(row.map(|row| match integer {
                true => Ids::Int(row.get(0)),
                false => Ids::Text(row.get(0)),
            }))
        })
    }

    /// Where the transaction's count of rows inserted starts.
    fn count_begins(&self) -> Call<'a, Opened> {
        let (client, table) = (self.client, self.coll.qualified_name());
        let statement = self.begins_statement.clone();
        Box::pin(async move {
            let began = client.query_one(&statement, &[&table]).await;
            Opened::Begun(began.map(|_| ()))
        })
    }

    /// The check after `n` rows: every row copied so far was written, and
    /// (for keys COPY draws) the keys of these `n`.
    fn check(&self, n: usize) -> Call<'a, Opened> {
        let (client, coll) = (self.client, self.coll);
        let statement = self.check_statement.clone();
        let table = coll.qualified_name();
        let expected = (self.copied + n) as i64;
        let key = &coll.columns[self.key].name;
        let sequence = match &self.keys {
            KeySource::Sequence(sequence) => Some(sequence.clone()),
            KeySource::Given | KeySource::Drawn => None,
        };
        Box::pin(async move {
            let n = n as i32;
            Opened::Checked(match sequence {
                Some(sequence) => {
                    let params: [&(dyn ToSql + Sync); 5] = [&table, key, &sequence, &expected, &n];
                    let row = client.query_one(&statement, &params).await;
                    row.map(|row| Some(Ids::Int(row.get(0))))
                }
                None => {
                    let params: [&(dyn ToSql + Sync); 2] = [&table, &expected];
                    client.query_one(&statement, &params).await.map(|_| None)
                }
            })
        })
    }

    /// What a segment's answers say: its keys kept, or why it failed.
    /// `commit_sent`: COMMIT went out behind the rows, so a connection lost
    /// before any statement failed leaves the outcome unknown.
    fn judge(
        &mut self,
        answers: Answers,
        copied: Result<u64, PgError>,
        n: usize,
        (first, single): (usize, bool),
        commit_sent: bool,
    ) -> Result<(), CopyFailed> {
        let Answers {
            opening,
            opening_lost,
            checked,
            committed,
            ..
        } = answers;
        // The first failure, in the order sent: the server's own error
        // means the transaction failed (nothing was written); a lost
        // connection before any, with COMMIT sent, leaves it unknown.
        let failures = [
            copied.as_ref().err(),
            checked.as_ref().and_then(|c| c.as_ref().err()),
        ];
        let lost = match &opening {
            Err(_) => opening_lost,
            Ok(()) => failures
                .into_iter()
                .flatten()
                .chain(committed.as_ref().and_then(|c| c.as_ref().err()))
                .next()
                .is_some_and(|e| e.as_db_error().is_none()),
        };
        if commit_sent && lost {
            return Err(super::outcome_unknown(&self.tally).into());
        }
        opening?;
        let count = match copied {
            Ok(count) => count,
            Err(e) if copy_refused(&e) && first == 0 => return Err(CopyFailed::Refused(e)),
            Err(e) => return Err(self.copy_failed(e, first, single).into()),
        };
        // A BEFORE INSERT trigger returning NULL drops a row without an error.
        let keys = match checked {
            Some(Err(e)) if rows_skipped(&e) => return Err(CopyFailed::RowsSkipped),
            Some(Err(e)) if copy_refused(&e) && first == 0 => return Err(CopyFailed::Refused(e)),
            Some(Err(e)) => return Err(Error::database("checking the COPY", &e).into()),
            _ if count != n as u64 => return Err(CopyFailed::RowsSkipped),
            Some(Ok(keys)) => keys,
            None => None,
        };
        if let Some(keys) = keys {
            self.tally.ids.extend(&keys);
        }
        match committed {
            Some(Err(e)) => Err(super::commit_failed(self.coll, &e, &self.tally).into()),
            _ => Ok(()),
        }
    }

    /// The report of a COPY whose COMMIT went in the flight of its rows.
    fn committed(self) -> WriteReport {
        WriteReport {
            strategy: super::Strategy::Copy,
            batches: self.tally.reports(true),
            ids: self.tally.ids,
        }
    }

    /// COMMIT (with the response under the Idempotency-Key) in a flight of
    /// its own, once every COPY has said how many rows it wrote.
    pub async fn commit(self, keyed: Option<Keyed<'_>>) -> Result<WriteReport, Error> {
        let report = WriteReport {
            strategy: super::Strategy::Copy,
            batches: self.tally.reports(true),
            ids: self.tally.ids.clone(),
        };
        match super::store_and_commit(self.client, keyed, &report).await {
            Ok(()) => {
                // The report as stored under the Idempotency-Key, if any.
                self.client.set_open(false);
                Ok(report)
            }
            Err(error) => {
                if error.as_db_error().is_some() {
                    self.client.set_open(false);
                }
                Err(super::commit_failed(self.coll, &error, &self.tally))
            }
        }
    }

    /// Claim the Idempotency-Key in the transaction (one round trip): a
    /// COPY of a body read as it arrived knows the request's hash last.
    pub async fn claim(&self, keyed: Keyed<'_>) -> Result<(), Error> {
        let mut calls = Calls::new(super::claim_calls(keyed, self.client).into());
        calls.send_all().await;
        while let Some(answer) = calls.next().await {
            if let Err(e) = answer {
                drop(calls);
                self.rollback().await;
                return Err(super::claim_failed(&e));
            }
        }
        Ok(())
    }

    /// The ids and batches of the rows copied so far.
    pub fn into_tally(self) -> Tally {
        self.tally
    }

    /// The error for a COPY that failed: at the feature on the line
    /// PostgreSQL names (of the segment from feature `first`), or for the
    /// whole request when it names none.
    fn copy_failed(&mut self, error: PgError, first: usize, single: bool) -> Error {
        // Some checks (foreign keys) run after PostgreSQL has dropped the
        // "line N" context: then no feature can be named.
        let Some(feature) = failed_row(&error).filter(|&k| first + k < self.copied) else {
            return refused(self.coll, &error, self.tally.reports(false));
        };
        self.tally.failure = Some(Failure {
            feature: first + feature,
            error: Some(error),
        });
        write_failed(self.coll, single, &self.tally)
    }

    /// Undo everything copied.
    pub async fn rollback(&self) {
        crate::db::round_trips::round_trip();
        if self.client.batch_execute("ROLLBACK").await.is_ok() {
            self.client.set_open(false);
        }
    }
}

/// Send `rows` into the COPY's `sink` (with their drawn keys, if any) and
/// end the COPY: its row count, and when each batch's last row was taken
/// (a batch's time is how long the server took to accept its rows).
async fn send_rows(
    sink: Result<CopyInSink<Bytes>, PgError>,
    types: &[Type],
    rows: &[FeatureRow],
    batches: &[usize],
    drawn: Option<(&Ids, ScalarType)>,
) -> (Result<u64, PgError>, Vec<Instant>) {
    let mut marks = Vec::with_capacity(batches.len());
    let sink = match sink {
        Ok(sink) => sink,
        Err(e) => return (Err(e), marks),
    };
    let mut writer = std::pin::pin!(BinaryCopyInWriter::new(sink, types));
    let mut batch_ends = batches.iter().scan(0, |end, len| {
        *end += len;
        Some(*end)
    });
    let mut batch_end = batch_ends.next();
    for (i, row) in rows.iter().enumerate() {
        let key = drawn.map(|(keys, ty)| key_param(keys, i, ty));
        if let Err(e) = writer.as_mut().write(&row_params(row, key.as_ref())).await {
            // Dropped, the writer aborts the COPY (CopyFail) before what
            // follows it in the flight.
            return (Err(e), marks);
        }
        if batch_end == Some(i + 1) && i + 1 < rows.len() {
            marks.push(Instant::now());
            batch_end = batch_ends.next();
        }
    }
    let copied = writer.as_mut().finish().await;
    marks.push(Instant::now());
    (copied, marks)
}

/// Where the keys of rows fed as they come are: given by the features (at
/// this column, if they are), or drawn ahead (sent as this type).
enum FedKeys {
    Given(Option<usize>),
    Ahead(KeysAhead, ScalarType),
}

/// Why a COPY fed as batches came failed.
enum Unfed {
    /// The database refused it.
    Copy(PgError),
    /// Keys drawn ahead could not be had (the COPY was abandoned).
    Keys(Error),
}

/// Send the rows of `batches` (the first is feature `first`) into the
/// COPY's `sink` as they come, their batches and keys counted in `tally`,
/// and end the COPY: its row count, and the rows sent.
async fn feed(
    sink: Result<CopyInSink<Bytes>, PgError>,
    types: &[Type],
    (first, mut keys): (usize, FedKeys),
    tally: &mut Tally,
    mut batches: impl Stream<Item = Vec<FeatureRow>> + Unpin,
) -> (Result<u64, Unfed>, usize) {
    let sink = match sink {
        Ok(sink) => sink,
        Err(e) => return (Err(Unfed::Copy(e)), 0),
    };
    let mut writer = std::pin::pin!(BinaryCopyInWriter::new(sink, types));
    let mut sent = 0;
    while let Some(rows) = batches.next().await {
        tally.add_batch(first + sent..first + sent + rows.len());
        let drawn = match &mut keys {
            FedKeys::Ahead(ahead, ty) => match ahead.take(rows.len()).await {
                Ok(drawn) => Some((Ids::Int(drawn), *ty)),
                // Dropped, the writer aborts the COPY (CopyFail).
                Err(e) => return (Err(Unfed::Keys(e)), sent),
            },
            FedKeys::Given(_) => None,
        };
        for (i, row) in rows.iter().enumerate() {
            if let FedKeys::Given(Some(at)) = keys {
                tally.ids.push_text(key_text(&row.values[at]));
            }
            let key = drawn.as_ref().map(|(keys, ty)| key_param(keys, i, *ty));
            if let Err(e) = writer.as_mut().write(&row_params(row, key.as_ref())).await {
                return (Err(Unfed::Copy(e)), sent);
            }
        }
        if let Some((drawn, _)) = &drawn {
            tally.ids.extend(drawn);
        }
        sent += rows.len();
        // A batch's time is how long the server took to accept its rows.
        tally.mark_batch();
    }
    crate::db::round_trips::round_trip();
    let copied = writer.as_mut().finish().await.map_err(Unfed::Copy);
    tally.add_to_last();
    (copied, sent)
}

/// The COPY values of `row`, then its drawn `key` if any.
fn row_params<'r>(row: &'r FeatureRow, key: Option<&'r SqlValue>) -> Vec<&'r (dyn ToSql + Sync)> {
    let values = row.values.iter().chain(key);
    values.map(|v| v as &(dyn ToSql + Sync)).collect()
}

/// `COPY … (columns) FROM STDIN (FORMAT binary)`.
fn copy_sql(coll: &Collection, columns: &[usize]) -> String {
    let names: Vec<String> = columns
        .iter()
        .map(|&c| quote_ident(&coll.columns[c].name))
        .collect();
    format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        coll.qualified_name(),
        names.join(", ")
    )
}

/// The ONE defaults query that draws a key per row ([`KeySource::Drawn`]):
/// the key column's default expression from the catalog (volatile ones are
/// evaluated once per row), or an identity's sequence (named by the table
/// and the key column, its parameters after the number of keys).
fn draw_query(coll: &Collection, pk: usize) -> DrawQuery {
    let key = &coll.columns[pk];
    let names = key
        .default
        .is_none()
        .then(|| (coll.qualified_name(), key.name.clone()));
    DrawQuery {
        sql: keys_sql(coll, pk),
        names,
    }
}

/// The SQL of [`draw_query`].
fn keys_sql(coll: &Collection, pk: usize) -> String {
    let key = &coll.columns[pk];
    let cast = if key.is_integer() { "int8" } else { "text" };
    let draw = match &key.default {
        Some(expr) => format!("({expr})"),
        None => "nextval(pg_get_serial_sequence($2::text, $3::text))".to_owned(),
    };
    // One row holding an array: far less memory than a row per key.
    format!(
        "SELECT array_agg(k ORDER BY g) FROM \
         (SELECT g, {draw}::{cast} AS k FROM generate_series(1, $1::int4) AS g) AS keys"
    )
}

/// Key `i` of those drawn, as a parameter of the key column's type.
fn key_param(keys: &Ids, i: usize, ty: ScalarType) -> SqlValue {
    match (keys, ty) {
        // A key too large for its column is sent as int8, which COPY then
        // refuses as malformed, rather than silently truncated.
        (Ids::Int(k), ScalarType::Int2) => {
            i16::try_from(k[i]).map_or(SqlValue::Int8(k[i]), SqlValue::Int2)
        }
        (Ids::Int(k), ScalarType::Int4) => {
            i32::try_from(k[i]).map_or(SqlValue::Int8(k[i]), SqlValue::Int4)
        }
        (Ids::Int(k), _) => SqlValue::Int8(k[i]),
        (Ids::Text(k), ScalarType::Uuid) => k[i]
            .parse()
            .map_or_else(|_| SqlValue::Text(k[i].clone()), SqlValue::Uuid),
        (Ids::Text(k), _) => SqlValue::Text(k[i].clone()),
    }
}

/// A key given by a feature, as the text the database would return.
fn key_text(value: &SqlValue) -> String {
    match value {
        SqlValue::Int2(v) => v.to_string(),
        SqlValue::Int4(v) => v.to_string(),
        SqlValue::Int8(v) => v.to_string(),
        SqlValue::Uuid(v) => v.to_string(),
        SqlValue::Text(v) => v.clone(),
        _ => unreachable!("copy_plan allows integer, text and uuid keys only"),
    }
}

/// The feature a COPY error is about: PostgreSQL says "COPY t, line N" (1-based).
fn failed_row(error: &PgError) -> Option<usize> {
    let context = error.as_db_error()?.where_()?;
    let after = &context[context.find(", line ")? + 7..];
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse::<usize>().ok()?.checked_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Column;
    use crate::geometry::GeometryColumn;

    /// A points table whose key `id` has `default` (or is an identity when `None`).
    fn table(key: ScalarType, default: Option<&str>) -> Collection {
        let mut id = Column::new("id", ColumnType::Scalar(key));
        id.default = default.map(str::to_owned);
        if default.is_none() {
            id.identity = Identity::ByDefault;
        }
        let n = Column::new("n", ColumnType::Scalar(ScalarType::Int4));
        let geom = GeometryColumn::from_typmod((4326 << 8) | (1 << 2), false);
        let mut coll = Collection::new(
            "t",
            vec![id, n, Column::new("geom", ColumnType::Geometry(geom))],
            2,
        );
        coll.primary_key = Some(0);
        coll
    }

    fn plan(coll: &Collection, shape: Vec<usize>) -> CopyPlan {
        let plan = Plan {
            shapes: vec![shape],
            batches: Vec::new(),
        };
        copy_plan(coll, &plan, 4326).expect("copyable")
    }

    #[test]
    fn keys_come_from_the_features_a_sequence_or_the_defaults_query() {
        let serial = table(ScalarType::Int4, Some("nextval('t_id_seq'::regclass)"));
        assert_eq!(plan(&serial, vec![0, 1, 2]).keys, KeySource::Given);
        let copy = plan(&serial, vec![1, 2]);
        assert_eq!(copy.keys, KeySource::Sequence(Some("t_id_seq".into())));
        assert_eq!(copy.columns, [1, 2], "COPY draws the key itself");
        let identity = table(ScalarType::Int8, None);
        assert_eq!(plan(&identity, vec![1, 2]).keys, KeySource::Sequence(None));
        let quoted = table(
            ScalarType::Int8,
            Some(r#"nextval('"odd""name''s seq"'::regclass)"#),
        );
        assert_eq!(
            plan(&quoted, vec![1, 2]).keys,
            KeySource::Sequence(Some(r#""odd""name's seq""#.into()))
        );
        // More than a draw from a sequence: drawn before the rows.
        for default in [
            "(nextval('t_id_seq'::regclass) * 2)",
            "nextval('a'::regclass) + nextval('b'::regclass)",
            "nextval('a'::regclass) + 1 + ('x'::regclass)",
        ] {
            let coll = table(ScalarType::Int8, Some(default));
            let copy = plan(&coll, vec![1, 2]);
            assert_eq!(copy.keys, KeySource::Drawn, "{default}");
            assert_eq!(copy.columns, [1, 2, 0], "{default}");
        }
        let uuid = table(ScalarType::Uuid, Some("gen_random_uuid()"));
        assert_eq!(plan(&uuid, vec![1, 2]).keys, KeySource::Drawn);
    }

    #[test]
    fn a_key_of_several_columns_is_given_or_drawn_one_column_at_most() {
        // PRIMARY KEY (team, id): id a serial, team given by the features.
        let mut coll = table(ScalarType::Int8, Some("nextval('t_id_seq'::regclass)"));
        coll.columns[1] = Column::new("team", ColumnType::Scalar(ScalarType::Int4));
        (coll.primary_key, coll.composite_key) = (None, vec![1, 0]);
        let drawn = plan(&coll, vec![1, 2]);
        assert_eq!(
            (drawn.key, drawn.keys, drawn.columns),
            (0, KeySource::Drawn, vec![1, 2, 0])
        );
        let given = plan(&coll, vec![0, 1, 2]);
        assert_eq!((given.key, given.keys), (1, KeySource::Given));
        let one_plan = |shape| Plan {
            shapes: vec![shape],
            batches: Vec::new(),
        };
        // Two columns to draw, or one without a default: INSERT.
        assert_eq!(copy_plan(&coll, &one_plan(vec![2]), 4326), None);
        coll.columns[0].default = None;
        assert_eq!(copy_plan(&coll, &one_plan(vec![1, 2]), 4326), None);
    }

    #[test]
    fn large_requests_next_to_the_database_draw_their_keys_first() {
        let serial = table(ScalarType::Int4, Some("nextval('t_id_seq'::regclass)"));
        let sequence = || plan(&serial, vec![1, 2]);
        let costs = |round_trip_ms: f64, read_back_us: f64| Observed {
            round_trip: round_trip_ms * 1e-3,
            read_back_row: read_back_us * 1e-6,
            ..Observed::default()
        };
        // 1,000 keys read back: 1.2 ms, more than a 0.5 ms round trip.
        let near = sequence().cheapest_keys(&serial, 1000, &costs(0.5, 1.2));
        assert_eq!((near.keys, near.columns), (KeySource::Drawn, vec![1, 2, 0]));
        let few = sequence().cheapest_keys(&serial, 100, &costs(0.5, 1.2));
        assert_eq!(few.keys, sequence().keys);
        // ... unless many writers' rows lie between them.
        let busy = sequence().cheapest_keys(&serial, 100, &costs(0.5, 40.0));
        assert_eq!(busy.keys, KeySource::Drawn);
        // 50 ms away, 10,000 keys read back (12 ms) beat a round trip.
        let far = sequence().cheapest_keys(&serial, 10_000, &costs(50.0, 1.2));
        assert_eq!(far.keys, sequence().keys);
        assert_eq!(sequence().extra_round_trips(false), 0);
        assert_eq!(sequence().extra_round_trips(true), 1);
        let drawn = sequence().cheapest_keys(&serial, 1_000_000, &costs(0.0, 1.2));
        assert_eq!(drawn.extra_round_trips(false), 1);
    }

    #[test]
    fn a_stream_draws_its_keys_ahead_where_the_drawing_keeps_up_with_the_rows() {
        let serial = table(ScalarType::Int4, Some("nextval('t_id_seq'::regclass)"));
        let sequence = || plan(&serial, vec![1, 2]);
        let costs = |round_trip_ms: f64, copy_us: f64| Observed {
            round_trip: round_trip_ms * 1e-3,
            copy_row: copy_us * 1e-6,
            ..Observed::default()
        };
        // 2,000 rows take COPY 12 ms: a 0.3 ms round trip keeps well ahead.
        let near = sequence().keys_for_stream(&serial, 2000, &costs(0.3, 6.0));
        assert_eq!((near.keys, near.columns), (KeySource::Drawn, vec![1, 2, 0]));
        // 10 ms away it would barely: the keys are read back at the end.
        let far = sequence().keys_for_stream(&serial, 2000, &costs(10.0, 6.0));
        assert_eq!(far.keys, sequence().keys);
        // Keys the features give stay theirs.
        let given = plan(&serial, vec![0, 1, 2]).keys_for_stream(&serial, 2000, &costs(0.3, 6.0));
        assert_eq!(given.keys, KeySource::Given);
    }
}
