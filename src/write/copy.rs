//! The COPY fast path: binary COPY with every key known before writing.
//!
//! Keys come from the features themselves or from ONE defaults query
//! (`SELECT <key default> FROM generate_series(1, n)`, volatile defaults
//! once per row); the other columns left out take their defaults from COPY
//! itself. Warm, a request costs three round trips: BEGIN, the defaults
//! query and the start of the COPY in one flight; the rows and the end of the
//! COPY in the second; COMMIT in the third, once the COPY's row count has
//! been checked against the rows sent.

use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error as PgError, Statement};

use super::guard::TxGuard;
use super::pipeline::{Call, Calls};
use super::plan::Plan;
use super::report::{Failure, Ids, Tally, WriteReport};
use super::{refused, write_failed, Job, Keyed};
use crate::catalog::{Collection, ColumnType, ScalarType};
use std::sync::Arc;
use std::time::Instant;

use crate::db::costs::{Cost, Costs};
use crate::db::quote_ident;
use crate::db::statement::{cache_room, prepare_named, Naming};
use crate::error::Error;
use crate::feature::value::SqlValue;
use crate::feature::FeatureRow;

/// What a COPY of one request writes.
#[derive(Debug, PartialEq)]
pub struct CopyPlan {
    /// Column indices, in COPY order: the features' columns, then the key if
    /// the database must supply it.
    pub columns: Vec<usize>,
    /// The key is taken from the defaults query, not from the features.
    pub key_from_default: bool,
}

/// Whether this request can be written by COPY, and how.
///
/// Needs: one column set for all features (COPY has one column list); no
/// `BEFORE INSERT` trigger on the table or its partitions (it could change
/// the key, or skip the row); no row-level security (COPY FROM refuses it
/// for the roles its policies apply to); no SRID transform and no
/// `numeric` (those need SQL around the value); a key the features give or a
/// default can produce, of a type we can report.
pub fn copy_plan(coll: &Collection, plan: &Plan, input_srid: i32) -> Option<CopyPlan> {
    let [shape] = plan.shapes.as_slice() else {
        return None;
    };
    let pk = coll.primary_key?;
    let key = &coll.columns[pk];
    let key_type_ok = matches!(
        key.ty,
        ColumnType::Scalar(
            ScalarType::Int2
                | ScalarType::Int4
                | ScalarType::Int8
                | ScalarType::Text { .. }
                | ScalarType::Uuid
        )
    );
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
    let key_from_default = !shape.contains(&pk);
    if key_from_default {
        if !key.has_default() {
            return None;
        }
        columns.push(pk);
    }
    Some(CopyPlan {
        columns,
        key_from_default,
    })
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

/// An answer of the first flight.
enum Opened {
    Done,
    /// The answer to claiming the Idempotency-Key.
    Claimed(Result<(), PgError>),
    Keys(Ids),
    Sink(tokio_postgres::CopyInSink<bytes::Bytes>),
}

/// Why a COPY wrote nothing.
pub enum CopyFailed {
    /// The write failed: the answer for the client.
    Write(Error),
    /// COPY was refused before any row was sent (say, a role that may
    /// INSERT but not draw keys from the sequence): INSERT may still do it.
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
/// (42501), which an INSERT drawing an identity does not need.
fn copy_refused(e: &PgError) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::FEATURE_NOT_SUPPORTED || *c == SqlState::INSUFFICIENT_PRIVILEGE
    })
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
        copying
            .segment(job.rows, &batches, job.single, job.idempotency)
            .await?;
        Ok(copying.commit(job.idempotency).await?)
    }
}

/// A COPY under way on one connection, one `COPY` statement per segment of
/// rows (a whole request, or what a streamed body has ready): its statements
/// prepared, its keys drawn per segment in the flight that starts it.
///
/// Warm, a segment costs two round trips: BEGIN (with the first), the
/// defaults query and the start of the COPY in one flight; the rows and the
/// end of the COPY in the second. COMMIT is a third, once every COPY's row
/// count has been checked against the rows sent.
pub struct Copying<'a> {
    client: &'a TxGuard,
    coll: &'a Collection,
    copy_statement: Statement,
    /// The defaults query drawing keys, when the features do not give them.
    keys_statement: Option<Statement>,
    /// The binary type of each column copied.
    types: Vec<Type>,
    key_type: ScalarType,
    /// Where the features give the key among their columns, if they do.
    key_at: Option<usize>,
    /// Ids, batches and the failure so far.
    tally: Tally,
    /// Rows copied so far.
    copied: usize,
    /// What writes cost on this database, observed again by this one.
    costs: Arc<Costs>,
}

