//! The dynamic filter: rows of one input compared with the one value of
//! another (`WHERE amount > (SELECT avg(credit) FROM accounts)`, `HAVING
//! count(*) >= (SELECT ...)`), whose value changes as its tables do.
//!
//! Deltas: a row of the filtered input (input 0) passes or not by the
//! current value and is sent on or taken back accordingly. A change of the
//! value (input 1, a one-row aggregate: its old row taken back, its new row
//! inserted) sends on only the rows whose compared value lies between the
//! old and the new threshold: those that crossed it are taken back or sent.
//! A threshold that becomes or stops being NULL (no row, or a NULL value),
//! and `<>`, look at every row.
//!
//! State: every row of the filtered input, ordered by its compared value
//! ([`RankedGroups`] with one group), and the current threshold.
//!
//! Checkpoint: the rows with their counts (part 0) and the threshold, a
//! batch of zero or one row (part 1).
//!
//! Watermark: nothing; rows stay while their input has them.

use std::ops::Bound;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, Scalar};
use arrow::compute::{self, kernels::cmp, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator as Op;
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::{Bytes, RankedGroups};
use crate::error::SluiceError;

pub struct DynamicFilterOperator {
    rows: RankedGroups,
    input: SchemaRef,
    /// The compared value of a filtered row.
    value: Arc<dyn PhysicalExpr>,
    /// `value op threshold` passes.
    op: Op,
    /// The threshold, over the other input's row.
    threshold_expr: Arc<dyn PhysicalExpr>,
    threshold_type: DataType,
    /// None while the other input has no row, or its value is NULL.
    threshold: Option<ScalarValue>,
    description: String,
    rows_in: u64,
    rows_out: u64,
}

impl DynamicFilterOperator {
    /// `input` is the filtered rows' schema (and the output's); `value`
    /// is over it, `threshold_expr` over `threshold_input`.
    pub fn new(
        input: SchemaRef,
        value: Arc<dyn PhysicalExpr>,
        op: Op,
        threshold_expr: Arc<dyn PhysicalExpr>,
        threshold_input: &Schema,
        description: String,
    ) -> Result<DynamicFilterOperator, SluiceError> {
        if !matches!(
            op,
            Op::Lt | Op::LtEq | Op::Gt | Op::GtEq | Op::Eq | Op::NotEq
        ) {
            return Err(SluiceError::Internal(format!(
                "a dynamic filter cannot compare with {op}"
            )));
        }
        let order = vec![(
            value.clone(),
            SortOptions {
                descending: false,
                nulls_first: true,
            },
        )];
        Ok(DynamicFilterOperator {
            rows: RankedGroups::new(input.clone(), Vec::new(), order)?,
            input,
            value,
            op,
            threshold_type: threshold_expr.data_type(threshold_input)?,
            threshold_expr,
            threshold: None,
            description,
            rows_in: 0,
            rows_out: 0,
        })
    }

    /// Which rows of `batch` pass `value op threshold`.
    fn passes(
        &self,
        batch: &RecordBatch,
        threshold: &Option<ScalarValue>,
    ) -> Result<BooleanArray, SluiceError> {
        let n = batch.num_rows();
        let Some(threshold) = threshold else {
            return Ok(BooleanArray::from(vec![false; n]));
        };
        let values = self.value.evaluate(batch)?.into_array(n)?;
        let right = Scalar::new(threshold.to_array()?);
        let out = match self.op {
            Op::Lt => cmp::lt(&values, &right),
            Op::LtEq => cmp::lt_eq(&values, &right),
            Op::Gt => cmp::gt(&values, &right),
            Op::GtEq => cmp::gt_eq(&values, &right),
            Op::Eq => cmp::eq(&values, &right),
            _ => cmp::neq(&values, &right),
        }?;
        // NULL (a NULL value) does not pass.
        Ok(BooleanArray::from_iter(
            (0..n).map(|i| Some(out.is_valid(i) && out.value(i))),
        ))
    }

    fn filtered(
        &self,
        batch: &RecordBatch,
        keep: &BooleanArray,
    ) -> Result<RecordBatch, SluiceError> {
        Ok(compute::filter_record_batch(batch, keep)?)
    }

    /// The filtered input's rows: added or taken back, and the passing
    /// ones sent on.
    fn apply_rows(&mut self, delta: &Delta) -> Result<Delta, SluiceError> {
        let mut out = Delta::default();
        for (batches, insert) in [(&delta.insert, true), (&delta.retract, false)] {
            for b in batches.iter().filter(|b| b.num_rows() > 0) {
                self.rows_in += b.num_rows() as u64;
                for k in self.rows.keyed(b)? {
                    match insert {
                        true => self.rows.add(k, 1),
                        false => self.rows.take(k, "dynamic filter")?,
                    }
                }
                let passing = self.filtered(b, &self.passes(b, &self.threshold.clone())?)?;
                if passing.num_rows() > 0 {
                    match insert {
                        true => {
                            self.rows_out += passing.num_rows() as u64;
                            out.insert.push(passing)
                        }
                        false => out.retract.push(passing),
                    }
                }
            }
        }
        Ok(out)
    }

    /// A new threshold: the rows that crossed it.
    fn apply_threshold(&mut self, delta: &Delta) -> Result<Delta, SluiceError> {
        let mut new = self.threshold.clone();
        if delta.retract.iter().any(|b| b.num_rows() > 0) {
            new = None;
        }
        for b in delta.insert.iter().filter(|b| b.num_rows() > 0) {
            let v = self.threshold_expr.evaluate(b)?.into_array(b.num_rows())?;
            let last = ScalarValue::try_from_array(&v, v.len() - 1)?;
            new = (!last.is_null()).then_some(last);
        }
        let old = std::mem::replace(&mut self.threshold, new.clone());
        if old == new {
            return Ok(Delta::default());
        }
        let candidates = self.candidates(&old, &new)?;
        let mut out = Delta::default();
        if candidates.is_empty() {
            return Ok(out);
        }
        let columns = self.rows.columns(candidates.iter())?;
        let batch = RecordBatch::try_new(self.input.clone(), columns)?;
        let (before, after) = (self.passes(&batch, &old)?, self.passes(&batch, &new)?);
        let left: BooleanArray = (0..batch.num_rows())
            .map(|i| Some(before.value(i) && !after.value(i)))
            .collect();
        let came: BooleanArray = (0..batch.num_rows())
            .map(|i| Some(after.value(i) && !before.value(i)))
            .collect();
        let (left, came) = (self.filtered(&batch, &left)?, self.filtered(&batch, &came)?);
        if left.num_rows() > 0 {
            out.retract.push(left);
        }
        if came.num_rows() > 0 {
            self.rows_out += came.num_rows() as u64;
            out.insert.push(came);
        }
        Ok(out)
    }

    /// The rows (a copy each) that may pass by one threshold and not the
    /// other: those between them, or all where that has no bound.
    fn candidates(
        &self,
        old: &Option<ScalarValue>,
        new: &Option<ScalarValue>,
    ) -> Result<Vec<Bytes>, SluiceError> {
        let Some(ranked) = self.rows.group(&[]) else {
            return Ok(Vec::new());
        };
        let copies =
            |((_, row), n): (&(Bytes, Bytes), &u64)| std::iter::repeat_n(row.clone(), *n as usize);
        let (Some(old), Some(new), false) = (old, new, self.op == Op::NotEq) else {
            return Ok(ranked.iter().flat_map(copies).collect());
        };
        let bounds: ArrayRef = ScalarValue::iter_to_array([old.clone(), new.clone()])?;
        let bounds = compute::cast(&bounds, &self.value.data_type(&self.input)?)?;
        let mut bytes = self.rows.order_bytes(&[bounds])?;
        bytes.sort();
        let (low, high) = (bytes[0].clone(), bytes[1].clone());
        let empty: Bytes = Box::from(&[][..]);
        Ok(ranked
            .range((Bound::Included((low, empty)), Bound::Unbounded))
            .take_while(|((order, _), _)| *order <= high)
            .flat_map(copies)
            .collect())
    }
}

impl Operator for DynamicFilterOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        match input {
            0 => self.apply_rows(delta),
            1 => self.apply_threshold(delta),
            _ => Err(SluiceError::Internal(format!(
                "a dynamic filter has no input {input}"
            ))),
        }
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let threshold = match &self.threshold {
            Some(v) => v.to_array()?,
            None => arrow::array::new_empty_array(&self.threshold_type),
        };
        let schema = Arc::new(Schema::new(vec![Field::new(
            "threshold",
            self.threshold_type.clone(),
            true,
        )]));
        Ok(vec![
            vec![self.rows.snapshot()?],
            vec![RecordBatch::try_new(schema, vec![threshold])?],
        ])
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        match part {
            0 => self.rows.restore(rows, "dynamic filter"),
            1 => {
                for b in rows.iter().filter(|b| b.num_rows() > 0) {
                    let v = ScalarValue::try_from_array(b.column(0), 0)?;
                    self.threshold = (!v.is_null()).then_some(v);
                }
                Ok(())
            }
            _ => Err(SluiceError::Internal(format!(
                "a dynamic filter has no part {part}"
            ))),
        }
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "dynamic filter",
            description: self.description.clone(),
            state_rows: self.rows.held(),
            state_bytes: self.rows.state_bytes(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use datafusion::physical_expr::expressions::col;

    fn rows(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        let mut out: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                c.values().to_vec()
            })
            .collect();
        out.sort();
        out
    }

    fn insert(batch: RecordBatch) -> Delta {
        Delta {
            insert: vec![batch],
            retract: Vec::new(),
        }
    }

    /// `v > threshold`, both inputs one `v` column.
    fn greater() -> DynamicFilterOperator {
        let schema = rows(&[]).schema();
        DynamicFilterOperator::new(
            schema.clone(),
            col("v", &schema).unwrap(),
            Op::Gt,
            col("v", &schema).unwrap(),
            &schema,
            "v > threshold".into(),
        )
        .unwrap()
    }

    #[test]
    fn a_moving_threshold_sends_only_the_rows_that_cross_it() {
        let mut op = greater();
        // No threshold yet: nothing passes.
        let out = op
            .apply(0, &insert(rows(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])))
            .unwrap();
        assert!(out.insert.is_empty());
        let out = op.apply(1, &insert(rows(&[5]))).unwrap();
        assert_eq!(values(&out.insert), [6, 7, 8, 9, 10]);
        // Up from 5 to 7: 6 and 7 leave, nothing else is sent.
        let out = op
            .apply(
                1,
                &Delta {
                    insert: vec![rows(&[7])],
                    retract: vec![rows(&[5])],
                },
            )
            .unwrap();
        assert_eq!(values(&out.retract), [6, 7]);
        assert!(out.insert.is_empty());
        // Down to 2: 3 to 7 come back.
        let out = op
            .apply(
                1,
                &Delta {
                    insert: vec![rows(&[2])],
                    retract: vec![rows(&[7])],
                },
            )
            .unwrap();
        assert_eq!(values(&out.insert), [3, 4, 5, 6, 7]);
        assert!(out.retract.is_empty());
        // The threshold survives a checkpoint.
        let parts = op.snapshot().unwrap();
        let mut restored = greater();
        for (i, part) in parts.iter().enumerate() {
            restored.restore(i, part).unwrap();
        }
        let out = restored.apply(0, &insert(rows(&[1, 3]))).unwrap();
        assert_eq!(values(&out.insert), [3]);
    }
}
