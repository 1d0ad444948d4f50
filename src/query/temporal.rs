//! Functions on intervals, dates and timestamps with PostgreSQL's
//! results, which the operators (`super::pg_operators`) and casts
//! (`super::pg_casts`) plan calls of:
//!
//! - `interval * number`, `interval / number`: fractions of months and
//!   days cascade down, as PostgreSQL's do;
//! - `interval_span(i)`: the one number two intervals compare by (30-day
//!   months, 24-hour days), so `INTERVAL '1 day' = INTERVAL '24 hours'`;
//! - `timestamp - timestamp`: an interval of days and time
//!   (`386 days 15:39:22`), not of hours;
//! - `timestamp ± interval`: checked against PostgreSQL's range;
//! - text to dates, timestamps, times and intervals in every form
//!   PostgreSQL reads (`types::datetime`, `types::interval`), failing with
//!   its SQLSTATEs.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Decimal128Array, IntervalMonthDayNanoArray,
    PrimitiveArray, Time64MicrosecondArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{
    DataType, Float64Type, IntervalMonthDayNanoType, IntervalUnit, TimeUnit,
    TimestampMicrosecondType,
};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::{array_udf, cached_udf, pg_error};
use crate::types::datetime::{
    parse_date, parse_time, parse_timestamp, TIMESTAMP_INFINITY, TIMESTAMP_NEG_INFINITY,
};
use crate::types::interval::{parse_interval, Interval};

pub(crate) fn interval_type() -> DataType {
    DataType::Interval(IntervalUnit::MonthDayNano)
}

fn intervals(a: &ArrayRef) -> &PrimitiveArray<IntervalMonthDayNanoType> {
    a.as_primitive::<IntervalMonthDayNanoType>()
}

fn interval_scale(args: &[ArrayRef], divide: bool) -> Result<ArrayRef> {
    let (i, f) = (intervals(&args[0]), args[1].as_primitive::<Float64Type>());
    let mut out = Vec::with_capacity(i.len());
    for k in 0..i.len() {
        if i.is_null(k) || f.is_null(k) {
            out.push(None);
            continue;
        }
        let v = Interval::from_arrow(i.value(k));
        let factor = f.value(k);
        let r = if divide {
            if factor == 0.0 {
                return Err(pg_error("22012", "division by zero"));
            }
            v.divided_by(factor)?
        } else {
            v.times(factor)?
        };
        out.push(Some(r.to_arrow()));
    }
    Ok(Arc::new(IntervalMonthDayNanoArray::from(out)))
}

cached_udf!(
    interval_mul,
    array_udf(
        "interval_mul",
        vec![interval_type(), DataType::Float64],
        interval_type(),
        |a| interval_scale(a, false)
    )
);

cached_udf!(
    interval_div,
    array_udf(
        "interval_div",
        vec![interval_type(), DataType::Float64],
        interval_type(),
        |a| interval_scale(a, true)
    )
);

cached_udf!(
    interval_span,
    array_udf(
        "interval_span",
        vec![interval_type()],
        DataType::Decimal128(38, 0),
        |a| {
            let i = intervals(&a[0]);
            let spans: Decimal128Array = i
                .iter()
                .map(|v| v.map(|v| Interval::from_arrow(v).span()))
                .collect();
            Ok(Arc::new(spans.with_precision_and_scale(38, 0)?))
        }
    )
);

fn micros(a: &ArrayRef) -> Result<PrimitiveArray<TimestampMicrosecondType>> {
    let a = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    Ok(a.as_primitive::<TimestampMicrosecondType>().clone())
}

cached_udf!(
    timestamp_difference,
    ScalarUDF::new_from_impl(TimestampDifference {
        signature: Signature::any(2, Volatility::Immutable),
    })
);

/// `timestamp - timestamp`: days and time, as PostgreSQL's `timestamp_mi`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TimestampDifference {
    signature: Signature,
}

