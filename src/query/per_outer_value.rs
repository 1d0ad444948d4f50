//! Correlated subqueries the optimizer cannot turn into joins, evaluated
//! once per distinct value of the outer columns they read, as PostgreSQL
//! evaluates them per outer row.
//!
//! DataFusion decorrelates a subquery whose outer references are
//! equalities in its WHERE clause. Others fail to plan (`t2.f1 >= t1.f1`,
//! an outer column in an outer join's ON or in the select list), and a
//! LATERAL subquery with a window function or a LIMIT would be
//! decorrelated wrongly (the rows of every outer row numbered or cut
//! together). For those, a node that holds such a subquery (a filter or a
//! projection over its input, or a LATERAL join over its left side) is
//! computed as the union, over each distinct value `v` of the outer
//! columns, of the node over the input rows whose columns are `v` (IS NOT
//! DISTINCT FROM), with `v` bound into the subquery as literals: the
//! subquery is then uncorrelated and plans as usual.
//!
//! The input is computed first, once, and the node reads those rows, so
//! the values and the rows they select agree. Planning then costs a copy
//! of the node per value: past [`MAX_OUTER_VALUES`] the query is refused
//! with 0A000 rather than left to run for hours.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef, DataFusionError, Result, ScalarValue};
use datafusion::datasource::{provider_as_source, MemTable};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    binary_expr, EmptyRelation, Expr, LogicalPlan, LogicalPlanBuilder, Operator, Union,
};
use datafusion::prelude::DataFrame;

/// The most distinct outer values a query is evaluated for.
pub const MAX_OUTER_VALUES: usize = 1000;

/// Whether planning failed on a correlated subquery that an evaluation per
/// outer value may answer.
pub fn is_correlation_error(e: &DataFusionError) -> bool {
    let text = e.to_string();
    text.contains("Accessing outer reference columns is not allowed")
        || text.contains("Physical plan does not support logical expression ScalarSubquery")
        || text.contains("Physical plan does not support logical expression Exists")
        || text.contains("Physical plan does not support logical expression InSubquery")
        || text.contains("Physical plan does not support logical expression SetComparison")
        || text.contains("Physical plan does not support logical expression OuterReferenceColumn")
        || text.contains("Correlated column is not allowed")
}

