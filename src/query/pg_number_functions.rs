//! PostgreSQL's number functions where DataFusion's differ or are
//! missing: `round(double precision)` rounds half to even, `trunc(numeric,
//! n)` has n digits, `sign`, `ceiling`, `mod`, `div`, `factorial`, and
//! `gcd`/`lcm` keep their arguments' type. And those DataFusion lacks:
//! the trigonometric functions in degrees (`sind`, `cosd`, `tand`, `cotd`,
//! `asind`, `acosd`, `atand`, `atan2d`, exact at the angles PostgreSQL
//! makes exact), `scale` and `min_scale` of numerics, `num_nulls` and
//! `num_nonnulls`, and `pg_size_pretty`.

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

const RADIANS_PER_DEGREE: f64 = 0.017_453_292_519_943_295;

/// The trigonometric functions in degrees as PostgreSQL's float.c
/// computes them: the argument is brought into the first quadrant, and
/// sines and cosines there are scaled so that 30, 45, 60 and 90 degrees
/// give exact results.
mod degrees {
    use super::RADIANS_PER_DEGREE;

    fn sin_30() -> f64 {
        (30.0 * RADIANS_PER_DEGREE).sin()
    }

    fn one_minus_cos_60() -> f64 {
        1.0 - (60.0 * RADIANS_PER_DEGREE).cos()
    }

    fn sind_0_to_30(x: f64) -> f64 {
        ((x * RADIANS_PER_DEGREE).sin() / sin_30()) / 2.0
    }

    fn cosd_0_to_60(x: f64) -> f64 {
        1.0 - ((1.0 - (x * RADIANS_PER_DEGREE).cos()) / one_minus_cos_60()) / 2.0
    }

    fn sind_q1(x: f64) -> f64 {
        match x <= 30.0 {
            true => sind_0_to_30(x),
            false => cosd_0_to_60(90.0 - x),
        }
    }

    fn cosd_q1(x: f64) -> f64 {
        match x <= 60.0 {
            true => cosd_0_to_60(x),
            false => sind_0_to_30(90.0 - x),
        }
    }

    /// The angle in [0, 90] and the sign of the result, for sine (or, with
    /// `cosine`, cosine); the argument is finite.
    fn quadrant(x: f64, cosine: bool, tangent: bool) -> (f64, f64) {
        let (mut x, mut sign) = (x % 360.0, 1.0);
        if x < 0.0 {
            x = -x;
            if !cosine {
                sign = -sign;
            }
        }
        if x > 180.0 {
            x = 360.0 - x;
            if !cosine {
                sign = -sign;
            }
        }
        if x > 90.0 {
            x = 180.0 - x;
            if cosine || tangent {
                sign = -sign;
            }
        }
        (x, sign)
    }

    pub fn sind(x: f64) -> f64 {
        let (x, sign) = quadrant(x, false, false);
        sign * sind_q1(x)
    }

    pub fn cosd(x: f64) -> f64 {
        let (x, sign) = quadrant(x, true, false);
        sign * cosd_q1(x)
    }

    pub fn tand(x: f64) -> f64 {
        let (x, sign) = quadrant(x, false, true);
        let tan_45 = sind_q1(45.0) / cosd_q1(45.0);
        let r = sign * ((sind_q1(x) / cosd_q1(x)) / tan_45);
        // -0 shows as 0, as in PostgreSQL.
        if r == 0.0 {
            0.0
        } else {
            r
        }
    }

    pub fn cotd(x: f64) -> f64 {
        let (x, sign) = quadrant(x, false, true);
        let cot_45 = cosd_q1(45.0) / sind_q1(45.0);
        let r = sign * ((cosd_q1(x) / sind_q1(x)) / cot_45);
        if r == 0.0 {
            0.0
        } else {
            r
        }
    }

    fn asind_q1(x: f64) -> f64 {
        match x <= 0.5 {
            true => (x.asin() / 0.5f64.asin()) * 30.0,
            false => 90.0 - (x.acos() / 0.5f64.acos()) * 60.0,
        }
    }

    fn acosd_q1(x: f64) -> f64 {
        match x <= 0.5 {
            true => 90.0 - (x.asin() / 0.5f64.asin()) * 30.0,
            false => (x.acos() / 0.5f64.acos()) * 60.0,
        }
    }

