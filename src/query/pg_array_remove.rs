//! `array_remove(array, element)` as PostgreSQL computes it: every
//! element not distinct from `element` goes, so removing NULL removes the
//! NULL elements (DataFusion's `array_remove_all` answers NULL for a NULL
//! element). Arrays of more than one dimension are refused (0A000), as
//! PostgreSQL refuses them.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, ListArray, Scalar};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function, registered as `pg_array_remove` (the SQL front end
/// renames `array_remove` to it).
pub fn array_remove() -> ScalarUDF {
    ScalarUDF::new_from_impl(ArrayRemove {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayRemove {
    signature: Signature,
}

impl ScalarUDFImpl for ArrayRemove {
    fn name(&self) -> &str {
        "pg_array_remove"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// The array's elements and the element as one type, the one `=`
    /// compares them in (PostgreSQL's `anycompatible`).
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [list @ DataType::List(f), element] = args else {
            return datafusion::common::plan_err!("array_remove takes an array and an element");
        };
        let common = match element {
            DataType::Null => None,
            e => datafusion::logical_expr::type_coercion::binary::comparison_coercion(
                f.data_type(),
                e,
            ),
        };
        Ok(match common {
            Some(c) if c != *f.data_type() && !f.data_type().is_nested() => {
                vec![DataType::new_list(c.clone(), true), c]
            }
            _ => vec![list.clone(), f.data_type().clone()],
        })
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args.first() {
            Some(DataType::List(f)) if f.data_type().is_nested() => Err(super::udf::pg_error(
                "0A000",
                "removing elements from multidimensional arrays is not supported",
            )),
            // Without the elements' metadata: the result is built anew.
            Some(DataType::List(f)) => Ok(DataType::new_list(f.data_type().clone(), true)),
            other => datafusion::common::plan_err!("array_remove takes an array, not {other:?}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = args.number_rows;
        let [array, element] = args.args.as_slice() else {
            return datafusion::common::plan_err!("array_remove takes two arguments");
        };
        let (array, element) = (array.to_array(rows)?, element.to_array(rows)?);
        let out = remove(&array, &element, args.return_field.data_type())?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Each row of `lists` without its elements not distinct from that row's
/// `element`.
fn remove(lists: &ArrayRef, element: &ArrayRef, returns: &DataType) -> Result<ArrayRef> {
    let Some(lists) = lists.as_list_opt::<i32>() else {
        return datafusion::common::plan_err!("array_remove takes an array");
    };
    if lists.value_type().is_nested() {
        return Err(super::udf::pg_error(
            "0A000",
            "removing elements from multidimensional arrays is not supported",
        ));
    }
    let values = lists.values();
    let mut keep = BooleanBuilder::with_capacity(values.len());
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    offsets.push(0i32);
    let mut kept_total = 0i32;
    let mut at = 0usize;
    for row in 0..lists.len() {
        let (start, end) = (
            lists.value_offsets()[row] as usize,
            lists.value_offsets()[row + 1] as usize,
        );
        // Values between rows (none in arrays built here) are dropped.
        keep.append_n(start - at, false);
        if lists.is_null(row) {
            keep.append_n(end - start, false);
        } else {
            let slice = values.slice(start, end - start);
            let needle = Scalar::new(element.slice(row, 1));
            let distinct = arrow::compute::kernels::cmp::distinct(&slice, &needle)?;
            for kept in distinct.iter() {
                let kept = kept.unwrap_or(true);
                kept_total += i32::from(kept);
                keep.append_value(kept);
            }
        }
        at = end;
        offsets.push(kept_total);
    }
    keep.append_n(values.len() - at, false);
    let kept = arrow::compute::filter(values, &keep.finish())?;
    // The planned type, with its fields' metadata.
    let field = match returns {
        DataType::List(f) => f.clone(),
        _ => return datafusion::common::plan_err!("array_remove takes an array"),
    };
    Ok(Arc::new(ListArray::try_new(
        field,
        OffsetBuffer::new(offsets.into()),
        kept,
        lists.nulls().cloned(),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use arrow::datatypes::Int32Type;

    #[test]
    fn removes_elements_not_distinct_from_the_element() {
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None, Some(2), Some(1)]),
            None,
            Some(vec![None, Some(3)]),
        ]));
        let element: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), Some(1), None]));
        let out = remove(&lists, &element, lists.data_type()).unwrap();
        let out = out.as_list::<i32>();
        let row = |i: usize| {
            let v = out.value(i);
            v.as_primitive::<Int32Type>().iter().collect::<Vec<_>>()
        };
        assert_eq!(row(0), vec![None, Some(2)]);
        assert!(out.is_null(1));
        assert_eq!(row(2), vec![Some(3)]);
    }
}
