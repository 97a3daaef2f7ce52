//! What a write reports: ids in feature order and the fate of every batch.

use std::ops::Range;
use std::time::Instant;

use serde::Serialize;
use tokio_postgres::error::SqlState;
use utoipa::ToSchema;

/// What happened to one batch.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Written and committed.
    Committed,
    /// Sent, then undone because the request failed.
    RolledBack,
    /// Never sent because an earlier batch failed.
    NotAttempted,
    /// The connection was lost before the answer: whether it was committed is unknown.
    Unknown,
}

impl BatchStatus {
    /// The name reports and metrics use.
    pub fn name(self) -> &'static str {
        match self {
            BatchStatus::Committed => "committed",
            BatchStatus::RolledBack => "rolled_back",
            BatchStatus::NotAttempted => "not_attempted",
            BatchStatus::Unknown => "unknown",
        }
    }
}

/// A contiguous run of features that were not written without being at fault.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, ToSchema)]
pub struct FeatureRun {
    /// First feature index.
    pub first: usize,
    /// Number of features.
    pub count: usize,
}

/// One batch of the write.
#[derive(Debug, Clone, Serialize, PartialEq, ToSchema)]
pub struct BatchReport {
    /// Batch number, from 0.
    pub index: usize,
    /// Index of its first feature.
    pub first_feature: usize,
    /// Number of features.
    pub count: usize,
    /// Its fate.
    pub status: BatchStatus,
    /// Milliseconds spent waiting on the database for this batch.
    pub db_ms: f64,
    /// The feature whose statement failed, when it is in this batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_feature: Option<usize>,
    /// Features after the failed one in this batch: not executed, not at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_written: Option<FeatureRun>,
}

/// The new keys in feature order: JSON numbers for integer keys, strings otherwise.
/// Kept unboxed (8 bytes per integer key) since a request may hold a million.
#[derive(Debug, Clone, PartialEq)]
pub enum Ids {
    /// Integer keys.
    Int(Vec<i64>),
    /// Keys of any other type, as PostgreSQL prints them.
    Text(Vec<String>),
}

impl Ids {
    /// No keys yet, with room for `capacity`.
    pub fn new(integer: bool, capacity: usize) -> Self {
        if integer {
            Ids::Int(Vec::with_capacity(capacity))
        } else {
            Ids::Text(Vec::with_capacity(capacity))
        }
    }

    /// Append a key given as text (integer text for integer keys).
    pub fn push_text(&mut self, key: String) {
        match self {
            Ids::Int(v) => v.push(key.parse().expect("integer keys print as integers")),
            Ids::Text(v) => v.push(key),
        }
    }

    /// Append `more` keys of the same kind.
    pub fn extend(&mut self, more: &Ids) {
        match (self, more) {
            (Ids::Int(v), Ids::Int(more)) => v.extend_from_slice(more),
            (Ids::Text(v), Ids::Text(more)) => v.extend_from_slice(more),
            _ => unreachable!("the keys of one table are of one kind"),
        }
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        match self {
            Ids::Int(v) => v.len(),
            Ids::Text(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key of feature `i`, as text (for URLs).
    pub fn text(&self, i: usize) -> Option<String> {
        match self {
            Ids::Int(v) => v.get(i).map(i64::to_string),
            Ids::Text(v) => v.get(i).cloned(),
        }
    }
}

impl Serialize for Ids {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Ids::Int(v) => v.serialize(s),
            Ids::Text(v) => v.serialize(s),
        }
    }
}

/// The response body of a successful write.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WriteReport {
    /// How the features were written.
    pub strategy: super::Strategy,
    /// The new keys, one per feature, in feature order: numbers for integer keys, else strings.
    #[schema(value_type = Vec<Object>)]
    pub ids: Ids,
    /// Every batch, committed.
    pub batches: Vec<BatchReport>,
}

/// The statement that failed first, and why.
pub struct Failure {
    /// Index of the feature whose statement failed.
    pub feature: usize,
    /// The database's error; `None` when no row was inserted and no error
    /// raised (a BEFORE INSERT trigger returned NULL).
    pub error: Option<tokio_postgres::Error>,
}

