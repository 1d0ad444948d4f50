//! `a @> b`, `a <@ b` and `a && b` over arrays as PostgreSQL computes
//! them (`arraycontains`, `arrayoverlap`): elements compare with `=`, so
//! a NULL element never matches anything (`ARRAY[1,NULL] @> ARRAY[NULL]`
//! is false), and arrays of any dimensions compare their elements as one
//! flat list. DataFusion's `array_has_all` and `array_has_any` match NULL
//! with NULL.

use std::collections::HashSet;

use arrow::array::{Array, ArrayRef, AsArray, BooleanBuilder, GenericListArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Whether the first array holds every element of the second.
pub fn array_contains() -> ScalarUDF {
    ScalarUDF::new_from_impl(ArrayContains {
        overlap: false,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

/// Whether the arrays share an element.
pub fn array_overlap() -> ScalarUDF {
    ScalarUDF::new_from_impl(ArrayContains {
        overlap: true,
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayContains {
    overlap: bool,
    signature: Signature,
}

/// The innermost element type of an array type.
fn element_type(t: &DataType) -> &DataType {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            element_type(f.data_type())
        }
        t => t,
    }
}

/// `t` with its innermost elements of type `to`, and no field metadata.
fn with_elements(t: &DataType, to: &DataType) -> DataType {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            DataType::new_list(with_elements(f.data_type(), to), true)
        }
        _ => to.clone(),
    }
}

impl ScalarUDFImpl for ArrayContains {
    fn name(&self) -> &str {
        match self.overlap {
            false => "arraycontains",
            true => "arrayoverlap",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Both arrays' elements as the one type `=` compares them in.
    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let [l, r] = args else {
            return datafusion::common::plan_err!("{} takes two arrays", self.name());
        };
        let (le, re) = (element_type(l), element_type(r));
        let common = match (le, re) {
            (DataType::Null, e) | (e, DataType::Null) => e.clone(),
            (a, b) => datafusion::logical_expr::type_coercion::binary::comparison_coercion(a, b)
                .ok_or_else(|| {
                    super::udf::pg_error(
                        "42883",
                        format!(
                            "operator does not exist: {}[] {} {}[]",
                            crate::types::PgType::of_data_type(a).format(),
                            if self.overlap { "&&" } else { "@>" },
                            crate::types::PgType::of_data_type(b).format()
                        ),
                    )
                })?,
        };
        Ok(vec![with_elements(l, &common), with_elements(r, &common)])
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = args.number_rows;
        let [left, right] = args.args.as_slice() else {
            return datafusion::common::plan_err!("{} takes two arrays", self.name());
        };
        let (left, right) = (left.to_array(rows)?, right.to_array(rows)?);
        let out = compare(&left, &right, self.overlap)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// Per row, the range of its elements in the flat values (None: NULL).
type Ranges = Vec<Option<(usize, usize)>>;

/// Each row's array as its innermost elements: a flat array of them and,
/// per row, its range in it (None for a NULL array).
fn flatten(a: &ArrayRef) -> Result<(ArrayRef, Ranges)> {
    fn list_ranges<O: arrow::array::OffsetSizeTrait>(
        l: &GenericListArray<O>,
    ) -> (ArrayRef, Ranges) {
        let ranges = (0..l.len())
            .map(|i| {
                let o = l.value_offsets();
                l.is_valid(i)
                    .then(|| (o[i].as_usize(), o[i + 1].as_usize()))
            })
            .collect();
        (l.values().clone(), ranges)
    }
    let (values, mut ranges) = match a.data_type() {
        DataType::List(_) => list_ranges(a.as_list::<i32>()),
        DataType::LargeList(_) => list_ranges(a.as_list::<i64>()),
        DataType::Null => return Ok((a.clone(), vec![None; a.len()])),
        other => {
            return datafusion::common::plan_err!("an array operator takes arrays, not {other}")
        }
    };
    if !values.data_type().is_nested() {
        return Ok((values, ranges));
    }
    // A row's range of the inner level maps to the innermost elements
    // its inner arrays span.
    let (inner, inner_ranges) = flatten(&values)?;
    for r in ranges.iter_mut().flatten() {
        let spans: Vec<(usize, usize)> = inner_ranges[r.0..r.1].iter().flatten().copied().collect();
        *r = match (spans.first(), spans.last()) {
            (Some(first), Some(last)) => (first.0, last.1),
            _ => (0, 0),
        };
    }
    Ok((inner, ranges))
}

fn compare(left: &ArrayRef, right: &ArrayRef, overlap: bool) -> Result<ArrayRef> {
    let (lv, lr) = flatten(left)?;
    let (rv, rr) = flatten(right)?;
    let mut out = BooleanBuilder::with_capacity(lr.len());
    if lv.data_type().is_null() || rv.data_type().is_null() {
        // Arrays of only NULLs: nothing matches.
        for (l, r) in lr.iter().zip(&rr) {
            match (l, r) {
                (Some(_), Some((rs, re))) => out.append_value(!overlap && rs == re),
                _ => out.append_null(),
            }
        }
        return Ok(std::sync::Arc::new(out.finish()));
    }
    // -0 and +0 are one value to `=`.
    let (lv, rv) = (
        super::join_keys::canonical_key(lv),
        super::join_keys::canonical_key(rv),
    );
    let converter = RowConverter::new(vec![SortField::new(lv.data_type().clone())])?;
    let lrows = converter.convert_columns(std::slice::from_ref(&lv))?;
    let rrows = converter.convert_columns(std::slice::from_ref(&rv))?;
    for (l, r) in lr.iter().zip(&rr) {
        let (Some((ls, le)), Some((rs, re))) = (l, r) else {
            out.append_null();
            continue;
        };
        let present: HashSet<&[u8]> = (*ls..*le)
            .filter(|&i| lv.is_valid(i))
            .map(|i| lrows.row(i).data())
            .collect();
        let mut found = (*rs..*re).map(|i| rv.is_valid(i) && present.contains(rrows.row(i).data()));
        out.append_value(match overlap {
            true => found.any(|f| f),
            false => found.all(|f| f),
        });
    }
    Ok(std::sync::Arc::new(out.finish()))
}
