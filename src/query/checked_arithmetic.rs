//! Integer `+`, `-` and `*` that fail on overflow, as PostgreSQL's do
//! (22003 `bigint out of range`); float operators that fail when a finite
//! result is too large (22003 `value out of range: overflow`) and on a zero
//! divisor (22012 `division by zero`). DataFusion's integer operators wrap
//! around (`9223372036854775807 + 1` gives a negative number) and its float
//! operators give infinity: wrong answers with no error. An analyzer rule,
//! run after type coercion, turns each such operation on smallint,
//! integer, bigint, real or double operands into a call of a function
//! that uses Arrow's checked kernels. The function names its
//! result column as the operator would (`a + b`), so column names do not
//! change; EXPLAIN shows PostgreSQL's names for the functions (`int8pl`).
//! The same rule wraps float math functions ([`super::checked_math`]).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::numeric;
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr_common::datum::apply;

/// The analyzer rule; add it to every session that plans user queries.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // Types of a node's expressions come from its inputs; a scan
            // has none (its filters are pushed down later, from nodes
            // rewritten here).
            if node.inputs().is_empty() {
                return Ok(Transformed::no(node));
            }
            let schema = merge_schema(&node.inputs());
            let rewritten = node.map_expressions(|e| {
                e.transform_up(|e| {
                    checked(e, &schema)?
                        .transform_data(|e| super::checked_math::checked_function(e, &schema))
                })
            })?;
            if rewritten.transformed {
                rewritten.map_data(|p| p.recompute_schema())
            } else {
                Ok(rewritten)
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "sluice_checked_arithmetic"
    }
}

fn checked(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    if !matches!(
        op,
        Operator::Plus | Operator::Minus | Operator::Multiply | Operator::Divide
    ) {
        return Ok(Transformed::no(e));
    }
    // Operands whose type cannot be told here are left alone.
    let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else {
        return Ok(Transformed::no(e));
    };
    let ty = match (&l, &r, op) {
        // Integer division already fails on zero; only + - * wrap.
        (_, _, Operator::Divide) if l.is_integer() => return Ok(Transformed::no(e)),
        (DataType::Int16, DataType::Int16, _) => NumType::SmallInt,
        (DataType::Int32, DataType::Int32, _) => NumType::Integer,
        (DataType::Int64, DataType::Int64, _) => NumType::BigInt,
        // Float division by zero, and a finite result too large to hold,
        // are errors in PostgreSQL, not infinity.
        (DataType::Float32, DataType::Float32, _) => NumType::Real,
        (DataType::Float64, DataType::Float64, _) => NumType::Double,
        _ => return Ok(Transformed::no(e)),
    };
    let udf = ScalarUDF::new_from_impl(CheckedOp::new(*op, ty, l));
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(
            Arc::new(udf),
            vec![left.as_ref().clone(), right.as_ref().clone()],
        ),
    )))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NumType {
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
}