/// Whether `plan` holds a LATERAL subquery the optimizer would decorrelate
/// into a wrong answer: one computing a window function or a LIMIT over
/// the rows of each outer row.
pub fn needs_per_outer_value(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        if let LogicalPlan::Join(join) = node {
            if lateral_subqueries(&join.right, join.left.schema())
                .iter()
                .any(|sq| counts_rows(sq))
            {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `plan` with every node that reads its outer rows through a correlated
/// subquery computed per outer value (see the module header). `state`
/// computes each such node's input.
pub async fn evaluate_per_outer_value(
    state: &SessionState,
    mut plan: LogicalPlan,
) -> Result<LogicalPlan> {
    // Each round expands the first such node, bottom-up, whose input has
    // none left; a plan has a handful.
    for _ in 0..64 {
        let Some((input, columns)) = first_correlated_node(&plan)? else {
            return Ok(plan);
        };
        let batches = DataFrame::new(state.clone(), input.clone())
            .collect()
            .await?;
        let outer = OuterRows::new(&input, &columns, batches)?;
        let mut done = false;
        plan = plan
            .transform_up(|node| {
                if done || correlation_of(&node).is_none() {
                    return Ok(Transformed::no(node));
                }
                done = true;
                Ok(Transformed::new(
                    outer.expand(&node)?,
                    true,
                    TreeNodeRecursion::Stop,
                ))
            })?
            .data;
    }
    Ok(plan)
}

/// The input and the outer columns of the first node, bottom-up, that
/// reads its rows through a correlated subquery.
fn first_correlated_node(plan: &LogicalPlan) -> Result<Option<(LogicalPlan, Vec<Column>)>> {
    let mut found = None;
    // `transform_up` visits a node's inputs before the node.
    let _ = plan.clone().transform_up(|node| {
        if found.is_none() {
            found = correlation_of(&node);
        }
        Ok(Transformed::no(node))
    })?;
    Ok(found)
}

/// The input a node's correlated subqueries read and the columns of it
/// they read, for a filter, a projection or a LATERAL join.
fn correlation_of(node: &LogicalPlan) -> Option<(LogicalPlan, Vec<Column>)> {
    let (input, columns) = match node {
        LogicalPlan::Filter(f) => (
            f.input.as_ref(),
            expression_outer_columns(node, f.input.schema()),
        ),
        LogicalPlan::Projection(p) => (
            p.input.as_ref(),
            expression_outer_columns(node, p.input.schema()),
        ),
        LogicalPlan::Join(j) => {
            let mut columns = Vec::new();
            for sq in lateral_subqueries(&j.right, j.left.schema()) {
                collect_outer_columns(&sq, j.left.schema(), &mut columns);
            }
            (j.left.as_ref(), columns)
        }
        _ => return None,
    };
    (!columns.is_empty()).then(|| (input.clone(), columns))
}

/// The columns of `input` that the subqueries of `node`'s expressions read.
fn expression_outer_columns(node: &LogicalPlan, input: &DFSchemaRef) -> Vec<Column> {
    let mut columns = Vec::new();
    for e in node.expressions() {
        let _ = e.apply(|e| {
            match e {
                Expr::ScalarSubquery(sq)
                | Expr::Exists(datafusion::logical_expr::expr::Exists { subquery: sq, .. }) => {
                    collect_outer_columns(&sq.subquery, input, &mut columns)
                }
                Expr::InSubquery(i) => {
                    collect_outer_columns(&i.subquery.subquery, input, &mut columns)
                }
                Expr::SetComparison(s) => {
                    collect_outer_columns(&s.subquery.subquery, input, &mut columns)
                }
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    columns
}

/// The plans of the LATERAL subqueries in `right` that read columns of
/// `left`.
fn lateral_subqueries(right: &LogicalPlan, left: &DFSchemaRef) -> Vec<Arc<LogicalPlan>> {
    let mut found = Vec::new();
    let _ = right.apply(|node| {
        if let LogicalPlan::Subquery(sq) = node {
            let mut columns = Vec::new();
            collect_outer_columns(&sq.subquery, left, &mut columns);
            if !columns.is_empty() {
                found.push(sq.subquery.clone());
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Whether a subquery numbers, ranks or cuts its rows.
fn counts_rows(plan: &LogicalPlan) -> bool {
    plan.exists(|n| Ok(matches!(n, LogicalPlan::Window(_) | LogicalPlan::Limit(_))))
        .unwrap_or(false)
}

/// Adds to `columns` the outer references anywhere in `plan` (its
/// subqueries too) that are columns of `outer`.
fn collect_outer_columns(plan: &LogicalPlan, outer: &DFSchemaRef, columns: &mut Vec<Column>) {
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::OuterReferenceColumn(_, c) = e {
                    if outer.has_column(c) && !columns.contains(c) {
                        columns.push(c.clone());
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
}

/// A node's input rows, computed, and the distinct values of the outer
/// columns among them.
struct OuterRows {
    /// The rows, as a plan with the input's own schema.
    rows: LogicalPlan,
    columns: Vec<Column>,
    values: Vec<Vec<ScalarValue>>,
}

impl OuterRows {
    fn new(input: &LogicalPlan, columns: &[Column], batches: Vec<RecordBatch>) -> Result<Self> {
        let schema = input.schema();
        let indices = columns
            .iter()
            .map(|c| schema.index_of_column(c))
            .collect::<Result<Vec<_>>>()?;
        let mut seen = HashSet::new();
        let mut values = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                let v = indices
                    .iter()
                    .map(|&i| ScalarValue::try_from_array(batch.column(i), row))
                    .collect::<Result<Vec<_>>>()?;
                if seen.insert(v.clone()) {
                    values.push(v);
                    if values.len() > MAX_OUTER_VALUES {
                        return Err(super::udf::pg_error(
                            "0A000",
                            format!(
                                "a subquery that reads the outer query's columns other than by \
                                 equality is evaluated once per distinct outer value, and this \
                                 query has more than {MAX_OUTER_VALUES} of them"
                            ),
                        ));
                    }
                }
            }
        }
        // Named c0, c1, ...: the input's names may repeat under other
        // qualifiers; the projection gives each its own back.
        let renamed = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batches = batches
            .into_iter()
            .map(|b| RecordBatch::try_new(renamed.clone(), b.columns().to_vec()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let table = MemTable::try_new(renamed, vec![batches])?;
        let restored = schema
            .iter()
            .enumerate()
            .map(|(i, (qualifier, field))| {
                Expr::Column(Column::new(Some("outer_rows"), format!("c{i}")))
                    .alias_qualified(qualifier.cloned(), field.name())
            })
            .collect::<Vec<_>>();
        let rows =
            LogicalPlanBuilder::scan("outer_rows", provider_as_source(Arc::new(table)), None)?
                .project(restored)?
                .build()?;
        Ok(OuterRows {
            rows,
            columns: columns.to_vec(),
            values,
        })
    }

    /// `node` as the union of its copies per outer value.
    fn expand(&self, node: &LogicalPlan) -> Result<LogicalPlan> {
        let mut parts = Vec::with_capacity(self.values.len());
        for v in &self.values {
            let selected = self
                .columns
                .iter()
                .zip(v)
                .map(|(c, v)| {
                    binary_expr(
                        Expr::Column(c.clone()),
                        Operator::IsNotDistinctFrom,
                        Expr::Literal(v.clone(), None),
                    )
                })
                .reduce(Expr::and)
                .unwrap_or_else(|| datafusion::logical_expr::lit(true));
            let input = LogicalPlanBuilder::from(self.rows.clone())
                .filter(selected)?
                .build()?;
            let mut inputs: Vec<LogicalPlan> = node.inputs().into_iter().cloned().collect();
            // The node's outer rows are its only input, or a join's left.
            inputs[0] = input;
            let copy = node.with_new_exprs(node.expressions(), inputs)?;
            let bound: HashMap<Column, ScalarValue> = self
                .columns
                .iter()
                .cloned()
                .zip(v.iter().cloned())
                .collect();
            let copy = bind_outer_values(copy, &bound)?;
            parts.push(Arc::new(positional(copy)?));
        }
        let union = match parts.len() {
            0 => {
                return Ok(LogicalPlan::EmptyRelation(EmptyRelation {
                    produce_one_row: false,
                    schema: node.schema().clone(),
                }))
            }
            1 => Arc::unwrap_or_clone(parts.remove(0)),
            _ => LogicalPlan::Union(Union::try_new_with_loose_types(parts)?),
        };
        renamed_as(union, node.schema())
    }
}

/// `plan` with the outer references to `values`' columns replaced by the
/// values, at every depth: the subqueries that read only those become
/// uncorrelated.
fn bind_outer_values(
    plan: LogicalPlan,
    values: &HashMap<Column, ScalarValue>,
) -> Result<LogicalPlan> {
    let unbound = |refs: &mut Vec<Expr>| {
        refs.retain(|e| !matches!(e, Expr::OuterReferenceColumn(_, c) if values.contains_key(c)))
    };
    plan.transform_up_with_subqueries(|node| {
        let node = match node {
            LogicalPlan::Subquery(mut sq) => {
                unbound(&mut sq.outer_ref_columns);
                LogicalPlan::Subquery(sq)
            }
            node => node,
        };
        let preserver = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = preserver.save(&e);
            let t = e.transform(|e| match e {
                Expr::OuterReferenceColumn(_, ref c) => match values.get(c) {
                    Some(v) => Ok(Transformed::yes(Expr::Literal(v.clone(), None))),
                    None => Ok(Transformed::no(e)),
                },
                Expr::ScalarSubquery(mut sq) => {
                    unbound(&mut sq.outer_ref_columns);
                    Ok(Transformed::yes(Expr::ScalarSubquery(sq)))
                }
                Expr::Exists(mut ex) => {
                    unbound(&mut ex.subquery.outer_ref_columns);
                    Ok(Transformed::yes(Expr::Exists(ex)))
                }
                Expr::InSubquery(mut i) => {
                    unbound(&mut i.subquery.outer_ref_columns);
                    Ok(Transformed::yes(Expr::InSubquery(i)))
                }
                Expr::SetComparison(mut s) => {
                    unbound(&mut s.subquery.outer_ref_columns);
                    Ok(Transformed::yes(Expr::SetComparison(s)))
                }
                e => Ok(Transformed::no(e)),
            })?;
            Ok(t.update_data(|e| saved.restore(e)))
        })?
        .transform_data(|n| n.recompute_schema().map(Transformed::yes))
    })?
    .data
    // An uncorrelated LATERAL subquery is its plan (those of expressions
    // stay subqueries: they are not in the plan's tree).
    .transform_up(|node| match node {
        LogicalPlan::Subquery(sq) if sq.outer_ref_columns.is_empty() => {
            Ok(Transformed::yes(Arc::unwrap_or_clone(sq.subquery)))
        }
        node => Ok(Transformed::no(node)),
    })
    .map(|t| t.data)
}

/// `plan`'s columns named c0, c1, ... by position: a union's columns are
/// unqualified, and the node's may repeat a name under two qualifiers.
fn positional(plan: LogicalPlan) -> Result<LogicalPlan> {
    let columns = plan
        .schema()
        .columns()
        .into_iter()
        .enumerate()
        .map(|(i, c)| Expr::Column(c).alias(format!("c{i}")))
        .collect::<Vec<_>>();
    LogicalPlanBuilder::from(plan).project(columns)?.build()
}

/// `plan` (columns named by position) with `schema`'s names and
/// qualifiers, column by column.
fn renamed_as(plan: LogicalPlan, schema: &DFSchemaRef) -> Result<LogicalPlan> {
    let columns = plan
        .schema()
        .columns()
        .into_iter()
        .zip(schema.iter())
        .map(|(c, (q, f))| Expr::Column(c).alias_qualified(q.cloned(), f.name()))
        .collect::<Vec<_>>();
    LogicalPlanBuilder::from(plan).project(columns)?.build()
}
