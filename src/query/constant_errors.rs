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
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, Volatility,
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
        // DataFusion's optimizer would fold what PostgreSQL never computes.
        // Names stay as planned: the nodes above refer to them.
        plan.transform_up_with_subqueries(|node| {
            let preserver = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = preserver.save(&e);
                let t = e.transform_up(drop_untaken_arms)?;
                Ok(match t.transformed {
                    true => t.update_data(|e| saved.restore(e)),
                    false => t,
                })
            })
        })
        .map(|t| t.data)
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

/// A CASE arm whose condition is the constant `false` or NULL is never
/// taken, and PostgreSQL drops it before folding: its result, when it is
/// a constant, becomes a NULL of its type, so that DataFusion's constant
/// folding does not compute it (`CASE WHEN NULL THEN 'x'::numeric END` is
/// NULL, not 22P02).
fn drop_untaken_arms(e: Expr) -> Result<Transformed<Expr>> {
    let Expr::Case(mut case) = e else {
        return Ok(Transformed::no(e));
    };
    if case.expr.is_some() {
        return Ok(Transformed::no(Expr::Case(case)));
    }
    let mut changed = false;
    let mut taken = None;
    for (i, (when, then)) in case.when_then_expr.iter_mut().enumerate() {
        let condition = value(when)?;
        // The arms after one whose condition is the constant `true`, and
        // the ELSE, are never taken: they go (`CASE WHEN 1 = 1 THEN 'a'
        // WHEN 1/0 = 1 THEN 'b' END` is 'a').
        if is_bool(&condition, true) {
            taken = Some(i);
            break;
        }
        let untaken = is_bool(&condition, false) || matches!(&condition, Some(v) if v.is_null());
        if untaken && is_constant(then) && !matches!(then.as_ref(), Expr::Literal(..)) {
            let t = then.get_type(&DFSchema::empty())?;
            **then = Expr::Literal(ScalarValue::try_from(&t)?, None);
            changed = true;
        }
    }
    if let Some(i) = taken {
        if i + 1 < case.when_then_expr.len() || case.else_expr.is_some() {
            case.when_then_expr.truncate(i + 1);
            case.else_expr = None;
            changed = true;
        }
    }
    Ok(if changed {
        Transformed::yes(Expr::Case(case))
    } else {
        Transformed::no(Expr::Case(case))
    })
}

/// Fails with the first error of a cast of a literal in `e`
/// (`'true'::numeric`).
fn check_literal_casts(e: &Expr) -> Result<()> {
    e.apply(|e| {
        if let Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) = e {
            if matches!(expr.as_ref(), Expr::Literal(..)) {
                evaluate(e)?;
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// Fails with the first error of a constant part of `e` that PostgreSQL
/// would fold.
fn check(e: &Expr) -> Result<()> {
    // A constant CASE is looked into arm by arm, as below: computed whole,
    // it would compute arms that are never taken.
    if is_constant(e) && !matches!(e, Expr::Case(_)) {
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
                    // Never computed, except a literal's cast, which
                    // PostgreSQL's parser makes before anything is folded.
                    check_literal_casts(then)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{cast, lit, when};

    #[test]
    fn a_literals_cast_fails_even_in_an_arm_never_taken() {
        let bad = cast(lit("true"), DataType::Decimal128(38, 0));
        assert!(evaluate(&bad).is_err());
        let case = when(cast(lit(ScalarValue::Null), DataType::Boolean), bad)
            .end()
            .unwrap();
        assert!(check(&case).is_err(), "{case}");
        let computed = when(
            cast(lit(ScalarValue::Null), DataType::Boolean),
            lit(1) / lit(0),
        )
        .end()
        .unwrap();
        assert!(check(&computed).is_ok(), "{computed}");
    }
}
