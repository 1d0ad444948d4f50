//! PostgreSQL's date and time functions where DataFusion's differ or are
//! missing: `to_char` (PostgreSQL's patterns, also of numbers and
//! intervals), `to_timestamp(text, format)`, `to_timestamp(seconds)`,
//! `to_date`, `extract` (a `numeric`, exact), `date_part` (a `double
//! precision`), `make_date`,
//! `make_timestamp`, `make_interval`, `age`, `justify_hours`,
//! `justify_days`, `justify_interval`, `isfinite`, and `now()` (a
//! `timestamptz` in microseconds).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Decimal128Array, Float64Array,
    IntervalMonthDayNanoArray, StringArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float64Type, Int64Type, IntervalMonthDayNanoType,
    TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::temporal::interval_type;
use super::udf::{field_udf, pg_error, texts};
use crate::types::datetime::{
    civil_from_days, days_from_civil, days_in_month, DATE_INFINITY, DATE_NEG_INFINITY,
    TIMESTAMP_INFINITY, TIMESTAMP_NEG_INFINITY, US_PER_DAY, US_PER_SEC,
};
use crate::types::format::{format_interval, format_timestamp, parse_with_format};
use crate::types::interval::Interval;
use crate::types::number_format::{format_number, NumberValue};
use crate::types::UTC;

fn timestamptz() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from(UTC)))
}

/// Microseconds since 1970 of a date or timestamp column's values.
fn micros_of(a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    Ok(match a.data_type() {
        DataType::Date32 => a
            .as_primitive::<Date32Type>()
            .iter()
            .map(|d| d.map(|d| d as i64 * US_PER_DAY))
            .collect(),
        DataType::Timestamp(_, _) => {
            let t = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            t.as_primitive::<TimestampMicrosecondType>()
                .iter()
                .collect()
        }
        other => {
            return Err(pg_error(
                "42883",
                format!(
                    "function does not take {}",
                    crate::types::PgType::of_data_type(other).format()
                ),
            ))
        }
    })
}

/// `to_char(value, format)`.
fn to_char(a: &[ArrayRef]) -> Result<ArrayRef> {
    let formats = texts(&a[1])?;
    let value = &a[0];
    let n = value.len();
    let format_at = |i: usize| if formats.len() == 1 { 0 } else { i };
    let mut out = Vec::with_capacity(n);
    match value.data_type() {
        DataType::Date32 | DataType::Timestamp(_, _) => {
            let with_zone = matches!(value.data_type(), DataType::Timestamp(_, Some(_)));
            for (i, us) in micros_of(value)?.into_iter().enumerate() {
                let f = format_at(i);
                out.push(match us {
                    Some(us) if formats.is_valid(f) => {
                        Some(format_timestamp(us, formats.value(f), with_zone))
                    }
                    _ => None,
                });
            }
        }
        DataType::Interval(_) => {
            let iv = value.as_primitive::<IntervalMonthDayNanoType>();
            for i in 0..n {
                let f = format_at(i);
                out.push(if iv.is_null(i) || formats.is_null(f) {
                    None
                } else {
                    let v = Interval::from_arrow(iv.value(i));
                    Some(
                        format_interval(v.months, v.days, v.micros, formats.value(f))
                            .map_err(|e| pg_error("22007", e.0))?,
                    )
                });
            }
        }
        t if t.is_numeric() => {
            let exact = match t {
                DataType::Decimal128(_, scale) => {
                    let d = value.as_primitive::<Decimal128Type>();
                    (0..n)
                        .map(|i| {
                            d.is_valid(i).then(|| {
                                let mut s = String::new();
                                crate::types::text::write_decimal(d.value(i), *scale, &mut s);
                                s
                            })
                        })
                        .collect::<Vec<_>>()
                }
                t if t.is_integer() => {
                    let v = arrow::compute::cast(value, &DataType::Int64)?;
                    v.as_primitive::<Int64Type>()
                        .iter()
                        .map(|v| v.map(|v| v.to_string()))
                        .collect()
                }
                _ => vec![None; n],
            };
            let floats = arrow::compute::cast(value, &DataType::Float64)?;
            let floats = floats.as_primitive::<Float64Type>();
            // The significant digits the float type holds (DBL_DIG, FLT_DIG).
            let digits = match t {
                DataType::Float32 | DataType::Float16 => 6,
                _ => 15,
            };
            for (i, exact) in exact.iter().enumerate().take(n) {
                let f = format_at(i);
                out.push(if floats.is_null(i) || formats.is_null(f) {
                    None
                } else {
                    let value = match exact {
                        Some(e) => NumberValue::Exact(e),
                        None => NumberValue::Float {
                            value: floats.value(i),
                            digits,
                        },
                    };
                    Some(
                        format_number(value, formats.value(f))
                            .map_err(|e| pg_error(e.sqlstate, e.message))?,
                    )
                });
            }
        }
        other => {
            return Err(pg_error(
                "42883",
                format!(
                    "function to_char({}, unknown) does not exist",
                    crate::types::PgType::of_data_type(other).format()
                ),
            ))
        }
    }
    Ok(Arc::new(StringArray::from(out)))
}

