//! What a session reports: each operation's fate in order, and each batch's.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_postgres::Error;
use utoipa::ToSchema;

use super::{Done, Mode, Op, Operation, Step};
use crate::error::{FieldError, Refusal, MAX_LISTED_ERRORS};
use crate::write::dberror::feature_error;
use crate::write::report::{BatchStatus, Ids};

/// About what one operation of a session costs in memory until its
/// report is sent, its statement's values aside: the operation, its result
/// and its part of the report (measured: 1,000,000 empty features in skip
/// mode, each refused, took about 900 MiB).
pub const BYTES_PER_OPERATION: usize = 1024;

/// About what one operation's result costs in memory until the report is
/// sent (a session read as it arrives keeps its results, not its operations).
pub const BYTES_PER_RESULT: usize = 256;

/// What happened to one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpStatus {
    /// Written and committed.
    Written,
    /// Refused by the database; see `error`.
    Failed,
    /// Done, then undone because its transaction did not commit.
    RolledBack,
    /// Not carried out because an earlier operation of its transaction failed.
    NotWritten,
    /// The connection was lost before the answer: whether it was committed is unknown.
    Unknown,
}

/// One operation's result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OpResult {
    /// What it did.
    pub op: Op,
    /// Its collection.
    #[schema(value_type = String)]
    pub collection: Arc<str>,
    /// Its fate.
    pub status: OpStatus,
    /// Inserts: the new keys in feature order (numbers for integer keys);
    /// updates and deletes by filter: the keys of the features they touched.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub ids: Option<Ids>,
    /// Replaces and updates: the feature's new ETag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Deletes: how many features were deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<usize>,
    /// Updates by filter: how many features were updated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated: Option<usize>,
    // Boxed: most operations do not fail, and a session read as it arrives
    // holds one result per feature.
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<FieldError>)]
    pub error: Option<Box<FieldError>>,
}

/// One batch of operations.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionBatch {
    /// Batch number, from 0.
    pub index: usize,
    /// Its first operation.
    pub first_operation: usize,
    /// How many operations.
    pub count: usize,
    /// Committed, rolled back, or not attempted.
    pub status: BatchStatus,
    /// Milliseconds from sending the session until this batch's last answer.
    pub db_ms: f64,
}

/// The response of `POST /transactions`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionReport {
    /// Why the first failure failed, if one did (not serialized).
    #[serde(skip)]
    pub failure: Option<Refusal>,
    /// The commit mode used.
    pub mode: Mode,
    /// Operations that were written (committed).
    pub written: usize,
    /// Operations that failed or were not written.
    pub not_written: usize,
    /// One result per operation, in request order.
    pub results: Vec<OpResult>,
    /// Batches: units of the report (atomic, skip) or of commit (batch).
    pub batches: Vec<SessionBatch>,
    /// Problems of no single operation, such as a deferred constraint at COMMIT.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// How many operations failed with an error of their own, listed or not:
    /// `results` gives the first 100 their `error`, as problem bodies do.
    #[serde(skip_serializing_if = "is_zero")]
    pub total_errors: usize,
    /// The errors past the first 100, by code: a session of a million
    /// refused features answers with a report of its size, not ten times it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted_errors: Vec<UnlistedErrors>,
}

/// The errors of one code that `results` does not list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnlistedErrors {
    /// Their code, e.g. `missing_geometry`.
    pub code: String,
    /// How many operations failed with it.
    pub count: usize,
    /// The first such operation.
    pub first_operation: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SessionReport {
    /// Whether the connection was lost after a COMMIT went out: some batch
    /// may or may not have been written.
    pub fn lost_after_commit(&self) -> bool {
        self.batches
            .iter()
            .any(|b| b.status == BatchStatus::Unknown)
    }
}

/// Results as they come in.
#[derive(Clone)]
pub struct Outcome {
    failure: Option<Refusal>,
    results: Vec<OpResult>,
    batches: Vec<SessionBatch>,
    /// The current transaction has failed: later statements are refused, COMMIT rolls back.
    aborted: bool,
    /// An answer did not come from the database (the connection failed).
    lost: bool,
    /// Problems of no single operation.
    errors: Vec<FieldError>,
    /// Operations that failed with an error of their own.
    total_errors: usize,
    /// Their errors past the first [`MAX_LISTED_ERRORS`], by code.
    unlisted: Vec<UnlistedErrors>,
    /// The caller may read every collection of the session: told the DETAIL
    /// of an error no operation can be blamed for.
    may_read_all: bool,
}

