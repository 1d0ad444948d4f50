//! `numeric` division and `avg` as exact decimals, where DataFusion's
//! keep four digits after the point (`1.0 / 3` = `0.3333`) and average
//! integers as doubles.
//!
//! PostgreSQL gives each quotient a number of digits of its own (at least
//! 16 significant ones); a column here has one scale for all its values,
//! so a quotient has 20 digits after the point (or its operands' scale,
//! if larger) and an average 16, rounded half away from zero as
//! PostgreSQL rounds. The digits both show agree.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{i256, DataType, Decimal128Type, FieldRef, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::average::Avg;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, GroupsAccumulator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::pg_error;

/// Digits after the point of a quotient.
pub const QUOTIENT_SCALE: i8 = 20;
/// Digits after the point of an average.
pub const AVERAGE_SCALE: i8 = 16;

/// The precision and scale a numeric of this type has (integers as
/// numerics of scale 0).
pub fn decimal_of(t: &DataType) -> Option<(u8, i8)> {
    Some(match t {
        DataType::Decimal128(p, s) => (*p, *s),
        // A literal of more than 38 digits, read here rounded to 38.
        DataType::Decimal256(p, s) => decimal128_of_wider(*p, *s),
        DataType::Int8 | DataType::Int16 => (5, 0),
        DataType::Int32 => (10, 0),
        DataType::Int64 => (19, 0),
        DataType::UInt64 => (20, 0),
        _ => return None,
    })
}

/// The type of `a / b` for numerics of these types.
pub fn quotient_type(a: (u8, i8), b: (u8, i8)) -> DataType {
    DataType::Decimal128(38, a.1.max(b.1).max(QUOTIENT_SCALE))
}

/// `a / b` for numerics (one of them `numeric`, the other an integer or
/// `numeric`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDivide {
    signature: Signature,
}

impl NumericDivide {
    pub fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl Default for NumericDivide {
    fn default() -> Self {
        Self::new()
    }
}

/// The 128-bit decimal type a wider decimal is read as: its integer
/// digits kept, its fraction rounded to what is left of 38 digits.
fn decimal128_of_wider(p: u8, s: i8) -> (u8, i8) {
    let integer_digits = (p as i16 - s as i16).max(0);
    let scale = (s as i16).min(38 - integer_digits.min(38)).max(0);
    (38, scale as i8)
}

fn unscaled(a: &ArrayRef) -> Result<(Vec<Option<i128>>, i8)> {
    Ok(match a.data_type() {
        DataType::Decimal128(_, s) => (a.as_primitive::<Decimal128Type>().iter().collect(), *s),
        DataType::Decimal256(p, s) => {
            let (p, s) = decimal128_of_wider(*p, *s);
            let narrowed = arrow::compute::cast_with_options(
                a,
                &DataType::Decimal128(p, s),
                &arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                },
            )
            .map_err(|_| pg_error("22003", "value overflows numeric format"))?;
            (
                narrowed.as_primitive::<Decimal128Type>().iter().collect(),
                s,
            )
        }
        _ => {
            let v = arrow::compute::cast(a, &DataType::Int64)?;
            (
                v.as_primitive::<Int64Type>()
                    .iter()
                    .map(|v| v.map(i128::from))
                    .collect(),
                0,
            )
        }
    })
}

/// `x / y` where x has scale `sx` and y `sy`, to `scale` digits, rounded
/// half away from zero; None when it does not fit 38 digits.
pub fn divide(x: i128, sx: i8, y: i128, sy: i8, scale: i8) -> Option<i128> {
    // x / 10^sx / (y / 10^sy) * 10^scale = x * 10^(scale + sy - sx) / y
    let shift = scale as i32 + sy as i32 - sx as i32;
    let mut num = i256::from_i128(x);
    let mut den = i256::from_i128(y);
    let ten = i256::from_i128(10);
    if shift >= 0 {
        for _ in 0..shift {
            num = num.checked_mul(ten)?;
        }
    } else {
        for _ in 0..(-shift) {
            den = den.checked_mul(ten)?;
        }
    }
    let q = num.checked_div(den)?;
    let r = num.checked_rem(den)?;
    let twice = r.checked_mul(i256::from_i128(2))?;
    let round_up = twice.wrapping_abs() >= den.wrapping_abs();
    let q = if round_up {
        if (num < i256::ZERO) != (den < i256::ZERO) {
            q.checked_sub(i256::ONE)?
        } else {
            q.checked_add(i256::ONE)?
        }
    } else {
        q
    };
    let q = q.to_i128()?;
    (q.unsigned_abs() < 10u128.pow(38)).then_some(q)
}

