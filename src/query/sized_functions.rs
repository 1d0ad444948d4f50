//! Functions whose result can be far larger than their arguments (`repeat`,
//! `lpad`, `rpad`, `replace`, `array_repeat`, `array_resize`, `range`,
//! `generate_series` as an array) are sized before they run.
//!
//! Each wraps DataFusion's function with an estimate of the bytes every
//! row asks for, computed from the arguments alone. A value over
//! PostgreSQL's 1 GiB limit, or a call over 2 GiB in all, fails with 54000
//! before anything is allocated; otherwise the call reserves its bytes from
//! the query memory pool (`--query-memory`) while it runs, so that a call
//! that does not fit beside what the running queries hold fails with 53200
//! instead of growing the server past its limit. (The result then streams
//! on in its batch; the pool tracks what operators keep.)

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::FieldRef;
use arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, Documentation, ReversedUDAF,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

use super::udf::{pg_error, texts};

/// The most bytes one value may take, as PostgreSQL's MaxAllocSize
/// (1 GiB - 1).
const MAX_VALUE_BYTES: i64 = (1 << 30) - 1;

/// The most bytes one call may produce over all its rows: a batch of
/// values each under [`MAX_VALUE_BYTES`] could still ask for gigabytes.
const MAX_CALL_BYTES: i64 = 2 * MAX_VALUE_BYTES;

/// The most bytes one character takes in UTF-8.
const MAX_CHAR_BYTES: i64 = 4;

/// What an element of an array result takes at least (an offset or a
/// fixed-width value).
const MIN_ELEMENT_BYTES: i64 = 8;

const NANOS_PER_DAY: i128 = 86_400_000_000_000;

/// How a function's result size is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Estimate {
    /// `lpad(text, n [, fill])`, `rpad`: n characters.
    Pad,
    /// `repeat(text, n)`: n times the text.
    Repeat,
    /// `replace(text, from, to)`: the text with each `from` grown to `to`.
    Replace,
    /// `array_repeat(element, n)`: n elements.
    ArrayRepeat,
    /// `array_resize(array, n [, fill])`: n elements.
    ArrayResize,
    /// `range(stop)`, `range(start, stop [, step])`, `generate_series`.
    Series,
}

impl Estimate {
    fn of(name: &str) -> Option<Estimate> {
        Some(match name {
            "lpad" | "rpad" => Estimate::Pad,
            "repeat" => Estimate::Repeat,
            "replace" => Estimate::Replace,
            "array_repeat" => Estimate::ArrayRepeat,
            "array_resize" => Estimate::ArrayResize,
            "range" | "generate_series" => Estimate::Series,
            _ => return None,
        })
    }

    /// Whether a negative count means an empty result (PostgreSQL) rather
    /// than DataFusion's capacity overflow: the count is clamped at zero.
    fn clamps_negative_count(self) -> bool {
        matches!(self, Estimate::Pad | Estimate::Repeat)
    }
}

/// A DataFusion function sized before it runs (see the module header).
#[derive(Debug)]
struct SizedFunction {
    inner: ScalarUDF,
    estimate: Estimate,
    /// Where a call reserves its bytes (unbounded when queries have no
    /// limit).
    pool: Arc<dyn MemoryPool>,
}

impl PartialEq for SizedFunction {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner && self.estimate == other.estimate
    }
}

impl Eq for SizedFunction {}

impl std::hash::Hash for SizedFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
        self.estimate.hash(state);
    }
}

fn too_large() -> datafusion::error::DataFusionError {
    pg_error("54000", "requested length too large")
}

/// A count argument as int64s, one per row.
fn counts(arg: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    Ok(arrow::compute::cast(
        &arg.to_array(rows)?,
        &DataType::Int64,
    )?)
}

/// The bytes one element of `values` at `row` takes in an array result.
fn element_bytes(values: &ArrayRef, row: usize) -> Result<i64> {
    Ok(match values.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let t = texts(values)?;
            MIN_ELEMENT_BYTES
                + if t.is_valid(row) {
                    t.value(row).len() as i64
                } else {
                    0
                }
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::Binary | DataType::LargeBinary => {
            let one = values.slice(row, 1);
            MIN_ELEMENT_BYTES.max(one.get_array_memory_size() as i64)
        }
        other => MIN_ELEMENT_BYTES.max(other.primitive_width().unwrap_or(8) as i64),
    })
}

