//! `hop_window_starts(t, slide_us, size_us)`: the starts of the HOP
//! windows of fixed `size_us` sliding by `slide_us` that time `t` falls in,
//! as a list (NULL for a NULL time). `HOP(...)` with constant sizes
//! unnests it for `window_start` (see `sluice_sql`'s window rewrite).
//!
//! It gives what `generate_series(date_bin(slide, t - size) + slide,
//! date_bin(slide, t), slide)` gives, the same type too (nanosecond
//! timestamps in `t`'s time zone), by integer arithmetic: the series over
//! timestamps goes through calendar arithmetic and a time zone lookup per
//! value, which was a quarter of Nexmark q5's CPU.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListArray, TimestampNanosecondArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name in SQL.
pub const HOP_WINDOW_STARTS: &str = "hop_window_starts";

pub fn hop_window_starts() -> ScalarUDF {
    ScalarUDF::new_from_impl(HopWindowStarts {
        signature: Signature::any(3, Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct HopWindowStarts {
    signature: Signature,
}

/// The element type: nanosecond timestamps in the input's time zone.
fn element(input: &DataType) -> Result<DataType> {
    match input {
        DataType::Timestamp(_, tz) => Ok(DataType::Timestamp(TimeUnit::Nanosecond, tz.clone())),
        other => Err(DataFusionError::Plan(format!(
            "{HOP_WINDOW_STARTS} takes a timestamp, not {other}"
        ))),
    }
}

/// A constant positive number of microseconds, in nanoseconds.
fn nanos(arg: &ColumnarValue, what: &str) -> Result<i64> {
    // A literal is an integer of the narrowest type that holds it.
    let us = match arg {
        ColumnarValue::Scalar(ScalarValue::Int64(Some(us))) => Some(*us),
        ColumnarValue::Scalar(ScalarValue::Int32(Some(us))) => Some(i64::from(*us)),
        _ => None,
    };
    us.filter(|us| *us > 0)
        .and_then(|us| us.checked_mul(1000))
        .ok_or_else(|| {
            DataFusionError::Plan(format!(
                "{HOP_WINDOW_STARTS} takes the {what} as a positive constant number of microseconds"
            ))
        })
}

impl ScalarUDFImpl for HopWindowStarts {
    fn name(&self) -> &str {
        HOP_WINDOW_STARTS
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let [time, _, _] = args else {
            return Err(DataFusionError::Plan(format!(
                "{HOP_WINDOW_STARTS} takes (time, slide, size)"
            )));
        };
        Ok(DataType::List(Arc::new(Field::new_list_field(
            element(time)?,
            true,
        ))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [time, slide, size] = args.args.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "{HOP_WINDOW_STARTS} takes (time, slide, size)"
            )));
        };
        let (slide, size) = (nanos(slide, "slide")?, nanos(size, "size")?);
        let scalar = matches!(time, ColumnarValue::Scalar(_));
        let input = time.to_array(args.number_rows)?;
        let element = element(input.data_type())?;
        let times = arrow::compute::cast(&input, &element)?;
        let times = times
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .ok_or_else(|| DataFusionError::Internal("a timestamp cast failed".into()))?;
        let per_row = (size / slide + 1) as usize;
        let mut starts = Vec::with_capacity(times.len() * per_row);
        let mut offsets = Vec::with_capacity(times.len() + 1);
        offsets.push(0i32);
        for i in 0..times.len() {
            if times.is_valid(i) {
                let t = times.value(i);
                // date_bin's bins start at multiples of the slide from the
                // epoch; the first window holding t starts a slide after
                // the bin of t - size.
                let first = floor_to(t.saturating_sub(size), slide).saturating_add(slide);
                let last = floor_to(t, slide);
                let mut start = first;
                while start <= last {
                    starts.push(start);
                    start = start.saturating_add(slide);
                    if start == i64::MAX {
                        break;
                    }
                }
            }
            let end = i32::try_from(starts.len()).map_err(|_| {
                DataFusionError::Execution("too many HOP windows in one batch".into())
            })?;
            offsets.push(end);
        }
        let values: ArrayRef =
            Arc::new(TimestampNanosecondArray::from(starts).with_data_type(element.clone()));
        let list = ListArray::try_new(
            Arc::new(Field::new_list_field(element, true)),
            OffsetBuffer::new(offsets.into()),
            values,
            times.nulls().cloned(),
        )?;
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&list, 0)?),
            false => ColumnarValue::Array(Arc::new(list)),
        })
    }
}

/// `t` rounded down to a multiple of `step`.
fn floor_to(t: i64, step: i64) -> i64 {
    t - t.rem_euclid(step)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    /// The function gives what the series over `date_bin` gives, for
    /// times on and between window bounds, before the epoch and NULL.
    #[tokio::test]
    async fn gives_the_starts_generate_series_gives() {
        let ctx = SessionContext::new();
        ctx.register_udf(hop_window_starts());
        let times =
            "(VALUES (TIMESTAMP '2026-01-01 00:00:07.5'), (TIMESTAMP '2026-01-01 00:00:08'), \
                     (TIMESTAMP '1969-12-31 23:59:55.25'), (CAST(NULL AS TIMESTAMP))) AS v(t)";
        let ours = format!(
            "SELECT CAST(t AS TEXT) AS t, CAST(hop_window_starts(t, 2000000, 10000000) AS TEXT) AS s FROM {times} ORDER BY t"
        );
        let series = format!(
            "SELECT CAST(t AS TEXT) AS t, CAST(generate_series(date_bin(INTERVAL '2 seconds', t - INTERVAL '10 seconds') \
             + INTERVAL '2 seconds', date_bin(INTERVAL '2 seconds', t), INTERVAL '2 seconds') AS TEXT) AS s \
             FROM {times} ORDER BY t"
        );
        let run = |sql: String| {
            let ctx = ctx.clone();
            async move {
                let batches = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
                arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string()
            }
        };
        let (a, b) = (run(ours).await, run(series).await);
        assert_eq!(a, b);
        assert!(a.contains("2026-01-01T00:00:00"), "{a}");
    }
}