impl ScalarUDFImpl for NumericDivide {
    fn name(&self) -> &str {
        "numeric_div"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match (decimal_of(&args[0]), decimal_of(&args[1])) {
            (Some(a), Some(b)) => Ok(quotient_type(a, b)),
            _ => Ok(DataType::Decimal128(38, QUOTIENT_SCALE)),
        }
    }

    /// A NULL operand makes the quotient NULL without evaluating the other
    /// (as PostgreSQL folds a strict operator; see `CheckedOp::simplify`):
    /// `(i % (10 / i)) / NULL` never divides by a zero `i`.
    fn simplify(
        &self,
        args: Vec<Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> Result<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        use datafusion::logical_expr::simplify::ExprSimplifyResult;
        if !args
            .iter()
            .any(|a| matches!(a, Expr::Literal(v, _) if v.is_null()))
        {
            return Ok(ExprSimplifyResult::Original(args));
        }
        let types = args
            .iter()
            .map(|a| info.get_data_type(a))
            .collect::<Result<Vec<_>>>()?;
        let quotient = self.return_type(&types)?;
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            ScalarValue::try_from(&quotient)?,
            None,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ((x, sx), (y, sy)) = (unscaled(&arrays[0])?, unscaled(&arrays[1])?);
        let scale = match args.return_field.data_type() {
            DataType::Decimal128(_, s) => *s,
            _ => QUOTIENT_SCALE,
        };
        let mut out = Vec::with_capacity(x.len());
        for (x, y) in x.into_iter().zip(y) {
            out.push(match (x, y) {
                (Some(_), Some(0)) => return Err(pg_error("22012", "division by zero")),
                (Some(x), Some(y)) => {
                    let q = divide(x, sx, y, sy, scale)
                        .ok_or_else(|| pg_error("22003", "value overflows numeric format"))?;
                    // A quotient of a value that is not zero is never zero
                    // in PostgreSQL (it keeps 16 significant digits); here
                    // it would be all zeros of this column's scale.
                    if q == 0 && x != 0 {
                        return Err(pg_error(
                            "22003",
                            format!(
                                "numeric quotient too small for {scale} digits after the point"
                            ),
                        ));
                    }
                    Some(q)
                }
                _ => None,
            });
        }
        let out: ArrayRef =
            Arc::new(Decimal128Array::from(out).with_precision_and_scale(38, scale)?);
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

super::udf::cached_udf!(
    numeric_divide,
    ScalarUDF::new_from_impl(NumericDivide::new())
);

/// `avg` as PostgreSQL types it: of integers and numerics a numeric (here
/// with [`AVERAGE_SCALE`] digits), of floats a double. DataFusion's
/// accumulators do the work, given integers as numerics.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgAvg {
    inner: Avg,
    signature: Signature,
}

/// The `avg` to register in every session that plans user queries.
pub fn pg_avg() -> AggregateUDF {
    AggregateUDF::new_from_impl(PgAvg {
        inner: Avg::new(),
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

impl PgAvg {
    fn input_type(t: &DataType) -> DataType {
        match t {
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                DataType::Decimal128(20, 0)
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                DataType::Decimal128(20, 0)
            }
            DataType::Decimal128(..) | DataType::Duration(_) => t.clone(),
            _ => DataType::Float64,
        }
    }
}

impl AggregateUDFImpl for PgAvg {
    fn name(&self) -> &str {
        "avg"
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [t] if t.is_numeric() || matches!(t, DataType::Duration(_) | DataType::Null) => {
                Ok(vec![if t.is_null() {
                    DataType::Float64
                } else {
                    Self::input_type(t)
                }])
            }
            [t] => Err(pg_error(
                "42883",
                format!(
                    "function avg({}) does not exist",
                    crate::types::PgType::of_data_type(t).format()
                ),
            )),
            _ => Err(pg_error("42883", "avg takes one argument")),
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match &args[0] {
            DataType::Decimal128(_, s) => DataType::Decimal128(38, (*s).max(AVERAGE_SCALE)),
            other => self.inner.return_type(std::slice::from_ref(other))?,
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match one_more_digit(&args) {
            Some((wider, scale)) => Ok(Box::new(RoundedAvg {
                inner: self.inner.accumulator(AccumulatorArgs {
                    return_field: wider,
                    ..args
                })?,
                scale,
            })),
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
        match one_more_digit(&args) {
            Some((wider, scale)) => Ok(Box::new(RoundedAvg {
                inner: self.inner.create_groups_accumulator(AccumulatorArgs {
                    return_field: wider,
                    ..args
                })?,
                scale,
            })),
            None => self.inner.create_groups_accumulator(args),
        }
    }

    fn reverse_expr(&self) -> datafusion::logical_expr::ReversedUDAF {
        datafusion::logical_expr::ReversedUDAF::Identical
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        ScalarValue::try_from(data_type)
    }
}

/// For a numeric average: the return field with one more digit (which
/// DataFusion's accumulators truncate at) and the scale to round it to.
fn one_more_digit(args: &AccumulatorArgs) -> Option<(FieldRef, i8)> {
    match args.return_field.data_type() {
        DataType::Decimal128(p, s) if *s < 38 => Some((
            std::sync::Arc::new(
                args.return_field
                    .as_ref()
                    .clone()
                    .with_data_type(DataType::Decimal128(*p, s + 1)),
            ),
            *s,
        )),
        _ => None,
    }
}

/// An average computed to one more digit than shown and rounded half away
/// from zero, as PostgreSQL rounds (DataFusion truncates).
#[derive(Debug)]
struct RoundedAvg<A: ?Sized> {
    inner: Box<A>,
    scale: i8,
}

fn round_last_digit(a: ArrayRef, scale: i8) -> Result<ArrayRef> {
    let d = a.as_primitive::<Decimal128Type>();
    let out: Decimal128Array = d
        .iter()
        .map(|v| {
            v.map(|v| {
                let (q, r) = (v / 10, v % 10);
                if r >= 5 {
                    q + 1
                } else if r <= -5 {
                    q - 1
                } else {
                    q
                }
            })
        })
        .collect();
    Ok(Arc::new(out.with_precision_and_scale(38, scale)?))
}

impl Accumulator for RoundedAvg<dyn Accumulator> {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let v = self.inner.evaluate()?;
        let a = round_last_digit(v.to_array()?, self.scale)?;
        ScalarValue::try_from_array(&a, 0)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

impl GroupsAccumulator for RoundedAvg<dyn GroupsAccumulator> {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> Result<ArrayRef> {
        round_last_digit(self.inner.evaluate(emit_to)?, self.scale)
    }

    fn state(&mut self, emit_to: datafusion::logical_expr::EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_rounds_half_away_from_zero() {
        // 1 / 3 to 20 digits
        assert_eq!(divide(1, 0, 3, 0, 20), Some(33333333333333333333));
        // 2 / 3 rounds up
        assert_eq!(divide(2, 0, 3, 0, 2), Some(67));
        assert_eq!(divide(-2, 0, 3, 0, 2), Some(-67));
        // 7.0 / 2 = 3.5
        assert_eq!(divide(70, 1, 2, 0, 1), Some(35));
        // 1 / 0.25 = 4
        assert_eq!(divide(1, 0, 25, 2, 0), Some(4));
        assert_eq!(divide(i128::MAX, 0, 1, 0, 20), None);
    }
}
