//! PostgreSQL's meaning of SQL on a DataFusion session. Every session
//! that plans user SQL (the query context and each materialized view's
//! pipeline) is built here, so that a view computes what its query
//! answers:
//!
//! - literals typed as PostgreSQL types them: `1.5` is `numeric`, an
//!   integer that fits in 32 bits is `integer` ([`postgres_plan`]);
//! - type names read as PostgreSQL's (`crate::query::PgTypePlanner`);
//! - operators with PostgreSQL's types and results (`super::pg_operators`:
//!   intervals, dates, timestamps, JSON);
//! - casts, arithmetic and functions that fail or round where PostgreSQL's
//!   do (`super::pg_casts`, `super::CheckedArithmetic`).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::{FunctionRegistry, SessionStateDefaults};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::planner::ExprPlanner;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::analyzer::Analyzer;
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionConfig;

use super::pg_type_planner::OidArrayTypePlanner;
use super::PgTypePlanner;

/// A session state builder with PostgreSQL's semantics; callers add what
/// their session needs beyond it (tables, a query planner).
pub fn postgres_state(
    config: SessionConfig,
    runtime: Option<Arc<RuntimeEnv>>,
) -> SessionStateBuilder {
    let config = config
        .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
        .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false)
        // An ORDER BY in a subquery orders what a LIMIT above it takes
        // (Spark's JDBC source wraps every query so).
        .set_bool(
            "datafusion.sql_parser.enable_subquery_sort_elimination",
            false,
        );
    let mut planners: Vec<Arc<dyn ExprPlanner>> = vec![Arc::new(super::pg_operators::PgOperators)];
    planners.extend(SessionStateDefaults::default_expr_planners());
    let mut rules: Vec<Arc<dyn AnalyzerRule + Send + Sync>> = Analyzer::new().rules;
    rules.push(Arc::new(super::CheckedArithmetic));
    rules.push(Arc::new(super::pg_casts::PgCasts));
    rules.push(Arc::new(super::constant_errors::ConstantErrors));
    rules.push(Arc::new(super::asof_join::AsofJoins));
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_expr_planners(planners)
        .with_type_planner(type_planner())
        .with_analyzer_rules(rules);
    if let Some(runtime) = runtime {
        builder = builder.with_runtime_env(runtime);
    }
    builder
}

/// How SQL type names become Arrow types (see [`PgTypePlanner`]).
pub fn type_planner() -> Arc<dyn datafusion::logical_expr::planner::TypePlanner> {
    Arc::new(PgTypePlanner {
        next: Arc::new(OidArrayTypePlanner),
    })
}

/// Registers PostgreSQL's functions (and Sluice's checked `sum`) on a
/// session, replacing DataFusion's of the same names.
pub fn register_functions(ctx: &datafusion::prelude::SessionContext) {
    super::pg_functions::register(ctx);
    let datafusion = |name: &str| ctx.udf(name).ok();
    let mut functions = super::pg_json::functions();
    functions.extend(super::pg_text_functions::functions());
    functions.extend(super::pg_string_functions::functions());
    functions.extend(super::pg_hash::functions());
    functions.extend(super::stable_hash::functions());
    functions.extend(super::sized_functions::sized_functions(
        &datafusion,
        ctx.runtime_env().memory_pool.clone(),
    ));
    functions.extend(super::pg_number_functions::functions(&datafusion));
    functions.extend(super::pg_time_functions::functions());
    functions.extend(super::pg_time_bins::functions());
    functions.extend(super::pg_array_shape::functions());
    for f in functions {
        ctx.register_udf(f);
    }
    // PostgreSQL's name for a random (version 4) UUID.
    if let Some(uuid) = datafusion("uuid") {
        ctx.register_udf(uuid.as_ref().clone().with_aliases(["gen_random_uuid"]));
    }
    if let Some(f) = super::sized_functions::sized_string_agg(ctx.udaf("string_agg").ok()) {
        ctx.register_udaf(f);
    }
    ctx.register_udaf(super::checked_sum());
    for udaf in super::float_min_max::float_min_max() {
        ctx.register_udaf(udaf);
    }
    ctx.register_udaf(super::pg_numeric::pg_avg());
    ctx.register_udf(super::hop_window_starts());
    ctx.register_udf(super::asof_join::asof_mark());
}

