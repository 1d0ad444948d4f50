//! Math functions on floats that fail where PostgreSQL's fail, instead of
//! returning NaN or infinity: the logarithm of zero or of a negative
//! number (2201E), the square root of a negative number and impossible
//! powers (2201F), and `exp` or `power` results too large or too small for
//! a double (22003 `value out of range: overflow` / `underflow`). The
//! [`super::checked_arithmetic::CheckedArithmetic`] rule wraps each call of
//! such a function on float arguments in [`CheckedMath`], which checks the
//! arguments, calls DataFusion's function, and checks its result. Column
//! names stay `ln(x)`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

use crate::error::SluiceError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MathKind {
    /// `ln`, `log`, `log10`, `log2`: every argument must be positive.
    Log,
    Sqrt,
    Exp,
    Power,
}

/// Wraps a call of a checked function on float arguments.
pub(super) fn checked_function(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::ScalarFunction(f) = &e else {
        return Ok(Transformed::no(e));
    };
    if f.func.inner().downcast_ref::<CheckedMath>().is_some() {
        return Ok(Transformed::no(e));
    }
    let kind = match f.func.name() {
        "ln" | "log" | "log10" | "log2" => MathKind::Log,
        "sqrt" => MathKind::Sqrt,
        "exp" => MathKind::Exp,
        "power" => MathKind::Power,
        _ => return Ok(Transformed::no(e)),
    };
    let floats = f.args.iter().all(|a| {
        matches!(
            a.get_type(schema),
            Ok(DataType::Float64 | DataType::Float32)
        )
    });
    if !floats || f.args.is_empty() {
        return Ok(Transformed::no(e));
    }
    let udf = ScalarUDF::new_from_impl(CheckedMath {
        kind,
        inner: f.func.clone(),
    });
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::new(udf), f.args.clone()),
    )))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedMath {
    kind: MathKind,
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for CheckedMath {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let inputs = args
            .args
            .iter()
            .map(|a| doubles(a, rows))
            .collect::<Result<Vec<_>>>()?;
        let inputs: Vec<&Float64Array> = inputs.iter().map(|a| a.as_primitive()).collect();
        self.check_arguments(&inputs)?;
        let out = self.inner.invoke_with_args(args)?;
        if matches!(self.kind, MathKind::Exp | MathKind::Power) {
            let result = doubles(&out, rows)?;
            check_range(&inputs, result.as_primitive(), self.kind)?;
        }
        Ok(out)
    }
}

impl CheckedMath {
    fn check_arguments(&self, inputs: &[&Float64Array]) -> Result<()> {
        let rows = inputs.first().map_or(0, |a| a.len());
        for i in 0..rows {
            let v: Vec<Option<f64>> = inputs
                .iter()
                .map(|a| a.is_valid(i).then(|| a.value(i)))
                .collect();
            match self.kind {
                MathKind::Log => {
                    for x in v.iter().flatten() {
                        if *x == 0.0 {
                            return Err(fail("2201E", "cannot take logarithm of zero"));
                        }
                        if *x < 0.0 {
                            return Err(fail(
                                "2201E",
                                "cannot take logarithm of a negative number",
                            ));
                        }
                    }
                }
                MathKind::Sqrt => {
                    if v[0].is_some_and(|x| x < 0.0) {
                        return Err(fail(
                            "2201F",
                            "cannot take square root of a negative number",
                        ));
                    }
                }
                MathKind::Power => {
                    if let [Some(x), Some(y)] = v[..] {
                        if x == 0.0 && y < 0.0 {
                            return Err(fail(
                                "2201F",
                                "zero raised to a negative power is undefined",
                            ));
                        }
                        if x < 0.0 && y.fract() != 0.0 && y.is_finite() {
                            return Err(fail(
                                "2201F",
                                "a negative number raised to a non-integer power yields a complex result",
                            ));
                        }
                    }
                }
                MathKind::Exp => {}
            }
        }
        Ok(())
    }
}

/// `exp` and `power`: a result that is infinite, or zero, where every
/// argument is finite (and a power's base is not zero) is out of range.
fn check_range(inputs: &[&Float64Array], out: &Float64Array, kind: MathKind) -> Result<()> {
    for i in 0..out.len() {
        if out.is_null(i) || inputs.iter().any(|a| a.is_null(i)) {
            continue;
        }
        let finite = inputs.iter().all(|a| a.value(i).is_finite());
        let r = out.value(i);
        if finite && r.is_infinite() {
            return Err(fail("22003", "value out of range: overflow"));
        }
        let zero_base = kind == MathKind::Power && inputs[0].value(i) == 0.0;
        if finite && r == 0.0 && !zero_base {
            return Err(fail("22003", "value out of range: underflow"));
        }
    }
    Ok(())
}

fn doubles(v: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    Ok(arrow::compute::cast(
        &v.to_array(rows)?,
        &DataType::Float64,
    )?)
}

fn fail(sqlstate: &'static str, message: &str) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::Evaluation {
        sqlstate,
        message: message.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::super::checked_arithmetic::CheckedArithmetic;
    use super::*;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn domain_errors_as_postgresql_names_them() {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(CheckedArithmetic));
        for (sql, code, message) in [
            ("SELECT ln(CAST(0 AS DOUBLE))", "2201E", "logarithm of zero"),
            (
                "SELECT log10(CAST(-1 AS DOUBLE))",
                "2201E",
                "negative number",
            ),
            (
                "SELECT log(a) FROM (VALUES (1.0), (0.0)) t(a)",
                "2201E",
                "zero",
            ),
            ("SELECT sqrt(CAST(-1 AS DOUBLE))", "2201F", "square root"),
            (
                "SELECT power(CAST(0 AS DOUBLE), -1)",
                "2201F",
                "negative power",
            ),
            ("SELECT power(CAST(-8 AS DOUBLE), 0.5)", "2201F", "complex"),
            ("SELECT exp(CAST(1000 AS DOUBLE))", "22003", "overflow"),
            ("SELECT power(CAST(10 AS DOUBLE), 400)", "22003", "overflow"),
            ("SELECT exp(CAST(-1000 AS DOUBLE))", "22003", "underflow"),
        ] {
            let err = ctx.sql(sql).await.unwrap().collect().await.unwrap_err();
            let err = SluiceError::DataFusion(err);
            assert_eq!(err.sqlstate(), code, "{sql}");
            assert!(err.message().contains(message), "{sql}: {}", err.message());
        }
        let batches = ctx
            .sql("SELECT ln(a), sqrt(a), exp(a), power(a, 2), power(0, 0) FROM (VALUES (1.0), (NULL)) t(a)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names[0], "ln(t.a)");
        assert_eq!(batches[0].num_rows(), 2);
    }
}
