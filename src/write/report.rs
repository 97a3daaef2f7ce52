//! What a write reports: ids in feature order and the fate of every batch.

use serde::Serialize;
use serde_json::Value;

/// What happened to one batch.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Written and committed.
    Committed,
    /// Sent, then undone because the request failed.
    RolledBack,
    /// Never sent because an earlier batch failed.
    NotAttempted,
}

/// A contiguous run of features that were not written without being at fault.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FeatureRun {
    /// First feature index.
    pub first: usize,
    /// Number of features.
    pub count: usize,
}

/// One batch of the write.
#[derive(Debug, Clone, Serialize, PartialEq)]
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

/// The response body of a successful write.
#[derive(Debug, Clone, Serialize)]
pub struct WriteReport {
    /// The new keys, one per feature, in feature order (numbers for integer keys).
    pub ids: Vec<Value>,
    /// Every batch, committed.
    pub batches: Vec<BatchReport>,
}