/// The number of values of a series from `start` to `stop` by `step`, or
/// None when the types are not ones it knows (DataFusion then decides).
fn series_length(
    start: &ScalarValue,
    stop: &ScalarValue,
    step: Option<&ScalarValue>,
) -> Option<i128> {
    // Numerics at the finest scale among the arguments.
    let finest = [Some(start), Some(stop), step]
        .into_iter()
        .flatten()
        .filter_map(|v| match v {
            ScalarValue::Decimal128(_, _, s) => Some((*s).max(0)),
            _ => None,
        })
        .max();
    let numeric = |x: i128, s: i8| {
        x.checked_mul(10i128.checked_pow((finest.unwrap_or(s) - s.max(0)).max(0) as u32)?)
    };
    // Both ends on one scale: integers as they are, dates and timestamps
    // in nanoseconds.
    let scale = |v: &ScalarValue| -> Option<i128> {
        Some(match v {
            ScalarValue::Int64(Some(x)) => *x as i128,
            ScalarValue::Int32(Some(x)) => *x as i128,
            ScalarValue::Decimal128(Some(x), _, s) => numeric(*x, *s)?,
            ScalarValue::Date32(Some(d)) => *d as i128 * NANOS_PER_DAY,
            ScalarValue::Date64(Some(ms)) => *ms as i128 * 1_000_000,
            ScalarValue::TimestampSecond(Some(x), _) => *x as i128 * 1_000_000_000,
            ScalarValue::TimestampMillisecond(Some(x), _) => *x as i128 * 1_000_000,
            ScalarValue::TimestampMicrosecond(Some(x), _) => *x as i128 * 1_000,
            ScalarValue::TimestampNanosecond(Some(x), _) => *x as i128,
            _ => return None,
        })
    };
    let (a, b) = (scale(start)?, scale(stop)?);
    // The smallest a step can move: a month is at least 28 days.
    let step = match step {
        // A numeric 1 at the arguments' scale.
        None => numeric(1, 0)?,
        Some(ScalarValue::Int64(Some(s))) => *s as i128,
        Some(ScalarValue::Int32(Some(s))) => *s as i128,
        Some(ScalarValue::Decimal128(Some(x), _, s)) => numeric(*x, *s)?,
        Some(ScalarValue::IntervalMonthDayNano(Some(i))) => {
            i.months as i128 * 28 * NANOS_PER_DAY
                + i.days as i128 * NANOS_PER_DAY
                + i.nanoseconds as i128
        }
        Some(ScalarValue::IntervalDayTime(Some(i))) => {
            i.days as i128 * NANOS_PER_DAY + i.milliseconds as i128 * 1_000_000
        }
        Some(ScalarValue::IntervalYearMonth(Some(m))) => *m as i128 * 28 * NANOS_PER_DAY,
        Some(_) => return None,
    };
    if step == 0 || (b - a).signum() * step.signum() < 0 {
        return Some(0);
    }
    Some((b - a) / step + 1)
}

