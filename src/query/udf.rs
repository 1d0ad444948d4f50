//! Scalar functions computed on whole arrays, the way most of
//! PostgreSQL's functions here are written: a name, fixed argument types
//! (or any), a result field (which may say its SQL type in metadata:
//! `jsonb`, `varchar(5)`) and a function of the argument arrays.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::error::SluiceError;

/// A failure PostgreSQL reports with this SQLSTATE and words.
pub(crate) fn pg_error(sqlstate: &'static str, message: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::Evaluation {
        sqlstate,
        message: message.into(),
    }))
}

impl From<crate::types::datetime::DateTimeError> for DataFusionError {
    fn from(e: crate::types::datetime::DateTimeError) -> Self {
        pg_error(e.sqlstate(), e.to_string())
    }
}

impl From<crate::types::interval::IntervalError> for DataFusionError {
    fn from(e: crate::types::interval::IntervalError) -> Self {
        pg_error(e.sqlstate(), e.to_string())
    }
}

/// A function computed on whole arrays.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayFunction {
    name: &'static str,
    signature: Signature,
    returns: FieldRef,
    compute: FnPtr,
}

/// A function pointer compared by address, so that the UDF is `Eq`.
#[derive(Clone, Copy)]
struct FnPtr(fn(&[ArrayRef]) -> Result<ArrayRef>);

impl std::fmt::Debug for FnPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fn")
    }
}

impl PartialEq for FnPtr {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::fn_addr_eq(self.0, other.0)
    }
}

impl Eq for FnPtr {}

impl std::hash::Hash for FnPtr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.0 as usize).hash(state)
    }
}

impl ScalarUDFImpl for ArrayFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.returns.data_type().clone())
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(self.returns.as_ref().clone().with_name(self.name)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let out = (self.compute.0)(&arrays)?;
        if scalar && out.len() == 1 {
            // A list keeps its element field (and what its metadata says
            // of the type), which `try_from_array` would build anew.
            if let DataType::List(_) = out.data_type() {
                use arrow::array::AsArray;
                return Ok(ColumnarValue::Scalar(
                    datafusion::common::ScalarValue::List(Arc::new(out.as_list::<i32>().clone())),
                ));
            }
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&out, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// An argument array as text (a text-typed column or literal of any
/// string width, or another type cast to text).
pub(crate) fn texts(a: &ArrayRef) -> Result<arrow::array::StringArray> {
    use arrow::array::AsArray;
    Ok(arrow::compute::cast(a, &DataType::Utf8)?
        .as_string::<i32>()
        .clone())
}

/// A UDF of fixed argument types computed by `compute` on whole arrays.
pub(crate) fn array_udf(
    name: &'static str,
    args: Vec<DataType>,
    returns: DataType,
    compute: fn(&[ArrayRef]) -> Result<ArrayRef>,
) -> ScalarUDF {
    field_udf(
        name,
        Signature::exact(args, Volatility::Immutable),
        Field::new(name, returns, true),
        compute,
    )
}

/// A UDF of any signature whose result is `returns` (its metadata says
/// the SQL type, `jsonb` say), computed by `compute` on whole arrays.
pub(crate) fn field_udf(
    name: &'static str,
    signature: Signature,
    returns: Field,
    compute: fn(&[ArrayRef]) -> Result<ArrayRef>,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(ArrayFunction {
        name,
        signature,
        returns: Arc::new(returns),
        compute: FnPtr(compute),
    })
}

/// A function that makes one UDF once and hands out the same one.
macro_rules! cached_udf {
    ($fn_name:ident, $make:expr) => {
        pub(crate) fn $fn_name() -> std::sync::Arc<datafusion::logical_expr::ScalarUDF> {
            static UDF: std::sync::OnceLock<std::sync::Arc<datafusion::logical_expr::ScalarUDF>> =
                std::sync::OnceLock::new();
            UDF.get_or_init(|| std::sync::Arc::new($make)).clone()
        }
    };
}
pub(crate) use cached_udf;

/// `x` itself, as a column that may be NULL: what a scalar subquery
/// gives is NULL when it finds no row, whatever its column says.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct AsNullable {
    signature: Signature,
}

impl ScalarUDFImpl for AsNullable {
    fn name(&self) -> &str {
        "nullable"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        Ok(Arc::new(
            args.arg_fields[0].as_ref().clone().with_nullable(true),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(args.args[0].clone())
    }
}

cached_udf!(
    as_nullable,
    ScalarUDF::new_from_impl(AsNullable {
        signature: Signature::any(1, Volatility::Immutable),
    })
);