impl NumType {
    fn pg_name(self) -> &'static str {
        match self {
            NumType::SmallInt => "smallint",
            NumType::Integer => "integer",
            NumType::BigInt => "bigint",
            NumType::Real => "real",
            NumType::Double => "double precision",
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedOp {
    op: Operator,
    ty: NumType,
    name: String,
    signature: Signature,
}

impl CheckedOp {
    fn new(op: Operator, ty: NumType, data_type: DataType) -> CheckedOp {
        let prefix = match ty {
            NumType::SmallInt => "int2",
            NumType::Integer => "int4",
            NumType::BigInt => "int8",
            NumType::Real => "float4",
            NumType::Double => "float8",
        };
        let suffix = match op {
            Operator::Plus => "pl",
            Operator::Minus => "mi",
            Operator::Divide => "div",
            _ => "mul",
        };
        CheckedOp {
            op,
            ty,
            name: format!("{prefix}{suffix}"),
            signature: Signature::exact(vec![data_type.clone(), data_type], Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Int64))
    }

    /// A NULL operand makes the result NULL without evaluating the other
    /// (PostgreSQL folds a strict operator with a NULL constant so, and
    /// `NULL - (i * i)` then never fails on an overflowing `i * i`).
    fn simplify(
        &self,
        args: Vec<Expr>,
        _info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> Result<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        use datafusion::logical_expr::simplify::ExprSimplifyResult;
        if args
            .iter()
            .any(|a| matches!(a, Expr::Literal(v, _) if v.is_null()))
        {
            let ty = match self.signature.type_signature {
                datafusion::logical_expr::TypeSignature::Exact(ref t) => t.first().cloned(),
                _ => None,
            };
            if let Some(ty) = ty {
                return Ok(ExprSimplifyResult::Simplified(Expr::Literal(
                    ScalarValue::try_from(&ty)?,
                    None,
                )));
            }
        }
        Ok(ExprSimplifyResult::Original(args))
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        match args {
            [l, r] => Ok(format!(
                "{} {} {}",
                l.schema_name(),
                self.op,
                r.schema_name()
            )),
            _ => Ok(self.name.clone()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [l, r] = args.args.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "{} takes two arguments",
                self.name
            )));
        };
        let kernel = match self.op {
            Operator::Plus => numeric::add,
            Operator::Minus => numeric::sub,
            Operator::Divide => {
                if has_zero(r)? {
                    return Err(DataFusionError::ArrowError(
                        Box::new(ArrowError::DivideByZero),
                        None,
                    ));
                }
                numeric::div
            }
            _ => numeric::mul,
        };
        let out_of_range = format!("{} out of range", self.ty.pg_name());
        let out = apply(l, r, |a, b| {
            kernel(a, b).map_err(|e| match e {
                ArrowError::ArithmeticOverflow(_) => {
                    ArrowError::ArithmeticOverflow(out_of_range.clone())
                }
                other => other,
            })
        })?;
        if matches!(self.ty, NumType::Real | NumType::Double) {
            if overflowed(l, r, &out, args.number_rows)? {
                return Err(DataFusionError::ArrowError(
                    Box::new(ArrowError::ArithmeticOverflow(
                        "value out of range: overflow".into(),
                    )),
                    None,
                ));
            }
            if matches!(self.op, Operator::Multiply | Operator::Divide)
                && underflowed(self.op, l, r, &out, args.number_rows)?
            {
                return Err(super::udf::pg_error(
                    "22003",
                    "value out of range: underflow",
                ));
            }
        }
        Ok(out)
    }
}

/// True when a float result is infinite in a row where both operands are
/// finite.
fn overflowed(
    l: &ColumnarValue,
    r: &ColumnarValue,
    out: &ColumnarValue,
    rows: usize,
) -> Result<bool> {
    // Almost always nothing is infinite: answer that without copying.
    if !any_infinite(out) {
        return Ok(false);
    }
    let doubles = |v: &ColumnarValue| -> Result<ArrayRef> {
        Ok(arrow::compute::cast(
            &v.to_array(rows)?,
            &DataType::Float64,
        )?)
    };
    let (l, r, out) = (doubles(l)?, doubles(r)?, doubles(out)?);
    let (l, r, out) = (
        l.as_primitive::<Float64Type>(),
        r.as_primitive::<Float64Type>(),
        out.as_primitive::<Float64Type>(),
    );
    Ok((0..out.len()).any(|i| {
        out.is_valid(i)
            && out.value(i).is_infinite()
            && l.value(i).is_finite()
            && r.value(i).is_finite()
    }))
}

/// True when a float product is zero in a row where neither operand is,
/// or a quotient is zero where the dividend is not and the divisor is
/// finite: PostgreSQL's `float8mul` and `float8div` fail there.
fn underflowed(
    op: Operator,
    l: &ColumnarValue,
    r: &ColumnarValue,
    out: &ColumnarValue,
    rows: usize,
) -> Result<bool> {
    let doubles = |v: &ColumnarValue| -> Result<ArrayRef> {
        Ok(arrow::compute::cast(
            &v.to_array(rows)?,
            &DataType::Float64,
        )?)
    };
    let out = doubles(out)?;
    let out = out.as_primitive::<Float64Type>();
    // Almost always no result is zero: answer that without copying.
    if !out.iter().flatten().any(|v| v == 0.0) {
        return Ok(false);
    }
    let (l, r) = (doubles(l)?, doubles(r)?);
    let (l, r) = (
        l.as_primitive::<Float64Type>(),
        r.as_primitive::<Float64Type>(),
    );
    Ok((0..out.len()).any(|i| {
        out.is_valid(i)
            && out.value(i) == 0.0
            && l.value(i) != 0.0
            && match op {
                Operator::Multiply => r.value(i) != 0.0,
                _ => r.value(i).is_finite(),
            }
    }))
}