/// A plan as PostgreSQL types it, right after DataFusion planned it: each
/// integer literal that fits in 32 bits is an `integer` (DataFusion
/// plans every one as a `bigint`), as are the columns of `VALUES` lists
/// of such literals. Names stay as planned, so that what refers to a
/// column by name still finds it. Arguments of aggregate and window
/// functions keep their types (`count(*)` is planned as a count of 1).
pub fn postgres_plan(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        match node {
            // LIMIT and OFFSET take bigints.
            LogicalPlan::Values(v) => {
                // A column narrows when every row's value is a bigint
                // literal that fits (or NULL).
                let columns = v.schema.fields().len();
                let fits = |c: usize| {
                    v.values.iter().all(|row| match &row[c] {
                        Expr::Literal(ScalarValue::Int64(Some(x)), _) => i32::try_from(*x).is_ok(),
                        Expr::Literal(ScalarValue::Int64(None), _) => true,
                        _ => false,
                    }) && v
                        .values
                        .iter()
                        .any(|row| matches!(&row[c], Expr::Literal(ScalarValue::Int64(Some(_)), _)))
                };
                let narrow: Vec<bool> = (0..columns).map(fits).collect();
                if !narrow.iter().any(|n| *n) {
                    return Ok(Transformed::no(LogicalPlan::Values(v)));
                }
                let values: Vec<Vec<Expr>> = v
                    .values
                    .iter()
                    .map(|row| {
                        row.iter()
                            .zip(&narrow)
                            .map(|(e, n)| match (e, n) {
                                (Expr::Literal(ScalarValue::Int64(x), m), true) => Expr::Literal(
                                    ScalarValue::Int32(x.map(|x| x as i32)),
                                    m.clone(),
                                ),
                                (e, _) => e.clone(),
                            })
                            .collect()
                    })
                    .collect();
                // The columns keep their names (`column1`, ...).
                Ok(Transformed::yes(LogicalPlanBuilder::values(values)?.build()?))
            }
            // Its schema is its input's, which may have changed below.
            LogicalPlan::Limit(_) => Transformed::yes(node).map_data(|p| p.recompute_schema()),
            LogicalPlan::Sort(mut sort) => {
                let changed = intervals_by_span(&mut sort.expr, sort.input.schema())?;
                let t = rewrite_node(LogicalPlan::Sort(sort))?;
                Ok(Transformed::new(t.data, t.transformed || changed, t.tnr))
            }
            LogicalPlan::Window(window) => {
                let schema = window.input.schema().clone();
                let mut changed = false;
                let mut exprs = Vec::with_capacity(window.window_expr.len());
                for e in window.window_expr {
                    let name = e.schema_name().to_string();
                    let (mut inner, alias) = match e {
                        Expr::Alias(a) => (*a.expr, Some((a.relation, a.name))),
                        other => (other, None),
                    };
                    let mut this = false;
                    if let Expr::WindowFunction(f) = &mut inner {
                        this = intervals_by_span(&mut f.params.order_by, &schema)?;
                    }
                    changed |= this;
                    exprs.push(match (this, alias) {
                        (_, Some((relation, alias))) => inner.alias_qualified(relation, alias),
                        // The output keeps the name the query gave it.
                        (true, None) => inner.alias(name),
                        (false, None) => inner,
                    });
                }
                let window = datafusion::logical_expr::Window::try_new(exprs, window.input)?;
                let t = rewrite_node(LogicalPlan::Window(window))?;
                Ok(Transformed::new(t.data, t.transformed || changed, t.tnr))
            }
            LogicalPlan::Aggregate(mut aggregate) => {
                let schema = aggregate.input.schema().clone();
                let mut changed = false;
                for e in aggregate.aggr_expr.iter_mut() {
                    if let Some(by_span) = interval_extreme_by_span(e, &schema)? {
                        *e = by_span;
                        changed = true;
                    }
                }
                let t = rewrite_node(LogicalPlan::Aggregate(aggregate))?;
                let changed = t.transformed || changed;
                // Intervals equal by span are one group.
                match t.data {
                    LogicalPlan::Aggregate(a) => {
                        let g = super::interval_keys::group_by_span(a)?;
                        Ok(Transformed::new(g.data, g.transformed || changed, t.tnr))
                    }
                    other => Ok(Transformed::new(other, changed, t.tnr)),
                }
            }
            LogicalPlan::Distinct(d) => super::interval_keys::distinct_by_span(d),
            // The recursive term reads a work table typed as the static term
            // was planned, before its literals narrowed above (`SELECT 1`
            // as integer). Both terms run with the work table's types and
            // no field metadata (the executor wants them alike); the
            // result then takes the static term's types, as PostgreSQL
            // types a recursive query by its non-recursive term.
            LogicalPlan::RecursiveQuery(mut rq) => {
                let wanted = rq.recursive_term.schema().clone();
                let have = rq.static_term.schema().clone();
                if have.fields().len() != wanted.fields().len()
                    || have.fields().iter().zip(wanted.fields()).all(|(h, w)| {
                        h.data_type() == w.data_type()
                            && h.metadata() == w.metadata()
                            && h.is_nullable() == w.is_nullable()
                    })
                {
                    return Ok(Transformed::no(LogicalPlan::RecursiveQuery(rq)));
                }
                let work_types: Vec<_> =
                    wanted.fields().iter().map(|f| f.data_type().clone()).collect();
                rq.static_term = Arc::new(cast_columns(&rq.static_term, &work_types, None)?);
                rq.recursive_term =
                    Arc::new(cast_columns(&rq.recursive_term, &work_types, None)?);
                let result_types: Vec<_> =
                    have.fields().iter().map(|f| f.data_type().clone()).collect();
                let recursive = LogicalPlan::RecursiveQuery(rq).recompute_schema()?;
                Ok(Transformed::yes(cast_columns(
                    &recursive,
                    &result_types,
                    Some(&have),
                )?))
            }
            LogicalPlan::Join(join) => {
                let j = super::interval_keys::join_by_span(join)?;
                let t = rewrite_node(j.data)?;
                Ok(Transformed::new(t.data, t.transformed || j.transformed, t.tnr))
            }
            // A union's columns take their types from its inputs again;
            // type coercion then finds the common type.
            LogicalPlan::Union(u) => {
                let union = datafusion::logical_expr::Union::try_new_with_loose_types(
                    union_inputs(u.inputs)?,
                )?;
                // Typed now, so that the result's columns are described
                // with the type their values will have.
                Ok(Transformed::yes(
                    datafusion::optimizer::analyzer::type_coercion::TypeCoercionRewriter::coerce_union(
                        union,
                    )?,
                ))
            }
            LogicalPlan::Filter(mut filter) => {
                // IN subqueries below an OR or a comparison become
                // expressions first (see `in_filter_as_case`), then the
                // filter is rewritten as any node.
                let t = in_filter_as_case(filter.predicate.clone())?;
                if t.transformed {
                    filter.predicate = t.data;
                }
                let t = rewrite_node(LogicalPlan::Filter(filter))?;
                Ok(t)
            }
            node => rewrite_node(node),
        }
    })
    .map(|t| t.data)
}