    pub fn asind(x: f64) -> f64 {
        match x >= 0.0 {
            true => asind_q1(x),
            false => -asind_q1(-x),
        }
    }

    pub fn acosd(x: f64) -> f64 {
        match x >= 0.0 {
            true => acosd_q1(x),
            false => 90.0 + asind_q1(-x),
        }
    }

    pub fn atand(x: f64) -> f64 {
        (x.atan() / 1.0f64.atan()) * 45.0
    }

    pub fn atan2d(y: f64, x: f64) -> f64 {
        (y.atan2(x) / 1.0f64.atan()) * 45.0
    }
}

fn floats(a: &ArrayRef) -> Result<arrow::array::Float64Array> {
    Ok(arrow::compute::cast(a, &DataType::Float64)?
        .as_primitive::<Float64Type>()
        .clone())
}

/// A function of one float in degrees: `inverse` ones take [-1, 1], the
/// others any finite number (22003 otherwise, as PostgreSQL says).
fn degree_function(a: &[ArrayRef], f: fn(f64) -> f64, inverse: bool) -> Result<ArrayRef> {
    let x = floats(&a[0])?;
    let mut out = Vec::with_capacity(x.len());
    for v in x.iter() {
        out.push(match v {
            Some(v) if v.is_nan() => Some(f64::NAN),
            Some(v) if (inverse && !(-1.0..=1.0).contains(&v)) || v.is_infinite() => {
                return Err(pg_error("22003", "input is out of range"))
            }
            Some(v) => Some(f(v)),
            None => None,
        });
    }
    Ok(Arc::new(arrow::array::Float64Array::from(out)))
}

fn atan2d(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (y, x) = (floats(&a[0])?, floats(&a[1])?);
    Ok(Arc::new(
        y.iter()
            .zip(x.iter())
            .map(|(y, x)| Some(degrees::atan2d(y?, x?)))
            .collect::<arrow::array::Float64Array>(),
    ))
}

/// `scale(numeric)`: digits after the point; `min_scale`: how many of them
/// the value needs.
fn numeric_scale(a: &[ArrayRef], minimal: bool) -> Result<ArrayRef> {
    let (values, scale) = match a[0].data_type() {
        DataType::Decimal128(_, s) => (a[0].as_primitive::<Decimal128Type>().clone(), *s),
        t if t.is_integer() => {
            let cast = arrow::compute::cast(&a[0], &DataType::Decimal128(38, 0))?;
            (cast.as_primitive::<Decimal128Type>().clone(), 0)
        }
        other => {
            return Err(pg_error(
                "42883",
                format!("function scale({other}) does not exist"),
            ))
        }
    };
    Ok(Arc::new(arrow::array::Int32Array::from_iter(
        values.iter().map(|v| {
            let v = v?;
            let mut s = i32::from(scale.max(0));
            if minimal {
                let mut v = v;
                while s > 0 && v % 10 == 0 {
                    v /= 10;
                    s -= 1;
                }
            }
            Some(s)
        }),
    )))
}

/// PostgreSQL's `pg_size_pretty(bigint)`: bytes below 10 kB, then the
/// largest unit that keeps the number below 20 * 1024, rounded half away
/// from zero.
pub(crate) fn size_pretty(mut size: i64) -> String {
    // (name, limit, rounds, bits)
    const UNITS: [(&str, i64, bool, u32); 6] = [
        ("bytes", 10 * 1024, false, 0),
        ("kB", 20 * 1024 - 1, true, 10),
        ("MB", 20 * 1024 - 1, true, 20),
        ("GB", 20 * 1024 - 1, true, 30),
        ("TB", 20 * 1024 - 1, true, 40),
        ("PB", 20 * 1024 - 1, true, 50),
    ];
    for (i, &(name, limit, rounds, bits)) in UNITS.iter().enumerate() {
        let next = UNITS.get(i + 1);
        if next.is_none() || size.unsigned_abs() < limit as u64 {
            if rounds {
                size = (size + if size < 0 { -1 } else { 1 }) / 2;
            }
            return format!("{size} {name}");
        }
        if let Some(&(_, _, next_rounds, next_bits)) = next {
            let shift = next_bits - bits - u32::from(next_rounds) + u32::from(rounds);
            size /= 1i64 << shift;
        }
    }
    format!("{size} PB")
}