/// True when a float result holds an infinity.
fn any_infinite(v: &ColumnarValue) -> bool {
    match v {
        ColumnarValue::Scalar(ScalarValue::Float64(Some(x))) => x.is_infinite(),
        ColumnarValue::Scalar(ScalarValue::Float32(Some(x))) => x.is_infinite(),
        ColumnarValue::Scalar(_) => false,
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Float64 => a
                .as_primitive::<Float64Type>()
                .iter()
                .flatten()
                .any(f64::is_infinite),
            DataType::Float32 => a
                .as_primitive::<Float32Type>()
                .iter()
                .flatten()
                .any(f32::is_infinite),
            _ => true,
        },
    }
}

/// True when a float divisor holds a zero.
fn has_zero(divisor: &ColumnarValue) -> Result<bool> {
    let zero = |v: f64| v == 0.0;
    Ok(match divisor {
        ColumnarValue::Scalar(s) => match s {
            ScalarValue::Float64(Some(v)) => zero(*v),
            ScalarValue::Float32(Some(v)) => zero(f64::from(*v)),
            _ => false,
        },
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Float64 => a.as_primitive::<Float64Type>().iter().flatten().any(zero),
            DataType::Float32 => a
                .as_primitive::<Float32Type>()
                .iter()
                .flatten()
                .any(|v| zero(f64::from(v))),
            _ => false,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn run(ctx: &SessionContext, sql: &str) -> Result<Vec<arrow::array::RecordBatch>> {
        ctx.sql(sql).await?.collect().await
    }

    #[tokio::test]
    async fn overflow_fails_and_names_stay() {
        let ctx = SessionContext::new();
        ctx.add_analyzer_rule(Arc::new(CheckedArithmetic));
        for (sql, ty) in [
            ("SELECT CAST(9223372036854775807 AS BIGINT) + 1", "bigint"),
            ("SELECT CAST(-9223372036854775807 AS BIGINT) - 2", "bigint"),
            ("SELECT CAST(2147483647 AS INT) * CAST(2 AS INT)", "integer"),
            (
                "SELECT CAST(300 AS SMALLINT) * CAST(1000 AS SMALLINT)",
                "smallint",
            ),
        ] {
            let err = run(&ctx, sql).await.unwrap_err().to_string();
            assert!(err.contains(&format!("{ty} out of range")), "{sql}: {err}");
        }
        let batches = run(
            &ctx,
            "SELECT a + 1, a * a - 2 FROM (VALUES (CAST(3 AS BIGINT)), (NULL)) t(a) \
             WHERE a + 0 > 0 OR a IS NULL",
        )
        .await
        .unwrap();
        let schema = batches[0].schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["t.a + Int64(1)", "t.a * t.a - Int64(2)"]);
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| 4 ") && text.contains("| 7 "), "{text}");
        // Floats and mixed types keep DataFusion's operators, but for
        // division by zero.
        run(&ctx, "SELECT CAST(1.5 AS DOUBLE) * 2").await.unwrap();
        run(&ctx, "SELECT CAST(1.5 AS DOUBLE) / 2").await.unwrap();
        // Infinity in, infinity out; a finite overflow fails.
        run(
            &ctx,
            "SELECT CAST('inf' AS DOUBLE) * 2, CAST(NULL AS DOUBLE) * 2",
        )
        .await
        .unwrap();
        for sql in [
            "SELECT CAST(1e308 AS DOUBLE) * 10",
            "SELECT a + a FROM (VALUES (1.0), (1.7e308)) t(a)",
            "SELECT CAST(3e38 AS REAL) * CAST(10 AS REAL)",
        ] {
            let err = run(&ctx, sql).await.unwrap_err().to_string();
            assert!(err.contains("value out of range: overflow"), "{sql}: {err}");
        }
        for sql in [
            "SELECT CAST(1.5 AS DOUBLE) / 0",
            "SELECT a / b FROM (VALUES (1.0, 2.0), (1.0, -0.0)) t(a, b)",
            "SELECT CAST(1 AS REAL) / CAST(0 AS REAL)",
        ] {
            let err = run(&ctx, sql).await.unwrap_err().to_string();
            assert!(err.contains("Divide by zero"), "{sql}: {err}");
        }
    }
}