impl SizedFunction {
    /// The bytes each row asks for.
    fn row_bytes(&self, args: &[ColumnarValue], rows: usize) -> Result<Vec<i64>> {
        let mut out = vec![0i64; rows];
        match self.estimate {
            Estimate::Pad | Estimate::Repeat => {
                let n = counts(&args[1], rows)?;
                let n = n.as_primitive::<Int64Type>();
                let text = match self.estimate {
                    Estimate::Repeat => Some(texts(&args[0].to_array(rows)?)?),
                    _ => None,
                };
                for (row, bytes) in out.iter_mut().enumerate() {
                    if n.is_null(row) {
                        continue;
                    }
                    let unit = match &text {
                        Some(t) if t.is_valid(row) => t.value(row).len() as i64,
                        Some(_) => 0,
                        None => MAX_CHAR_BYTES,
                    };
                    *bytes = n
                        .value(row)
                        .max(0)
                        .checked_mul(unit)
                        .ok_or_else(too_large)?;
                }
            }
            Estimate::Replace => {
                let (text, from, to) = (
                    args[0].to_array(rows)?,
                    args[1].to_array(rows)?,
                    args[2].to_array(rows)?,
                );
                let (text, from, to) = (texts(&text)?, texts(&from)?, texts(&to)?);
                for (row, bytes) in out.iter_mut().enumerate() {
                    if text.is_null(row) || from.is_null(row) || to.is_null(row) {
                        continue;
                    }
                    let (s, f, t) = (text.value(row), from.value(row), to.value(row));
                    let grow = t.len() as i64 - f.len() as i64;
                    let times = if grow <= 0 {
                        0
                    } else if f.is_empty() {
                        s.chars().count() as i64 + 1
                    } else {
                        s.matches(f).count() as i64
                    };
                    *bytes = times
                        .checked_mul(grow.max(0))
                        .and_then(|g| g.checked_add(s.len() as i64))
                        .ok_or_else(too_large)?;
                }
            }
            Estimate::ArrayRepeat | Estimate::ArrayResize => {
                let (n, values) = match self.estimate {
                    Estimate::ArrayRepeat => (counts(&args[1], rows)?, args[0].to_array(rows)?),
                    _ => {
                        let fill = match args.get(2) {
                            Some(f) => f.to_array(rows)?,
                            None => args[0].to_array(rows)?,
                        };
                        (counts(&args[1], rows)?, fill)
                    }
                };
                let n = n.as_primitive::<Int64Type>();
                let per_fill = matches!(self.estimate, Estimate::ArrayResize) && args.len() < 3;
                for (row, bytes) in out.iter_mut().enumerate() {
                    if n.is_null(row) {
                        continue;
                    }
                    let unit = if per_fill {
                        MIN_ELEMENT_BYTES
                    } else {
                        element_bytes(&values, row)?
                    };
                    *bytes = n
                        .value(row)
                        .max(0)
                        .checked_mul(unit)
                        .ok_or_else(too_large)?;
                }
            }
            Estimate::Series => {
                let columns: Vec<ArrayRef> = args
                    .iter()
                    .map(|a| a.to_array(rows))
                    .collect::<Result<_>>()?;
                for (row, bytes) in out.iter_mut().enumerate() {
                    let value = |i: usize| ScalarValue::try_from_array(&columns[i], row);
                    let (start, stop, step) = match columns.len() {
                        1 => (ScalarValue::Int64(Some(0)), value(0)?, None),
                        2 => (value(0)?, value(1)?, None),
                        _ => (value(0)?, value(1)?, Some(value(2)?)),
                    };
                    if let Some(len) = series_length(&start, &stop, step.as_ref()) {
                        let b = len.saturating_mul(MIN_ELEMENT_BYTES as i128);
                        *bytes = i64::try_from(b).map_err(|_| too_large())?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Checks the sizes; returns the bytes of the whole call.
    fn check(&self, args: &[ColumnarValue], rows: usize) -> Result<i64> {
        let mut total: i64 = 0;
        for bytes in self.row_bytes(args, rows)? {
            if bytes > MAX_VALUE_BYTES {
                return Err(too_large());
            }
            total = total.saturating_add(bytes);
            if total > MAX_CALL_BYTES {
                return Err(too_large());
            }
        }
        Ok(total)
    }

    /// Negative counts as zero, for the functions PostgreSQL answers ''.
    fn clamp_count(args: &mut ScalarFunctionArgs) -> Result<()> {
        let rows = args.number_rows;
        let n = counts(&args.args[1], rows)?;
        let n = n.as_primitive::<Int64Type>();
        if !n.iter().flatten().any(|v| v < 0) {
            return Ok(());
        }
        let clamped: arrow::array::Int64Array = n.iter().map(|v| v.map(|v| v.max(0))).collect();
        args.args[1] = match &args.args[1] {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&clamped, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(clamped)),
        };
        // A clamped count is an Int64 now, whatever it was declared.
        if let Some(f) = args.arg_fields.get_mut(1) {
            *f = Arc::new(Field::new(f.name(), DataType::Int64, true));
        }
        Ok(())
    }
}

impl ScalarUDFImpl for SizedFunction {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let needed = if args.args.len() >= 2 || self.estimate == Estimate::Series {
            self.check(&args.args, args.number_rows)?
        } else {
            0
        };
        if self.estimate.clamps_negative_count() && args.args.len() >= 2 {
            Self::clamp_count(&mut args)?;
        }
        let _reserved = match &self.pool {
            pool if needed > 0 => {
                let r = MemoryConsumer::new(format!("function {}", self.name())).register(pool);
                r.try_grow(needed as usize).map_err(|_| {
                    pg_error(
                        "53200",
                        format!(
                            "out of memory: {}() needs {needed} bytes more than the memory \
                             free to queries (--query-memory)",
                            self.name()
                        ),
                    )
                })?;
                Some(r)
            }
            _ => None,
        };
        self.inner.invoke_with_args(args)
    }
}

/// DataFusion's functions named in [`Estimate::of`], sized, each reserving
/// from `pool` while it runs.
pub(crate) fn sized_functions(
    datafusion: &dyn Fn(&str) -> Option<Arc<ScalarUDF>>,
    pool: Arc<dyn MemoryPool>,
) -> Vec<ScalarUDF> {
    [
        "lpad",
        "rpad",
        "repeat",
        "replace",
        "array_repeat",
        "array_resize",
        "range",
        "generate_series",
    ]
    .into_iter()
    .filter_map(|name| Some((datafusion(name)?, Estimate::of(name)?)))
    .map(|(inner, estimate)| {
        ScalarUDF::new_from_impl(SizedFunction {
            inner: inner.as_ref().clone(),
            estimate,
            pool: pool.clone(),
        })
    })
    .collect()
}

/// `string_agg` with PostgreSQL's limit on the text it builds: a group
/// whose text would pass 1 GiB fails with 54000 as it grows, rather than
/// Arrow's offsets overflowing at 2 GiB (a panic). Its groups accumulator
/// is not used, so that each group's bytes are counted as they arrive.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SizedStringAgg {
    inner: AggregateUDF,
}

/// Counts the text a `string_agg` group has taken in.
#[derive(Debug)]
struct SizedAccumulator {
    inner: Box<dyn Accumulator>,
    bytes: i64,
}

/// The text bytes in a column of values or partial results.
fn text_bytes(values: &ArrayRef) -> i64 {
    match texts(values) {
        Ok(t) => t.iter().flatten().map(|v| v.len() as i64).sum(),
        Err(_) => values.get_buffer_memory_size() as i64,
    }
}

impl SizedAccumulator {
    fn grow(&mut self, by: i64) -> Result<()> {
        self.bytes = self.bytes.saturating_add(by);
        if self.bytes > MAX_VALUE_BYTES {
            return Err(pg_error(
                "54000",
                format!("out of memory: string_agg's result would exceed {MAX_VALUE_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

impl Accumulator for SizedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(v) = values.first() {
            self.grow(text_bytes(v))?;
        }
        self.inner.update_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        if let Some(s) = states.first() {
            self.grow(text_bytes(s))?;
        }
        self.inner.merge_batch(states)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.inner.evaluate()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let Some(v) = values.first() {
            self.bytes -= text_bytes(v);
        }
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

impl SizedStringAgg {
    fn wrap(inner: AggregateUDF) -> AggregateUDF {
        AggregateUDF::new_from_impl(SizedStringAgg { inner })
    }
}

impl AggregateUDFImpl for SizedStringAgg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }

    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SizedAccumulator {
            inner: self.inner.accumulator(args)?,
            bytes: 0,
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(SizedAccumulator {
            inner: self.inner.create_sliding_accumulator(args)?,
            bytes: 0,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        false
    }

    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> Result<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(self
            .inner
            .clone()
            .with_beneficial_ordering(beneficial_ordering)?
            .map(|inner| Arc::new(SizedStringAgg { inner }) as Arc<dyn AggregateUDFImpl>))
    }

    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }

    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_udf() {
            ReversedUDAF::Reversed(r) => {
                ReversedUDAF::Reversed(Arc::new(Self::wrap(r.as_ref().clone())))
            }
            other => other,
        }
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }

    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// DataFusion's `string_agg`, sized (see [`SizedStringAgg`]).
pub(crate) fn sized_string_agg(datafusion: Option<Arc<AggregateUDF>>) -> Option<AggregateUDF> {
    datafusion.map(|inner| SizedStringAgg::wrap(inner.as_ref().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_lengths_of_integers_dates_and_timestamps() {
        let i = |x: i64| ScalarValue::Int64(Some(x));
        assert_eq!(series_length(&i(1), &i(10), None), Some(10));
        assert_eq!(series_length(&i(10), &i(1), None), Some(0));
        assert_eq!(series_length(&i(1), &i(10), Some(&i(3))), Some(4));
        assert_eq!(series_length(&i(10), &i(1), Some(&i(-1))), Some(10));
        let day = ScalarValue::IntervalMonthDayNano(Some(
            arrow::datatypes::IntervalMonthDayNano::new(0, 1, 0),
        ));
        let d = |x: i32| ScalarValue::Date32(Some(x));
        assert_eq!(series_length(&d(0), &d(365), Some(&day)), Some(366));
        let ts = |s: i64| ScalarValue::TimestampMicrosecond(Some(s * 1_000_000), None);
        let second = ScalarValue::IntervalMonthDayNano(Some(
            arrow::datatypes::IntervalMonthDayNano::new(0, 0, 1_000_000_000),
        ));
        assert_eq!(
            series_length(&ts(0), &ts(31_536_000_000), Some(&second)),
            Some(31_536_000_001)
        );
        assert_eq!(series_length(&ScalarValue::Utf8(None), &i(1), None), None);
        // 0.1 to 0.35 by 0.1, and 1.5 to 3 by 1.
        let n = |x: i128, s: i8| ScalarValue::Decimal128(Some(x), 38, s);
        assert_eq!(series_length(&n(1, 1), &n(35, 2), Some(&n(1, 1))), Some(3));
        assert_eq!(series_length(&n(15, 1), &n(30, 1), None), Some(2));
    }
}
