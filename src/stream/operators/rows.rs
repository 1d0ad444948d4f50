//! The rows operator: the last stage of a view without an aggregate,
//! which holds the view's rows.
//!
//! State: the view's rows as batches. Inserted rows are appended; a
//! retracted row removes one equal row (rows compare by their arrow-row
//! bytes).
//!
//! Checkpoint: when no input ever takes rows back, rows are appended for
//! good and the checkpoint writes each once (`FileKind::Rows`); otherwise
//! [`Operator::snapshot`] gives all of them, rewritten each epoch.
//!
//! Watermark: nothing; rows stay as long as their input rows do.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::compute;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use crate::error::SluiceError;

pub struct RowsOperator {
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
    rows_in: u64,
}

impl RowsOperator {
    pub fn new(schema: SchemaRef) -> RowsOperator {
        RowsOperator {
            schema,
            rows: Vec::new(),
            rows_in: 0,
        }
    }

    /// The rows held, oldest first (as the query produced them).
    pub fn batches(&self) -> &[RecordBatch] {
        &self.rows
    }

    /// Appends rows without counting them as input (a restore).
    pub fn extend(&mut self, rows: impl IntoIterator<Item = RecordBatch>) {
        self.rows
            .extend(rows.into_iter().filter(|b| b.num_rows() > 0));
    }
}

impl Operator for RowsOperator {
    fn apply(&mut self, _input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        for b in delta.insert.iter().chain(&delta.retract) {
            self.rows_in += b.num_rows() as u64;
        }
        self.extend(delta.insert.iter().cloned());
        remove_rows(&self.schema, &mut self.rows, &delta.retract)?;
        // The view's last stage: readers take its rows, nothing follows.
        Ok(Delta::default())
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        Ok(vec![self.rows.clone()])
    }

    fn restore(&mut self, _part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        self.extend(rows.iter().cloned());
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        let held: u64 = self.rows.iter().map(|b| b.num_rows() as u64).sum();
        OperatorStats {
            kind: "rows",
            description: "the view's rows".into(),
            state_rows: held,
            state_bytes: self
                .rows
                .iter()
                .map(|b| b.get_array_memory_size() as u64)
                .sum(),
            input_rows: self.rows_in,
            output_rows: held,
        }
    }
}

/// Removes one row equal to each row of `gone` from `rows`.
fn remove_rows(
    schema: &SchemaRef,
    rows: &mut Vec<RecordBatch>,
    gone: &[RecordBatch],
) -> Result<(), SluiceError> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let mut pending: HashMap<Vec<u8>, usize> = HashMap::new();
    for b in gone {
        let encoded = converter.convert_columns(b.columns())?;
        for r in encoded.iter() {
            *pending.entry(r.as_ref().to_vec()).or_insert(0) += 1;
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    let mut kept = Vec::with_capacity(rows.len());
    for b in rows.drain(..) {
        let encoded = converter.convert_columns(b.columns())?;
        let keep: arrow::array::BooleanArray = encoded
            .iter()
            .map(|r| match pending.get_mut(r.as_ref()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Some(false)
                }
                _ => Some(true),
            })
            .collect();
        let b = compute::filter_record_batch(&b, &keep)?;
        if b.num_rows() > 0 {
            kept.push(b);
        }
    }
    *rows = kept;
    Ok(())
}
