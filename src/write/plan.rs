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
    /// Distinct column sets, one prepared INSERT each (usually just one).
    pub shapes: Vec<Vec<usize>>,
    /// For each feature, its index into `shapes`.
    pub shape_of: Vec<usize>,
    /// Consecutive feature ranges, in order.
    pub batches: Vec<Range<usize>>,
}

/// Group features by the columns they write and cut them into batches.
pub fn plan(rows: &[FeatureRow], limits: BatchLimits) -> Plan {
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    let mut shape_of = Vec::with_capacity(rows.len());
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let shape = match shapes.iter().position(|s| *s == row.columns) {
            Some(s) => s,
            None => {
                shapes.push(row.columns.clone());
                shapes.len() - 1
            }
        };
        shape_of.push(shape);
        let size = row.wire_size();
        if i > start && (i - start >= limits.max_features.max(1) || bytes + size > limits.max_bytes)
        {
            batches.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < rows.len() {
        batches.push(start..rows.len());
    }
    Plan {
        shapes,
        shape_of,
        batches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feature::value::SqlValue;

    fn row(columns: &[usize], bytes: usize) -> FeatureRow {
        FeatureRow {
            columns: columns.to_vec(),
            values: columns
                .iter()
                .map(|_| SqlValue::Ewkb(vec![0; bytes / columns.len().max(1)]))
                .collect(),
        }
    }

    #[test]
    fn batches_by_count() {
        let rows: Vec<_> = (0..1001).map(|_| row(&[0, 1], 10)).collect();
        let p = plan(
            &rows,
            BatchLimits {
                max_features: 500,
                max_bytes: usize::MAX,
            },
        );
        assert_eq!(p.batches, vec![0..500, 500..1000, 1000..1001]);
        assert_eq!(p.shapes, vec![vec![0, 1]]);
    }

    #[test]
    fn batches_by_bytes_and_oversized_rows_stand_alone() {
        let rows = vec![row(&[0], 60), row(&[0], 60), row(&[0], 500), row(&[0], 10)];
        let p = plan(
            &rows,
            BatchLimits {
                max_features: 100,
                max_bytes: 100,
            },
        );
        assert_eq!(p.batches, vec![0..1, 1..2, 2..3, 3..4]);
    }

    #[test]
    fn shapes_follow_written_columns() {
        let rows = vec![row(&[0, 2], 8), row(&[0], 8), row(&[0, 2], 8)];
        let p = plan(
            &rows,
            BatchLimits {
                max_features: 10,
                max_bytes: 1000,
            },
        );
        assert_eq!(p.shapes, vec![vec![0, 2], vec![0]]);
        assert_eq!(p.shape_of, vec![0, 1, 0]);
        assert!(p.batches.iter().map(|b| b.len()).sum::<usize>() == 3);
    }

    #[test]
    fn empty_request_has_no_batches() {
        let p = plan(
            &[],
            BatchLimits {
                max_features: 10,
                max_bytes: 10,
            },
        );
        assert!(p.batches.is_empty());
    }
}
