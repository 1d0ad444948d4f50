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
//!
//! A view whose query ends in `ORDER BY` keeps its rows as a sorted
//! arrangement instead ([`RowsOperator::ordered`]): each row by its ORDER
//! BY values' arrow-row bytes (then its own bytes), with its count, so that
//! a row arrives or leaves in its place and a read gets the rows in the
//! view's order without sorting them. Its checkpoint is every row, in
//! order, each epoch.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{self, SortOptions};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::RankedGroups;
use crate::error::SluiceError;

pub struct RowsOperator {
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
    /// The rows in the view's ORDER BY order, when it has one (then
    /// `rows` stays empty).
    sorted: Option<Box<RankedGroups>>,
    rows_in: u64,
}

impl RowsOperator {
    pub fn new(schema: SchemaRef) -> RowsOperator {
        RowsOperator {
            schema,
            rows: Vec::new(),
            sorted: None,
            rows_in: 0,
        }
    }

    /// Rows kept in the order of `order_by` (over the view's columns).
    pub fn ordered(
        schema: SchemaRef,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    ) -> Result<RowsOperator, SluiceError> {
        Ok(RowsOperator {
            sorted: Some(Box::new(RankedGroups::new(
                schema.clone(),
                Vec::new(),
                order_by,
            )?)),
            ..RowsOperator::new(schema)
        })
    }

    /// Whether the rows are kept in the view's order.
    pub fn is_ordered(&self) -> bool {
        self.sorted.is_some()
    }

    /// The rows held, oldest first (as the query produced them); none for
    /// ordered rows (see [`RowsOperator::rows`]).
    pub fn batches(&self) -> &[RecordBatch] {
        &self.rows
    }

    /// Every row held: in the view's order for ordered rows (one batch),
    /// else as [`RowsOperator::batches`].
    pub fn rows(&self) -> Result<Vec<RecordBatch>, SluiceError> {
        let Some(sorted) = &self.sorted else {
            return Ok(self.rows.clone());
        };
        if sorted.held() == 0 {
            return Ok(Vec::new());
        }
        let rows = sorted.iter().flat_map(|(_, ranked)| {
            ranked
                .iter()
                .flat_map(|((_, row), copies)| std::iter::repeat_n(row, *copies as usize))
        });
        let columns = sorted.columns(rows)?;
        Ok(vec![RecordBatch::try_new(self.schema.clone(), columns)?])
    }

    /// Appends rows without counting them as input (a restore).
    pub fn extend(&mut self, rows: impl IntoIterator<Item = RecordBatch>) {
        self.rows
            .extend(rows.into_iter().filter(|b| b.num_rows() > 0));
    }

    /// Adds rows to the arrangement (ordered rows).
    fn arrange(&mut self, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        if let Some(sorted) = self.sorted.as_mut() {
            for b in rows.iter().filter(|b| b.num_rows() > 0) {
                for k in sorted.keyed(b)? {
                    sorted.add(k, 1);
                }
            }
        }
        Ok(())
    }
}

impl Operator for RowsOperator {
    fn apply(&mut self, _input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        for b in delta.insert.iter().chain(&delta.retract) {
            self.rows_in += b.num_rows() as u64;
        }
        if self.sorted.is_some() {
            self.arrange(&delta.insert)?;
            if let Some(sorted) = self.sorted.as_mut() {
                for b in delta.retract.iter().filter(|b| b.num_rows() > 0) {
                    for k in sorted.keyed(b)? {
                        sorted.take(k, "view's ordered rows")?;
                    }
                }
            }
            return Ok(Delta::default());
        }
        self.extend(delta.insert.iter().cloned());
        remove_rows(&self.schema, &mut self.rows, &delta.retract)?;
        // The view's last stage: readers take its rows, nothing follows.
        Ok(Delta::default())
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        Ok(vec![self.rows()?])
    }

    fn restore(&mut self, _part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        match self.sorted.is_some() {
            true => self.arrange(rows)?,
            false => self.extend(rows.iter().cloned()),
        }
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        let (held, bytes) = match &self.sorted {
            Some(sorted) => (sorted.held(), sorted.state_bytes()),
            None => (
                self.rows.iter().map(|b| b.num_rows() as u64).sum(),
                self.rows
                    .iter()
                    .map(|b| b.get_array_memory_size() as u64)
                    .sum(),
            ),
        };
        OperatorStats {
            kind: "rows",
            description: match self.sorted {
                Some(_) => "the view's rows, kept in its ORDER BY order".into(),
                None => "the view's rows".into(),
            },
            state_rows: held,
            state_bytes: bytes,
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
