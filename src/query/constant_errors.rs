//! PostgreSQL computes every constant part of a query while planning it
//! (`eval_const_expressions`), so `SELECT 2147483647 * 3 FROM t WHERE
//! false` fails with 22003 even though no row is read, and `CASE WHEN x > 0
//! THEN 1/0 END` fails whatever `x` holds. DataFusion folds constants too
//! but keeps one that fails for the rows to fail on. This analyzer rule,
//! run after the rules that give operators and casts PostgreSQL's results,
//! evaluates each constant part PostgreSQL would fold and returns the
//! first error, with the SQLSTATE a row would have given.
//!
//! What PostgreSQL does not fold is not evaluated: a CASE arm after one
//! whose condition is the constant `true` or whose own condition is a
//! constant `false` or NULL, what follows a constant `false` in an AND (a
//! constant `true` in an OR), the COALESCE arguments after a constant that
//! is not NULL, and anything with a column, a parameter, a subquery, an
//! aggregate or a function that is not immutable in it.

use std::sync::{Arc, LazyLock};

use arrow::array::{new_null_array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::create_physical_expr;

#[derive(Debug, Default)]
pub struct ConstantErrors;

impl AnalyzerRule for ConstantErrors {
    fn name(&self) -> &str {
        "constant_errors"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                check(e)?;
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(plan)
    }
}

/// Whether `e` alone can be computed now: no column, parameter, subquery,
/// aggregate or function that is not immutable anywhere in it.
fn is_constant(e: &Expr) -> bool {
    let mut constant = true;
    let _ = e.apply(|e| {
        let here = match e {
            Expr::Column(_)
            | Expr::OuterReferenceColumn(..)
            | Expr::ScalarVariable(..)
            | Expr::Placeholder(_)
            | Expr::Exists(_)
            | Expr::InSubquery(_)
            | Expr::ScalarSubquery(_)
            | Expr::SetComparison(_)
            | Expr::AggregateFunction(_)
            | Expr::WindowFunction(_)
            | Expr::GroupingSet(_)
            | Expr::Unnest(_) => false,
            #[allow(deprecated)]
            Expr::Wildcard { .. } => false,
            // PostgreSQL folds immutable functions only (`now()` is
            // stable: computed when the statement runs).
            Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Immutable,
            _ => true,
        };
        constant &= here;
        Ok(if here {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    constant
}

static ONE_ROW_SCHEMA: LazyLock<Arc<Schema>> =
    LazyLock::new(|| Arc::new(Schema::new(vec![Field::new(".", DataType::Null, true)])));

/// The value of a constant expression.
fn evaluate(e: &Expr) -> Result<ScalarValue> {
    match e {
        Expr::Literal(v, _) => return Ok(v.clone()),
        // DataFusion plans COALESCE only as the CASE its simplifier makes
        // of it: its first argument that is not NULL.
        Expr::ScalarFunction(f) if f.func.name() == "coalesce" => {
            let mut last = ScalarValue::Null;
            for arg in &f.args {
                last = evaluate(arg)?;
                if !last.is_null() {
                    break;
                }
            }
            return Ok(last);
        }
        _ => {}
    }
    let e = &as_planned(e.clone())?;
    let df_schema = DFSchema::try_from(Arc::clone(&*ONE_ROW_SCHEMA))?;
    let physical = create_physical_expr(
        e,
        &df_schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let batch = RecordBatch::try_new(
        Arc::clone(&*ONE_ROW_SCHEMA),
        vec![new_null_array(&DataType::Null, 1)],
    )?;
    match physical.evaluate(&batch)? {
        ColumnarValue::Scalar(v) => Ok(v),
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0),
    }
}

/// `e` with every function call as DataFusion's simplifier would leave
/// it, so that it can be planned: COALESCE as a CASE, `arrow_cast` as a
/// cast (functions that refuse to run unsimplified).
fn as_planned(e: Expr) -> Result<Expr> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::logical_expr::expr::ScalarFunction;
    use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
    let context = SimplifyContext::default();
    e.transform_up(|e| match e {
        Expr::ScalarFunction(f) => match f.func.simplify(f.args, &context)? {
            ExprSimplifyResult::Simplified(e) => Ok(Transformed::yes(e)),
            ExprSimplifyResult::Original(args) => Ok(Transformed::no(Expr::ScalarFunction(
                ScalarFunction::new_udf(f.func, args),
            ))),
        },
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

/// The constant's value, or None when `e` is not a constant.
fn value(e: &Expr) -> Result<Option<ScalarValue>> {
    if is_constant(e) {
        evaluate(e).map(Some)
    } else {
        Ok(None)
    }
}

fn is_bool(v: &Option<ScalarValue>, b: bool) -> bool {
    matches!(v, Some(ScalarValue::Boolean(Some(x))) if *x == b)
}

/// Fails with the first error of a constant part of `e` that PostgreSQL
/// would fold.
fn check(e: &Expr) -> Result<()> {
    if is_constant(e) {
        // Literals and aliases of them cost nothing to skip.
        if !matches!(e, Expr::Literal(..)) {
            evaluate(e)?;
        }
        return Ok(());
    }
    match e {
        Expr::Case(case) => {
            if let Some(operand) = &case.expr {
                check(operand)?;
            }
            for (when, then) in &case.when_then_expr {
                check(when)?;
                let condition = match case.expr {
                    // `CASE x WHEN v`: the arm is never taken only when
                    // the comparison is constant, which needs a constant x.
                    Some(_) => None,
                    None => value(when)?,
                };
                if is_bool(&condition, false) || matches!(&condition, Some(v) if v.is_null()) {
                    continue;
                }
                check(then)?;
                if is_bool(&condition, true) {
                    return Ok(());
                }
            }
            if let Some(e) = &case.else_expr {
                check(e)?;
            }
            Ok(())
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::And | Operator::Or) =>
        {
            check(left)?;
            let stop = *op == Operator::Or;
            if is_bool(&value(left)?, stop) {
                return Ok(());
            }
            check(right)
        }
        Expr::ScalarFunction(f) if f.func.name() == "coalesce" => {
            for arg in &f.args {
                check(arg)?;
                if matches!(value(arg)?, Some(v) if !v.is_null()) {
                    break;
                }
            }
            Ok(())
        }
        // Subqueries are checked as plans of their own.
        Expr::ScalarSubquery(_) | Expr::Exists(_) => Ok(()),
        Expr::InSubquery(ins) => check(&ins.expr),
        e => {
            let mut result = Ok(());
            let _ = e.apply_children(|child| {
                result = check(child);
                Ok(if result.is_ok() {
                    TreeNodeRecursion::Continue
                } else {
                    TreeNodeRecursion::Stop
                })
            });
            result
        }
    }
}
