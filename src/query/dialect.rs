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
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion::optimizer::analyzer::Analyzer;
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::SessionConfig;

use super::pg_catalog_info::OidArrayTypePlanner;
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
    functions.extend(super::pg_number_functions::functions(&datafusion));
    if let Some(date_trunc) = datafusion("date_trunc") {
        functions.extend(super::pg_time_functions::functions(date_trunc));
    }
    for f in functions {
        ctx.register_udf(f);
    }
    ctx.register_udaf(super::checked_sum());
    ctx.register_udaf(super::pg_numeric::pg_avg());
    ctx.register_udf(super::hop_window_starts());
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
            node => {
                let preserver = NamePreserver::new(&node);
                let in_filter = matches!(node, LogicalPlan::Filter(_));
                let schema = datafusion::logical_expr::utils::merge_schema(&node.inputs());
                let t = node.map_expressions(|e| {
                    let saved = preserver.save(&e);
                    let t = e.transform_down(|e| match e {
                        Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
                            Ok(Transformed::new(e, false, TreeNodeRecursion::Jump))
                        }
                        Expr::ScalarSubquery(sq) => Ok(Transformed::yes(Expr::ScalarSubquery(
                            nullable_subquery(sq)?,
                        ))),
                        // DataFusion plans EXISTS and IN subqueries in a
                        // WHERE clause only.
                        Expr::Exists(ex) if !in_filter => {
                            Ok(Transformed::yes(exists_as_count(ex)?))
                        }
                        Expr::InSubquery(ins) if !in_filter && ins.subquery.outer_ref_columns.is_empty() => {
                            Ok(Transformed::yes(in_as_case(ins)?))
                        }
                        e => Ok(narrow_literal(e)),
                    })?;
                    let t = t.transform_data(|e| {
                        e.transform_up(|e| numeric_cast_scale(e, &schema))
                    })?;
                    Ok(if t.transformed {
                        Transformed::yes(saved.restore(t.data))
                    } else {
                        t
                    })
                })?;
                // A node's schema follows its inputs', which may have
                // changed below it.
                Transformed::yes(t.data).map_data(|p| p.recompute_schema())
            }
        }
    })
    .map(|t| t.data)
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
    let scale = match cast.expr.get_type(schema) {
        Ok(DataType::Decimal128(_, s)) => s,
        Ok(t) if t.is_integer() => 0,
        _ => match cast.expr.as_ref() {
            Expr::Literal(ScalarValue::Utf8(Some(text)), _) => text
                .trim()
                .split_once('.')
                .map(|(_, frac)| {
                    frac.chars()
                        .take_while(|c| c.is_ascii_digit())
                        .count()
                        .min(30) as i8
                })
                .unwrap_or(0),
            _ => return Ok(Transformed::no(e)),
        },
    };
    let field = Arc::new(
        cast.field
            .as_ref()
            .clone()
            .with_data_type(DataType::Decimal128(38, scale)),
    );
    Ok(Transformed::yes(Expr::Cast(
        datafusion::logical_expr::expr::Cast {
            expr: cast.expr.clone(),
            field,
        },
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
