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
    held: HeldRows,
    rows_in: u64,
}

/// How the rows are held.
enum HeldRows {
    /// Appended for good, as the query produced them.
    Appended(Vec<RecordBatch>),
    /// In the view's ORDER BY order.
    Sorted(Box<RankedGroups>),
    /// Indexed by their bytes: the input takes rows back.
    Indexed(Box<IndexedRows>),
}

impl RowsOperator {
    pub fn new(schema: SchemaRef) -> RowsOperator {
        RowsOperator {
            schema,
            held: HeldRows::Appended(Vec::new()),
            rows_in: 0,
        }
    }

    /// Rows of an input that takes rows back.
    pub fn taking_back(schema: SchemaRef) -> Result<RowsOperator, SluiceError> {
        Ok(RowsOperator {
            held: HeldRows::Indexed(Box::new(IndexedRows::new(schema.clone())?)),
            ..RowsOperator::new(schema)
        })
    }

    /// Rows kept in the order of `order_by` (over the view's columns).
    pub fn ordered(
        schema: SchemaRef,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    ) -> Result<RowsOperator, SluiceError> {
        let sorted = RankedGroups::new(schema.clone(), Vec::new(), order_by)?;
        Ok(RowsOperator {
            held: HeldRows::Sorted(Box::new(sorted)),
            ..RowsOperator::new(schema)
        })
    }

    /// Whether the rows are kept in the view's order.
    pub fn is_ordered(&self) -> bool {
        matches!(self.held, HeldRows::Sorted(_))
    }

    /// The rows appended for good, oldest first (as the query produced
    /// them); none for sorted or indexed rows (see [`RowsOperator::rows`]).
    pub fn batches(&self) -> &[RecordBatch] {
        match &self.held {
            HeldRows::Appended(rows) => rows,
            _ => &[],
        }
    }

    /// Every row held: in the view's order for sorted rows (one batch).
    pub fn rows(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        match &mut self.held {
            HeldRows::Appended(rows) => Ok(rows.clone()),
            HeldRows::Indexed(indexed) => indexed.batches(),
            HeldRows::Sorted(sorted) if sorted.held() == 0 => Ok(Vec::new()),
            HeldRows::Sorted(sorted) => {
                let rows = sorted.iter().flat_map(|(_, ranked)| {
                    ranked
                        .iter()
                        .flat_map(|((_, row), copies)| std::iter::repeat_n(row, *copies as usize))
                });
                let columns = sorted.columns(rows)?;
                Ok(vec![RecordBatch::try_new(self.schema.clone(), columns)?])
            }
        }
    }

    /// Appends rows appended for good, without counting them as input (a
    /// restore).
    pub fn extend(&mut self, rows: impl IntoIterator<Item = RecordBatch>) {
        if let HeldRows::Appended(held) = &mut self.held {
            held.extend(rows.into_iter().filter(|b| b.num_rows() > 0));
        }
    }

    /// Adds rows (without counting them as input).
    fn add(&mut self, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        let rows = rows.iter().filter(|b| b.num_rows() > 0);
        match &mut self.held {
            HeldRows::Appended(held) => held.extend(rows.cloned()),
            HeldRows::Indexed(indexed) => {
                for b in rows {
                    indexed.add(b)?;
                }
            }
            HeldRows::Sorted(sorted) => {
                for b in rows {
                    for k in sorted.keyed(b)? {
                        sorted.add(k, 1);
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes rows back.
    fn take(&mut self, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        let mut rows = rows.iter().filter(|b| b.num_rows() > 0).peekable();
        match &mut self.held {
            HeldRows::Appended(_) if rows.peek().is_some() => Err(SluiceError::Internal(
                "rows kept for good were taken back".into(),
            )),
            HeldRows::Appended(_) => Ok(()),
            HeldRows::Indexed(indexed) => rows.try_for_each(|b| indexed.take(b)),
            HeldRows::Sorted(sorted) => {
                for b in rows {
                    for k in sorted.keyed(b)? {
                        sorted.take(k, "view's ordered rows")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl Operator for RowsOperator {
    fn apply(&mut self, _input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        for b in delta.insert.iter().chain(&delta.retract) {
            self.rows_in += b.num_rows() as u64;
        }
        // Inserts first: a delta may take back a row it also inserts.
        self.add(&delta.insert)?;
        self.take(&delta.retract)?;
        // The view's last stage: readers take its rows, nothing follows.
        Ok(Delta::default())
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        Ok(vec![self.rows()?])
    }

    fn restore(&mut self, _part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        self.add(rows)
    }

    fn stats(&self) -> OperatorStats {
        let (held, bytes) = match &self.held {
            HeldRows::Sorted(sorted) => (sorted.held(), sorted.state_bytes()),
            HeldRows::Indexed(indexed) => (indexed.len() as u64, indexed.memory_bytes()),
            HeldRows::Appended(rows) => (
                rows.iter().map(|b| b.num_rows() as u64).sum(),
                rows.iter().map(|b| b.get_array_memory_size() as u64).sum(),
            ),
        };
        OperatorStats {
            kind: "rows",
            description: match self.held {
                HeldRows::Sorted(_) => "the view's rows, kept in its ORDER BY order".into(),
                _ => "the view's rows".into(),
            },
            state_rows: held,
            state_bytes: bytes,
            input_rows: self.rows_in,
            output_rows: held,
        }
    }
}