/// PostgreSQL orders intervals by the time they span (a month as 30 days,
/// a day as 24 hours: `1 mon -40 days` is before `5 days`), where Arrow
/// orders them by months, then days, then nanoseconds. An ORDER BY of an
/// interval sorts by its span.
fn intervals_by_span(
    order: &mut [datafusion::logical_expr::SortExpr],
    schema: &datafusion::common::DFSchema,
) -> Result<bool> {
    let mut changed = false;
    for s in order.iter_mut() {
        if matches!(
            s.expr.get_type(schema)?,
            arrow::datatypes::DataType::Interval(_)
        ) {
            s.expr = super::temporal::interval_span().call(vec![s.expr.clone()]);
            changed = true;
        } else if s
            .expr
            .to_field(schema)
            .is_ok_and(|(_, f)| crate::types::PgType::of_field(&f).oid == crate::types::oid::JSONB)
        {
            // jsonb sorts by PostgreSQL's jsonb order, not its text.
            s.expr = super::pg_json::jsonb_sort_key().call(vec![s.expr.clone()]);
            changed = true;
        }
    }
    Ok(changed)
}

/// `max(x)` or `min(x)` of an interval: the value first in its span's
/// order (see [`intervals_by_span`]), NULLs last, under the same name.
fn interval_extreme_by_span(
    e: &Expr,
    schema: &datafusion::common::DFSchema,
) -> Result<Option<Expr>> {
    let (inner, alias) = match e {
        Expr::Alias(a) => (a.expr.as_ref(), Some(a)),
        other => (other, None),
    };
    let Expr::AggregateFunction(f) = inner else {
        return Ok(None);
    };
    let name = f.func.name().to_lowercase();
    let [arg] = f.params.args.as_slice() else {
        return Ok(None);
    };
    if !matches!(name.as_str(), "max" | "min")
        || f.params.distinct
        || !matches!(
            arg.get_type(schema)?,
            arrow::datatypes::DataType::Interval(_)
        )
    {
        return Ok(None);
    }
    let span = super::temporal::interval_span().call(vec![arg.clone()]);
    let first =
        Expr::AggregateFunction(datafusion::logical_expr::expr::AggregateFunction::new_udf(
            datafusion::functions_aggregate::first_last::first_value_udaf(),
            vec![arg.clone()],
            false,
            f.params.filter.clone(),
            vec![span.sort(name == "min", false)],
            None,
        ));
    let named = match alias {
        Some(a) => first.alias_qualified(a.relation.clone(), a.name.clone()),
        None => first.alias(inner.schema_name().to_string()),
    };
    Ok(Some(named))
}

/// In a WHERE clause DataFusion gives `x IN (subquery)` SQL's NULLs only
/// where it is a condition of its own (`AND`ed with the rest, or under
/// NOT): it becomes a semi or null-aware anti join. Elsewhere (`a OR x IN
/// (...)`, `(x IN (...)) <= b`) it becomes a mark join whose mark is never
/// NULL, so a row that PostgreSQL filters out (x NULL, or a NULL among the
/// values) was kept. Those uncorrelated IN subqueries are planned as in a
/// select list instead.
fn in_filter_as_case(predicate: Expr) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
    let mut changed = false;
    let mut conjuncts = Vec::new();
    for c in split_conjunction_owned(predicate.clone()) {
        let own_condition = match &c {
            Expr::InSubquery(_) => true,
            Expr::Not(inner) => matches!(inner.as_ref(), Expr::InSubquery(_)),
            _ => false,
        };
        if own_condition {
            conjuncts.push(c);
            continue;
        }
        let t = c.transform_down(|e| match e {
            Expr::InSubquery(ins) if ins.subquery.outer_ref_columns.is_empty() => {
                Ok(Transformed::yes(in_as_case(ins)?))
            }
            // Subqueries keep their own WHERE clauses.
            e @ (Expr::ScalarSubquery(_) | Expr::Exists(_)) => {
                Ok(Transformed::new(e, false, TreeNodeRecursion::Jump))
            }
            e => Ok(Transformed::no(e)),
        })?;
        changed |= t.transformed;
        conjuncts.push(t.data);
    }
    Ok(match (changed, conjunction(conjuncts)) {
        (true, Some(p)) => Transformed::yes(p),
        _ => Transformed::no(predicate),
    })
}

/// A node whose expressions take PostgreSQL's literal types, subquery
/// forms and declared types (see [`postgres_plan`]).
/// `plan`'s columns cast to `types`, each nullable and with the metadata
/// of `like`'s field (none without `like`), under the same names.
fn cast_columns(
    plan: &LogicalPlan,
    types: &[arrow::datatypes::DataType],
    like: Option<&datafusion::common::DFSchemaRef>,
) -> Result<LogicalPlan> {
    let exprs: Vec<Expr> = plan
        .schema()
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, ((q, f), t))| {
            let mut target = arrow::datatypes::Field::new(f.name(), t.clone(), true);
            if let Some(like) = like {
                target = target.with_metadata(like.field(i).metadata().clone());
            }
            Expr::Cast(datafusion::logical_expr::Cast::new_from_field(
                Box::new(Expr::Column(datafusion::common::Column::from((q, f)))),
                Arc::new(target),
            ))
            .alias_qualified(q.cloned(), f.name())
        })
        .collect();
    LogicalPlanBuilder::from(plan.clone())
        .project(exprs)?
        .build()
}

