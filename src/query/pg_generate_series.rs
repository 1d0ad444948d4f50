//! `generate_series(start, stop [, step])` typed as PostgreSQL types it:
//! over `integer` bounds (and steps) the values are `integer`, over a
//! `bigint` anywhere they are `bigint`, over a `numeric` anywhere they are
//! `numeric` (DataFusion's computes every integer series as `bigint` and
//! has no numeric one). Dates and timestamps go to DataFusion's function.
//! A step of zero fails with 22023, as in PostgreSQL; a NULL argument
//! gives no values.
//!
//! The set-returning rewrite (`sluice_sql::set_returning`) unnests the
//! list this returns, one row per value.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, ListBuilder, PrimitiveBuilder};
use arrow::datatypes::{ArrowPrimitiveType, DataType, Decimal128Type, Int32Type, Int64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::pg_error;

/// The function, replacing `inner` (DataFusion's `generate_series`), to
/// which it hands what it does not compute itself.
pub fn generate_series(inner: ScalarUDF) -> ScalarUDF {
    ScalarUDF::new_from_impl(GenerateSeries {
        signature: Signature::user_defined(Volatility::Immutable),
        inner,
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct GenerateSeries {
    signature: Signature,
    inner: ScalarUDF,
}

/// The types a numeric series' arguments are computed in (the values'
/// type is the first), or None where DataFusion's function computes the
/// series. A numeric series' values have the scale of its start and step;
/// its stop keeps its own, so that it bounds the values exactly.
fn series_types(args: &[DataType]) -> Option<Vec<DataType>> {
    if !(2..=3).contains(&args.len()) {
        return None;
    }
    let mut wide = false;
    let mut scales: Vec<Option<i8>> = Vec::with_capacity(args.len());
    for t in args {
        match t {
            DataType::Null | DataType::Int8 | DataType::Int16 | DataType::Int32 => {
                scales.push(None)
            }
            DataType::Int64 | DataType::UInt8 | DataType::UInt16 | DataType::UInt32 => {
                wide = true;
                scales.push(None)
            }
            DataType::Decimal128(_, s) => scales.push(Some((*s).max(0))),
            _ => return None,
        }
    }
    if scales.iter().all(Option::is_none) {
        let t = if wide {
            DataType::Int64
        } else {
            DataType::Int32
        };
        return Some(vec![t; args.len()]);
    }
    let scale_of = |i: usize| scales.get(i).copied().flatten().unwrap_or(0);
    let values = scale_of(0).max(scale_of(2));
    let stop = values.max(scale_of(1));
    let mut types = vec![DataType::Decimal128(38, values); args.len()];
    types[1] = DataType::Decimal128(38, stop);
    Some(types)
}

/// The values' type of a series over arguments of these types (dates
/// count as timestamptz, as PostgreSQL casts them), or None.
fn coerced_dates(args: &[DataType]) -> Option<Vec<DataType>> {
    let dates = args
        .iter()
        .any(|t| matches!(t, DataType::Date32 | DataType::Date64));
    let timestamps = args.iter().any(|t| matches!(t, DataType::Timestamp(..)));
    (dates && !timestamps && args.len() == 3).then(|| {
        let tz = DataType::Timestamp(
            arrow::datatypes::TimeUnit::Microsecond,
            Some(crate::types::UTC.into()),
        );
        vec![tz.clone(), tz, args[2].clone()]
    })
}

impl ScalarUDFImpl for GenerateSeries {
    fn name(&self) -> &str {
        "generate_series"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let args = coerced_dates(args).unwrap_or_else(|| args.to_vec());
        match series_types(&args) {
            Some(types) => Ok(types),
            None => {
                let fields: Vec<arrow::datatypes::FieldRef> = args
                    .iter()
                    .map(|t| Arc::new(arrow::datatypes::Field::new("", t.clone(), true)))
                    .collect();
                Ok(
                    datafusion::logical_expr::type_coercion::functions::fields_with_udf(
                        &fields,
                        &self.inner,
                    )?
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect(),
                )
            }
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match series_types(args) {
            Some(types) => Ok(DataType::new_list(types[0].clone(), true)),
            None => self.inner.return_type(args),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arg_types: Vec<DataType> = args.args.iter().map(|a| a.data_type()).collect();
        let Some(types) = series_types(&arg_types) else {
            return self.inner.invoke_with_args(args);
        };
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = args.number_rows;
        // Every argument at the finest scale among them (the stop's), so
        // that they compare exactly.
        let work = &types[1];
        let columns = args
            .args
            .iter()
            .map(|a| Ok(arrow::compute::cast(&a.to_array(rows)?, work)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let values = &types[0];
        let out = match values {
            DataType::Int32 => series_of::<Int32Type>(&columns, rows, values, i128::from, |v| {
                i32::try_from(v).ok()
            })?,
            DataType::Int64 => series_of::<Int64Type>(&columns, rows, values, i128::from, |v| {
                i64::try_from(v).ok()
            })?,
            DataType::Decimal128(_, s) => {
                let DataType::Decimal128(_, finer) = work else {
                    return datafusion::common::plan_err!("generate_series: {work:?}");
                };
                let shift = 10i128.pow((*finer - *s).max(0) as u32);
                series_of::<Decimal128Type>(&columns, rows, values, |v| v, |v| Some(v / shift))?
            }
            other => return datafusion::common::plan_err!("generate_series of {other:?}"),
        };
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// One list per row: `start`, `start + step`, ... while not past `stop`.
/// Values are computed in i128 (no bound of the type overflows it) and
/// converted back with `narrow`, which cannot fail between two bounds.
fn series_of<T: ArrowPrimitiveType>(
    columns: &[ArrayRef],
    rows: usize,
    value_type: &DataType,
    widen: impl Fn(T::Native) -> i128,
    narrow: impl Fn(i128) -> Option<T::Native>,
) -> Result<ArrayRef> {
    let arg = |i: usize, row: usize| -> Option<i128> {
        let c = columns[i].as_primitive::<T>();
        c.is_valid(row).then(|| widen(c.value(row)))
    };
    // A numeric step of 1 is 1 at the arguments' scale.
    let one = match columns[0].data_type() {
        DataType::Decimal128(_, s) => 10i128.pow((*s).max(0) as u32),
        _ => 1,
    };
    let mut builder =
        ListBuilder::new(PrimitiveBuilder::<T>::new().with_data_type(value_type.clone()));
    for row in 0..rows {
        let step = if columns.len() == 3 {
            arg(2, row)
        } else {
            Some(one)
        };
        let (Some(start), Some(stop), Some(step)) = (arg(0, row), arg(1, row), step) else {
            builder.append_null();
            continue;
        };
        if step == 0 {
            return Err(pg_error("22023", "step size cannot equal zero"));
        }
        let mut v = start;
        while (step > 0 && v <= stop) || (step < 0 && v >= stop) {
            match narrow(v) {
                Some(n) => builder.values().append_value(n),
                None => return Err(pg_error("22003", "value out of range")),
            }
            v += step;
        }
        builder.append(true);
    }
    Ok(Arc::new(builder.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_take_the_type_postgresql_gives_them() {
        let t = |a: &[DataType]| series_types(a).map(|t| t[0].clone());
        assert_eq!(
            t(&[DataType::Int32, DataType::Int32]),
            Some(DataType::Int32)
        );
        assert_eq!(
            t(&[DataType::Int32, DataType::Int64]),
            Some(DataType::Int64)
        );
        assert_eq!(
            t(&[DataType::Decimal128(2, 1), DataType::Int32]),
            Some(DataType::Decimal128(38, 1))
        );
        // 0.1 to 0.35 by 0.1: values of scale 1, bounded at scale 2.
        let d = |s: i8| DataType::Decimal128(3, s);
        assert_eq!(
            series_types(&[d(1), d(2), d(1)]),
            Some(vec![
                DataType::Decimal128(38, 1),
                DataType::Decimal128(38, 2),
                DataType::Decimal128(38, 1)
            ])
        );
        assert_eq!(t(&[DataType::Date32, DataType::Date32]), None);
        assert_eq!(t(&[DataType::Int32]), None);
    }

    #[test]
    fn integer_series_stop_at_the_bound_and_refuse_a_zero_step() {
        let col = |v: Vec<Option<i32>>| -> ArrayRef { Arc::new(arrow::array::Int32Array::from(v)) };
        let out = series_of::<Int32Type>(
            &[
                col(vec![Some(1), Some(i32::MAX - 1), None]),
                col(vec![Some(7), Some(i32::MAX), Some(3)]),
                col(vec![Some(3), Some(1), Some(1)]),
            ],
            3,
            &DataType::Int32,
            i128::from,
            |v| i32::try_from(v).ok(),
        )
        .unwrap();
        let out = out.as_list::<i32>();
        let row = |i: usize| {
            out.value(i)
                .as_primitive::<Int32Type>()
                .iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(row(0), vec![Some(1), Some(4), Some(7)]);
        assert_eq!(row(1), vec![Some(i32::MAX - 1), Some(i32::MAX)]);
        assert!(out.is_null(2));
        let zero = series_of::<Int32Type>(
            &[col(vec![Some(1)]), col(vec![Some(2)]), col(vec![Some(0)])],
            1,
            &DataType::Int32,
            i128::from,
            |v| i32::try_from(v).ok(),
        );
        assert!(zero.is_err());
    }
}
