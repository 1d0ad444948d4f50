//! Intervals that span the same time are one value wherever values are
//! grouped, hashed or matched, as PostgreSQL compares them: `'1 day'` and
//! `'24 hours'` (and `'1 mon'` and `'30 days'`) are one group of `GROUP
//! BY`, one row of `DISTINCT` and `UNION`, a match of `INTERSECT` and
//! `EXCEPT`, one row of `DISTINCT ON`, and one value of `count(DISTINCT
//! ...)`.
//!
//! Arrow compares intervals field by field (months, days, nanoseconds), so
//! such a key is replaced by its span (`interval_span`, the number `=`
//! already compares by), and the group shows one of its intervals (the
//! least by Arrow's order, as `min` picks it; PostgreSQL shows the first it
//! met, which no query can rely on either).

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, Result};
use datafusion::functions_aggregate::min_max::min;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    Aggregate, Distinct, Expr, ExprSchemable, Join, LogicalPlan, Projection,
};

use super::temporal::interval_span;

fn is_interval(e: &Expr, schema: &datafusion::common::DFSchema) -> bool {
    matches!(e.get_type(schema), Ok(DataType::Interval(_)))
}

/// An aggregate grouping by intervals (or counting distinct ones) as one
/// grouping by their spans, under a projection that gives the aggregate's
/// own columns back.
pub(super) fn group_by_span(aggregate: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let input_schema = aggregate.input.schema().clone();
    let grouping_sets = aggregate
        .group_expr
        .iter()
        .any(|e| matches!(e, Expr::GroupingSet(_)));
    let by_interval: Vec<bool> = aggregate
        .group_expr
        .iter()
        .map(|e| is_interval(e, &input_schema))
        .collect();
    let distinct_interval = |e: &Expr| match e {
        Expr::AggregateFunction(f) => {
            f.params.distinct
                && f.func.name().eq_ignore_ascii_case("count")
                && f.params.args.iter().any(|a| is_interval(a, &input_schema))
        }
        Expr::Alias(a) => matches!(a.expr.as_ref(), Expr::AggregateFunction(f)
            if f.params.distinct
                && f.func.name().eq_ignore_ascii_case("count")
                && f.params.args.iter().any(|a| is_interval(a, &input_schema))),
        _ => false,
    };
    if grouping_sets
        || (!by_interval.iter().any(|b| *b) && !aggregate.aggr_expr.iter().any(distinct_interval))
    {
        return Ok(Transformed::no(LogicalPlan::Aggregate(aggregate)));
    }
    let original = aggregate.schema.clone();
    let groups = aggregate.group_expr.len();
    let mut group_expr = Vec::with_capacity(groups);
    let mut shown = Vec::new();
    for (i, (e, interval)) in aggregate.group_expr.iter().zip(&by_interval).enumerate() {
        if *interval {
            group_expr.push(
                interval_span()
                    .call(vec![e.clone()])
                    .alias(format!("__sluice_span_{i}")),
            );
            shown.push(min(e.clone()).alias(format!("__sluice_interval_{i}")));
        } else {
            group_expr.push(e.clone());
        }
    }
    let mut aggr_expr: Vec<Expr> = aggregate
        .aggr_expr
        .iter()
        .map(|e| {
            if !distinct_interval(e) {
                return e.clone();
            }
            let (f, name) = match e {
                Expr::Alias(a) => (a.expr.as_ref().clone(), a.name.clone()),
                other => (other.clone(), other.schema_name().to_string()),
            };
            let Expr::AggregateFunction(mut f) = f else {
                return e.clone();
            };
            f.params.args = f
                .params
                .args
                .iter()
                .map(|a| match is_interval(a, &input_schema) {
                    true => interval_span().call(vec![a.clone()]),
                    false => a.clone(),
                })
                .collect();
            Expr::AggregateFunction(AggregateFunction { ..f }).alias(name)
        })
        .collect();
    let aggregates = aggr_expr.len();
    aggr_expr.extend(shown);
    let grouped = Aggregate::try_new(aggregate.input.clone(), group_expr, aggr_expr)?;
    let fields = grouped.schema.clone();
    let column = |i: usize| Expr::Column(Column::from(fields.qualified_field(i)));
    let mut extra = groups + aggregates;
    let mut exprs = Vec::with_capacity(original.fields().len());
    for (j, (qualifier, field)) in original.iter().enumerate() {
        let e = if j < groups && by_interval[j] {
            let e = column(extra);
            extra += 1;
            e
        } else {
            column(j)
        };
        exprs.push(e.alias_qualified(qualifier.cloned(), field.name()));
    }
    let projection = Projection::try_new(exprs, Arc::new(LogicalPlan::Aggregate(grouped)))?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// `DISTINCT` over rows with an interval column: the aggregate grouping
/// by every column, by span. `DISTINCT ON` an interval: on its span, and
/// ordered by it (PostgreSQL's order of intervals).
pub(super) fn distinct_by_span(distinct: Distinct) -> Result<Transformed<LogicalPlan>> {
    let input = match distinct {
        Distinct::All(input) => input,
        Distinct::On(on) => {
            let schema = on.input.schema().clone();
            if !on.on_expr.iter().any(|e| is_interval(e, &schema)) {
                return Ok(Transformed::no(LogicalPlan::Distinct(Distinct::On(on))));
            }
            let by_span = |e: &Expr| match is_interval(e, &schema) {
                true => interval_span().call(vec![e.clone()]),
                false => e.clone(),
            };
            let on_expr = on.on_expr.iter().map(by_span).collect();
            let sort_expr = on.sort_expr.map(|sorts| {
                sorts
                    .into_iter()
                    .map(|mut s| {
                        s.expr = by_span(&s.expr);
                        s
                    })
                    .collect()
            });
            let rewritten = datafusion::logical_expr::DistinctOn::try_new(
                on_expr,
                on.select_expr,
                sort_expr,
                on.input,
            )?;
            return Ok(Transformed::yes(LogicalPlan::Distinct(Distinct::On(
                rewritten,
            ))));
        }
    };
    let schema = input.schema().clone();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Interval(_)))
    {
        return Ok(Transformed::no(LogicalPlan::Distinct(Distinct::All(input))));
    }
    let columns: Vec<Expr> = schema.columns().into_iter().map(Expr::Column).collect();
    let aggregate = Aggregate::try_new(input, columns, vec![])?;
    group_by_span(aggregate).map(|t| Transformed::yes(t.data))
}