fn rewrite_node(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let preserver = NamePreserver::new(&node);
    let in_filter = matches!(node, LogicalPlan::Filter(_));
    let schema = datafusion::logical_expr::utils::merge_schema(&node.inputs());
    let t = node.map_expressions(|e| {
        let saved = preserver.save(&e);
        let spans = e.transform_up(|e| super::interval_keys::subquery_by_span(e, &schema))?;
        let (e, spanned) = (spans.data, spans.transformed);
        let t = e.transform_down(|e| match e {
            Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
                Ok(Transformed::new(e, false, TreeNodeRecursion::Jump))
            }
            Expr::ScalarSubquery(sq) => {
                // A correlated one that does not aggregate takes its one row.
                let sq = super::single_row::single_row_subquery(&sq)?.unwrap_or(sq);
                Ok(Transformed::yes(Expr::ScalarSubquery(nullable_subquery(
                    sq,
                )?)))
            }
            // DataFusion plans EXISTS and IN subqueries in a
            // WHERE clause only.
            Expr::Exists(ex) if !in_filter => Ok(Transformed::yes(exists_as_count(ex)?)),
            Expr::InSubquery(ins) if !in_filter && ins.subquery.outer_ref_columns.is_empty() => {
                Ok(Transformed::yes(in_as_case(ins)?))
            }
            Expr::InSubquery(ins) if !in_filter => {
                Ok(Transformed::yes(super::correlated_in::correlated_in(
                    *ins.expr,
                    &ins.subquery,
                    ins.negated,
                    &schema,
                )?))
            }
            // `x = ANY (subquery)` is `x IN`, `x <> ALL` is `x NOT IN`.
            Expr::SetComparison(sc)
                if !in_filter
                    && matches!(
                        (sc.op, &sc.quantifier),
                        (
                            datafusion::logical_expr::Operator::Eq,
                            datafusion::logical_expr::expr::SetQuantifier::Any
                        ) | (
                            datafusion::logical_expr::Operator::NotEq,
                            datafusion::logical_expr::expr::SetQuantifier::All
                        )
                    ) =>
            {
                let negated = sc.op == datafusion::logical_expr::Operator::NotEq;
                let e = match sc.subquery.outer_ref_columns.is_empty() {
                    true => in_as_case(datafusion::logical_expr::expr::InSubquery::new(
                        sc.expr,
                        sc.subquery,
                        negated,
                    ))?,
                    false => super::correlated_in::correlated_in(
                        *sc.expr,
                        &sc.subquery,
                        negated,
                        &schema,
                    )?,
                };
                Ok(Transformed::yes(e))
            }
            // Other operators over a subquery that reads nothing outside
            // it; a correlated one is refused rather than answered wrong.
            Expr::SetComparison(sc) if !in_filter => {
                if !sc.subquery.outer_ref_columns.is_empty() {
                    return Err(super::udf::pg_error(
                        "0A000",
                        format!(
                            "{} {} over a correlated subquery is supported in WHERE only",
                            sc.op, sc.quantifier
                        ),
                    ));
                }
                if matches!(
                    sc.expr.get_type(&schema),
                    Ok(arrow::datatypes::DataType::Interval(_))
                ) {
                    return Ok(Transformed::no(Expr::SetComparison(sc)));
                }
                Ok(Transformed::yes(set_comparison_as_case(sc)?))
            }
            e => Ok(narrow_literal(e)),
        })?;
        let t = t.transform_data(|e| {
            e.transform_up(|e| {
                numeric_cast_scale(e, &schema)?
                    .transform_data(|e| common_declared_type(e, &schema))?
                    .transform_data(|e| float_over_numeric(e, &schema))?
                    .transform_data(|e| bpchar_length(e, &schema))?
                    .transform_data(|e| smallint_shift(e, &schema))?
                    .transform_data(|e| postgres_result_type(e, &schema))
            })
        })?;
        Ok(if t.transformed || spanned {
            Transformed::yes(saved.restore(t.data))
        } else {
            t
        })
    })?;
    // A node's schema follows its inputs', which may have
    // changed below it.
    Transformed::yes(t.data).map_data(|p| p.recompute_schema())
}

/// A union's inputs with PostgreSQL's rule for text and other types in
/// one column: a string literal reads as the other type (and fails if it
/// is not one: `SELECT 1 UNION SELECT 'a'`), any other text column is an
/// error (42804), where DataFusion would make every value text.
fn union_inputs(inputs: Vec<Arc<LogicalPlan>>) -> Result<Vec<Arc<LogicalPlan>>> {
    use arrow::datatypes::DataType;
    let is_text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    let Some(width) = inputs.first().map(|i| i.schema().fields().len()) else {
        return Ok(inputs);
    };
    let mut inputs = inputs;
    for c in 0..width {
        let types: Vec<DataType> = inputs
            .iter()
            .filter_map(|i| i.schema().fields().get(c).map(|f| f.data_type().clone()))
            .collect();
        let Some(other) = types.iter().find(|t| !is_text(t) && !t.is_null()).cloned() else {
            continue;
        };
        if !types.iter().any(is_text) {
            continue;
        }
        for input in inputs.iter_mut() {
            if !is_text(input.schema().field(c).data_type()) {
                continue;
            }
            let LogicalPlan::Projection(p) = input.as_ref() else {
                return Err(union_mismatch(input.schema().field(c).data_type(), &other));
            };
            let literal = match &p.expr[c] {
                Expr::Alias(a) => a.expr.as_ref(),
                e => e,
            };
            if !matches!(literal, Expr::Literal(ScalarValue::Utf8(_), _)) {
                return Err(union_mismatch(input.schema().field(c).data_type(), &other));
            }
            let mut p = p.clone();
            let name = p.expr[c].schema_name().to_string();
            p.expr[c] = datafusion::logical_expr::cast(literal.clone(), other.clone()).alias(name);
            *input = Arc::new(LogicalPlan::Projection(
                datafusion::logical_expr::Projection::try_new(p.expr, p.input)?,
            ));
        }
    }
    Ok(inputs)
}

fn union_mismatch(
    a: &arrow::datatypes::DataType,
    b: &arrow::datatypes::DataType,
) -> datafusion::error::DataFusionError {
    let name = |t: &arrow::datatypes::DataType| crate::types::PgType::of_data_type(t).format();
    super::udf::pg_error(
        "42804",
        format!("UNION types {} and {} cannot be matched", name(a), name(b)),
    )
}