/// `to_timestamp(seconds)`, `to_timestamp(text)` and
/// `to_timestamp(text, format)`: a timestamptz.
fn to_timestamp(a: &[ArrayRef]) -> Result<ArrayRef> {
    let out: Vec<Option<i64>> = match (a.len(), a[0].data_type()) {
        (1, t) if t.is_numeric() => {
            let f = arrow::compute::cast(&a[0], &DataType::Float64)?;
            f.as_primitive::<Float64Type>()
                .iter()
                .map(|v| {
                    v.map(|v| match v {
                        v if v == f64::INFINITY => TIMESTAMP_INFINITY,
                        v if v == f64::NEG_INFINITY => TIMESTAMP_NEG_INFINITY,
                        v => (v * 1e6).round() as i64,
                    })
                })
                .collect()
        }
        (1, _) => {
            let t = texts(&a[0])?;
            t.iter()
                .map(|v| {
                    v.map(|v| crate::types::datetime::parse_timestamp(v, true))
                        .transpose()
                })
                .collect::<std::result::Result<_, _>>()?
        }
        _ => {
            let (t, f) = (texts(&a[0])?, texts(&a[1])?);
            let mut out = Vec::with_capacity(t.len());
            for i in 0..t.len() {
                let fi = if f.len() == 1 { 0 } else { i };
                out.push(if t.is_null(i) || f.is_null(fi) {
                    None
                } else {
                    Some(
                        parse_with_format(t.value(i), f.value(fi))
                            .map_err(|e| pg_error("22007", e.0))?,
                    )
                });
            }
            out
        }
    };
    Ok(Arc::new(
        TimestampMicrosecondArray::from(out).with_timezone(UTC),
    ))
}

fn to_date(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (t, f) = (texts(&a[0])?, texts(&a[1])?);
    let mut out = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        let fi = if f.len() == 1 { 0 } else { i };
        out.push(if t.is_null(i) || f.is_null(fi) {
            None
        } else {
            let us =
                parse_with_format(t.value(i), f.value(fi)).map_err(|e| pg_error("22007", e.0))?;
            Some(us.div_euclid(US_PER_DAY) as i32)
        });
    }
    Ok(Arc::new(Date32Array::from(out)))
}

