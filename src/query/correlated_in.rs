//! A correlated `x IN (subquery)` (or `x = ANY`, `x <> ALL`) outside a
//! WHERE clause, with SQL's NULLs: `SELECT k, k IN (SELECT k FROM u WHERE
//! u.b = t.a) FROM t`. DataFusion plans IN subqueries only as a condition
//! of their own in WHERE (a semi or anti join); elsewhere this module
//! writes the value from three counts over the subquery's rows for the
//! outer row (all of them, those equal to x, those NULL), each a
//! correlated scalar subquery the planner turns into a join grouped by the
//! correlation:
//!
//! false when there are no rows, NULL when x is NULL, true when one equals
//! x, NULL when one is NULL, false otherwise.
//!
//! The subquery's own correlation must be equalities, as for every
//! correlated subquery here (others fail with 0A000).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ExprSchema, Result, ScalarValue};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::{lit, when, Expr, LogicalPlan, LogicalPlanBuilder, Subquery};

/// `x IN (subquery)` (negated: `NOT IN`) over a correlated subquery, as
/// the module header says; `schema` is the outer row's.
pub(super) fn correlated_in(
    x: Expr,
    subquery: &Subquery,
    negated: bool,
    schema: &DFSchema,
) -> Result<Expr> {
    let plan = subquery.subquery.as_ref().clone();
    let Some(column) = plan.schema().columns().into_iter().next() else {
        return datafusion::common::plan_err!("an IN subquery returns one column");
    };
    let column = Expr::Column(column);
    let outer_x = as_outer_reference(x.clone(), schema)?;
    let counted = |filter: Option<Expr>| -> Result<Expr> {
        let mut b = LogicalPlanBuilder::from(plan.clone());
        if let Some(f) = filter {
            b = b.filter(f)?;
        }
        let counting: LogicalPlan = b
            .aggregate(Vec::<Expr>::new(), vec![count(lit(1))])?
            .build()?;
        let outer_ref_columns = counting.all_out_ref_exprs();
        let found = Expr::ScalarSubquery(Subquery {
            subquery: Arc::new(counting),
            outer_ref_columns,
            spans: subquery.spans.clone(),
        });
        // An outer row the subquery gives no rows for joins as NULL.
        Ok(datafusion::functions::expr_fn::coalesce(vec![
            found,
            lit(0i64),
        ]))
    };
    let rows = counted(None)?;
    let equal = counted(Some(column.clone().eq(outer_x)))?;
    let nulls = counted(Some(column.is_null()))?;
    let found = when(rows.eq(lit(0i64)), lit(false))
        .when(x.is_null(), lit(ScalarValue::Boolean(None)))
        .when(equal.gt(lit(0i64)), lit(true))
        .when(nulls.gt(lit(0i64)), lit(ScalarValue::Boolean(None)))
        .otherwise(lit(false))?;
    Ok(if negated { !found } else { found })
}

/// `e` with its columns (the outer row's) as outer references.
fn as_outer_reference(e: Expr, schema: &DFSchema) -> Result<Expr> {
    e.transform_up(|e| match e {
        Expr::Column(c) => {
            let field = schema.field_from_column(&c)?;
            Ok(Transformed::yes(Expr::OuterReferenceColumn(
                Arc::clone(field),
                c,
            )))
        }
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}
