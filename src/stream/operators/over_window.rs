//! The over-window operator: window functions over partitions (`rank()`,
//! `dense_rank()`, `row_number()`, `lag`, `lead`, running `sum() OVER
//! (PARTITION BY ... ORDER BY ...)`, ...), whose rows come out with the
//! functions' values appended.
//!
//! Deltas: the partitions a delta touches are computed again, before and
//! after it, with DataFusion's window functions over the partition's rows
//! in order; rows whose values changed are taken back and sent again, the
//! others stay. Other partitions are not touched. A partition is computed
//! whole, so a change costs the size of its partition (no PARTITION BY is
//! one partition: every change costs the whole input).
//!
//! State: every row of every partition ([`RankedGroups`]: by PARTITION BY
//! values, in ORDER BY order, ties by the whole row, so that `row_number()`
//! and `lag` among peers give one definite answer).
//!
//! Checkpoint: every held row with its count, whole each time.
//!
//! Watermark: nothing; partitions stay while they have rows.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{self, SortOptions};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::{Bytes, OutputRows, RankedGroups};
use crate::error::SluiceError;

pub struct OverWindowOperator {
    groups: RankedGroups,
    functions: Vec<Arc<dyn WindowExpr>>,
    input: SchemaRef,
    output: SchemaRef,
    output_rows: RowConverter,
    description: String,
    rows_in: u64,
    rows_out: u64,
}

impl OverWindowOperator {
    /// `functions` share `partition_by` and `order_by`; `output` is the
    /// input's columns then one per function.
    pub fn new(
        input: SchemaRef,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        functions: Vec<Arc<dyn WindowExpr>>,
        output: SchemaRef,
        description: String,
    ) -> Result<OverWindowOperator, SluiceError> {
        if output.fields().len() != input.fields().len() + functions.len() {
            return Err(SluiceError::Internal(format!(
                "an over-window of {} columns and {} functions cannot give {}",
                input.fields().len(),
                functions.len(),
                output.fields().len()
            )));
        }
        let output_fields = output
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(OverWindowOperator {
            groups: RankedGroups::new(input.clone(), partition_by, order_by)?,
            functions,
            input,
            output_rows: RowConverter::new(output_fields)?,
            output,
            description,
            rows_in: 0,
            rows_out: 0,
        })
    }

    fn rows(&self, rows: &[(Bytes, u64)]) -> Result<RecordBatch, SluiceError> {
        let parser = self.output_rows.parser();
        let columns = self
            .output_rows
            .convert_rows(rows.iter().map(|(r, _)| parser.parse(r)))?;
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// A partition's output rows (as bytes, each copy once), its window
/// functions computed over its rows in order.
fn evaluate(
    groups: &RankedGroups,
    group: &[u8],
    functions: &[Arc<dyn WindowExpr>],
    input: &SchemaRef,
    output: &SchemaRef,
    output_rows: &RowConverter,
) -> Result<OutputRows, SluiceError> {
    let Some(ranked) = groups.group(group) else {
        return Ok(Vec::new());
    };
    let rows = ranked
        .iter()
        .flat_map(|((_, row), copies)| std::iter::repeat_n(row, *copies as usize));
    let columns = groups.columns(rows)?;
    let batch = RecordBatch::try_new(input.clone(), columns)?;
    let mut columns = batch.columns().to_vec();
    for (f, field) in functions
        .iter()
        .zip(&output.fields()[input.fields().len()..])
    {
        let values = f.evaluate(&batch)?;
        columns.push(compute::cast(&values, field.data_type())?);
    }
    let rows = output_rows.convert_columns(&columns)?;
    Ok(rows.iter().map(|r| (Box::from(r.as_ref()), 0)).collect())
}

impl Operator for OverWindowOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input != 0 {
            return Err(SluiceError::Internal(format!(
                "an over-window has no input {input}"
            )));
        }
        let functions = &self.functions;
        let (input_schema, output) = (&self.input, &self.output);
        let output_rows = &self.output_rows;
        let changed = self.groups.apply_delta(
            delta,
            "over-window",
            |groups, g| evaluate(groups, g, functions, input_schema, output, output_rows),
            |_, _| {},
        )?;
        self.rows_in += changed.rows_in;
        self.rows_out += changed.came.len() as u64;
        changed.delta(|rows| self.rows(rows))
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        self.groups.state_parts()
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        self.groups.restore_part(part, rows, "over-window")
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "over-window",
            description: self.description.clone(),
            state_rows: self.groups.held(),
            state_bytes: self.groups.state_bytes(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}