/// A join matching interval columns (INTERSECT, EXCEPT, a join on them)
/// matches their spans.
pub(super) fn join_by_span(mut join: Join) -> Result<Transformed<LogicalPlan>> {
    let (left, right) = (join.left.schema().clone(), join.right.schema().clone());
    let mut changed = false;
    for (l, r) in join.on.iter_mut() {
        if is_interval(l, &left) && is_interval(r, &right) {
            *l = interval_span().call(vec![l.clone()]);
            *r = interval_span().call(vec![r.clone()]);
            changed = true;
        }
    }
    Ok(Transformed::new_transformed(
        LogicalPlan::Join(join),
        changed,
    ))
}

/// `x IN (subquery)` and `x op ANY/ALL (subquery)` over intervals compare
/// spans: the planner matches them by a join or a comparison it builds
/// later, on the intervals as they are.
pub(super) fn subquery_by_span(
    e: Expr,
    schema: &datafusion::common::DFSchema,
) -> Result<Transformed<Expr>> {
    match e {
        Expr::InSubquery(mut ins) if is_interval(&ins.expr, schema) => {
            ins.expr = Box::new(interval_span().call(vec![*ins.expr]));
            ins.subquery = spans_of(ins.subquery)?;
            Ok(Transformed::yes(Expr::InSubquery(ins)))
        }
        Expr::SetComparison(mut sc) if is_interval(&sc.expr, schema) => {
            sc.expr = Box::new(interval_span().call(vec![*sc.expr]));
            sc.subquery = spans_of(sc.subquery)?;
            Ok(Transformed::yes(Expr::SetComparison(sc)))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// The subquery's one column as its span.
fn spans_of(sq: datafusion::logical_expr::Subquery) -> Result<datafusion::logical_expr::Subquery> {
    let plan = sq.subquery.as_ref().clone();
    let Some(column) = plan.schema().columns().into_iter().next() else {
        return Ok(sq);
    };
    let name = column.name.clone();
    let projected = datafusion::logical_expr::LogicalPlanBuilder::from(plan)
        .project(vec![interval_span()
            .call(vec![Expr::Column(column)])
            .alias(name)])?
        .build()?;
    Ok(datafusion::logical_expr::Subquery {
        subquery: Arc::new(projected),
        outer_ref_columns: sq.outer_ref_columns,
        spans: sq.spans,
    })
}