/// `EXISTS (subquery)` outside a WHERE clause as a scalar subquery
/// counting its rows (with `LIMIT 1` when it refers to nothing outside).
fn exists_as_count(ex: datafusion::logical_expr::expr::Exists) -> Result<Expr> {
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::logical_expr::lit;
    let correlated = !ex.subquery.outer_ref_columns.is_empty();
    let mut b = LogicalPlanBuilder::from(ex.subquery.subquery.as_ref().clone());
    if !correlated {
        b = b.limit(0, Some(1))?;
    }
    let plan = b
        .aggregate(Vec::<Expr>::new(), vec![count(lit(1)).alias("__count")])?
        .project(vec![Expr::Column(datafusion::common::Column::from_name(
            "__count",
        ))
        .gt(lit(0i64))
        .alias("exists")])?
        .build()?;
    let found = Expr::ScalarSubquery(datafusion::logical_expr::Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns: ex.subquery.outer_ref_columns,
        spans: ex.subquery.spans,
    });
    // A correlated count over no rows joins as NULL.
    let found = if correlated {
        datafusion::functions::expr_fn::coalesce(vec![found, lit(false)])
    } else {
        found
    };
    Ok(if ex.negated { !found } else { found })
}

/// `x op ANY (subquery)` or `x op ALL (subquery)` outside a WHERE clause,
/// over a subquery that reads nothing of the outer row, with SQL's NULLs,
/// from the subquery's row count, non-NULL count, least and greatest value
/// (each computed once): ANY is true where x compares true with the least
/// or greatest value that decides, NULL where only a NULL value could make
/// it true, false otherwise, and false over no rows; ALL the same with
/// false where one value compares false, and true over no rows.
fn set_comparison_as_case(sc: datafusion::logical_expr::expr::SetComparison) -> Result<Expr> {
    use datafusion::functions_aggregate::expr_fn::{count, max, min};
    use datafusion::logical_expr::expr::SetQuantifier;
    use datafusion::logical_expr::{lit, when, Operator};
    let plan = sc.subquery.subquery.as_ref().clone();
    let column = Expr::Column(plan.schema().columns()[0].clone());
    let scalar = |aggregate: Expr| -> Result<Expr> {
        Ok(Expr::ScalarSubquery(datafusion::logical_expr::Subquery {
            subquery: Arc::new(
                LogicalPlanBuilder::from(plan.clone())
                    .aggregate(Vec::<Expr>::new(), vec![aggregate])?
                    .build()?,
            ),
            outer_ref_columns: vec![],
            spans: Default::default(),
        }))
    };
    let rows = scalar(count(lit(1)))?;
    let values = scalar(count(column.clone()))?;
    let least = scalar(min(column.clone()))?;
    let greatest = scalar(max(column))?;
    let x = *sc.expr;
    let any = sc.quantifier == SetQuantifier::Any;
    // What decides: ANY > holds when x > the least value, ALL > when
    // x > the greatest; = and <> take both ends.
    let decides = match (sc.op, any) {
        (Operator::Gt | Operator::GtEq, true) | (Operator::Lt | Operator::LtEq, false) => {
            Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                Box::new(x.clone()),
                sc.op,
                Box::new(least),
            ))
        }
        (Operator::Lt | Operator::LtEq, true) | (Operator::Gt | Operator::GtEq, false) => {
            Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                Box::new(x.clone()),
                sc.op,
                Box::new(greatest),
            ))
        }
        // = ALL: every value equals x; <> ANY: some value differs.
        (Operator::Eq, false) => least.clone().eq(x.clone()).and(greatest.eq(x.clone())),
        (Operator::NotEq, true) => least
            .clone()
            .not_eq(x.clone())
            .or(greatest.not_eq(x.clone())),
        (op, _) => {
            return datafusion::common::plan_err!("{op} ANY/ALL over a subquery is not supported")
        }
    };
    let null = lit(ScalarValue::Boolean(None));
    let some_null = rows.clone().gt(values.clone());
    let mut found = when(rows.eq(lit(0i64)), lit(!any));
    found.when(x.is_null(), null.clone());
    let found = match any {
        true => found
            .when(values.gt(lit(0i64)).and(decides), lit(true))
            .when(some_null, null)
            .otherwise(lit(false))?,
        false => found
            .when(
                values.gt(lit(0i64)).and(Expr::Not(Box::new(decides))),
                lit(false),
            )
            .when(some_null, null)
            .otherwise(lit(true))?,
    };
    Ok(found)
}

/// `x IN (subquery)` outside a WHERE clause, with SQL's NULLs: false over
/// no rows, NULL for a NULL x or when only a NULL could match.
fn in_as_case(ins: datafusion::logical_expr::expr::InSubquery) -> Result<Expr> {
    use datafusion::functions_aggregate::expr_fn::{array_agg, count};
    use datafusion::logical_expr::{lit, when};
    let plan = ins.subquery.subquery.as_ref().clone();
    let column = Expr::Column(plan.schema().columns()[0].clone());
    let scalar = |p: LogicalPlan| {
        Expr::ScalarSubquery(datafusion::logical_expr::Subquery {
            subquery: Arc::new(p),
            outer_ref_columns: vec![],
            spans: Default::default(),
        })
    };
    let rows = scalar(
        LogicalPlanBuilder::from(plan.clone())
            .aggregate(Vec::<Expr>::new(), vec![count(lit(1))])?
            .build()?,
    );
    let values = scalar(
        LogicalPlanBuilder::from(plan.clone())
            .aggregate(Vec::<Expr>::new(), vec![array_agg(column.clone())])?
            .build()?,
    );
    let nulls = scalar(
        LogicalPlanBuilder::from(plan)
            .filter(column.is_null())?
            .aggregate(Vec::<Expr>::new(), vec![count(lit(1))])?
            .build()?,
    );
    let x = *ins.expr;
    let found = when(rows.eq(lit(0i64)), lit(false))
        .when(x.clone().is_null(), lit(ScalarValue::Boolean(None)))
        .when(
            datafusion::functions_nested::expr_fn::array_has(values, x),
            lit(true),
        )
        .when(nulls.gt(lit(0i64)), lit(ScalarValue::Boolean(None)))
        .otherwise(lit(false))?;
    Ok(if ins.negated { !found } else { found })
}

