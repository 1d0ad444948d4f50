//! `date_trunc` and `date_bin` as PostgreSQL computes them: on
//! microseconds over the whole range PostgreSQL takes (4713 BC to 294276
//! AD), where DataFusion's go through nanoseconds and fail outside 1677 to
//! 2262. `date_trunc` also truncates dates (to a `timestamptz`) and
//! intervals; `date_bin` also takes two arguments (origin 1970-01-01), the
//! form the engine's event-time windows use.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, IntervalMonthDayNanoArray, PrimitiveArray};
use arrow::datatypes::{DataType, IntervalMonthDayNanoType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::pg_error;
use crate::types::datetime::{
    civil_from_days, days_from_civil, TIMESTAMP_INFINITY, TIMESTAMP_NEG_INFINITY, US_PER_DAY,
    US_PER_SEC,
};
use crate::types::interval::Interval;
use crate::types::UTC;

/// A unit `date_trunc` truncates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Microseconds,
    Milliseconds,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
    Decade,
    Century,
    Millennium,
}

/// PostgreSQL's spellings of each unit (`DecodeUnits`).
fn unit_of(name: &str) -> Option<Unit> {
    Some(match name.trim().to_ascii_lowercase().as_str() {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" | "useconds" => Unit::Microseconds,
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" | "mseconds" => Unit::Milliseconds,
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Second,
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Minute,
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Hour,
        "day" | "days" | "d" => Unit::Day,
        "week" | "weeks" | "w" => Unit::Week,
        "month" | "months" | "mon" | "mons" => Unit::Month,
        "quarter" | "qtr" => Unit::Quarter,
        "year" | "years" | "y" | "yr" | "yrs" => Unit::Year,
        "decade" | "decades" | "dec" | "decs" => Unit::Decade,
        "century" | "centuries" | "c" | "cent" => Unit::Century,
        "millennium" | "millennia" | "mil" | "mils" => Unit::Millennium,
        _ => return None,
    })
}

fn unknown_unit(name: &str, ty: &str) -> DataFusionError {
    pg_error(
        "22023",
        format!("unit \"{}\" not recognized for type {ty}", name.trim()),
    )
}

/// PostgreSQL's first year of the decade, century or millennium holding
/// `year` (astronomical: 0 is 1 BC), as `timestamp_trunc` computes it.
fn first_year(unit: Unit, year: i64) -> i64 {
    match unit {
        Unit::Decade if year > 0 => (year / 10) * 10,
        Unit::Decade => -((8 - (year - 1)) / 10) * 10,
        Unit::Century if year > 0 => ((year + 99) / 100) * 100 - 99,
        Unit::Century => -((99 - (year - 1)) / 100) * 100 + 1,
        Unit::Millennium if year > 0 => ((year + 999) / 1000) * 1000 - 999,
        Unit::Millennium => -((999 - (year - 1)) / 1000) * 1000 + 1,
        _ => year,
    }
}

/// A timestamp (microseconds since 1970) truncated to `unit`.
fn truncate(unit: Unit, us: i64) -> i64 {
    if us == TIMESTAMP_INFINITY || us == TIMESTAMP_NEG_INFINITY {
        return us;
    }
    let floor = |step: i64| us - us.rem_euclid(step);
    let days = us.div_euclid(US_PER_DAY);
    let at_day = |d: i64| d * US_PER_DAY;
    match unit {
        Unit::Microseconds => us,
        Unit::Milliseconds => floor(1000),
        Unit::Second => floor(US_PER_SEC),
        Unit::Minute => floor(60 * US_PER_SEC),
        Unit::Hour => floor(3600 * US_PER_SEC),
        Unit::Day => at_day(days),
        // 1970-01-01 was a Thursday: Mondays are 4 days after a multiple
        // of 7 from it.
        Unit::Week => at_day(days - (days - 4).rem_euclid(7)),
        _ => {
            let (y, m, _) = civil_from_days(days);
            let (y, m) = match unit {
                Unit::Month => (y, m),
                Unit::Quarter => (y, 3 * ((m - 1) / 3) + 1),
                Unit::Year => (y, 1),
                _ => (first_year(unit, y), 1),
            };
            at_day(days_from_civil(y, m, 1))
        }
    }
}

/// An interval truncated to `unit`, each field toward zero.
fn truncate_interval(unit: Unit, v: Interval) -> Option<Interval> {
    let toward_zero = |x: i64, step: i64| x - x % step;
    let years = |step: i32| Interval {
        months: (v.months / 12 / step) * step * 12,
        days: 0,
        micros: 0,
    };
    Some(match unit {
        Unit::Microseconds => v,
        Unit::Milliseconds => Interval {
            micros: toward_zero(v.micros, 1000),
            ..v
        },
        Unit::Second => Interval {
            micros: toward_zero(v.micros, US_PER_SEC),
            ..v
        },
        Unit::Minute => Interval {
            micros: toward_zero(v.micros, 60 * US_PER_SEC),
            ..v
        },
        Unit::Hour => Interval {
            micros: toward_zero(v.micros, 3600 * US_PER_SEC),
            ..v
        },
        Unit::Day => Interval { micros: 0, ..v },
        Unit::Week => return None,
        Unit::Month => Interval {
            months: v.months,
            days: 0,
            micros: 0,
        },
        Unit::Quarter => Interval {
            months: v.months - v.months % 3,
            days: 0,
            micros: 0,
        },
        Unit::Year => years(1),
        Unit::Decade => years(10),
        Unit::Century => years(100),
        Unit::Millennium => years(1000),
    })
}

