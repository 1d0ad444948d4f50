//! Helpers a join needs in a query's plan and in a view's dataflow alike:
//! keys as `=` compares them, and an outer join's padded side.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, Schema, SchemaRef};

/// A key column (GROUP BY, or an equi-join's) with every float `-0.0`
/// made `+0.0`, before its rows are compared in the row format, which
/// tells the two apart: GROUP BY puts them in one group (shown as `0`) and
/// `=` joins them, as in DataFusion's batch plans. NaNs stay as they are,
/// equal to a NaN of the same bits, as there.
pub fn canonical_key(column: ArrayRef) -> ArrayRef {
    use arrow::array::AsArray;
    use arrow::datatypes::{ArrowPrimitiveType, DataType, Float16Type, Float32Type, Float64Type};
    fn fold<T: ArrowPrimitiveType>(column: &ArrayRef) -> ArrayRef {
        // The type's default is +0, and -0 equals it.
        let zero = T::Native::default();
        Arc::new(
            column
                .as_primitive::<T>()
                .unary::<_, T>(|v| if v == zero { zero } else { v }),
        )
    }
    match column.data_type() {
        DataType::Float64 => fold::<Float64Type>(&column),
        DataType::Float32 => fold::<Float32Type>(&column),
        DataType::Float16 => fold::<Float16Type>(&column),
        _ => column,
    }
}

/// The schema with every column nullable (an outer join's side).
pub fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ))
}
