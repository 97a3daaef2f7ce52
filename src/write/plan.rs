//! Planning a write: which statement each feature uses, and how features are batched.

use std::ops::Range;

use crate::feature::FeatureRow;

/// Limits that cut a request into batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Features per batch.
    pub max_features: usize,
    /// Parameter bytes per batch (a single larger feature still gets a batch of its own).
    pub max_bytes: usize,
}

/// The statements and batches of one write.
#[derive(Debug, PartialEq)]
pub struct Plan {
    /// Distinct column sets, one prepared INSERT each (usually just one);
    /// each row names its own by index.
    pub shapes: Vec<Vec<usize>>,
    /// Consecutive feature ranges, in order.
    pub batches: Vec<Range<usize>>,
}

/// Cut features into batches; `shapes` are the column sets the rows refer to.
pub fn plan(shapes: Vec<Vec<usize>>, rows: &[FeatureRow], limits: BatchLimits) -> Plan {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let size = row.wire_size();
        if limits.full(i - start, bytes, size) {
            batches.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < rows.len() {
        batches.push(start..rows.len());
    }
    Plan { shapes, batches }
}

impl BatchLimits {
    /// Whether a batch of `count` rows and `bytes` bytes is full before a
    /// row of `size` bytes (a batch always takes its first row).
    fn full(&self, count: usize, bytes: usize, size: usize) -> bool {
        count > 0 && (count >= self.max_features.max(1) || bytes + size > self.max_bytes)
    }
}

/// Rows cut into batches as they come, as [`plan`] cuts them.
pub struct Batcher {
    limits: BatchLimits,
    rows: Vec<FeatureRow>,
    bytes: usize,
}

impl Batcher {
    /// No rows yet.
    pub fn new(limits: BatchLimits) -> Self {
        Batcher {
            limits,
            rows: Vec::new(),
            bytes: 0,
        }
    }

    /// Add a row; the batch before it, if the row starts a new one.
    pub fn push(&mut self, row: FeatureRow) -> Option<Vec<FeatureRow>> {
        let size = row.wire_size();
        let full = self
            .limits
            .full(self.rows.len(), self.bytes, size)
            .then(|| std::mem::take(&mut self.rows));
        if full.is_some() {
            self.bytes = 0;
        }
        self.bytes += size;
        self.rows.push(row);
        full
    }

    /// The last batch, if it has rows.
    pub fn finish(self) -> Option<Vec<FeatureRow>> {
        Some(self.rows).filter(|rows| !rows.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::value::SqlValue;

    fn row(bytes: usize) -> FeatureRow {
        FeatureRow {
            shape: 0,
            values: vec![SqlValue::Ewkb(vec![0; bytes])],
        }
    }

    fn limits(max_features: usize, max_bytes: usize) -> BatchLimits {
        BatchLimits {
            max_features,
            max_bytes,
        }
    }

    #[test]
    fn batches_by_count() {
        let rows: Vec<_> = (0..1001).map(|_| row(10)).collect();
        let p = plan(vec![vec![0]], &rows, limits(500, usize::MAX));
        assert_eq!(p.batches, vec![0..500, 500..1000, 1000..1001]);
    }

    #[test]
    fn batches_by_bytes_and_oversized_rows_stand_alone() {
        let rows = vec![row(60), row(60), row(500), row(10)];
        let p = plan(vec![vec![0]], &rows, limits(100, 100));
        assert_eq!(p.batches, vec![0..1, 1..2, 2..3, 3..4]);
    }

    #[test]
    fn rows_as_they_come_are_cut_as_a_plan_cuts_them() {
        let sizes = [60, 60, 500, 10, 10, 10, 90, 5];
        let rows: Vec<_> = sizes.iter().map(|&s| row(s)).collect();
        let whole = plan(vec![vec![0]], &rows, limits(3, 100)).batches;
        let mut batcher = Batcher::new(limits(3, 100));
        let mut lengths: Vec<usize> = rows
            .iter()
            .filter_map(|r| batcher.push(r.clone()).map(|b| b.len()))
            .collect();
        lengths.extend(batcher.finish().map(|b| b.len()));
        assert_eq!(lengths, whole.iter().map(|r| r.len()).collect::<Vec<_>>());
    }

    #[test]
    fn empty_request_has_no_batches() {
        let p = plan(vec![], &[], limits(10, 10));
        assert!(p.batches.is_empty());
    }
}
