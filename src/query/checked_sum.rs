//! `SUM` of integers that fails on overflow (22003 `bigint out of range`)
//! where DataFusion's wraps around. It replaces DataFusion's `sum` under the
//! same name and delegates everything but the integer accumulators to it:
//! same signature, return type and state fields, so checkpoints written by
//! either read back in the other. (PostgreSQL's SUM of bigint is numeric and
//! cannot overflow; a bigint result that fails is the nearest exact answer.)

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::buffer::NullBuffer;
use arrow::compute::sum_checked;
use arrow::datatypes::{DataType, FieldRef, Int64Type, UInt64Type};
use arrow::error::ArrowError;
use datafusion::common::{Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, GroupsAccumulator,
    ReversedUDAF, SetMonotonicity, Signature,
};

/// The `sum` to register in every session that plans user queries.
pub fn checked_sum() -> AggregateUDF {
    AggregateUDF::new_from_impl(CheckedSum::default())
}

#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct CheckedSum {
    inner: Sum,
}

/// The error of a bigint SUM that overflows (22003), as this SUM reports it.
pub fn out_of_range() -> DataFusionError {
    DataFusionError::ArrowError(
        Box::new(ArrowError::ArithmeticOverflow("bigint out of range".into())),
        None,
    )
}

/// An integer SUM (DataFusion sums every integer type as bigint).
fn sums_bigint(args: &AccumulatorArgs) -> bool {
    !args.is_distinct && args.return_field.data_type() == &DataType::Int64
}

fn checked_add(a: i64, b: i64) -> Result<i64> {
    a.checked_add(b).ok_or_else(out_of_range)
}

/// Sum of one batch's values, or an error if it leaves bigint.
fn batch_sum(values: &ArrayRef) -> Result<Option<i64>> {
    sum_checked(values.as_primitive::<Int64Type>()).map_err(|_| out_of_range())
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if sums_bigint(&args) {
            return Ok(Box::new(SumAccumulator::default()));
        }
        self.inner.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        if !sums_bigint(&args) {
            return self.inner.create_groups_accumulator(args);
        }
        Ok(Box::new(GroupSums::default()))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if sums_bigint(&args) {
            return Ok(Box::new(SlidingSumAccumulator::default()));
        }
        self.inner.create_sliding_accumulator(args)
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
}

/// State: `[sum]`, as DataFusion's.
#[derive(Debug, Default)]
struct SumAccumulator {
    sum: Option<i64>,
}

impl Accumulator for SumAccumulator {
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum(&values[0])? {
            self.sum = Some(checked_add(self.sum.unwrap_or(0), x)?);
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(self.sum))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// State: `[sum, count]`, as DataFusion's sliding sum.
#[derive(Debug, Default)]
struct SlidingSumAccumulator {
    sum: i64,
    count: u64,
}

impl Accumulator for SlidingSumAccumulator {
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?, self.count.into()])
    }

    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum(&values[0])? {
            self.sum = checked_add(self.sum, x)?;
        }
        self.count += (values[0].len() - values[0].null_count()) as u64;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum(&states[0])? {
            self.sum = checked_add(self.sum, x)?;
        }
        if let Some(n) = arrow::compute::sum(states[1].as_primitive::<UInt64Type>()) {
            self.count += n;
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum(&values[0])? {
            self.sum = self.sum.checked_sub(x).ok_or_else(out_of_range)?;
        }
        self.count = self
            .count
            .saturating_sub((values[0].len() - values[0].null_count()) as u64);
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64((self.count != 0).then_some(self.sum)))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// Sums of many groups at once (DataFusion's hash aggregation), each
/// group's sum NULL until it sees a value. State: `[sum]` per group.
#[derive(Debug, Default)]
struct GroupSums {
    sums: Vec<i64>,
    seen: Vec<bool>,
}

impl GroupsAccumulator for GroupSums {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let values = values[0].as_primitive::<Int64Type>();
        for (row, &g) in group_indices.iter().enumerate() {
            let wanted = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if !wanted || values.is_null(row) {
                continue;
            }
            self.sums[g] = checked_add(self.sums[g], values.value(row))?;
            self.seen[g] = true;
        }
        Ok(())
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    /// Each row its own group's state: the value itself, NULL where the
    /// filter drops the row.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = values[0].as_primitive::<Int64Type>();
        let Some(filter) = opt_filter else {
            return Ok(vec![Arc::new(values.clone())]);
        };
        let kept: Int64Array = values
            .iter()
            .enumerate()
            .map(|(i, v)| v.filter(|_| filter.is_valid(i) && filter.value(i)))
            .collect();
        Ok(vec![Arc::new(kept)])
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        Ok(Arc::new(Int64Array::new(
            sums.into(),
            Some(NullBuffer::from(seen)),
        )))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * 8 + self.seen.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn pretty(ctx: &SessionContext, sql: &str) -> String {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
    }

    #[tokio::test]
    async fn sums_fail_past_bigint_and_stay_exact_below() {
        let ctx = SessionContext::new();
        ctx.register_udaf(checked_sum());
        let big = "(VALUES (9223372036854775800, 1), (100, 1), (5, 2)) t(a, g)";
        for sql in [
            format!("SELECT SUM(a) FROM {big}"),
            format!("SELECT g, SUM(a) FROM {big} GROUP BY g"),
            format!("SELECT SUM(a) OVER (ORDER BY a ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM {big}"),
        ] {
            let err = ctx.sql(&sql).await.unwrap().collect().await.unwrap_err();
            assert!(err.to_string().contains("bigint out of range"), "{sql}: {err}");
        }
        let text = pretty(
            &ctx,
            "SELECT g, SUM(a) FROM (VALUES (1, 1), (NULL, 1), (2, 2), (-7, 2)) t(a, g) GROUP BY g ORDER BY g",
        )
        .await;
        assert!(
            text.contains("| 1 | 1 ") && text.contains("| 2 | -5 "),
            "{text}"
        );
        // Other types keep DataFusion's SUM.
        let text = pretty(&ctx, "SELECT SUM(x) FROM (VALUES (1.5), (2.0)) t(x)").await;
        assert!(text.contains("3.5"), "{text}");
    }

    #[test]
    fn sliding_sum_retracts_and_keeps_datafusions_state() {
        let mut acc = SlidingSumAccumulator::default();
        let values: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![
            Some(5),
            None,
            Some(i64::MAX - 10),
        ]));
        acc.update_batch(std::slice::from_ref(&values)).unwrap();
        let one: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![20]));
        assert!(acc.update_batch(std::slice::from_ref(&one)).is_err());
        acc.retract_batch(std::slice::from_ref(&values)).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Int64(None));
        acc.update_batch(std::slice::from_ref(&one)).unwrap();
        assert_eq!(
            acc.state().unwrap(),
            vec![ScalarValue::Int64(Some(20)), ScalarValue::UInt64(Some(1))]
        );
    }
}
