//! Functions of an array's shape as PostgreSQL gives them: `array_dims`
//! as text (`[1:2][1:3]`, NULL for an empty array; DataFusion's answers a
//! list of lengths), and `trim_array(array, n)`, the array without its
//! last n elements (2202E for n outside 0 to its length).

use std::sync::Arc;

use arrow::array::{new_empty_array, Array, ArrayRef, AsArray, ListArray, StringArray};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::{exec_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::{field_udf, pg_error};

/// `array_dims(array)`: each dimension's bounds, `[1:n]`, walking the
/// first element of each level (PostgreSQL's arrays are rectangular).
fn array_dims(a: &[ArrayRef]) -> Result<ArrayRef> {
    let Some(list) = a[0].as_list_opt::<i32>() else {
        return exec_err!("array_dims takes an array");
    };
    let dims = (0..list.len()).map(|row| {
        if list.is_null(row) {
            return None;
        }
        let mut text = String::new();
        let mut level = list.value(row);
        loop {
            if level.is_empty() {
                break;
            }
            text.push_str(&format!("[1:{}]", level.len()));
            match level.as_list_opt::<i32>() {
                Some(inner) if inner.is_valid(0) => level = inner.value(0),
                _ => break,
            }
        }
        (!text.is_empty()).then_some(text)
    });
    Ok(Arc::new(dims.collect::<StringArray>()))
}

/// `trim_array(array, n)`, its result of the array's type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TrimArray {
    signature: Signature,
}

impl ScalarUDFImpl for TrimArray {
    fn name(&self) -> &str {
        "trim_array"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(t @ DataType::List(_)) => Ok(t.clone()),
            _ => Err(pg_error(
                "42883",
                "function trim_array takes an array and an integer",
            )),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out = trim_array(&arrays)?;
        Ok(match scalar {
            true => ColumnarValue::Scalar(datafusion::common::ScalarValue::List(Arc::new(
                out.as_list::<i32>().clone(),
            ))),
            false => ColumnarValue::Array(out),
        })
    }
}

fn trim_array(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (Some(list), DataType::List(field)) = (a[0].as_list_opt::<i32>(), a[0].data_type()) else {
        return exec_err!("trim_array takes an array");
    };
    let n = arrow::compute::cast(&a[1], &DataType::Int64)?;
    let n = n.as_primitive::<Int64Type>();
    let mut offsets = vec![0i32];
    let mut pieces: Vec<ArrayRef> = Vec::new();
    let mut valid = Vec::with_capacity(list.len());
    for row in 0..list.len() {
        let last = offsets[offsets.len() - 1];
        if list.is_null(row) || n.is_null(row) {
            offsets.push(last);
            valid.push(false);
            continue;
        }
        let value = list.value(row);
        let len = value.len() as i64;
        let trim = n.value(row);
        if !(0..=len).contains(&trim) {
            return Err(pg_error(
                "2202E",
                format!("number of elements to trim must be between 0 and {len}"),
            ));
        }
        let keep = (len - trim) as usize;
        pieces.push(value.slice(0, keep));
        offsets.push(last + keep as i32);
        valid.push(true);
    }
    let values = match pieces.is_empty() {
        true => new_empty_array(field.data_type()),
        false => {
            let refs: Vec<&dyn Array> = pieces.iter().map(|p| p.as_ref()).collect();
            arrow::compute::concat(&refs)?
        }
    };
    Ok(Arc::new(ListArray::try_new(
        field.clone(),
        OffsetBuffer::new(offsets.into()),
        values,
        Some(NullBuffer::from(valid)),
    )?))
}

/// The functions to register, replacing DataFusion's `array_dims`.
pub(crate) fn functions() -> Vec<ScalarUDF> {
    vec![
        field_udf(
            "array_dims",
            Signature::any(1, Volatility::Immutable),
            Field::new("array_dims", DataType::Utf8, true),
            array_dims,
        ),
        ScalarUDF::new_from_impl(TrimArray {
            signature: Signature::any(2, Volatility::Immutable),
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, Int64Array};
    use arrow::datatypes::Int32Type;

    fn ints(rows: Vec<Option<Vec<Option<i32>>>>) -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows))
    }

    #[test]
    fn trims_the_last_elements_and_checks_the_count() {
        let a = ints(vec![Some(vec![Some(1), Some(2), Some(3)]), None]);
        let n: ArrayRef = Arc::new(Int64Array::from(vec![2, 1]));
        let out = trim_array(&[a.clone(), n]).unwrap();
        let out = out.as_list::<i32>();
        assert_eq!(
            out.value(0).as_primitive::<Int32Type>(),
            &Int32Array::from(vec![1])
        );
        assert!(out.is_null(1));
        let n: ArrayRef = Arc::new(Int64Array::from(vec![4, 0]));
        assert!(trim_array(&[a, n]).is_err());
    }

    #[test]
    fn dims_are_bounds_and_an_empty_array_has_none() {
        let a = ints(vec![Some(vec![Some(1), None]), Some(vec![]), None]);
        let out = array_dims(&[a]).unwrap();
        let out = out.as_string::<i32>();
        assert_eq!(out.value(0), "[1:2]");
        assert!(out.is_null(1));
        assert!(out.is_null(2));
    }
}
