//! The values of the feature being validated: one slot per column, reused
//! from feature to feature, so that only each row's own values are
//! allocated and finding a column among the given ones costs nothing.

use super::value::SqlValue;
use super::FeatureRow;

/// One slot per column of the collection.
pub struct Cells {
    slots: Vec<Option<SqlValue>>,
    /// Which slots were filled from a property, or named by one and left
    /// to their default (for duplicates).
    from_property: Vec<bool>,
    /// The columns a property named and left to their default.
    defaulted: Vec<usize>,
    /// The columns filled, in the order they were given.
    filled: Vec<usize>,
}

impl Cells {
    /// Empty slots for `columns` columns.
    pub fn new(columns: usize) -> Self {
        Cells {
            slots: vec![None; columns],
            from_property: vec![false; columns],
            defaulted: Vec::new(),
            filled: Vec::with_capacity(columns),
        }
    }

    /// Whether column `ci` has a value (possibly NULL).
    pub fn has(&self, ci: usize) -> bool {
        self.slots[ci].is_some()
    }

    /// Whether a property gave column `ci` already.
    pub fn has_property(&self, ci: usize) -> bool {
        self.from_property[ci]
    }

    /// Give column `ci` a value.
    pub fn set(&mut self, ci: usize, value: SqlValue) {
        if self.slots[ci].replace(value).is_none() {
            self.filled.push(ci);
        }
    }

    /// Give column `ci` a value from a property.
    pub fn set_property(&mut self, ci: usize, value: SqlValue) {
        self.from_property[ci] = true;
        self.set(ci, value);
    }

    /// A property named column `ci` and leaves it to its default: the
    /// column is not written, but named twice it is a duplicate.
    pub fn default_property(&mut self, ci: usize) {
        self.from_property[ci] = true;
        self.defaulted.push(ci);
    }

    /// Empty every slot.
    pub fn clear(&mut self) {
        for ci in self.filled.drain(..) {
            self.slots[ci] = None;
            self.from_property[ci] = false;
        }
        self.forget_defaulted();
    }

    fn forget_defaulted(&mut self) {
        for ci in self.defaulted.drain(..) {
            self.from_property[ci] = false;
        }
    }

    /// The row of the values given, in column order, emptying the slots;
    /// its shape is found in (or added to) `shapes`.
    pub fn take_row(&mut self, shapes: &mut Vec<Vec<usize>>) -> FeatureRow {
        self.filled.sort_unstable();
        let shape = match shapes.iter().position(|s| *s == self.filled) {
            Some(shape) => shape,
            None => {
                shapes.push(self.filled.clone());
                shapes.len() - 1
            }
        };
        let mut values = Vec::with_capacity(self.filled.len());
        for ci in self.filled.drain(..) {
            values.extend(self.slots[ci].take());
            self.from_property[ci] = false;
        }
        self.forget_defaulted();
        FeatureRow { shape, values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_out_in_column_order_and_share_shapes() {
        let mut cells = Cells::new(4);
        let mut shapes = Vec::new();
        cells.set(3, SqlValue::Int4(3));
        cells.set_property(1, SqlValue::Int4(1));
        assert!(cells.has(3) && cells.has(1) && !cells.has(0));
        assert!(cells.has_property(1) && !cells.has_property(3));
        let row = cells.take_row(&mut shapes);
        assert_eq!(row.values, [SqlValue::Int4(1), SqlValue::Int4(3)]);
        assert_eq!(shapes, [vec![1, 3]]);
        // Emptied for the next feature, which writes the same columns.
        assert!(!cells.has(1) && !cells.has_property(1));
        cells.set_property(1, SqlValue::Null);
        cells.set(3, SqlValue::Int4(4));
        assert_eq!(cells.take_row(&mut shapes).shape, 0);
        // A feature with problems leaves nothing behind.
        cells.set_property(2, SqlValue::Null);
        cells.clear();
        cells.set(0, SqlValue::Int4(0));
        let row = cells.take_row(&mut shapes);
        assert_eq!((row.shape, row.values.len()), (1, 1));
        assert_eq!(shapes[1], [0]);
    }
}
