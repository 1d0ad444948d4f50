//! The change log of a view whose rows change in place (an aggregate that
//! emits on update): at each checkpoint epoch, the difference between the
//! view's rows then and at the previous epoch, as `delete` and `insert`
//! rows. Subscriptions to the view read it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};

use crate::error::SluiceError;

/// Name of the column that says what a change does.
pub const OP_COLUMN: &str = "_op";

/// The view's columns plus `_op`.
pub fn change_schema(view: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = view.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(OP_COLUMN, DataType::Utf8, false));
    Arc::new(Schema::new(fields))
}

/// The rows of the last epoch (as a multiset) and how to tell the next
/// epoch's rows from them.
pub struct ChangeTracker {
    converter: RowConverter,
    schema: SchemaRef,
    base: HashMap<Box<[u8]>, usize>,
}

impl ChangeTracker {
    /// Starts from `rows` (empty: the first changes insert every row).
    pub fn new(schema: &SchemaRef, rows: &[RecordBatch]) -> Result<ChangeTracker, SluiceError> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let mut t = ChangeTracker {
            converter: RowConverter::new(fields)?,
            schema: change_schema(schema),
            base: HashMap::new(),
        };
        t.base = t.count(rows)?;
        Ok(t)
    }

    fn count(&self, rows: &[RecordBatch]) -> Result<HashMap<Box<[u8]>, usize>, SluiceError> {
        let mut counts = HashMap::new();
        for b in rows {
            let converted = self.converter.convert_columns(b.columns())?;
            for row in converted.iter() {
                *counts.entry(Box::from(row.as_ref())).or_insert(0) += 1;
            }
        }
        Ok(counts)
    }

    /// The changes from the previous rows to `rows` (deletes, then inserts,
    /// each in row order), which become the base; None when nothing changed.
    pub fn diff(&mut self, rows: &[RecordBatch]) -> Result<Option<RecordBatch>, SluiceError> {
        let next = self.count(rows)?;
        let mut deletes: BTreeMap<&[u8], usize> = BTreeMap::new();
        let mut inserts: BTreeMap<&[u8], usize> = BTreeMap::new();
        for (k, &was) in &self.base {
            let now = next.get(k).copied().unwrap_or(0);
            if was > now {
                deletes.insert(k, was - now);
            }
        }
        for (k, &now) in &next {
            let was = self.base.get(k).copied().unwrap_or(0);
            if now > was {
                inserts.insert(k, now - was);
            }
        }
        let mut ops: Vec<&str> = Vec::new();
        let mut encoded: Vec<&[u8]> = Vec::new();
        for (op, set) in [("delete", &deletes), ("insert", &inserts)] {
            for (k, &n) in set {
                for _ in 0..n {
                    ops.push(op);
                    encoded.push(k);
                }
            }
        }
        let out = if ops.is_empty() {
            None
        } else {
            let parser = self.converter.parser();
            let mut columns: Vec<ArrayRef> = self
                .converter
                .convert_rows(encoded.iter().map(|b| parser.parse(b)))?;
            columns.push(Arc::new(StringArray::from(ops)));
            Some(RecordBatch::try_new(self.schema.clone(), columns)?)
        };
        self.base = next;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn rows(pairs: &[(&str, i64)]) -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            (
                "tenant",
                Arc::new(StringArray::from_iter_values(pairs.iter().map(|p| p.0))) as ArrayRef,
            ),
            (
                "total",
                Arc::new(Int64Array::from_iter_values(pairs.iter().map(|p| p.1))) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn show(b: &RecordBatch) -> Vec<String> {
        let t = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let op = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        (0..b.num_rows())
            .map(|i| format!("{} {} {}", op.value(i), t.value(i), n.value(i)))
            .collect()
    }

    #[test]
    fn updates_become_a_delete_and_an_insert() {
        let first = rows(&[("a", 1), ("b", 2)]);
        let mut t = ChangeTracker::new(&first.schema(), &[]).unwrap();
        let c = t.diff(std::slice::from_ref(&first)).unwrap().unwrap();
        assert_eq!(show(&c), ["insert a 1", "insert b 2"]);
        assert!(t.diff(&[first]).unwrap().is_none(), "no change, no rows");
        let c = t.diff(&[rows(&[("a", 5), ("c", 1)])]).unwrap().unwrap();
        assert_eq!(
            show(&c),
            ["delete a 1", "delete b 2", "insert a 5", "insert c 1"]
        );
    }
}