impl<'a> Copying<'a> {
    /// Prepare the COPY of the rows of `shape` (and the defaults query), in
    /// one round trip unless cached.
    pub async fn prepare(
        client: &'a TxGuard,
        coll: &'a Collection,
        copy: CopyPlan,
        shape: &[usize],
        naming: Naming,
        costs: &Arc<Costs>,
    ) -> Result<Copying<'a>, Error> {
        let pk = coll.primary_key.expect("copy_plan checked the key");
        // Both statements are prepared up front so that each is later sent as
        // a single message, in the order polled; cached within the same
        // per-connection bound as INSERTs, prepared for this request beyond it.
        let keys_sql = keys_sql(coll, pk, copy.key_from_default);
        let copy_sql = copy_sql(coll, &copy.columns);
        let room = cache_room(client);
        let naming = |n| naming.within(room, n);
        let mut prepares: Vec<Call<'_, Result<Statement, PgError>>> =
            vec![Box::pin(prepare_named(client, &copy_sql, naming(0)))];
        if let Some(sql) = &keys_sql {
            prepares.push(Box::pin(prepare_named(client, sql, naming(1))));
        }
        let mut prepares = Calls::new(prepares);
        prepares.send_all().await;
        let mut statements = Vec::with_capacity(2);
        while let Some(prepared) = prepares.next().await {
            statements.push(prepared.map_err(|e| Error::database("preparing the COPY", &e))?);
        }
        drop(prepares);
        let keys_statement = keys_sql.and_then(|_| statements.pop());
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
        Ok(Copying {
            client,
            coll,
            copy_statement,
            keys_statement,
            types,
            key_type,
            key_at,
            tally: Tally::new(&[], coll.integer_key(), 0),
            copied: 0,
            costs: costs.clone(),
        })
    }

    /// Copy `rows`, the features after those copied so far, in one COPY;
    /// `batches` are their batches' lengths, for the report. The first
    /// segment begins the transaction and claims the Idempotency-Key
    /// (`keyed`), in the flight that starts its COPY. A failure rolls back.
    pub async fn segment(
        &mut self,
        rows: &[FeatureRow],
        batches: &[usize],
        single: bool,
        keyed: Option<Keyed<'_>>,
    ) -> Result<(), CopyFailed> {
        let first = self.copied;
        let mut start = first;
        for len in batches {
            self.tally.add_batch(start..start + len);
            start += len;
        }
        let client = self.client;
        let n = rows.len() as i32;
        let pk = self.coll.primary_key.expect("copy_plan checked the key");
        let (table, key_column) = (self.coll.qualified_name(), &self.coll.columns[pk].name);
        let mut flight: Vec<Call<'_, Result<Opened, PgError>>> = Vec::new();
        // Flight 1: (BEGIN), the defaults query, the start of the COPY.
        if first == 0 {
            client.set_open(true);
            flight.push(Box::pin(async {
                client.batch_execute("BEGIN").await.map(|()| Opened::Done)
            }));
            if let Some(keyed) = keyed {
                flight.extend(super::claim_calls(keyed, client).map(|call| {
                    Box::pin(async move { Ok(Opened::Claimed(call.await)) }) as Call<'_, _>
                }));
            }
        }
        if let Some(keys) = &self.keys_statement {
            let params: Vec<&(dyn ToSql + Sync)> = if self.coll.columns[pk].default.is_some() {
                vec![&n]
            } else {
                vec![&n, &table, key_column]
            };
            let integer = self.coll.integer_key();
            flight.push(Box::pin(async move {
                let row = client.query_one(keys, &params).await?;
                Ok(Opened::Keys(if integer {
                    Ids::Int(row.get(0))
                } else {
                    Ids::Text(row.get(0))
                }))
            }));
        }
        let copy_statement = &self.copy_statement;
        flight.push(Box::pin(async move {
            client.copy_in(copy_statement).await.map(Opened::Sink)
        }));
        let mut calls = Calls::new(flight);
        let sent = Instant::now();
        calls.send_all().await;
        let (mut keys, mut sink) = (None, None);
        while let Some(answer) = calls.next().await {
            if first == 0 && keys.is_none() && sink.is_none() {
                // BEGIN is answered at once: its answer takes a round trip.
                self.costs.observe(Cost::RoundTrip, sent.elapsed());
            }
            match answer {
                Ok(Opened::Done | Opened::Claimed(Ok(_))) => {}
                Ok(Opened::Claimed(Err(e))) => return Err(super::claim_failed(&e).into()),
                Ok(Opened::Keys(k)) => keys = Some(k),
                Ok(Opened::Sink(s)) => sink = Some(s),
                // A COPY refused before copy mode leaves tokio-postgres one
                // ReadyForQuery out of step (its CopyFail adds a Sync): the
                // connection cannot be trusted, so the guard closes it.
                Err(e) if copy_refused(&e) && first == 0 => return Err(CopyFailed::Refused(e)),
                Err(e) => return Err(Error::database("starting the COPY", &e).into()),
            }
        }
        drop(calls);
        let mut writer = Box::pin(BinaryCopyInWriter::new(
            sink.expect("the COPY started"),
            &self.types,
        ));
        // The keys are known before any row is sent: from the defaults query, or given.
        match &keys {
            Some(keys) => self.tally.ids.extend(keys),
            None => {
                let at = self.key_at.expect("copy_plan: the features give the key");
                for row in rows {
                    self.tally.ids.push_text(key_text(&row.values[at]));
                }
            }
        }

        // Flight 2: the rows and the end of the COPY.
        let copying = Instant::now();
        let mut written = Ok(());
        let mut batch_ends = batches.iter().scan(0, |end, len| {
            *end += len;
            Some(*end)
        });
        let mut batch_end = batch_ends.next();
        for (i, row) in rows.iter().enumerate() {
            let key = keys.as_ref().map(|k| key_param(k, i, self.key_type));
            let mut params: Vec<&(dyn ToSql + Sync)> = row.values.iter().map(|v| v as _).collect();
            if let Some(key) = &key {
                params.push(key);
            }
            if let Err(e) = writer.as_mut().write(&params).await {
                written = Err(e);
                break;
            }
            // A batch's time is how long the server took to accept its rows.
            if batch_end == Some(i + 1) && i + 1 < rows.len() {
                self.tally.mark_batch();
                batch_end = batch_ends.next();
            }
        }
        let copied = match written {
            Ok(()) => {
                crate::db::round_trips::round_trip();
                writer.as_mut().finish().await
            }
            Err(e) => {
                drop(writer); // aborts the COPY (CopyFail) before ROLLBACK can be sent
                Err(e)
            }
        };
        self.tally.mark_batch();
        self.copied += rows.len();
        // A BEFORE INSERT trigger returning NULL drops a row without an error.
        match copied {
            Ok(count) if count == rows.len() as u64 => {
                self.costs
                    .observe_rows(Cost::CopyRow, rows.len(), copying.elapsed());
                Ok(())
            }
            Ok(_) => {
                self.rollback().await;
                Err(CopyFailed::RowsSkipped)
            }
            Err(error) => {
                self.rollback().await;
                Err(self.copy_failed(error, first, single).into())
            }
        }
    }

    /// Flight 3: COMMIT (with the response under the Idempotency-Key), once
    /// every COPY has said how many rows it wrote.
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

/// The ONE defaults query that draws a key per row, when the features do
/// not give keys (`key_from_default`): the key column's default expression
/// from the catalog (volatile ones are evaluated once per row), or an
/// identity's sequence.
fn keys_sql(coll: &Collection, pk: usize, key_from_default: bool) -> Option<String> {
    let key = &coll.columns[pk];
    let cast = if coll.integer_key() { "int8" } else { "text" };
    let draw = match &key.default {
        Some(expr) => format!("({expr})"),
        None => "nextval(pg_get_serial_sequence($2::text, $3::text))".to_owned(),
    };
    // One row holding an array: far less memory than a row per key.
    key_from_default.then(|| {
        format!(
            "SELECT array_agg(k ORDER BY g) FROM \
             (SELECT g, {draw}::{cast} AS k FROM generate_series(1, $1::int4) AS g) AS keys"
        )
    })
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