fn pg_size_pretty(a: &[ArrayRef]) -> Result<ArrayRef> {
    let sizes = arrow::compute::cast(&a[0], &DataType::Int64)?;
    Ok(Arc::new(arrow::array::StringArray::from_iter(
        sizes
            .as_primitive::<Int64Type>()
            .iter()
            .map(|s| s.map(size_pretty)),
    )))
}

/// `num_nulls(...)` (or, `nonnulls`, `num_nonnulls(...)`): how many
/// arguments are NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CountNulls {
    name: &'static str,
    signature: Signature,
    nonnulls: bool,
}

impl ScalarUDFImpl for CountNulls {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut counts = vec![0i32; n];
        for a in &arrays {
            // A NULL literal's array has no null buffer: its logical
            // nulls say every row is NULL.
            let nulls = a.logical_nulls();
            for (row, count) in counts.iter_mut().enumerate() {
                let null = nulls.as_ref().is_some_and(|n| n.is_null(row));
                if null != self.nonnulls {
                    *count += 1;
                }
            }
        }
        Ok(ColumnarValue::Array(Arc::new(
            arrow::array::Int32Array::from(counts),
        )))
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
    let float = |name: &'static str, compute: fn(&[ArrayRef]) -> Result<ArrayRef>| {
        super::udf::field_udf(
            name,
            Signature::any(1, Volatility::Immutable),
            Field::new(name, DataType::Float64, true),
            compute,
        )
    };
    out.extend([
        float("sind", |a| degree_function(a, degrees::sind, false)),
        float("cosd", |a| degree_function(a, degrees::cosd, false)),
        float("tand", |a| degree_function(a, degrees::tand, false)),
        float("cotd", |a| degree_function(a, degrees::cotd, false)),
        float("asind", |a| degree_function(a, degrees::asind, true)),
        float("acosd", |a| degree_function(a, degrees::acosd, true)),
        float("atand", |a| degree_function(a, degrees::atand, false)),
        super::udf::field_udf(
            "atan2d",
            Signature::any(2, Volatility::Immutable),
            Field::new("atan2d", DataType::Float64, true),
            atan2d,
        ),
        super::udf::field_udf(
            "scale",
            Signature::any(1, Volatility::Immutable),
            Field::new("scale", DataType::Int32, true),
            |a| numeric_scale(a, false),
        ),
        super::udf::field_udf(
            "min_scale",
            Signature::any(1, Volatility::Immutable),
            Field::new("min_scale", DataType::Int32, true),
            |a| numeric_scale(a, true),
        ),
        super::udf::field_udf(
            "pg_size_pretty",
            Signature::any(1, Volatility::Immutable),
            Field::new("pg_size_pretty", DataType::Utf8, true),
            pg_size_pretty,
        ),
    ]);
    for (name, nonnulls) in [("num_nulls", false), ("num_nonnulls", true)] {
        out.push(ScalarUDF::new_from_impl(CountNulls {
            name,
            signature: Signature::variadic_any(Volatility::Immutable),
            nonnulls,
        }));
    }
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
    use super::{degrees, round_digits, size_pretty};

    #[test]
    fn degrees_are_exact_where_postgresql_makes_them_exact() {
        assert_eq!(degrees::sind(30.0), 0.5);
        assert_eq!(degrees::cosd(60.0), 0.5);
        assert_eq!(degrees::tand(45.0), 1.0);
        assert_eq!(degrees::cotd(45.0), 1.0);
        assert_eq!(degrees::sind(-90.0), -1.0);
        assert_eq!(degrees::cosd(180.0), -1.0);
        assert_eq!(degrees::tand(135.0), -1.0);
        assert_eq!(degrees::asind(0.5), 30.0);
        assert_eq!(degrees::acosd(0.5), 60.0);
        assert_eq!(degrees::acosd(-0.5), 120.0);
        assert_eq!(degrees::atand(1.0), 45.0);
        assert_eq!(degrees::atan2d(1.0, 1.0), 45.0);
    }

    #[test]
    fn sizes_are_pretty_as_postgresql_prints_them() {
        assert_eq!(size_pretty(10240), "10 kB");
        assert_eq!(size_pretty(10239), "10239 bytes");
        assert_eq!(size_pretty(20 * 1024 * 1024), "20 MB");
        assert_eq!(size_pretty(-1_000_000_000), "-954 MB");
        assert_eq!(size_pretty(i64::MAX), "8192 PB");
    }

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