impl Outcome {
    /// Nothing written yet.
    pub fn new(operations: &[Operation], batches: &[Range<usize>]) -> Self {
        let mut outcome = Outcome {
            failure: None,
            results: Vec::with_capacity(operations.len()),
            batches: Vec::with_capacity(batches.len()),
            aborted: false,
            lost: false,
            errors: Vec::new(),
            total_errors: 0,
            unlisted: Vec::new(),
            may_read_all: true,
        };
        outcome.grow(operations, batches);
        outcome
    }

    /// Operations and batches that came after those known so far (a
    /// session read as it arrives), nothing written yet.
    pub fn grow(&mut self, operations: &[Operation], batches: &[Range<usize>]) {
        self.results.extend(operations.iter().map(|o| OpResult {
            op: o.op,
            collection: o.collection.clone(),
            status: OpStatus::NotWritten,
            ids: None,
            etag: None,
            deleted: None,
            updated: None,
            error: None,
        }));
        let first = self.batches.len();
        self.batches
            .extend(batches.iter().enumerate().map(|(b, ops)| SessionBatch {
                index: first + b,
                first_operation: ops.start,
                count: ops.len(),
                status: BatchStatus::NotAttempted,
                db_ms: 0.0,
            }));
        self.may_read_all &= operations.iter().all(|o| o.may_read);
    }

    /// How many operations are known.
    pub fn operations(&self) -> usize {
        self.results.len()
    }

    /// How many batches are known.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// The connection was lost after a flight that ended in COMMIT went out,
    /// before its answer: every operation of `ops` (batches `batches`) that
    /// had not failed may or may not have been committed.
    pub fn lost_with_commit(&mut self, ops: Range<usize>, batches: Range<usize>) {
        // The connection was lost: the report's unknown batches say the rest.
        self.failure.get_or_insert(Refusal::Busy);
        for r in &mut self.results[ops] {
            if r.status != OpStatus::Failed {
                r.status = OpStatus::Unknown;
                r.ids = None;
                r.etag = None;
                r.deleted = None;
            }
        }
        for b in &mut self.batches[batches] {
            b.status = BatchStatus::Unknown;
        }
    }

    /// Read operation `k`'s answers (one per statement); false if it failed.
    pub fn record(
        &mut self,
        k: usize,
        op: &Operation,
        answers: &mut impl Iterator<Item = Result<Done, Error>>,
        steps: &[Step],
    ) -> bool {
        if let Some(e) = &op.rejected {
            // Invalid, set aside before any database work (skip mode).
            self.failure.get_or_insert(Refusal::Unfit);
            self.blame(k, e);
            return true;
        }
        let was_aborted = self.aborted;
        // Compact (a number or a string a key): a session read as it
        // arrives holds one result per feature.
        let mut ids: Option<Ids> = None;
        // An edit by filter: how many features it touched.
        let mut touched = None;
        let mut failure = None;
        let result = &mut self.results[k];
        for (i, s) in op.steps.clone().enumerate() {
            match answers.next() {
                Some(Ok(Done::Key(key))) => ids
                    .get_or_insert_with(|| Ids::new(steps[s].coll.integer_key(), op.steps.len()))
                    .push_text(key),
                Some(Ok(Done::Etag(etag))) => result.etag = Some(etag),
                Some(Ok(Done::Touched(keys))) => {
                    let ids = ids
                        .get_or_insert_with(|| Ids::new(steps[s].coll.integer_key(), keys.len()));
                    keys.into_iter().for_each(|key| ids.push_text(key));
                    touched = Some(ids.len());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) if failure.is_none() && !was_aborted => failure = Some((i, s, e)),
                Some(Err(_)) | None => {}
            }
        }
        if was_aborted {
            result.status = OpStatus::NotWritten;
            result.etag = None;
            return false;
        }
        if let Some((i, s, e)) = failure {
            let at = if op.indexed {
                format!("{}/{i}", op.at)
            } else {
                op.at.clone()
            };
            self.lost |= e.as_db_error().is_none();
            let feature = if op.indexed { Some(i) } else { op.feature };
            let (refusal, mut field) = feature_error(Some(&steps[s].coll), feature, &at, &e);
            self.failure.get_or_insert(refusal);
            field.operation = Some(k);
            result.etag = None;
            self.blame(k, &field.for_reader(op.may_read));
            self.aborted = true;
            return false;
        }
        result.status = OpStatus::Written;
        match (op.op, touched) {
            (Op::Insert, _) => result.ids = Some(ids.unwrap_or_else(|| Ids::new(false, 0))),
            (Op::Delete, None) => result.deleted = Some(op.steps.len()),
            (Op::Delete, Some(n)) => (result.deleted, result.ids) = (Some(n), ids),
            (Op::Update, Some(n)) => (result.updated, result.ids) = (Some(n), ids),
            _ => {}
        }
        true
    }