/// A field of a date, time or interval as `extract` gives it: the value
/// scaled by 10^scale, and the scale.
fn extract_value(field: &str, t: &DataType, a: &ArrayRef, i: usize) -> Result<Option<(i128, i8)>> {
    if a.is_null(i) {
        return Ok(None);
    }
    let unsupported = || {
        pg_error(
            "0A000",
            format!(
                "unit \"{field}\" not supported for type {}",
                crate::types::PgType::of_data_type(t).format()
            ),
        )
    };
    if let DataType::Interval(_) = t {
        let v = Interval::from_arrow(a.as_primitive::<IntervalMonthDayNanoType>().value(i));
        let secs_in_day = v.micros;
        return Ok(Some(match field {
            "epoch" => (
                (v.months as i128 / 12 * 365 * 86_400 + v.months as i128 % 12 * 30 * 86_400)
                    * 1_000_000
                    + v.months as i128 / 12 * 21_600 * 1_000_000
                    + v.days as i128 * 86_400_000_000
                    + v.micros as i128,
                6,
            ),
            "year" => ((v.months / 12) as i128, 0),
            "month" => ((v.months % 12) as i128, 0),
            "day" => (v.days as i128, 0),
            "hour" => ((secs_in_day / 3_600_000_000) as i128, 0),
            "minute" => ((secs_in_day / 60_000_000 % 60) as i128, 0),
            "second" => ((secs_in_day % 60_000_000) as i128, 6),
            "millisecond" | "milliseconds" => ((secs_in_day % 60_000_000) as i128, 3),
            "microsecond" | "microseconds" => ((secs_in_day % 60_000_000) as i128, 0),
            _ => return Err(unsupported()),
        }));
    }
    let (us, is_date) = match t {
        DataType::Date32 => (
            a.as_primitive::<Date32Type>().value(i) as i64 * US_PER_DAY,
            true,
        ),
        DataType::Timestamp(..) => (micros_of(&a.slice(i, 1))?[0].unwrap_or(0), false),
        _ => return Err(unsupported()),
    };
    let days = us.div_euclid(US_PER_DAY);
    let in_day = us.rem_euclid(US_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let weekday = (days + 4).rem_euclid(7) as i128;
    let time_field = matches!(
        field,
        "hour"
            | "minute"
            | "second"
            | "millisecond"
            | "milliseconds"
            | "microsecond"
            | "microseconds"
    );
    if is_date && time_field {
        return Err(unsupported());
    }
    Ok(Some(match field {
        "year" => (if y <= 0 { (y - 1) as i128 } else { y as i128 }, 0),
        "month" => (m as i128, 0),
        "day" => (d as i128, 0),
        "hour" => ((in_day / 3_600_000_000) as i128, 0),
        "minute" => ((in_day / 60_000_000 % 60) as i128, 0),
        "second" => ((in_day % 60_000_000) as i128, 6),
        "millisecond" | "milliseconds" => ((in_day % 60_000_000) as i128, 3),
        "microsecond" | "microseconds" => ((in_day % 60_000_000) as i128, 0),
        "epoch" if is_date => ((days * 86_400) as i128, 0),
        "epoch" => (us as i128, 6),
        "dow" => (weekday, 0),
        "isodow" => (if weekday == 0 { 7 } else { weekday }, 0),
        "doy" => ((days - days_from_civil(y, 1, 1) + 1) as i128, 0),
        "quarter" => (((m - 1) / 3 + 1) as i128, 0),
        "week" => {
            let weekday_mon0 = (days + 3).rem_euclid(7);
            let thursday = days - weekday_mon0 + 3;
            let (iy, _, _) = civil_from_days(thursday);
            (((thursday - days_from_civil(iy, 1, 1)) / 7 + 1) as i128, 0)
        }
        "isoyear" => {
            let weekday_mon0 = (days + 3).rem_euclid(7);
            (civil_from_days(days - weekday_mon0 + 3).0 as i128, 0)
        }
        "decade" => (y.div_euclid(10) as i128, 0),
        "century" => (
            if y > 0 {
                (y + 99) / 100
            } else {
                -((99 - (y - 1)) / 100)
            } as i128,
            0,
        ),
        "millennium" => (
            if y > 0 {
                (y + 999) / 1000
            } else {
                -((999 - (y - 1)) / 1000)
            } as i128,
            0,
        ),
        "julian" if is_date => ((days + 2_440_588) as i128, 0),
        // The session's zone is UTC: a timestamptz is 0 seconds off it.
        "timezone" | "timezone_hour" | "timezone_minute"
            if matches!(t, DataType::Timestamp(_, Some(_))) =>
        {
            (0, 0)
        }
        _ => return Err(unsupported()),
    }))
}

fn field_name(a: &ArrayRef) -> Result<String> {
    let t = texts(a)?;
    if t.is_empty() || t.is_null(0) {
        return Err(pg_error("22023", "the field of extract must be given"));
    }
    Ok(t.value(0).to_lowercase())
}

/// The scale of `extract(field FROM ...)`'s numeric.
fn extract_scale(field: &str, t: &DataType) -> i8 {
    match (field, t) {
        ("epoch", DataType::Date32) => 0,
        ("second" | "epoch", _) => 6,
        ("millisecond" | "milliseconds", _) => 3,
        _ => 0,
    }
}

/// `extract(field FROM x)`: an exact numeric.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Extract {
    signature: Signature,
    float: bool,
}