/// A scalar subquery whose column may be NULL (it is when the subquery
/// finds no row; DataFusion keeps the column's own nullability and fails).
fn nullable_subquery(
    sq: datafusion::logical_expr::Subquery,
) -> Result<datafusion::logical_expr::Subquery> {
    let plan = sq.subquery.as_ref();
    if plan.schema().fields().iter().all(|f| f.is_nullable()) {
        return Ok(sq);
    }
    let exprs: Vec<Expr> = plan
        .schema()
        .columns()
        .into_iter()
        .map(|c| {
            let name = c.name.clone();
            Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
                super::udf::as_nullable(),
                vec![Expr::Column(c)],
            ))
            .alias(name)
        })
        .collect();
    let projected = LogicalPlanBuilder::from(plan.clone())
        .project(exprs)?
        .build()?;
    Ok(datafusion::logical_expr::Subquery {
        subquery: Arc::new(projected),
        outer_ref_columns: sq.outer_ref_columns,
        spans: sq.spans,
    })
}

/// A cast to `numeric` without precision and scale keeps the digits of
/// what it casts: an integer has none after the point, a numeric its own,
/// a string literal those it writes (`'1.50'::numeric` is `1.50`).
fn numeric_cast_scale(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    use arrow::datatypes::DataType;
    use datafusion::logical_expr::ExprSchemable;
    let Expr::Cast(cast) = &e else {
        return Ok(Transformed::no(e));
    };
    let unconstrained = cast
        .field
        .metadata()
        .get(crate::types::SQL_TYPE_METADATA_KEY)
        .is_some_and(|d| d == "numeric(*)");
    if !unconstrained {
        return Ok(Transformed::no(e));
    }
    let mut field = cast.field.as_ref().clone();
    let scale = match cast.expr.get_type(schema) {
        Ok(DataType::Decimal128(_, s)) => s,
        Ok(t) if t.is_integer() => 0,
        // A float's digits differ by value: the column keeps the default
        // scale and shows each value without trailing zeros, as
        // PostgreSQL's `float8_numeric` prints it.
        Ok(DataType::Float32 | DataType::Float64) => {
            let mut metadata = field.metadata().clone();
            metadata.insert(
                crate::types::SQL_TYPE_METADATA_KEY.to_string(),
                "numeric".to_string(),
            );
            field = field.with_metadata(metadata);
            match crate::types::unconstrained_numeric() {
                DataType::Decimal128(_, s) => s,
                _ => return Ok(Transformed::no(e)),
            }
        }
        _ => match cast.expr.as_ref() {
            Expr::Literal(ScalarValue::Utf8(Some(text)), _) => literal_scale(text),
            _ => return Ok(Transformed::no(e)),
        },
    };
    let field = Arc::new(field.with_data_type(DataType::Decimal128(38, scale)));
    Ok(Transformed::yes(Expr::Cast(
        datafusion::logical_expr::expr::Cast {
            expr: cast.expr.clone(),
            field,
        },
    )))
}

/// The digits after the point a numeric literal's text shows, as
/// PostgreSQL's `numeric_in` keeps them (`1.50` two, `1.5e2` none, `1e-3`
/// three).
fn literal_scale(text: &str) -> i8 {
    let t = text.trim();
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(at) => (&t[..at], t[at + 1..].parse::<i64>().unwrap_or(0)),
        None => (t, 0),
    };
    let fraction = mantissa
        .split_once('.')
        .map(|(_, f)| f.chars().take_while(|c| c.is_ascii_digit()).count() as i64)
        .unwrap_or(0);
    (fraction - exponent).clamp(0, 30) as i8
}

/// CASE, COALESCE, NULLIF, GREATEST and LEAST keep their arguments'
/// declared type (`numeric(12,2)`, `varchar(5)`) when every argument that
/// can be the result has the same one, as PostgreSQL keeps the typmod;
/// DataFusion's result field would carry none. A CASE arm whose condition
/// is the constant `false` never gives the result, and one whose
/// condition is `true` gives it always (PostgreSQL folds both away).
fn common_declared_type(
    e: Expr,
    schema: &datafusion::common::DFSchema,
) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::ExprSchemable;
    let results: Vec<&Expr> = match &e {
        Expr::Case(case) => {
            let mut results = Vec::new();
            let mut always = false;
            for (when, then) in &case.when_then_expr {
                match when.as_ref() {
                    Expr::Literal(ScalarValue::Boolean(Some(false)), _) => continue,
                    Expr::Literal(ScalarValue::Boolean(Some(true)), _) => {
                        results.push(then.as_ref());
                        always = true;
                        break;
                    }
                    _ => results.push(then.as_ref()),
                }
            }
            if !always {
                match &case.else_expr {
                    Some(e) => results.push(e.as_ref()),
                    // The ELSE NULL left out has no declared type.
                    None => return Ok(Transformed::no(e)),
                }
            }
            results
        }
        Expr::ScalarFunction(f) => match f.func.name() {
            "coalesce" | "greatest" | "least" => f.args.iter().collect(),
            "nullif" => f.args.iter().take(1).collect(),
            _ => return Ok(Transformed::no(e)),
        },
        _ => return Ok(Transformed::no(e)),
    };
    let key = crate::types::SQL_TYPE_METADATA_KEY;
    let mut common: Option<arrow::datatypes::Field> = None;
    for r in results {
        let Ok((_, field)) = r.to_field(schema) else {
            return Ok(Transformed::no(e));
        };
        let Some(declared) = field.metadata().get(key) else {
            return Ok(Transformed::no(e));
        };
        match &common {
            Some(c)
                if c.data_type() != field.data_type()
                    || c.metadata().get(key) != Some(declared) =>
            {
                return Ok(Transformed::no(e))
            }
            Some(_) => {}
            None => common = Some(field.as_ref().clone()),
        }
    }
    let Some(common) = common else {
        return Ok(Transformed::no(e));
    };
    match e.to_field(schema) {
        Ok((_, f)) if f.metadata().get(key).is_none() && f.data_type() == common.data_type() => Ok(
            Transformed::yes(Expr::Cast(datafusion::logical_expr::expr::Cast {
                expr: Box::new(e),
                field: Arc::new(common.with_name("").with_nullable(true)),
            })),
        ),
        _ => Ok(Transformed::no(e)),
    }
}

