//! The rows operator: the last stage of a view without an aggregate,
//! which holds the view's rows.
//!
//! State: the view's rows as batches. Inserted rows are appended. When the
//! input takes rows back ([`RowsOperator::taking_back`]) the rows are
//! indexed by their arrow-row bytes ([`IndexedRows`]), and a retracted row
//! removes one equal row.
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

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::indexed_rows::IndexedRows;
use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::RankedGroups;
use crate::error::SluiceError;

pub struct RowsOperator {
    schema: SchemaRef,
    rows: Vec<RecordBatch>,
    /// The rows in the view's ORDER BY order, when it has one (then
    /// `rows` stays empty).
    sorted: Option<Box<RankedGroups>>,
    /// The rows, indexed, when the input takes rows back and the view has
    /// no ORDER BY (then `rows` stays empty).
    indexed: Option<Box<IndexedRows>>,
    rows_in: u64,
}

impl RowsOperator {
    pub fn new(schema: SchemaRef) -> RowsOperator {
        RowsOperator {
            schema,
            rows: Vec::new(),
            sorted: None,
            indexed: None,
            rows_in: 0,
        }
    }

    /// Rows of an input that takes rows back.
    pub fn taking_back(schema: SchemaRef) -> Result<RowsOperator, SluiceError> {
        Ok(RowsOperator {
            indexed: Some(Box::new(IndexedRows::new(schema.clone())?)),
            ..RowsOperator::new(schema)
        })
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
    pub fn rows(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        if let Some(indexed) = self.indexed.as_mut() {
            return indexed.batches();
        }
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

    /// Adds rows to the arrangement or the index.
    fn arrange(&mut self, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        if let Some(indexed) = self.indexed.as_mut() {
            for b in rows {
                indexed.add(b)?;
            }
        }
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
        if self.sorted.is_some() || self.indexed.is_some() {
            self.arrange(&delta.insert)?;
            if let Some(indexed) = self.indexed.as_mut() {
                for b in &delta.retract {
                    indexed.take(b)?;
                }
            }
            if let Some(sorted) = self.sorted.as_mut() {
                for b in delta.retract.iter().filter(|b| b.num_rows() > 0) {
                    for k in sorted.keyed(b)? {
                        sorted.take(k, "view's ordered rows")?;
                    }
                }
            }
            return Ok(Delta::default());
        }
        if delta.retract.iter().any(|b| b.num_rows() > 0) {
            return Err(SluiceError::Internal(
                "rows kept for good were taken back".into(),
            ));
        }
        self.extend(delta.insert.iter().cloned());
        // The view's last stage: readers take its rows, nothing follows.
        Ok(Delta::default())
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        Ok(vec![self.rows()?])
    }

    fn restore(&mut self, _part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        match self.sorted.is_some() || self.indexed.is_some() {
            true => self.arrange(rows)?,
            false => self.extend(rows.iter().cloned()),
        }
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        let (held, bytes) = match (&self.sorted, &self.indexed) {
            (Some(sorted), _) => (sorted.held(), sorted.state_bytes()),
            (None, Some(indexed)) => (indexed.len() as u64, indexed.memory_bytes()),
            (None, None) => (
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