fn timestamp_us(tz: Option<Arc<str>>) -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, tz)
}

/// The argument as microsecond timestamps (dates become midnight).
fn as_micros(v: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    let a = v.to_array(rows)?;
    let tz = match a.data_type() {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    Ok(arrow::compute::cast(&a, &timestamp_us(tz))?)
}

fn unit_argument(v: &ColumnarValue, ty: &str) -> Result<Option<Unit>> {
    let name = match v {
        ColumnarValue::Scalar(s) => match s {
            ScalarValue::Utf8(n) | ScalarValue::LargeUtf8(n) | ScalarValue::Utf8View(n) => {
                n.clone()
            }
            _ => None,
        },
        ColumnarValue::Array(_) => {
            return Err(pg_error("0A000", "date_trunc takes its unit as a constant"))
        }
    };
    match name {
        None => Ok(None),
        Some(n) => unit_of(&n).map(Some).ok_or_else(|| unknown_unit(&n, ty)),
    }
}

fn rows_of(args: &ScalarFunctionArgs) -> usize {
    args.number_rows
}

/// `date_trunc(unit, timestamp | timestamptz | date | interval)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateTrunc {
    signature: Signature,
}

impl ScalarUDFImpl for DateTrunc {
    fn name(&self) -> &str {
        "date_trunc"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.get(1) {
            Some(DataType::Date32 | DataType::Date64) => Ok(timestamp_us(Some(Arc::from(UTC)))),
            Some(DataType::Timestamp(_, tz)) => Ok(timestamp_us(tz.clone())),
            Some(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null) => {
                Ok(timestamp_us(None))
            }
            Some(t @ DataType::Interval(_)) => Ok(t.clone()),
            Some(other) => Err(pg_error(
                "42883",
                format!(
                    "function date_trunc(unknown, {}) does not exist",
                    crate::types::PgType::of_data_type(other).format()
                ),
            )),
            None => Err(pg_error("42883", "date_trunc takes two arguments")),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = rows_of(&args);
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let to = args.return_field.data_type().clone();
        let out: ArrayRef = if let DataType::Interval(_) = to {
            let unit = unit_argument(&args.args[0], "interval")?;
            let a = args.args[1].to_array(rows)?;
            let a = arrow::compute::cast(&a, &to)?;
            let mut out = Vec::with_capacity(a.len());
            for v in a.as_primitive::<IntervalMonthDayNanoType>().iter() {
                out.push(match (unit, v) {
                    (Some(unit), Some(v)) => Some(
                        truncate_interval(unit, Interval::from_arrow(v))
                            .ok_or_else(|| {
                                pg_error("0A000", "unit \"week\" not supported for type interval")
                            })?
                            .to_arrow(),
                    ),
                    _ => None,
                });
            }
            Arc::new(IntervalMonthDayNanoArray::from(out))
        } else {
            let ty = match to {
                DataType::Timestamp(_, Some(_)) => "timestamp with time zone",
                _ => "timestamp without time zone",
            };
            let unit = unit_argument(&args.args[0], ty)?;
            let a = as_micros(&args.args[1], rows)?;
            let values = a.as_primitive::<TimestampMicrosecondType>();
            let out: PrimitiveArray<TimestampMicrosecondType> = match unit {
                Some(unit) => values.unary_opt(|us| Some(truncate(unit, us))),
                None => PrimitiveArray::new_null(values.len()),
            };
            Arc::new(out.with_data_type(to))
        };
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `date_bin(stride, source [, origin])`: the start of the bin of width
/// `stride` counted from `origin` (1970-01-01 when left out) that holds
/// `source`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DateBin {
    signature: Signature,
}

/// PostgreSQL's `timestamp_bin` on microseconds.
fn bin(stride: i64, source: i64, origin: i64) -> Result<i64> {
    if source == TIMESTAMP_INFINITY || source == TIMESTAMP_NEG_INFINITY {
        return Ok(source);
    }
    let out_of_range = || pg_error("22008", "timestamp out of range");
    let diff = source.checked_sub(origin).ok_or_else(out_of_range)?;
    let delta = diff - diff.rem_euclid(stride);
    origin.checked_add(delta).ok_or_else(out_of_range)
}

fn stride_of(v: &ScalarValue) -> Result<Option<i64>> {
    let v = match v {
        ScalarValue::IntervalMonthDayNano(v) => *v,
        ScalarValue::Null => None,
        other => {
            let cast = other.cast_to(&super::temporal::interval_type())?;
            match cast {
                ScalarValue::IntervalMonthDayNano(v) => v,
                _ => None,
            }
        }
    };
    let Some(v) = v else { return Ok(None) };
    let v = Interval::from_arrow(v);
    if v.months != 0 {
        return Err(pg_error(
            "0A000",
            "timestamps cannot be binned into intervals containing months or years",
        ));
    }
    let us = (v.days as i64)
        .checked_mul(US_PER_DAY)
        .and_then(|d| d.checked_add(v.micros))
        .ok_or_else(|| pg_error("22008", "interval out of range"))?;
    if us <= 0 {
        return Err(pg_error("22008", "stride must be greater than zero"));
    }
    Ok(Some(us))
}

impl ScalarUDFImpl for DateBin {
    fn name(&self) -> &str {
        "date_bin"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [_, DataType::Timestamp(_, tz)] | [_, DataType::Timestamp(_, tz), _] => {
                Ok(timestamp_us(tz.clone()))
            }
            [_, _] | [_, _, _] => Ok(timestamp_us(None)),
            _ => Err(pg_error(
                "42883",
                "date_bin takes a stride, a timestamp and an origin",
            )),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = rows_of(&args);
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let to = args.return_field.data_type().clone();
        let stride = match &args.args[0] {
            ColumnarValue::Scalar(s) => stride_of(s)?,
            ColumnarValue::Array(_) => {
                return Err(pg_error("0A000", "date_bin takes its stride as a constant"))
            }
        };
        let source = as_micros(&args.args[1], rows)?;
        let source = source.as_primitive::<TimestampMicrosecondType>();
        let origin = match args.args.get(2) {
            Some(o) => Some(as_micros(o, rows)?),
            None => None,
        };
        let origin = origin
            .as_ref()
            .map(|o| o.as_primitive::<TimestampMicrosecondType>());
        let mut out = Vec::with_capacity(source.len());
        for i in 0..source.len() {
            let o = match origin {
                Some(o) if o.is_null(i) => None,
                Some(o) => Some(o.value(i)),
                None => Some(0),
            };
            if o == Some(TIMESTAMP_INFINITY) || o == Some(TIMESTAMP_NEG_INFINITY) {
                return Err(pg_error("22008", "origin out of range"));
            }
            out.push(match (stride, source.is_valid(i), o) {
                (Some(stride), true, Some(o)) => Some(bin(stride, source.value(i), o)?),
                _ => None,
            });
        }
        let out: ArrayRef =
            Arc::new(PrimitiveArray::<TimestampMicrosecondType>::from(out).with_data_type(to));
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// The functions to register, replacing DataFusion's of the same names.
pub(crate) fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(DateTrunc {
            signature: Signature::any(2, Volatility::Immutable),
        }),
        ScalarUDF::new_from_impl(DateBin {
            signature: Signature::variadic_any(Volatility::Immutable),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::datetime::{parse_timestamp, timestamp_text};

    fn trunc(unit: &str, t: &str) -> String {
        let us = parse_timestamp(t, false).unwrap();
        timestamp_text(truncate(unit_of(unit).unwrap(), us), false)
    }

    #[test]
    fn truncates_across_the_whole_range() {
        assert_eq!(trunc("hour", "0001-01-01 10:30:00"), "0001-01-01 10:00:00");
        assert_eq!(trunc("week", "0001-01-03"), "0001-01-01 00:00:00");
        assert_eq!(trunc("decade", "0005-01-03 BC"), "0011-01-01 00:00:00 BC");
        assert_eq!(trunc("century", "2000-05-01"), "1901-01-01 00:00:00");
        assert_eq!(trunc("millennium", "2001-05-01"), "2001-01-01 00:00:00");
        assert_eq!(
            trunc("quarter", "9999-12-31 23:59:59"),
            "9999-10-01 00:00:00"
        );
        assert_eq!(
            trunc("MILLISECONDS", "2000-01-01 10:00:00.123456"),
            "2000-01-01 10:00:00.123"
        );
        assert_eq!(trunc("week", "2026-12-06 12:00"), "2026-11-30 00:00:00");
    }

    #[test]
    fn truncates_intervals_toward_zero() {
        let v = Interval {
            months: 0,
            days: -1,
            micros: -(5 * 3600 + 7 * 60 + 8) * US_PER_SEC,
        };
        assert_eq!(
            truncate_interval(Unit::Hour, v),
            Some(Interval {
                months: 0,
                days: -1,
                micros: -5 * 3600 * US_PER_SEC
            })
        );
        assert_eq!(truncate_interval(Unit::Week, v), None);
    }

    #[test]
    fn bins_from_the_origin() {
        let ts = |t: &str| parse_timestamp(t, false).unwrap();
        let min15 = 15 * 60 * US_PER_SEC;
        let b = bin(min15, ts("2000-01-01 00:07"), ts("2001-01-01")).unwrap();
        assert_eq!(timestamp_text(b, false), "2000-01-01 00:00:00");
        let b = bin(min15, ts("0001-01-01 00:20"), ts("2001-01-01")).unwrap();
        assert_eq!(timestamp_text(b, false), "0001-01-01 00:15:00");
    }
}