impl ScalarUDFImpl for TimestampDifference {
    fn name(&self) -> &str {
        "timestamp_mi"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(interval_type())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (l, r) = (micros(&arrays[0])?, micros(&arrays[1])?);
        let out: IntervalMonthDayNanoArray = l
            .iter()
            .zip(r.iter())
            .map(|(l, r)| match (l, r) {
                (Some(l), Some(r)) => {
                    let infinite = |t: i64| t == TIMESTAMP_INFINITY || t == TIMESTAMP_NEG_INFINITY;
                    if infinite(l) || infinite(r) {
                        return Err(pg_error("22008", "cannot subtract infinite timestamps"));
                    }
                    let d = l.checked_sub(r).ok_or_else(interval_out_of_range)?;
                    Ok(Some(
                        Interval {
                            months: 0,
                            days: 0,
                            micros: d,
                        }
                        .justify_hours()
                        .to_arrow(),
                    ))
                }
                _ => Ok(None),
            })
            .collect::<Result<_>>()?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

cached_udf!(
    timestamp_plus_interval,
    ScalarUDF::new_from_impl(TimestampPlusInterval {
        signature: Signature::any(2, Volatility::Immutable),
        subtract: false,
    })
);

cached_udf!(
    timestamp_minus_interval,
    ScalarUDF::new_from_impl(TimestampPlusInterval {
        signature: Signature::any(2, Volatility::Immutable),
        subtract: true,
    })
);

/// `timestamp + interval` and `timestamp - interval` as PostgreSQL's
/// `timestamp_pl_interval`: months first (the day kept, or the month's
/// last), then days, then time; a result outside 4713 BC .. 294276 AD
/// fails with 22008 (`timestamp out of range`); infinity stays infinity.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TimestampPlusInterval {
    signature: Signature,
    subtract: bool,
}

impl ScalarUDFImpl for TimestampPlusInterval {
    fn name(&self) -> &str {
        if self.subtract {
            "timestamp_mi_interval"
        } else {
            "timestamp_pl_interval"
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(DataType::Timestamp(_, tz)) => {
                Ok(DataType::Timestamp(TimeUnit::Microsecond, tz.clone()))
            }
            _ => Ok(DataType::Timestamp(TimeUnit::Microsecond, None)),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let to = args.return_field.data_type().clone();
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let t = micros(&arrays[0])?;
        let i = arrow::compute::cast(&arrays[1], &interval_type())?;
        let i = intervals(&i);
        let mut out = Vec::with_capacity(t.len());
        for k in 0..t.len() {
            if t.is_null(k) || i.is_null(k) {
                out.push(None);
                continue;
            }
            let mut v = Interval::from_arrow(i.value(k));
            if self.subtract {
                v = Interval {
                    months: v.months.checked_neg().ok_or_else(interval_out_of_range)?,
                    days: v.days.checked_neg().ok_or_else(interval_out_of_range)?,
                    micros: v.micros.checked_neg().ok_or_else(interval_out_of_range)?,
                };
            }
            out.push(Some(
                crate::types::datetime::add_interval(t.value(k), v.months, v.days, v.micros)
                    .ok_or_else(|| pg_error("22008", "timestamp out of range"))?,
            ));
        }
        let out: ArrayRef = Arc::new(TimestampMicrosecondArray::from(out).with_data_type(to));
        if scalar {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&out, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(out))
    }
}

fn interval_out_of_range() -> DataFusionError {
    pg_error("22008", "interval out of range")
}

/// Text to a date, timestamp, time or interval, read as PostgreSQL reads
/// it; `to` is the target type.
pub(crate) fn text_to_temporal(text: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let text = arrow::compute::cast(text, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    Ok(match to {
        DataType::Date32 => {
            let mut out = Vec::with_capacity(text.len());
            for v in text.iter() {
                out.push(v.map(parse_date).transpose()?);
            }
            Arc::new(Date32Array::from(out))
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let mut out = Vec::with_capacity(text.len());
            for v in text.iter() {
                out.push(v.map(|v| parse_timestamp(v, tz.is_some())).transpose()?);
            }
            Arc::new(TimestampMicrosecondArray::from(out).with_timezone_opt(tz.clone()))
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            let mut out = Vec::with_capacity(text.len());
            for v in text.iter() {
                out.push(v.map(parse_time).transpose()?);
            }
            Arc::new(Time64MicrosecondArray::from(out))
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let mut out = Vec::with_capacity(text.len());
            for v in text.iter() {
                out.push(
                    v.map(|v| parse_interval(v).map(Interval::to_arrow))
                        .transpose()?,
                );
            }
            Arc::new(IntervalMonthDayNanoArray::from(out))
        }
        other => {
            return Err(DataFusionError::Internal(format!(
                "text_to_temporal: {other} is not a date or time type"
            )))
        }
    })
}

/// Whether [`text_to_temporal`] reads text as this type.
pub(crate) fn is_temporal_target(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Date32
            | DataType::Timestamp(TimeUnit::Microsecond, _)
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Interval(IntervalUnit::MonthDayNano)
    )
}
