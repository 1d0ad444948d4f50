//! PostgreSQL's number functions where DataFusion's differ or are
//! missing: `round(double precision)` rounds half to even, `trunc(numeric,
//! n)` has n digits, `sign`, `ceiling`, `mod`, `div`, `factorial`, and
//! `gcd`/`lcm` keep their arguments' type.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef, Float64Type, Int64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::udf::pg_error;

/// A function that returns its first argument's type (ints stay ints).
#[derive(Debug, PartialEq, Eq, Hash)]
struct SameType {
    name: &'static str,
    signature: Signature,
    /// DataFusion's function of the same name, for what this one does
    /// not change.
    inner: Option<Arc<ScalarUDF>>,
}

fn is_decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..))
}

fn integer_result(args: &[DataType]) -> DataType {
    if args.contains(&DataType::Int64) {
        DataType::Int64
    } else if args.contains(&DataType::Int32) {
        DataType::Int32
    } else {
        DataType::Int16
    }
}

impl ScalarUDFImpl for SameType {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.own_type(args).ok_or_else(|| {
            DataFusionError::Internal(format!("{}: use return_field_from_args", self.name))
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        // round(numeric, n) and trunc(numeric, n) with a constant n have
        // n digits after the point (none when n is negative).
        if matches!(self.name, "trunc" | "round") {
            if let (Some(DataType::Decimal128(p, s)), Some(Some(n))) =
                (types.first(), args.scalar_arguments.get(1))
            {
                if let Ok(ScalarValue::Int64(Some(n))) = n.cast_to(&DataType::Int64) {
                    let scale = n.clamp(0, 38) as u8;
                    let whole = (*p as i64 - *s as i64 + 1).max(1) as u8;
                    return Ok(Arc::new(Field::new(
                        self.name,
                        DataType::Decimal128(
                            whole.saturating_add(scale).clamp(scale.max(1), 38),
                            scale as i8,
                        ),
                        true,
                    )));
                }
            }
        }
        match (self.own_type(&types), &self.inner) {
            (Some(t), _) => Ok(Arc::new(Field::new(self.name, t, true))),
            (None, Some(inner)) => inner.return_field_from_args(args),
            (None, None) => Err(DataFusionError::Plan(format!(
                "{} takes other arguments",
                self.name
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.invoke(args)
    }
}

impl SameType {
    /// The result type where it is not DataFusion's.
    fn own_type(&self, args: &[DataType]) -> Option<DataType> {
        Some(match (self.name, args) {
            ("mod" | "gcd" | "lcm", a) if a.iter().all(|t| t.is_integer()) => integer_result(a),
            ("mod", [a, b]) if is_decimal(a) || is_decimal(b) => {
                let scale = |t: &DataType| match t {
                    DataType::Decimal128(_, s) => *s,
                    _ => 0,
                };
                DataType::Decimal128(38, scale(a).max(scale(b)))
            }
            ("div", _) => DataType::Decimal128(38, 0),
            ("factorial", _) => DataType::Decimal128(38, 0),
            ("sign", [t]) if is_decimal(t) => DataType::Decimal128(38, 0),
            ("sign", _) => DataType::Float64,
            ("round", [DataType::Float32 | DataType::Float64]) => DataType::Float64,
            // round(numeric) and trunc(numeric) have no digits after the
            // point.
            ("round" | "trunc", [DataType::Decimal128(p, s)]) => {
                DataType::Decimal128((*p as i16 - *s as i16 + 1).clamp(1, 38) as u8, 0)
            }
            ("round" | "trunc", [t, _]) if is_decimal(t) => t.clone(),
            ("ceil" | "floor", [DataType::Decimal128(p, _)]) => DataType::Decimal128(*p, 0),
            _ => return None,
        })
    }

    fn invoke(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let to = args.return_field.data_type().clone();
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out: ArrayRef = match (self.name, types.as_slice()) {
            ("round", [DataType::Float32 | DataType::Float64]) => {
                let f = arrow::compute::cast(&arrays[0], &DataType::Float64)?;
                Arc::new(
                    f.as_primitive::<Float64Type>()
                        .unary::<_, Float64Type>(f64::round_ties_even),
                )
            }
            ("trunc" | "round", [DataType::Decimal128(_, s), ..]) => {
                let round = self.name == "round";
                let digits = match arrays.get(1) {
                    Some(n) => arrow::compute::cast(n, &DataType::Int64)?
                        .as_primitive::<Int64Type>()
                        .iter()
                        .collect(),
                    None => vec![Some(0); arrays[0].len()],
                };
                let d = arrays[0].as_primitive::<Decimal128Type>();
                let out_scale = match &to {
                    DataType::Decimal128(_, os) => *os,
                    _ => *s,
                };
                let overflow = || pg_error("22003", "numeric field overflow");
                let mut values = Vec::with_capacity(d.len());
                for i in 0..d.len() {
                    let n = digits.get(i).copied().flatten();
                    values.push(match n {
                        Some(n) if d.is_valid(i) => Some(
                            round_digits(d.value(i), *s, n, round, out_scale)
                                .ok_or_else(overflow)?,
                        ),
                        _ => None,
                    });
                }
                let precision = match &to {
                    DataType::Decimal128(p, _) => *p,
                    _ => 38,
                };
                let values =
                    Decimal128Array::from(values).with_precision_and_scale(38, out_scale)?;
                values
                    .validate_decimal_precision(precision)
                    .map_err(|_| overflow())?;
                Arc::new(values.with_precision_and_scale(precision, out_scale)?)
            }
            ("sign", [t]) if is_decimal(t) => {
                let d = arrays[0].as_primitive::<Decimal128Type>();
                Arc::new(
                    d.iter()
                        .map(|v| v.map(|v| v.signum()))
                        .collect::<Decimal128Array>()
                        .with_precision_and_scale(38, 0)?,
                )
            }
            ("sign", _) => {
                let f = arrow::compute::cast(&arrays[0], &DataType::Float64)?;
                Arc::new(
                    f.as_primitive::<Float64Type>()
                        .unary::<_, Float64Type>(|v| {
                            if v > 0.0 {
                                1.0
                            } else if v < 0.0 {
                                -1.0
                            } else {
                                v
                            }
                        }),
                )
            }
            ("mod", _) => {
                let (a, b) = (
                    arrow::compute::cast(&arrays[0], &to)?,
                    arrow::compute::cast(&arrays[1], &to)?,
                );
                arrow::compute::kernels::numeric::rem(&a, &b).map_err(|e| match e {
                    arrow::error::ArrowError::DivideByZero => pg_error("22012", "division by zero"),
                    e => e.into(),
                })?
            }
            ("div", _) => {
                let (a, b) = (decimals(&arrays[0])?, decimals(&arrays[1])?);
                let mut out = Vec::with_capacity(a.len());
                for (x, y) in a.into_iter().zip(b) {
                    out.push(match (x, y) {
                        (Some(_), Some((0, _))) => {
                            return Err(pg_error("22012", "division by zero"))
                        }
                        (Some((x, sx)), Some((y, sy))) => {
                            // Align scales, then divide toward zero.
                            let (x, y) = align(x, sx, y, sy)?;
                            Some(x / y)
                        }
                        _ => None,
                    });
                }
                Arc::new(Decimal128Array::from(out).with_precision_and_scale(38, 0)?)
            }
            ("ceil" | "floor", [DataType::Decimal128(_, s)]) => {
                let d = arrays[0].as_primitive::<Decimal128Type>();
                let unit = 10i128.pow((*s).max(0) as u32);
                let up = self.name == "ceil";
                let out: Decimal128Array = d
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            let (q, r) = (v / unit, v % unit);
                            if r == 0 {
                                q
                            } else if up && v > 0 {
                                q + 1
                            } else if !up && v < 0 {
                                q - 1
                            } else {
                                q
                            }
                        })
                    })
                    .collect();
                let p = match &to {
                    DataType::Decimal128(p, _) => *p,
                    _ => 38,
                };
                Arc::new(out.with_precision_and_scale(p, 0)?)
            }
            ("gcd" | "lcm", _) => {
                let Some(inner) = &self.inner else {
                    return Err(DataFusionError::Internal(format!(
                        "{} has no body",
                        self.name
                    )));
                };
                let wide: Vec<ColumnarValue> = args
                    .args
                    .iter()
                    .map(|a| a.cast_to(&DataType::Int64, None))
                    .collect::<Result<_>>()?;
                let field = Arc::new(Field::new("a", DataType::Int64, true));
                let fields = vec![field.clone(), field];
                let r = inner.invoke_with_args(ScalarFunctionArgs {
                    args: wide,
                    arg_fields: fields,
                    number_rows: args.number_rows,
                    return_field: Arc::new(Field::new(self.name, DataType::Int64, true)),
                    config_options: args.config_options.clone(),
                })?;
                let r = r.to_array(args.number_rows)?;
                arrow::compute::cast(&r, &to)
                    .map_err(|_| pg_error("22003", "integer out of range"))?
            }
            ("factorial", _) => {
                let n = arrow::compute::cast(&arrays[0], &DataType::Int64)?;
                let mut out = Vec::with_capacity(n.len());
                for v in n.as_primitive::<Int64Type>().iter() {
                    out.push(match v {
                        Some(v) if v < 0 => {
                            return Err(pg_error(
                                "22023",
                                "factorial of a negative number is undefined",
                            ))
                        }
                        Some(v) if v > 33 => {
                            return Err(pg_error("22003", "value overflows numeric format"))
                        }
                        Some(v) => Some((1..=v as i128).product::<i128>()),
                        None => None,
                    });
                }
                Arc::new(Decimal128Array::from(out).with_precision_and_scale(38, 0)?)
            }
            (_, _) => {
                let Some(inner) = &self.inner else {
                    return Err(DataFusionError::Internal(format!(
                        "{} has no body",
                        self.name
                    )));
                };
                return inner.invoke_with_args(args);
            }
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Each value as an unscaled integer and its scale.
fn decimals(a: &ArrayRef) -> Result<Vec<Option<(i128, i8)>>> {
    Ok(match a.data_type() {
        DataType::Decimal128(_, s) => a
            .as_primitive::<Decimal128Type>()
            .iter()
            .map(|v| v.map(|v| (v, *s)))
            .collect(),
        _ => {
            let v = arrow::compute::cast(a, &DataType::Int64)?;
            v.as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.map(|v| (v as i128, 0)))
                .collect()
        }
    })
}

fn align(x: i128, sx: i8, y: i128, sy: i8) -> Result<(i128, i128)> {
    let overflow = || pg_error("22003", "value overflows numeric format");
    Ok(if sx >= sy {
        (
            x,
            y.checked_mul(10i128.pow((sx - sy) as u32))
                .ok_or_else(overflow)?,
        )
    } else {
        (
            x.checked_mul(10i128.pow((sy - sx) as u32))
                .ok_or_else(overflow)?,
            y,
        )
    })
}

/// `v` (of scale `s`) rounded half away from zero (or truncated) to `n`
/// digits after the point, written in scale `out`; None on overflow.
fn round_digits(v: i128, s: i8, n: i64, round: bool, out: i8) -> Option<i128> {
    let (s, out) = (s as i64, out as i64);
    let cut = (s - n.clamp(-38, s)).clamp(0, 38) as u32;
    let unit = 10i128.checked_pow(cut)?;
    let kept = v / unit;
    let rest = v % unit;
    let kept = if round && rest.unsigned_abs() * 2 >= unit.unsigned_abs() && cut > 0 {
        kept + rest.signum()
    } else {
        kept
    };
    // `kept` counts units of 10^-(s - cut); move to the result's scale.
    let at = s - cut as i64;
    if out >= at {
        kept.checked_mul(10i128.checked_pow((out - at) as u32)?)
    } else {
        Some(kept / 10i128.checked_pow((at - out) as u32)?)
    }
}

/// The functions to register, replacing DataFusion's of the same names.
pub(crate) fn functions(datafusion: &dyn Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let same = |name: &'static str, n: Option<usize>| {
        ScalarUDF::new_from_impl(SameType {
            name,
            signature: match n {
                Some(n) => Signature::any(n, Volatility::Immutable),
                None => Signature::variadic_any(Volatility::Immutable),
            },
            inner: datafusion(name),
        })
    };
    let mut out = vec![
        same("round", None),
        same("trunc", None),
        same("sign", Some(1)),
        same("mod", Some(2)),
        same("div", Some(2)),
        same("factorial", Some(1)),
        same("gcd", Some(2)),
        same("lcm", Some(2)),
        same("floor", Some(1)),
    ];
    out.push(
        ScalarUDF::new_from_impl(SameType {
            name: "ceil",
            signature: Signature::any(1, Volatility::Immutable),
            inner: datafusion("ceil"),
        })
        .with_aliases(["ceiling"]),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::round_digits;

    #[test]
    fn rounds_and_truncates_numerics_as_postgresql() {
        // round(15.5, -1) = 20, trunc(15.5, -1) = 10
        assert_eq!(round_digits(155, 1, -1, true, 0), Some(20));
        assert_eq!(round_digits(155, 1, -1, false, 0), Some(10));
        // round(2.5, 3) = 2.500
        assert_eq!(round_digits(25, 1, 3, true, 3), Some(2500));
        // round(-2.5) = -3, round(2.45, 1) = 2.5
        assert_eq!(round_digits(-25, 1, 0, true, 0), Some(-3));
        assert_eq!(round_digits(245, 2, 1, true, 1), Some(25));
    }
}
