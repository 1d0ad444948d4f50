//! `SUM` of integers that fails on overflow (22003 `bigint out of range`)
//! and of numerics that fails past 38 digits (22003 `value overflows
//! numeric format`), where DataFusion's wraps around into a wrong number.
//! It replaces DataFusion's `sum` under the same name and delegates
//! everything but these accumulators to it: same signature, return type
//! and state fields, so checkpoints written by either read back in the
//! other. (PostgreSQL's SUM of bigint is numeric and cannot overflow; a
//! bigint result that fails is the nearest exact answer. Its numeric has
//! no 38-digit bound; this one does, DESIGN.md.)

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Decimal128Type, FieldRef, Int64Type, UInt64Type,
};
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

/// A type this SUM adds with checks.
trait Summed: ArrowPrimitiveType + std::fmt::Debug {
    fn add(a: Self::Native, b: Self::Native) -> Result<Self::Native>;
    fn sub(a: Self::Native, b: Self::Native) -> Result<Self::Native>;
    fn scalar(v: Option<Self::Native>, data_type: &DataType) -> ScalarValue;
}

impl Summed for Int64Type {
    fn add(a: i64, b: i64) -> Result<i64> {
        a.checked_add(b).ok_or_else(out_of_range)
    }
    fn sub(a: i64, b: i64) -> Result<i64> {
        a.checked_sub(b).ok_or_else(out_of_range)
    }
    fn scalar(v: Option<i64>, _: &DataType) -> ScalarValue {
        ScalarValue::Int64(v)
    }
}

/// The largest magnitude a 38-digit numeric holds, plus one.
const NUMERIC_LIMIT: i128 = 10i128.pow(38);

fn numeric_overflow() -> DataFusionError {
    super::udf::pg_error("22003", "value overflows numeric format")
}

impl Summed for Decimal128Type {
    fn add(a: i128, b: i128) -> Result<i128> {
        a.checked_add(b)
            .filter(|v| v.unsigned_abs() < NUMERIC_LIMIT as u128)
            .ok_or_else(numeric_overflow)
    }
    fn sub(a: i128, b: i128) -> Result<i128> {
        a.checked_sub(b)
            .filter(|v| v.unsigned_abs() < NUMERIC_LIMIT as u128)
            .ok_or_else(numeric_overflow)
    }
    fn scalar(v: Option<i128>, data_type: &DataType) -> ScalarValue {
        match data_type {
            DataType::Decimal128(p, s) => ScalarValue::Decimal128(v, *p, *s),
            _ => ScalarValue::Decimal128(v, 38, 0),
        }
    }
}

/// Which checked accumulators a SUM takes (DataFusion sums every integer
/// type as bigint), or None for DataFusion's own.
enum Kind {
    Bigint,
    Numeric,
}

fn kind_of(args: &AccumulatorArgs) -> Option<Kind> {
    if args.is_distinct {
        return None;
    }
    match args.return_field.data_type() {
        DataType::Int64 => Some(Kind::Bigint),
        DataType::Decimal128(..) => Some(Kind::Numeric),
        _ => None,
    }
}