/// Answers of a write as they arrive: ids, batch timings, the first real failure.
pub struct Tally {
    batches: Vec<Range<usize>>,
    /// Keys so far, in feature order.
    pub ids: Ids,
    /// Milliseconds per batch answered so far.
    pub db_ms: Vec<f64>,
    /// The first statement that really failed.
    pub failure: Option<Failure>,
    mark: Instant,
}

impl Tally {
    /// Start counting now.
    pub fn new(batches: &[Range<usize>], integer_key: bool, expected: usize) -> Self {
        Tally {
            batches: batches.to_vec(),
            ids: Ids::new(integer_key, expected),
            db_ms: Vec::with_capacity(batches.len()),
            failure: None,
            mark: Instant::now(),
        }
    }

    /// Record the answer for `feature`: its key as text, or an error.
    ///
    /// After a failed statement every later one in the transaction fails with
    /// 25P02 ("current transaction is aborted"); those are "not written", not
    /// errors of their own, unless no real error came first.
    pub fn record(
        &mut self,
        feature: usize,
        answer: Result<Option<String>, tokio_postgres::Error>,
    ) {
        let aborted = |e: &Option<tokio_postgres::Error>| {
            e.as_ref().and_then(tokio_postgres::Error::code)
                == Some(&SqlState::IN_FAILED_SQL_TRANSACTION)
        };
        let error = match answer {
            Ok(Some(key)) => {
                self.ids.push_text(key);
                None
            }
            // No row and no error: a BEFORE INSERT trigger skipped it.
            Ok(None) => Some(None),
            Err(e) => Some(Some(e)),
        };
        if let Some(error) = error {
            if self
                .failure
                .as_ref()
                .is_none_or(|f| aborted(&f.error) && !aborted(&error))
            {
                self.failure = Some(Failure { feature, error });
            }
        }
        // A batch's time is taken at its last answer, if the server executed it.
        let Some(range) = self.batches.get(self.db_ms.len()) else {
            return;
        };
        let executed = self
            .failure
            .as_ref()
            .is_none_or(|f| f.feature >= range.start);
        if executed && range.end == feature + 1 {
            self.mark_batch();
        }
    }

    /// A batch more, after the others (a body read as it arrives).
    pub fn add_batch(&mut self, batch: Range<usize>) {
        self.batches.push(batch);
    }

    /// Close the current batch's timing.
    pub fn mark_batch(&mut self) {
        self.mark_batch_at(Instant::now());
    }

    /// Close the current batch's timing as of `at`.
    pub fn mark_batch_at(&mut self, at: Instant) {
        let took = at.saturating_duration_since(self.mark).as_secs_f64() * 1000.0;
        self.db_ms.push((took * 1000.0).round() / 1000.0);
        self.mark = at;
    }

    /// Add time since the last mark (COMMIT) to the last batch.
    pub fn add_to_last(&mut self) {
        let extra = millis(self.mark);
        if let Some(last) = self.db_ms.last_mut() {
            *last = ((*last + extra) * 1000.0).round() / 1000.0;
        }
    }

    /// Batch reports: committed ones, or rolled back up to the failure and not attempted after it.
    pub fn reports(&self, committed: bool) -> Vec<BatchReport> {
        let failed_batch = self
            .failure
            .as_ref()
            .and_then(|f| self.batches.iter().position(|b| b.contains(&f.feature)));
        self.batches
            .iter()
            .enumerate()
            .map(|(b, range)| {
                let failed_here = self.failure.as_ref().filter(|_| failed_batch == Some(b));
                let after = failed_here
                    .map(|f| f.feature + 1..range.end)
                    .filter(|r| !r.is_empty());
                let status = match failed_batch {
                    _ if committed => BatchStatus::Committed,
                    Some(fb) if b > fb => BatchStatus::NotAttempted,
                    _ => BatchStatus::RolledBack,
                };
                BatchReport {
                    index: b,
                    first_feature: range.start,
                    count: range.len(),
                    status,
                    db_ms: if status == BatchStatus::NotAttempted {
                        0.0
                    } else {
                        self.db_ms.get(b).copied().unwrap_or(0.0)
                    },
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

/// Milliseconds since `started`, to the microsecond.
fn millis(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e6).round() / 1000.0
}
