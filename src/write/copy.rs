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

use super::pipeline::{Call, Calls};
use super::plan::Plan;
use super::report::{Failure, Ids, Tally, WriteReport};
use super::{refused, write_failed, Job};
use crate::catalog::{Collection, ColumnType, ScalarType};
use crate::db::quote_ident;
use crate::db::statement::{cache_room, prepare_named};
use crate::error::Error;
use crate::feature::value::SqlValue;

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
        let pk = self
            .job
            .coll
            .primary_key
            .expect("copy_plan checked the key");
        // Both statements are prepared up front so that each is later sent as
        // a single message, in the order polled; cached within the same
        // per-connection bound as INSERTs, prepared for this request beyond it.
        let keys_sql = self.keys_sql(pk);
        let copy_sql = self.copy_sql();
        let room = cache_room(self.job.client);
        let naming = |n| self.job.naming.within(room, n);
        let mut prepares: Vec<Call<'_, Result<Statement, PgError>>> = vec![Box::pin(
            prepare_named(self.job.client, &copy_sql, naming(0)),
        )];
        if let Some(sql) = &keys_sql {
            prepares.push(Box::pin(prepare_named(self.job.client, sql, naming(1))));
        }
        let mut prepares = Calls::new(prepares);
        prepares.send_all().await;
        let mut statements = Vec::with_capacity(2);
        while let Some(prepared) = prepares.next().await {
            statements.push(prepared.map_err(|e| Error::database("preparing the COPY", &e))?);
        }
        let mut tally = Tally::new(
            &self.job.plan.batches,
            self.job.coll.integer_key(),
            self.job.rows.len(),
        );
        self.job.client.set_open(true);

        // Flight 1: BEGIN, the defaults query, the start of the COPY.
        let n = self.job.rows.len() as i32;
        let (table, key_column) = (
            self.job.coll.qualified_name(),
            &self.job.coll.columns[pk].name,
        );
        let mut first: Vec<Call<'_, Result<Opened, PgError>>> = vec![Box::pin(async {
            self.job
                .client
                .batch_execute("BEGIN")
                .await
                .map(|()| Opened::Done)
        })];
        if let Some(keyed) = self.job.idempotency {
            first.extend(super::claim_calls(keyed, self.job.client).map(|call| {
                Box::pin(async move { Ok(Opened::Claimed(call.await)) }) as Call<'_, _>
            }));
        }
        if let Some(keys) = statements.get(1) {
            let params: Vec<&(dyn ToSql + Sync)> = if self.job.coll.columns[pk].default.is_some() {
                vec![&n]
            } else {
                vec![&n, &table, key_column]
            };
            let integer = self.job.coll.integer_key();
            first.push(Box::pin(async move {
                let row = self.job.client.query_one(keys, &params).await?;
                Ok(Opened::Keys(if integer {
                    Ids::Int(row.get(0))
                } else {
                    Ids::Text(row.get(0))
                }))
            }));
        }
        first.push(Box::pin(async {
            self.job
                .client
                .copy_in(&statements[0])
                .await
                .map(Opened::Sink)
        }));
        let mut calls = Calls::new(first);
        calls.send_all().await;
        let (mut keys, mut sink) = (None, None);
        while let Some(answer) = calls.next().await {
            match answer {
                Ok(Opened::Done | Opened::Claimed(Ok(_))) => {}
                Ok(Opened::Claimed(Err(e))) => return Err(super::claim_failed(&e).into()),
                Ok(Opened::Keys(k)) => keys = Some(k),
                Ok(Opened::Sink(s)) => sink = Some(s),
                // A COPY refused before copy mode leaves tokio-postgres one
                // ReadyForQuery out of step (its CopyFail adds a Sync): the
                // connection cannot be trusted, so the guard closes it.
                Err(e) if copy_refused(&e) => return Err(CopyFailed::Refused(e)),
                Err(e) => return Err(Error::database("starting the COPY", &e).into()),
            }
        }
        let types: Vec<Type> = self
            .copy
            .columns
            .iter()
            .map(|&c| copy_type(&self.job.coll.columns[c].ty))
            .collect();
        let mut writer = Box::pin(BinaryCopyInWriter::new(
            sink.expect("the COPY started"),
            &types,
        ));
        // The keys are known before any row is sent: from the defaults query, or given.
        let ids = match keys.clone() {
            Some(keys) => keys,
            None => {
                let at = self.job.plan.shapes[0]
                    .iter()
                    .position(|&c| c == pk)
                    .expect("copy_plan: the features give the key");
                let mut ids = Ids::new(self.job.coll.integer_key(), self.job.rows.len());
                for row in self.job.rows {
                    ids.push_text(key_text(&row.values[at]));
                }
                ids
            }
        };

        // Flight 2: the rows and the end of the COPY.
        let key_type = match self.job.coll.columns[pk].ty {
            ColumnType::Scalar(t) => t,
            _ => unreachable!("copy_plan checked the key type"),
        };
        let mut written = Ok(());
        for (i, row) in self.job.rows.iter().enumerate() {
            let key = keys.as_ref().map(|k| key_param(k, i, key_type));
            let mut params: Vec<&(dyn ToSql + Sync)> = row.values.iter().map(|v| v as _).collect();
            if let Some(key) = &key {
                params.push(key);
            }
            if let Err(e) = writer.as_mut().write(&params).await {
                written = Err(e);
                break;
            }
            // A batch's time is how long the server took to accept its rows.
            let batch_ends = self.job.plan.batches[tally.db_ms.len()].end == i + 1;
            if batch_ends && i + 1 < self.job.rows.len() {
                tally.mark_batch();
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
        tally.mark_batch();
        // Flight 3: COMMIT (with the response under the Idempotency-Key), only
        // once the COPY has said how many rows it wrote: a BEFORE INSERT
        // trigger returning NULL drops a row without an error.
        match copied {
            Ok(count) if count == self.job.rows.len() as u64 => {}
            Ok(_) => {
                self.rollback().await;
                return Err(CopyFailed::RowsSkipped);
            }
            Err(error) => {
                self.rollback().await;
                return Err(self.copy_failed(error, tally).into());
            }
        }
        let report = WriteReport {
            strategy: super::Strategy::Copy,
            batches: tally.reports(true),
            ids,
        };
        let committed =
            super::store_and_commit(self.job.client, self.job.idempotency, &report).await;
        match committed {
            Ok(()) => {
                // The report as stored under the Idempotency-Key, if any.
                self.job.client.set_open(false);
                Ok(report)
            }
            Err(error) => {
                if error.as_db_error().is_some() {
                    self.job.client.set_open(false);
                }
                Err(super::commit_failed(self.job.coll, &error, &tally).into())
            }
        }
    }

    /// The error for a COPY that failed: at the feature on the line
    /// PostgreSQL names, or for the whole request when it names none.
    fn copy_failed(&self, error: PgError, mut tally: Tally<'_>) -> Error {
        // Some checks (foreign keys) run after PostgreSQL has dropped the
        // "line N" context: then no feature can be named.
        let Some(feature) = failed_row(&error).filter(|&k| k < self.job.rows.len()) else {
            return refused(self.job.coll, &error, tally.reports(false));
        };
        tally.failure = Some(Failure {
            feature,
            error: Some(error),
        });
        write_failed(self.job.coll, self.job.single, &tally)
    }

    /// `COPY … (columns) FROM STDIN (FORMAT binary)`.
    fn copy_sql(&self) -> String {
        let names: Vec<String> = self
            .copy
            .columns
            .iter()
            .map(|&c| quote_ident(&self.job.coll.columns[c].name))
            .collect();
        format!(
            "COPY {} ({}) FROM STDIN (FORMAT binary)",
            self.job.coll.qualified_name(),
            names.join(", ")
        )
    }

    /// The ONE defaults query that draws a key per row, when the features do
    /// not give keys: the key column's default expression from the catalog
    /// (volatile ones are evaluated once per row), or an identity's sequence.
    fn keys_sql(&self, pk: usize) -> Option<String> {
        let key = &self.job.coll.columns[pk];
        let cast = if self.job.coll.integer_key() {
            "int8"
        } else {
            "text"
        };
        let draw = match &key.default {
            Some(expr) => format!("({expr})"),
            None => "nextval(pg_get_serial_sequence($2::text, $3::text))".to_owned(),
        };
        // One row holding an array: far less memory than a row per key.
        self.copy.key_from_default.then(|| {
            format!(
                "SELECT array_agg(k ORDER BY g) FROM \
                 (SELECT g, {draw}::{cast} AS k FROM generate_series(1, $1::int4) AS g) AS keys"
            )
        })
    }

    async fn rollback(&self) {
        crate::db::round_trips::round_trip();
        if self.job.client.batch_execute("ROLLBACK").await.is_ok() {
            self.job.client.set_open(false);
        }
    }
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