/// Sum of one batch's values, checked at every step.
fn batch_sum<T: Summed>(values: &ArrayRef) -> Result<Option<T::Native>> {
    let values = values.as_primitive::<T>();
    let mut sum: Option<T::Native> = None;
    for v in values.iter().flatten() {
        sum = Some(match sum {
            None => v,
            Some(s) => T::add(s, v)?,
        });
    }
    Ok(sum)
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
        let data_type = args.return_field.data_type().clone();
        match kind_of(&args) {
            Some(Kind::Bigint) => Ok(Box::new(SumAccumulator::<Int64Type>::new(data_type))),
            Some(Kind::Numeric) => Ok(Box::new(SumAccumulator::<Decimal128Type>::new(data_type))),
            None => self.inner.accumulator(args),
        }
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
        let data_type = args.return_field.data_type().clone();
        match kind_of(&args) {
            Some(Kind::Bigint) => Ok(Box::new(GroupSums::<Int64Type>::new(data_type))),
            Some(Kind::Numeric) => Ok(Box::new(GroupSums::<Decimal128Type>::new(data_type))),
            None => self.inner.create_groups_accumulator(args),
        }
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let data_type = args.return_field.data_type().clone();
        match kind_of(&args) {
            Some(Kind::Bigint) => Ok(Box::new(SlidingSumAccumulator::<Int64Type>::new(data_type))),
            Some(Kind::Numeric) => Ok(Box::new(SlidingSumAccumulator::<Decimal128Type>::new(
                data_type,
            ))),
            None => self.inner.create_sliding_accumulator(args),
        }
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
#[derive(Debug)]
struct SumAccumulator<T: Summed> {
    sum: Option<T::Native>,
    data_type: DataType,
}

impl<T: Summed> SumAccumulator<T> {
    fn new(data_type: DataType) -> Self {
        SumAccumulator {
            sum: None,
            data_type,
        }
    }
}

impl<T: Summed> Accumulator for SumAccumulator<T> {
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }

    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum::<T>(&values[0])? {
            self.sum = Some(match self.sum {
                None => x,
                Some(s) => T::add(s, x)?,
            });
        }
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(T::scalar(self.sum, &self.data_type))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// State: `[sum, count]`, as DataFusion's sliding sum.
#[derive(Debug)]
struct SlidingSumAccumulator<T: Summed> {
    sum: T::Native,
    count: u64,
    data_type: DataType,
}

impl<T: Summed> SlidingSumAccumulator<T> {
    fn new(data_type: DataType) -> Self {
        SlidingSumAccumulator {
            sum: T::Native::default(),
            count: 0,
            data_type,
        }
    }
}

impl<T: Summed> Accumulator for SlidingSumAccumulator<T> {
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?, self.count.into()])
    }

    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum::<T>(&values[0])? {
            self.sum = T::add(self.sum, x)?;
        }
        self.count += (values[0].len() - values[0].null_count()) as u64;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum::<T>(&states[0])? {
            self.sum = T::add(self.sum, x)?;
        }
        if let Some(n) = arrow::compute::sum(states[1].as_primitive::<UInt64Type>()) {
            self.count += n;
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(x) = batch_sum::<T>(&values[0])? {
            self.sum = T::sub(self.sum, x)?;
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
        Ok(T::scalar(
            (self.count != 0).then_some(self.sum),
            &self.data_type,
        ))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}

/// Sums of many groups at once (DataFusion's hash aggregation), each
/// group's sum NULL until it sees a value. State: `[sum]` per group.
#[derive(Debug)]
struct GroupSums<T: Summed> {
    sums: Vec<T::Native>,
    seen: Vec<bool>,
    data_type: DataType,
}

impl<T: Summed> GroupSums<T> {
    fn new(data_type: DataType) -> Self {
        GroupSums {
            sums: Vec::new(),
            seen: Vec::new(),
            data_type,
        }
    }
}

impl<T: Summed> GroupsAccumulator for GroupSums<T> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.sums.resize(total_num_groups, T::Native::default());
        self.seen.resize(total_num_groups, false);
        let values = values[0].as_primitive::<T>();
        for (row, &g) in group_indices.iter().enumerate() {
            let wanted = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if !wanted || values.is_null(row) {
                continue;
            }
            self.sums[g] = T::add(self.sums[g], values.value(row))?;
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
        let Some(filter) = opt_filter else {
            return Ok(vec![values[0].clone()]);
        };
        let values = values[0].as_primitive::<T>();
        let kept: PrimitiveArray<T> = values
            .iter()
            .enumerate()
            .map(|(i, v)| v.filter(|_| filter.is_valid(i) && filter.value(i)))
            .collect();
        Ok(vec![Arc::new(
            kept.with_data_type(values.data_type().clone()),
        )])
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        Ok(Arc::new(
            PrimitiveArray::<T>::new(sums.into(), Some(NullBuffer::from(seen)))
                .with_data_type(self.data_type.clone()),
        ))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }

    fn size(&self) -> usize {
        self.sums.capacity() * std::mem::size_of::<T::Native>() + self.seen.capacity()
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
        let text = pretty(&ctx, "SELECT SUM(x) FROM (VALUES (1.5), (2.0)) t(x)").await;
        assert!(text.contains("3.5"), "{text}");
        // Numerics fail past 38 digits rather than wrap.
        let big = "(VALUES (CAST(9e27 AS DECIMAL(38, 10)), 1), (CAST(9e27 AS DECIMAL(38, 10)), 1)) t(a, g)";
        for sql in [
            format!("SELECT SUM(a) FROM {big}"),
            format!("SELECT g, SUM(a) FROM {big} GROUP BY g"),
        ] {
            let err = ctx.sql(&sql).await.unwrap().collect().await.unwrap_err();
            assert!(err.to_string().contains("numeric format"), "{sql}: {err}");
        }
    }

    #[test]
    fn sliding_sum_retracts_and_keeps_datafusions_state() {
        let mut acc = SlidingSumAccumulator::<Int64Type>::new(DataType::Int64);
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