impl ScalarUDFImpl for Extract {
    fn name(&self) -> &str {
        if self.float {
            "date_part"
        } else {
            "extract"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(if self.float {
            DataType::Float64
        } else {
            DataType::Decimal128(38, 6)
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        let t = if self.float {
            DataType::Float64
        } else {
            let field = args
                .scalar_arguments
                .first()
                .and_then(|s| *s)
                .and_then(|s| match s {
                    ScalarValue::Utf8(Some(f)) => Some(f.to_lowercase()),
                    _ => None,
                })
                .unwrap_or_default();
            let of = args
                .arg_fields
                .get(1)
                .map(|f| f.data_type().clone())
                .unwrap_or(DataType::Null);
            DataType::Decimal128(38, extract_scale(&field, &of))
        };
        Ok(Arc::new(Field::new(self.name(), t, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let field_arr = args.args[0].to_array(1)?;
        let field = field_name(&field_arr)?;
        let values = args.args[1].to_array(args.number_rows)?;
        let t = values.data_type().clone();
        let mut raw = Vec::with_capacity(values.len());
        for i in 0..values.len() {
            raw.push(extract_value(&field, &t, &values, i)?);
        }
        let out: ArrayRef = if self.float {
            Arc::new(Float64Array::from(
                raw.iter()
                    .map(|v| v.map(|(x, s)| x as f64 / 10f64.powi(s as i32)))
                    .collect::<Vec<_>>(),
            ))
        } else {
            let scale = match args.return_field.data_type() {
                DataType::Decimal128(_, s) => *s,
                _ => 6,
            };
            let d: Decimal128Array = raw
                .iter()
                .map(|v| v.map(|(x, s)| x * 10i128.pow((scale - s).max(0) as u32)))
                .collect();
            Arc::new(d.with_precision_and_scale(38, scale)?)
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

super::udf::cached_udf!(
    extract_udf,
    ScalarUDF::new_from_impl(Extract {
        signature: Signature::any(2, Volatility::Immutable),
        float: false,
    })
);

fn ints(a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let v = arrow::compute::cast(a, &DataType::Int64)?;
    Ok(v.as_primitive::<Int64Type>().iter().collect())
}

fn floats(a: &ArrayRef) -> Result<Vec<Option<f64>>> {
    let v = arrow::compute::cast(a, &DataType::Float64)?;
    Ok(v.as_primitive::<Float64Type>().iter().collect())
}

fn checked_date(y: i64, m: i64, d: i64) -> Result<i64> {
    let ok = y != 0 && (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m as u32) as i64;
    if !ok {
        return Err(pg_error(
            "22008",
            format!("date field value out of range: {y}-{m:02}-{d:02}"),
        ));
    }
    Ok(days_from_civil(
        if y < 0 { y + 1 } else { y },
        m as u32,
        d as u32,
    ))
}

fn make_date(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (y, m, d) = (ints(&a[0])?, ints(&a[1])?, ints(&a[2])?);
    let mut out = Vec::with_capacity(y.len());
    for i in 0..y.len() {
        out.push(match (y[i], m[i], d[i]) {
            (Some(y), Some(m), Some(d)) => Some(checked_date(y, m, d)? as i32),
            _ => None,
        });
    }
    Ok(Arc::new(Date32Array::from(out)))
}

fn make_timestamp(a: &[ArrayRef]) -> Result<ArrayRef> {
    let parts: Vec<Vec<Option<i64>>> = a[..5].iter().map(ints).collect::<Result<_>>()?;
    let secs = floats(&a[5])?;
    let mut out = Vec::with_capacity(secs.len());
    for i in 0..secs.len() {
        let p: Option<Vec<i64>> = parts.iter().map(|c| c[i]).collect();
        out.push(match (p, secs[i]) {
            (Some(p), Some(s)) => {
                if !(0..=24).contains(&p[3])
                    || !(0..=59).contains(&p[4])
                    || !(0.0..=60.0).contains(&s)
                {
                    return Err(pg_error(
                        "22008",
                        format!(
                            "date field value out of range: {}-{:02}-{:02} {:02}:{:02}:{s}",
                            p[0], p[1], p[2], p[3], p[4]
                        ),
                    ));
                }
                let days = checked_date(p[0], p[1], p[2])?;
                Some(
                    days * US_PER_DAY
                        + (p[3] * 3600 + p[4] * 60) * US_PER_SEC
                        + (s * 1e6).round() as i64,
                )
            }
            _ => None,
        });
    }
    Ok(Arc::new(TimestampMicrosecondArray::from(out)))
}

fn make_interval(a: &[ArrayRef]) -> Result<ArrayRef> {
    let n = a.first().map(|c| c.len()).unwrap_or(1);
    let get = |k: usize| -> Result<Vec<Option<f64>>> {
        match a.get(k) {
            Some(c) => floats(c),
            None => Ok(vec![Some(0.0); n]),
        }
    };
    let (years, months, weeks, days, hours, mins, secs) = (
        get(0)?,
        get(1)?,
        get(2)?,
        get(3)?,
        get(4)?,
        get(5)?,
        get(6)?,
    );
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let v = [
            years[i], months[i], weeks[i], days[i], hours[i], mins[i], secs[i],
        ];
        if v.iter().any(|x| x.is_none()) {
            out.push(None);
            continue;
        }
        let v: Vec<f64> = v.iter().map(|x| x.unwrap_or(0.0)).collect();
        out.push(Some(
            Interval {
                months: (v[0] * 12.0 + v[1]) as i32,
                days: (v[2] * 7.0 + v[3]) as i32,
                micros: ((v[4] * 3600.0 + v[5] * 60.0 + v[6]) * 1e6).round() as i64,
            }
            .to_arrow(),
        ));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

/// `age(a, b)`: years, months and days between two timestamps, as
/// PostgreSQL subtracts them field by field.
fn age(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (l, r) = (micros_of(&a[0])?, micros_of(&a[1])?);
    let mut out = Vec::with_capacity(l.len());
    for (l, r) in l.into_iter().zip(r) {
        out.push(match (l, r) {
            (Some(l), Some(r)) => Some(age_of(l, r).to_arrow()),
            _ => None,
        });
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

fn age_of(l: i64, r: i64) -> Interval {
    let (neg, a, b) = if l < r { (true, r, l) } else { (false, l, r) };
    let split = |us: i64| {
        let days = us.div_euclid(US_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        (y, m as i64, d as i64, us.rem_euclid(US_PER_DAY))
    };
    let (y1, m1, d1, t1) = split(a);
    let (y2, m2, d2, t2) = split(b);
    let mut time = t1 - t2;
    let mut day = d1 - d2;
    let mut month = m1 - m2;
    let mut year = y1 - y2;
    if time < 0 {
        time += US_PER_DAY;
        day -= 1;
    }
    if day < 0 {
        // Borrow the days of the earlier date's month, as PostgreSQL does.
        day += days_in_month(y2, m2 as u32) as i64;
        month -= 1;
    }
    if month < 0 {
        month += 12;
        year -= 1;
    }
    let v = Interval {
        months: (year * 12 + month) as i32,
        days: day as i32,
        micros: time,
    };
    if neg {
        v.checked_neg().unwrap_or(v)
    } else {
        v
    }
}

fn justify(a: &[ArrayRef], how: fn(Interval) -> Interval) -> Result<ArrayRef> {
    let iv = a[0].as_primitive::<IntervalMonthDayNanoType>();
    let out: IntervalMonthDayNanoArray = iv
        .iter()
        .map(|v| v.map(|v| how(Interval::from_arrow(v)).to_arrow()))
        .collect();
    Ok(Arc::new(out))
}

fn is_finite(a: &[ArrayRef]) -> Result<ArrayRef> {
    let out: BooleanArray = match a[0].data_type() {
        DataType::Date32 => a[0]
            .as_primitive::<Date32Type>()
            .iter()
            .map(|v| v.map(|v| v != DATE_INFINITY && v != DATE_NEG_INFINITY))
            .collect(),
        DataType::Interval(_) => a[0]
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|v| v.map(|_| true))
            .collect(),
        _ => micros_of(&a[0])?
            .into_iter()
            .map(|v| v.map(|v| v != TIMESTAMP_INFINITY && v != TIMESTAMP_NEG_INFINITY))
            .collect(),
    };
    Ok(Arc::new(out))
}

/// `now()` (and `current_timestamp`): the statement's start as a
/// `timestamptz` in microseconds, as PostgreSQL gives it; DataFusion's is
/// in nanoseconds with no zone, which clients show as a `timestamp`. As
/// `clock_timestamp()` (`at_call`), the time when it is computed (once
/// per batch of rows).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Now {
    name: &'static str,
    signature: Signature,
    aliases: Vec<String>,
    at_call: bool,
}

impl ScalarUDFImpl for Now {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(timestamptz())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        // Planning replaces the call by the statement's start (simplify).
        Ok(ColumnarValue::Scalar(ScalarValue::TimestampMicrosecond(
            Some(chrono::Utc::now().timestamp_micros()),
            Some(Arc::from(UTC)),
        )))
    }

    fn simplify(
        &self,
        args: Vec<datafusion::logical_expr::Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> Result<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        use datafusion::logical_expr::simplify::ExprSimplifyResult;
        let Some(start) = info.query_execution_start_time().filter(|_| !self.at_call) else {
            return Ok(ExprSimplifyResult::Original(args));
        };
        Ok(ExprSimplifyResult::Simplified(
            datafusion::logical_expr::Expr::Literal(
                ScalarValue::TimestampMicrosecond(
                    Some(start.timestamp_micros()),
                    Some(Arc::from(UTC)),
                ),
                None,
            ),
        ))
    }
}

/// The functions to register, replacing DataFusion's of the same names.
pub(crate) fn functions() -> Vec<ScalarUDF> {
    let any = |n| Signature::any(n, Volatility::Immutable);
    let field = |t: DataType| Field::new("", t, true);
    vec![
        field_udf("to_char", any(2), field(DataType::Utf8), to_char),
        field_udf(
            "to_timestamp",
            Signature::variadic_any(Volatility::Immutable),
            field(timestamptz()),
            to_timestamp,
        ),
        field_udf("to_date", any(2), field(DataType::Date32), to_date),
        extract_udf().as_ref().clone(),
        ScalarUDF::new_from_impl(Extract {
            signature: any(2),
            float: true,
        }),
        field_udf("make_date", any(3), field(DataType::Date32), make_date),
        field_udf(
            "make_timestamp",
            any(6),
            field(DataType::Timestamp(TimeUnit::Microsecond, None)),
            make_timestamp,
        ),
        field_udf(
            "make_interval",
            Signature::variadic_any(Volatility::Immutable)
                .with_parameter_names(
                    ["years", "months", "weeks", "days", "hours", "mins", "secs"]
                        .map(String::from)
                        .to_vec(),
                )
                .unwrap_or_else(|_| Signature::variadic_any(Volatility::Immutable)),
            field(interval_type()),
            make_interval,
        ),
        field_udf("age", any(2), field(interval_type()), age),
        field_udf("justify_hours", any(1), field(interval_type()), |a| {
            justify(a, Interval::justify_hours)
        }),
        field_udf("justify_days", any(1), field(interval_type()), |a| {
            justify(a, Interval::justify_days)
        }),
        field_udf("justify_interval", any(1), field(interval_type()), |a| {
            justify(a, Interval::justify)
        }),
        field_udf("isfinite", any(1), field(DataType::Boolean), is_finite),
        ScalarUDF::new_from_impl(Now {
            name: "now",
            signature: Signature::nullary(Volatility::Stable),
            aliases: vec!["current_timestamp".into(), "transaction_timestamp".into()],
            at_call: false,
        }),
        ScalarUDF::new_from_impl(Now {
            name: "clock_timestamp",
            signature: Signature::nullary(Volatility::Volatile),
            aliases: Vec::new(),
            at_call: true,
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::datetime::parse_timestamp;
    use crate::types::interval::interval_text;

    #[test]
    fn age_subtracts_field_by_field() {
        let ts = |t: &str| parse_timestamp(t, false).unwrap();
        assert_eq!(
            interval_text(age_of(ts("2026-03-01"), ts("2025-01-15"))),
            "1 year 1 mon 17 days"
        );
        assert_eq!(
            interval_text(age_of(ts("2026-01-01"), ts("2025-12-01"))),
            "1 mon"
        );
    }
}