/// Where a float and a numeric are compared (`=`, `<`, BETWEEN, IN),
/// PostgreSQL compares them as `double precision`; DataFusion would cast
/// the float to a decimal, which fails on `1e300` and is wrong for NaN.
fn float_over_numeric(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    use arrow::datatypes::DataType;
    use datafusion::logical_expr::{ExprSchemable, Operator};
    let is_float = |e: &Expr| {
        matches!(
            e.get_type(schema),
            Ok(DataType::Float32 | DataType::Float64)
        )
    };
    let is_decimal = |e: &Expr| {
        matches!(
            e.get_type(schema),
            Ok(DataType::Decimal128(..) | DataType::Decimal256(..))
        )
    };
    let to_float = |e: Expr| {
        if is_decimal(&e) {
            Expr::Cast(datafusion::logical_expr::expr::Cast::new(
                Box::new(e),
                DataType::Float64,
            ))
        } else {
            e
        }
    };
    match e {
        Expr::BinaryExpr(b)
            if matches!(
                b.op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::IsDistinctFrom
                    | Operator::IsNotDistinctFrom
            ) && ((is_float(&b.left) && is_decimal(&b.right))
                || (is_decimal(&b.left) && is_float(&b.right))) =>
        {
            Ok(Transformed::yes(Expr::BinaryExpr(
                datafusion::logical_expr::BinaryExpr::new(
                    Box::new(to_float(*b.left)),
                    b.op,
                    Box::new(to_float(*b.right)),
                ),
            )))
        }
        Expr::Between(b)
            if {
                let all = [b.expr.as_ref(), b.low.as_ref(), b.high.as_ref()];
                all.iter().any(|e| is_float(e)) && all.iter().any(|e| is_decimal(e))
            } =>
        {
            Ok(Transformed::yes(Expr::Between(
                datafusion::logical_expr::Between::new(
                    Box::new(to_float(*b.expr)),
                    b.negated,
                    Box::new(to_float(*b.low)),
                    Box::new(to_float(*b.high)),
                ),
            )))
        }
        Expr::InList(l)
            if (is_float(&l.expr) || l.list.iter().any(is_float))
                && (is_decimal(&l.expr) || l.list.iter().any(is_decimal)) =>
        {
            Ok(Transformed::yes(Expr::InList(
                datafusion::logical_expr::expr::InList::new(
                    Box::new(to_float(*l.expr)),
                    l.list.into_iter().map(to_float).collect(),
                    l.negated,
                ),
            )))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// Results whose type PostgreSQL gives otherwise than DataFusion: the
/// negation of a `numeric(p,s)` has no typmod, `array_length` and
/// `cardinality` are integers.
fn postgres_result_type(
    e: Expr,
    schema: &datafusion::common::DFSchema,
) -> Result<Transformed<Expr>> {
    use arrow::datatypes::DataType;
    use datafusion::logical_expr::ExprSchemable;
    let retyped = |e: Expr, t: DataType, declared: &str| {
        Expr::Cast(datafusion::logical_expr::expr::Cast {
            expr: Box::new(e),
            field: Arc::new(crate::types::declared_field("", t, declared)),
        })
    };
    match e {
        Expr::Negative(ref inner) => {
            let Ok((_, field)) = inner.to_field(schema) else {
                return Ok(Transformed::no(e));
            };
            let declared = field
                .metadata()
                .get(crate::types::SQL_TYPE_METADATA_KEY)
                .is_some_and(|d| d.starts_with("numeric("));
            if declared && matches!(field.data_type(), DataType::Decimal128(..)) {
                let t = field.data_type().clone();
                return Ok(Transformed::yes(retyped(e, t, "numeric(*)")));
            }
            Ok(Transformed::no(e))
        }
        Expr::ScalarFunction(ref f)
            if matches!(f.func.name(), "array_length" | "cardinality")
                && e.get_type(schema).is_ok_and(|t| t != DataType::Int32) =>
        {
            // An empty array has no dimension to measure: PostgreSQL's
            // array_length of it is NULL (its cardinality is 0).
            let measured = match f.func.name() {
                "array_length" => datafusion::functions::core::expr_fn::nullif(
                    e.clone(),
                    Expr::Literal(ScalarValue::UInt64(Some(0)), None),
                ),
                _ => e,
            };
            Ok(Transformed::yes(retyped(measured, DataType::Int32, "int4")))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// `char(n)` values as PostgreSQL reads them where they meet text: their
/// trailing spaces do not count. `length` of one does not count them
/// (`bpcharlen`); a cast to text or varchar, `||` and the text functions
/// that take text drop them (the implicit cast `bpchar` to `text`);
/// comparing one with another `char(n)`, a varchar or a literal compares
/// both without them (`bpchareq`), while beside a `text` value only the
/// `char(n)` loses them (`'a '::char(3) = 'a '::text` is false). Output,
/// `concat` and `format` keep the padding, as PostgreSQL prints it.
fn bpchar_length(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::{BinaryExpr, ExprSchemable, Operator};
    let declared = |e: &Expr| {
        e.to_field(schema)
            .map(|(_, field)| crate::types::PgType::of_field(&field).oid)
            .ok()
    };
    let is_bpchar = |e: &Expr| {
        matches!(
            e.get_type(schema),
            Ok(arrow::datatypes::DataType::Utf8 | arrow::datatypes::DataType::Utf8View)
        ) && declared(e) == Some(crate::types::oid::BPCHAR)
    };
    let trimmed = |e: Expr| {
        datafusion::functions::string::expr_fn::rtrim(vec![e, datafusion::logical_expr::lit(" ")])
    };
    /// Functions of text a `char(n)` argument reaches through its cast.
    const TEXT_FUNCTIONS: &[&str] = &[
        "length",
        "char_length",
        "character_length",
        "upper",
        "lower",
        "initcap",
        "btrim",
        "ltrim",
        "rtrim",
        "substr",
        "substring",
        "left",
        "right",
        "replace",
        "strpos",
        "split_part",
        "md5",
        "reverse",
        "lpad",
        "rpad",
        "starts_with",
        "translate",
        "ascii",
        "repeat",
        "sha256",
    ];
    match e {
        Expr::ScalarFunction(mut f) => {
            if !TEXT_FUNCTIONS.contains(&f.func.name()) || !f.args.first().is_some_and(is_bpchar) {
                return Ok(Transformed::no(Expr::ScalarFunction(f)));
            }
            let arg = f.args.remove(0);
            f.args.insert(0, trimmed(arg));
            Ok(Transformed::yes(Expr::ScalarFunction(f)))
        }
        // The cheap tests first: `to_field` names the whole expression, and
        // a long AND/OR chain would be named once per link.
        Expr::Cast(c)
            if matches!(
                c.field.data_type(),
                arrow::datatypes::DataType::Utf8 | arrow::datatypes::DataType::Utf8View
            ) && crate::types::PgType::of_field(&c.field).oid != crate::types::oid::BPCHAR
                && is_bpchar(&c.expr) =>
        {
            let field = c.field.clone();
            Ok(Transformed::yes(Expr::Cast(
                datafusion::logical_expr::Cast::new_from_field(Box::new(trimmed(*c.expr)), field),
            )))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq
                    | Operator::NotEq
                    | Operator::Lt
                    | Operator::LtEq
                    | Operator::Gt
                    | Operator::GtEq
                    | Operator::StringConcat
            ) && (is_bpchar(&left) || is_bpchar(&right)) =>
        {
            let plain_text = |e: &Expr| {
                !matches!(e, Expr::Literal(..)) && declared(e) == Some(crate::types::oid::TEXT)
            };
            let (l_bp, r_bp) = (is_bpchar(&left), is_bpchar(&right));
            let concat = op == Operator::StringConcat;
            let trim_left = l_bp || (!concat && !plain_text(&left));
            let trim_right = r_bp || (!concat && !plain_text(&right));
            let text_side = |e: Expr| {
                matches!(
                    e.get_type(schema),
                    Ok(arrow::datatypes::DataType::Utf8 | arrow::datatypes::DataType::Utf8View)
                )
            };
            let l = match trim_left && text_side(*left.clone()) {
                true => trimmed(*left),
                false => *left,
            };
            let r = match trim_right && text_side(*right.clone()) {
                true => trimmed(*right),
                false => *right,
            };
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(l),
                op,
                Box::new(r),
            ))))
        }
        e => Ok(Transformed::no(e)),
    }
}

/// `smallint << integer` is a smallint in PostgreSQL (`int2shl`: the
/// shifted integer's low 16 bits), where the planner would make it an
/// integer. The shift is done in integer and its low 16 bits
/// sign-extended (`(v << 16) >> 16`), so the cast back to smallint always
/// holds it.
fn smallint_shift(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    use arrow::datatypes::DataType;
    use datafusion::logical_expr::{BinaryExpr, ExprSchemable, Operator};
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
        return Ok(Transformed::no(e));
    };
    if !matches!(op, Operator::BitwiseShiftLeft | Operator::BitwiseShiftRight)
        || left.get_type(schema).ok() != Some(DataType::Int16)
    {
        return Ok(Transformed::no(e));
    }
    let left = Box::new(Expr::Cast(datafusion::logical_expr::Cast::new(
        left.clone(),
        DataType::Int32,
    )));
    let sixteen = || Box::new(Expr::Literal(ScalarValue::Int32(Some(16)), None));
    let shifted = Expr::BinaryExpr(BinaryExpr::new(left, *op, right.clone()));
    let low_bits = Expr::BinaryExpr(BinaryExpr::new(
        Box::new(Expr::BinaryExpr(BinaryExpr::new(
            Box::new(shifted),
            Operator::BitwiseShiftLeft,
            sixteen(),
        ))),
        Operator::BitwiseShiftRight,
        sixteen(),
    ));
    Ok(Transformed::yes(Expr::Cast(
        datafusion::logical_expr::Cast::new(Box::new(low_bits), DataType::Int16),
    )))
}

fn narrow_literal(e: Expr) -> Transformed<Expr> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) if i32::try_from(v).is_ok() => {
            Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), meta))
        }
        // A numeric literal with an exponent (`1e5`) has no digits after
        // the point, as PostgreSQL's numeric reads it.
        Expr::Literal(ScalarValue::Decimal128(Some(v), p, s), meta) if s < 0 => {
            match 10i128
                .checked_pow((-s) as u32)
                .and_then(|m| v.checked_mul(m))
                .filter(|v| v.unsigned_abs() < 10u128.pow(38))
            {
                Some(v) => Transformed::yes(Expr::Literal(
                    ScalarValue::Decimal128(Some(v), 38.min((p as i16 - s as i16) as u8), 0),
                    meta,
                )),
                None => {
                    Transformed::no(Expr::Literal(ScalarValue::Decimal128(Some(v), p, s), meta))
                }
            }
        }
        // Beyond bigint, an integer literal is a numeric.
        Expr::Literal(ScalarValue::UInt64(Some(v)), meta) => Transformed::yes(Expr::Literal(
            ScalarValue::Decimal128(Some(v as i128), 20, 0),
            meta,
        )),
        e => Transformed::no(e),
    }
}