    /// Operation `k` failed with `error`: listed in its result while fewer
    /// than [`MAX_LISTED_ERRORS`] are, counted by code after.
    fn blame(&mut self, k: usize, error: &FieldError) {
        self.results[k].status = OpStatus::Failed;
        self.total_errors += 1;
        if self.total_errors <= MAX_LISTED_ERRORS {
            self.results[k].error = Some(Box::new(error.clone()));
            return;
        }
        match self.unlisted.iter().position(|u| u.code == error.code) {
            Some(at) => self.unlisted[at].count += 1,
            // Codes are few; should a database invent more, the total counts them.
            None if self.unlisted.len() < MAX_LISTED_ERRORS => self.unlisted.push(UnlistedErrors {
                code: error.code.clone(),
                count: 1,
                first_operation: k,
            }),
            None => {}
        }
    }

    /// Operation `k` failed and was rolled back to its savepoint: the
    /// transaction goes on.
    pub fn skipped(&mut self) {
        self.aborted = false;
    }

    /// Batch `b` has had its last answer.
    pub fn batch_time(&mut self, b: usize, elapsed: Duration) {
        self.batches[b].db_ms = (elapsed.as_secs_f64() * 1e5).round() / 100.0;
    }

    /// The transaction of operations `ops` (batches `batches`) has ended with `commit`.
    pub fn finish_transaction(
        &mut self,
        ops: Range<usize>,
        commit: Option<Result<Done, Error>>,
        batches: Range<usize>,
    ) {
        let committed = !self.aborted && matches!(commit, Some(Ok(_)));
        let unknown = self.lost || matches!(&commit, Some(Err(e)) if e.as_db_error().is_none());
        if let (false, Some(Err(e))) = (self.aborted, &commit) {
            self.failure.get_or_insert(Refusal::of_error(e));
            // A deferred constraint fails at COMMIT, with no operation to blame.
            let (_, field) = feature_error(None, None, "", e);
            self.errors.push(field.for_reader(self.may_read_all));
        }
        for r in &mut self.results[ops] {
            if unknown && r.status != OpStatus::NotWritten {
                r.status = OpStatus::Unknown;
            } else if r.status == OpStatus::Written && !committed {
                r.status = OpStatus::RolledBack;
                r.ids = None;
                r.etag = None;
                r.deleted = None;
            }
        }
        for b in &mut self.batches[batches] {
            b.status = match (unknown, committed) {
                (true, _) => BatchStatus::Unknown,
                (false, true) => BatchStatus::Committed,
                (false, false) => BatchStatus::RolledBack,
            };
        }
        self.aborted = false;
    }

    /// Whether the current transaction has failed.
    pub fn failed(&self) -> bool {
        self.aborted
    }

    /// The report.
    pub fn report(self, mode: Mode) -> SessionReport {
        let written = self
            .results
            .iter()
            .filter(|r| r.status == OpStatus::Written)
            .count();
        SessionReport {
            failure: self.failure,
            errors: self.errors,
            mode,
            written,
            not_written: self.results.len() - written,
            results: self.results,
            batches: self.batches,
            total_errors: self.total_errors,
            unlisted_errors: self.unlisted,
        }
    }
}
