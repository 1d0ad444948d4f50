//! Compiling a view's query into its dataflow, and running deltas
//! through it.
//!
//! The optimized plan is cut at each join (and each aggregate below a
//! join) into the stages of a [`JoinGraph`]; what is left on top ends in
//! the view's last operator: [`RowsOperator`] (the view's rows) or an
//! [`AggregatePipeline`] (one `GROUP BY`, optionally over `TUMBLE`/`HOP`
//! windows that close by the watermark). Filters, projections, window
//! assignment, DISTINCT and UNION are DataFusion plans run on each delta
//! between them. Every delta, of one source or several, takes one path
//! ([`CompiledView::apply_input`]): the graph's stages, then the last
//! operator. What the engine cannot keep exact is refused with 0A000 at
//! CREATE.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::Statement as DfStatement;
use sluice_sql::sqlparser::ast;
use sluice_sql::{hide_system_columns, rewrite_window_functions};

use crate::checkpoint::{OperatorPart, RestoredPart};
use crate::error::SluiceError;
use crate::log::LogStore;

use crate::query::LogTableProvider;
use crate::stream::operators::aggregate::AggregatePipeline;
use crate::stream::operators::operator::{nullable, unsupported, Delta, Operator};
use crate::stream::operators::rows::RowsOperator;
use crate::stream::view::{ViewLookup, ViewSource};

use super::band::{expr_reach, TimeReach};
use super::graph::{check_volatile, JoinGraph, ViewQueryPlanner, NO_SOURCE};
use crate::stream::operators::delta::{DeltaSlot, DeltaTable};

const AGGREGATES: [&str; 15] = [
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "bool_and",
    "bool_or",
    "stddev",
    "stddev_pop",
    "var",
    "var_pop",
    "string_agg",
    "array_agg",
    "first_value",
    "last_value",
];

/// A view's query, ready to run on deltas of its source.
pub struct CompiledView {
    pub source: ViewSource,
    pub schema: SchemaRef,
    pub pipeline: Pipeline,
    /// The view's stages below its last operator: joins, and aggregates
    /// under them (none for most views). Every delta runs through it.
    graph: JoinGraph,
    /// The operator graph, as `EXPLAIN MATERIALIZED VIEW` shows it.
    pub explain: Vec<String>,
    /// Set when the view's windows close by the source's watermark.
    pub closing: Option<WindowClosing>,
    /// Final rows of closed windows.
    closed: Vec<RecordBatch>,
    /// The source takes rows back (a keyed table).
    pub retracting: bool,
    /// When the windows' time comes through interval joins: the sources'
    /// watermarks (plus offsets) whose least closes them (see
    /// [`TimeReach`]).
    close_horizon: Option<Vec<(usize, i64)>>,
    /// The view's ORDER BY: its rows are published in this order, so that
    /// a read that asks for no other order gets them so.
    order: Option<ViewOrder>,
}

/// A view's ORDER BY, over its own columns.
struct ViewOrder {
    keys: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    options: Vec<compute::SortOptions>,
}

impl ViewOrder {
    /// `rows` in this order, as one batch.
    fn sort(&self, schema: &SchemaRef, rows: &[RecordBatch]) -> Result<RecordBatch, SluiceError> {
        let all = compute::concat_batches(schema, rows)?;
        let columns = self
            .keys
            .iter()
            .zip(&self.options)
            .map(|(k, o)| {
                Ok(compute::SortColumn {
                    values: k.evaluate(&all)?.into_array(all.num_rows())?,
                    options: Some(*o),
                })
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        let order = compute::lexsort_to_indices(&columns, None)?;
        Ok(compute::take_record_batch(&all, &order)?)
    }
}

/// How a windowed aggregate view's windows close: a window is final once
/// the watermark passes `window_end + lateness`; its row is emitted for good
/// and its state dropped, and rows arriving for it later are late.
#[derive(Debug, Clone, Copy)]
pub struct WindowClosing {
    /// Index of the window's time column in the source rows; `None` when
    /// the window's time comes through joins (see
    /// [`CompiledView::close_horizon`]), whose band columns say which
    /// source rows are late.
    pub time_index: Option<usize>,
    pub size_us: i64,
    /// Windows start every `slide_us` (the size, for TUMBLE).
    pub slide_us: i64,
    pub lateness_us: i64,
    pub emit_on_close: bool,
    /// Position of the window's key among the GROUP BY keys: its
    /// `window_end`, or else its `window_start`.
    group_index: usize,
    /// How far the key is before the window's end: 0 for `window_end`,
    /// the window's size for `window_start`.
    key_before_end_us: i64,
}

impl WindowClosing {
    /// The end of the last window an event time belongs to (windows start
    /// at multiples of the slide from the epoch, as `date_bin`).
    pub fn window_end(&self, event_us: i64) -> i64 {
        event_us - event_us.rem_euclid(self.slide_us) + self.size_us
    }
}

/// What `CREATE MATERIALIZED VIEW` asked for besides the query.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmitOptions {
    pub emit_on_window_close: bool,
    pub allowed_lateness_us: i64,
}

pub enum Pipeline {
    Rows {
        plan: Arc<dyn ExecutionPlan>,
        rows: RowsOperator,
    },
    Aggregate(Box<AggregatePipeline>),
}

/// Plans a view's query against a delta source and checks its shape.
pub async fn compile(
    query: &ast::Query,
    store: &LogStore,
    views: &dyn ViewLookup,
    config: SessionConfig,
    emit: EmitOptions,
) -> Result<CompiledView, SluiceError> {
    // FETCH FIRST n ROWS WITH TIES of the whole query is its Top-N's
    // (the planner knows LIMIT only).
    let mut query = query.clone();
    let with_ties = match &mut query.fetch {
        Some(f) if f.with_ties && !f.percent && query.order_by.is_some() => {
            f.with_ties = false;
            true
        }
        _ => false,
    };
    let mut stmt = ast::Statement::Query(Box::new(query));
    // The view's columns are named as PostgreSQL names them (`count`, not
    // `count(*)`), and, as there, no two alike.
    if let Some(names) = sluice_sql::name_result_columns(&mut stmt) {
        let mut seen = std::collections::HashSet::new();
        for name in names {
            if let sluice_sql::ResultName::Named(name) = name {
                if !seen.insert(name.clone()) {
                    return Err(SluiceError::Sql(sluice_sql::SqlError::DuplicateColumn(
                        name,
                    )));
                }
            }
        }
    }
    sluice_sql::inline_ctes(&mut stmt)?;
    // Set-returning functions (`jsonb_array_elements`, lateral calls in
    // FROM) become `unnest` of lists, as in a query.
    sluice_sql::rewrite_ordinality(&mut stmt)?;
    sluice_sql::rewrite_set_returning(&mut stmt);
    let windows = rewrite_window_functions(&mut stmt)?;
    let mut relations = Vec::new();
    let _ = ast::visit_relations(&stmt, |name| {
        if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
            relations.push(if last.quote_style.is_some() {
                last.value.clone()
            } else {
                last.value.to_lowercase()
            });
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    relations.sort();
    relations.dedup();
    // Table functions in FROM (`generate_series(1, 4)`) read no table.
    relations.retain(|name| {
        !(matches!(name.as_str(), "generate_series" | "range" | "unnest")
            && store.table(name).is_none()
            && views.view(name).is_none())
    });
    let mut sources = Vec::with_capacity(relations.len());
    for name in &relations {
        sources.push(match (store.table(name), views.view(name)) {
            (Some(t), _) => ViewSource::Table(t),
            (None, Some(v)) => ViewSource::View(v),
            (None, None) => return Err(SluiceError::UndefinedTable(name.clone())),
        });
    }
    let source = match sources.as_slice() {
        [] => ViewSource::Constant,
        [one] => one.clone(),
        _ => ViewSource::Several(sources.clone()),
    };
    sluice_sql::rewrite_postgres_syntax(&mut stmt)?;
    sluice_sql::refuse_windows_in_lateral(&stmt)?;
    sluice_sql::rename_shadowing_relations(&mut stmt);
    hide_system_columns(&mut stmt, |name| {
        crate::stream::relation_columns(store, views, name)
    });
    sluice_sql::rewrite_asof_joins(&mut stmt)?;

    // One partition: the physical plans run once per delta, and a
    // repartitioning plan cannot be executed twice.
    // A scalar subquery without outer references becomes a join with its
    // one row, so that the view follows it as it changes; run as its own
    // plan, it would read one delta of its tables at a time.
    let config = config.with_target_partitions(1).set_bool(
        "datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery",
        false,
    );
    let state = crate::query::postgres_state(config, None)
        .with_query_planner(Arc::new(ViewQueryPlanner))
        .build();
    let ctx = SessionContext::new_with_state(state);
    crate::query::register_functions(&ctx);
    // A lone COUNT(DISTINCT x) per group stays one aggregate with a
    // distinct accumulator, which the aggregate operator keeps (and takes
    // rows back from); the batch rewrite into two nested GROUP BYs would
    // be refused.
    ctx.remove_optimizer_rule("single_distinct_aggregation_to_group_by");
    // An inner join stays one: DataFusion turns an inner join whose other
    // side is unique on the keys, and unused above, into a semi join, and
    // a semi join with a condition beyond its equalities is refused here
    // (Nexmark q5 is such a join).
    ctx.remove_optimizer_rule("eliminate_join");
    let mut slots = Vec::with_capacity(sources.len());
    for (name, source) in relations.iter().zip(&sources) {
        let schema = match source {
            ViewSource::View(v) => v.schema.clone(),
            ViewSource::Table(t) => {
                datafusion::datasource::TableProvider::schema(&LogTableProvider::new(t.clone()))
            }
            ViewSource::Several(_) | ViewSource::Constant => {
                return Err(unsupported("nested sources"))
            }
        };
        let slot: DeltaSlot = Default::default();
        ctx.register_table(
            name.as_str(),
            Arc::new(DeltaTable {
                schema,
                slot: slot.clone(),
            }),
        )?;
        slots.push(slot);
    }
    let state = ctx.state();
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
        .await?;
    let plan = crate::query::postgres_plan(plan)?;
    let plan = state.optimize(&plan)?;
    check_nodes(&plan, matches!(source, ViewSource::Constant))?;
    let (plan, order) = view_order(plan, &state)?;
    let schema = nullable(plan.schema().as_arrow());
    let has_join = plan.exists(|n| Ok(matches!(n, LogicalPlan::Join(_))))?;
    if has_join {
        check_volatile(&plan)?;
    }
    let times = sources
        .iter()
        .map(|s| match s {
            ViewSource::Table(t) if !t.def().is_keyed() => {
                t.def().options.watermark.as_ref().map(|w| w.column.clone())
            }
            _ => None,
        })
        .collect();
    // A keyed table's new versions and tombstones, or a source view's rows
    // changing in place, take earlier rows back.
    let retracting_sources: Vec<bool> = sources
        .iter()
        .map(|s| match s {
            ViewSource::Table(t) => t.def().is_keyed(),
            ViewSource::View(v) => !v.append_only,
            ViewSource::Several(_) => true,
            ViewSource::Constant => false,
        })
        .collect();
    let mut graph = JoinGraph::new(relations.clone(), slots)
        .with_source_times(times, emit.allowed_lateness_us)
        .with_retracting_sources(retracting_sources.clone())
        .with_ties(with_ties)
        .with_emit_on_close(emit.emit_on_window_close);
    // A GROUP BY with more above it than HAVING and a projection (a
    // filter or expression over its rows in an outer query, a join, a
    // union) is a stage of the graph like an aggregate below a join, its
    // changing rows read by the rows above.
    let aggregate_on_top = aggregate_in_place(&plan)?;
    let plan = graph.lift_joins(plan, &state, !aggregate_on_top).await?;
    check_lifted(&plan)?;

    let aggregate = find_aggregate(&plan)?;
    // Windows close by the watermark when the view groups by the window of
    // a TUMBLE over the source's WATERMARK column.
    let table = match (&source, graph.is_empty()) {
        (ViewSource::Table(t), true) => Some(t.clone()),
        _ => None,
    };
    let watermark = table
        .as_ref()
        .and_then(|t| t.def().options.watermark.clone());
    let closing = match (&windows[..], &watermark, aggregate, &table) {
        ([w], Some(mark), Some((agg, _)), Some(source)) if w.column == mark.column => {
            let key = |name: &str| {
                agg.group_expr
                    .iter()
                    .position(|e| matches!(e, Expr::Column(c) if c.name == name))
            };
            // A window is grouped by its end, or by its start alone (which
            // is its end less its size).
            let (group_index, key_before_end_us) = match (key("window_end"), key("window_start")) {
                (Some(i), _) => (Some(i), 0),
                (None, Some(i)) => (Some(i), w.size_us.unwrap_or_default()),
                (None, None) => (None, 0),
            };
            match (
                group_index,
                w.size_us,
                w.slide_us,
                source.def().column_index(&w.column),
            ) {
                (Some(group_index), Some(size_us), Some(slide_us), Some(time_index)) => {
                    Some(WindowClosing {
                        time_index: Some(time_index),
                        size_us,
                        slide_us,
                        lateness_us: emit.allowed_lateness_us,
                        emit_on_close: emit.emit_on_window_close,
                        group_index,
                        key_before_end_us,
                    })
                }
                _ => None,
            }
        }
        _ => None,
    };
    // A windowed aggregate over interval joins: its windows close as the
    // least of the watermarks that bound the window's time through the
    // joins (only for EMIT ON WINDOW CLOSE; emitted on update, its groups
    // stay).
    let mut close_horizon = None;
    let closing = match (closing, aggregate) {
        (None, Some((agg, _))) if emit.emit_on_window_close && !graph.is_empty() => {
            let found = agg.group_expr.iter().enumerate().find_map(|(i, e)| {
                let reach = expr_reach(e, &agg.input, &|s, c| graph.marked(s, c))?;
                let (size_us, end) = reach.window?;
                Some((i, size_us, end, reach.horizon))
            });
            found.map(|(group_index, size_us, end, horizon)| {
                close_horizon = Some(horizon);
                WindowClosing {
                    time_index: None,
                    size_us,
                    slide_us: size_us,
                    lateness_us: emit.allowed_lateness_us,
                    emit_on_close: true,
                    group_index,
                    key_before_end_us: if end { 0 } else { size_us },
                }
            })
        }
        (closing, _) => closing,
    };
    // Window functions under EMIT ON WINDOW CLOSE: the over-window stage
    // emits each row once final, and the rows above only append.
    let graph_closes = aggregate.is_none() && graph.last_stage_closes();
    if emit.emit_on_window_close && closing.is_none() && !graph_closes {
        return Err(unsupported(match (graph.is_empty(), sources.len()) {
            (true, 1) => "EMIT ON WINDOW CLOSE needs GROUP BY window_end or window_start over TUMBLE or HOP of the \
                     table's WATERMARK column with constant INTERVAL sizes",
            _ => "EMIT ON WINDOW CLOSE needs the view's last step to be GROUP BY the window_start or window_end of a \
                  TUMBLE whose time is a WATERMARK column, passed through interval joins (a time band like \
                  b.ts BETWEEN a.ts AND a.ts + INTERVAL '1 minute'), or window functions ordered by that column \
                  first: a join without a time band can pair a new row with any old one, so nothing it gives \
                  is ever final; leave out EMIT ON WINDOW CLOSE (the view then emits on update)",
        }));
    }
    // A keyed table's new versions and tombstones, or a source view's rows
    // changing in place, take earlier rows back; so does an outer, semi
    // or anti join as matches come and go.
    let retracting = retracting_sources.iter().any(|r| *r) || graph.retracts();
    if retracting && closing.is_some() {
        return Err(unsupported(
            "windows that close by the watermark are not supported over keyed tables yet (a later version could reopen a final window); group by the window without a WATERMARK on the table",
        ));
    }
    let pipeline = match aggregate {
        // An ORDER BY keeps the rows as a sorted arrangement.
        None => Pipeline::Rows {
            plan: state.create_physical_plan(&plan).await?,
            rows: match &order {
                Some(o) => RowsOperator::ordered(
                    schema.clone(),
                    o.keys
                        .iter()
                        .cloned()
                        .zip(o.options.iter().copied())
                        .collect(),
                )?,
                None if retracting => RowsOperator::taking_back(schema.clone())?,
                None => RowsOperator::new(schema.clone()),
            },
        },
        Some((aggregate, projection)) => {
            let mut agg =
                AggregatePipeline::new(&ctx.state(), aggregate, projection, retracting).await?;
            agg.attach(
                schema.clone(),
                closing.map(|c| (c.group_index, c.lateness_us, c.key_before_end_us)),
            );
            Pipeline::Aggregate(Box::new(agg))
        }
    };
    let mut explain = vec![match sources.is_empty() {
        true => "reads no table: its rows are computed once".to_string(),
        false => format!(
            "reads {}",
            sources
                .iter()
                .map(|s| match s {
                    ViewSource::Table(t) if t.def().has_primary_key() => {
                        format!(
                            "table {} (keyed: versions and deletes take rows back)",
                            t.def().name
                        )
                    }
                    ViewSource::Table(t) if t.def().is_keyed() => {
                        format!(
                            "table {} (rows change: UPDATE and DELETE take rows back)",
                            t.def().name
                        )
                    }
                    ViewSource::Table(t) => format!("table {} (append-only)", t.def().name),
                    ViewSource::View(v) if v.append_only => {
                        format!("materialized view {} (append-only)", v.def.name)
                    }
                    other => format!("materialized view {} (rows change in place)", other.name()),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }];
    explain.push(match &pipeline {
        Pipeline::Aggregate(agg) => format!(
            "aggregate: {}{}",
            agg.stats().description,
            match (closing, retracting) {
                (Some(c), _) if c.emit_on_close && c.time_index.is_none() => format!(
                    "; windows are emitted when the least of {} (less the allowed lateness) passes their end",
                    close_horizon.as_deref().map(|h| graph.show_horizon(h)).unwrap_or_default()
                ),
                (Some(c), _) if c.emit_on_close =>
                    "; windows are emitted when the watermark closes them".into(),
                (Some(_), _) => "; windows are dropped when the watermark closes them".into(),
                (None, true) => "; groups are kept until their rows are taken back".into(),
                (None, false) => "; groups are kept for the view's life".into(),
            }
        ),
        Pipeline::Rows { .. } if retracting => {
            "rows: the view's rows, each kept until taken back".to_string()
        }
        Pipeline::Rows { .. } => "rows: appended for good".to_string(),
    });
    explain.push("  computed per delta:".to_string());
    explain.extend(
        plan.display_indent()
            .to_string()
            .lines()
            .map(|l| format!("    {l}")),
    );
    explain.extend(graph.explain());
    Ok(CompiledView {
        explain,
        source,
        schema,
        pipeline,
        graph,
        closing,
        closed: Vec::new(),
        retracting,
        close_horizon,
        order,
    })
}

/// The view's ORDER BY, when its query ends in one: without LIMIT, taken
/// off the plan (the view keeps every row, published in that order); with
/// LIMIT, left for the Top-N and kept for publishing too. An ORDER BY of
/// expressions that are not the view's columns is refused.
fn view_order(
    plan: LogicalPlan,
    state: &datafusion::execution::SessionState,
) -> Result<(LogicalPlan, Option<ViewOrder>), SluiceError> {
    let sort = match &plan {
        LogicalPlan::Sort(s) => s,
        LogicalPlan::Limit(l) => match l.input.as_ref() {
            LogicalPlan::Sort(s) => s,
            _ => return Ok((plan, None)),
        },
        LogicalPlan::Projection(p) => {
            if let LogicalPlan::Sort(s) = p.input.as_ref() {
                if s.fetch.is_none() {
                    return Err(unsupported(
                        "ORDER BY in a materialized view sorts by the view's own columns: add the ORDER BY expressions to the select list",
                    ));
                }
            }
            return Ok((plan, None));
        }
        _ => return Ok((plan, None)),
    };
    let schema = sort.input.schema().clone();
    let keys = sort
        .expr
        .iter()
        .map(|s| state.create_physical_expr(s.expr.clone(), &schema))
        .collect::<Result<Vec<_>, _>>()?;
    let options = sort
        .expr
        .iter()
        .map(|s| compute::SortOptions {
            descending: !s.asc,
            nulls_first: s.nulls_first,
        })
        .collect();
    let order = Some(ViewOrder { keys, options });
    match plan {
        LogicalPlan::Sort(s) if s.fetch.is_none() => Ok((s.input.as_ref().clone(), order)),
        plan => Ok((plan, order)),
    }
}

/// Refuses plan nodes the incremental pipeline cannot maintain.
/// `constant`: the view reads no table, so its literal rows (`VALUES`,
/// `SELECT 1`) are computed once, not with each delta.
fn check_nodes(plan: &LogicalPlan, constant: bool) -> Result<(), SluiceError> {
    let mut bad = None;
    plan.apply(|node| {
        // A subquery left in an expression would run over one delta of
        // its tables, not over their rows: a wrong answer, so refused.
        let mut subquery = false;
        node.apply_expressions(|e| {
            subquery |= e.exists(|e| {
                Ok(matches!(
                    e,
                    Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                ))
            })?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        if subquery {
            bad = Some(
                "this subquery is not supported in materialized views: one that reads the outer \
                 query's columns in other than equalities, or under OR or NOT (write it as a JOIN \
                 with the subquery's grouped rows)"
                    .to_string(),
            );
            return Ok(TreeNodeRecursion::Stop);
        }
        match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Unnest(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::TableScan(_) => {}
            LogicalPlan::EmptyRelation(_) | LogicalPlan::Values(_) if constant => {}
            LogicalPlan::Extension(e)
                if e.node.as_any().is::<crate::query::asof_join::AsofJoinNode>() => {}
            LogicalPlan::Aggregate(a) => {
                for e in &a.aggr_expr {
                    let name = match e {
                        Expr::AggregateFunction(f) => f.func.name().to_lowercase(),
                        Expr::Alias(al) => match al.expr.as_ref() {
                            Expr::AggregateFunction(f) => f.func.name().to_lowercase(),
                            other => other.to_string(),
                        },
                        other => other.to_string(),
                    };
                    if !AGGREGATES.contains(&name.as_str()) {
                        bad = Some(format!(
                            "aggregate {name} is not supported in materialized views (supported: count, sum, min, max, avg, bool_and, bool_or, stddev, stddev_pop, variance, var_pop, string_agg, array_agg, first_value, last_value)"
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
            }
            // Top-N shapes become stages of the graph; what is left of
            // them after that is refused (see `check_lifted`).
            LogicalPlan::Window(_) | LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => {}
            other => {
                bad = Some(format!(
                    "{} is not supported in materialized views yet",
                    other.display().to_string().split(':').next().unwrap_or("this operator")
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match bad {
        Some(m) => Err(unsupported(m)),
        None => Ok(()),
    }
}

/// Refuses window functions, ORDER BY and LIMIT that did not become a
/// Top-N stage.
fn check_lifted(plan: &LogicalPlan) -> Result<(), SluiceError> {
    let mut bad = None;
    plan.apply(|node| {
        bad = match node {
            LogicalPlan::Window(_) => Some(
                "window functions in a materialized view are supported only as a Top-N: \
                 ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn in a subquery, \
                 filtered by rn <= N outside it",
            ),
            LogicalPlan::Sort(_) => Some(
                "ORDER BY inside a materialized view's query needs LIMIT (the first N rows in that order, a Top-N); an ORDER BY of the whole query orders the view's rows",
            ),
            LogicalPlan::Limit(_) => Some(
                "LIMIT in a materialized view needs ORDER BY: the view keeps the first rows in that order (a Top-N)",
            ),
            _ => return Ok(TreeNodeRecursion::Continue),
        };
        Ok(TreeNodeRecursion::Stop)
    })?;
    match bad {
        Some(m) => Err(unsupported(m)),
        None => Ok(()),
    }
}

/// Whether the plan has no aggregate, or one at its top with at most a
/// HAVING filter and a projection above it (the view's last operator).
fn aggregate_in_place(plan: &LogicalPlan) -> Result<bool, SluiceError> {
    let any = plan.exists(|n| Ok(matches!(n, LogicalPlan::Aggregate(_))))?;
    let below_projection = match plan {
        LogicalPlan::Projection(p) => p.input.as_ref(),
        other => other,
    };
    let top = match below_projection {
        LogicalPlan::Filter(f) => f.input.as_ref(),
        other => other,
    };
    Ok(!any || matches!(top, LogicalPlan::Aggregate(_)))
}

/// The view's one aggregate, with at most a projection above it.
pub(crate) fn find_aggregate(
    plan: &LogicalPlan,
) -> Result<Option<(&Aggregate, Option<&LogicalPlan>)>, SluiceError> {
    let mut count = 0;
    plan.apply(|n| {
        if matches!(n, LogicalPlan::Aggregate(_)) {
            count += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match count {
        0 => Ok(None),
        1 => {
            let refused = || {
                unsupported(
                    "only HAVING and a projection may follow GROUP BY in a materialized view (ORDER BY, LIMIT, joins and unions of aggregates are not supported yet)",
                )
            };
            // Above the aggregate: a projection, a HAVING filter, or both.
            let below_projection = match plan {
                LogicalPlan::Projection(p) => p.input.as_ref(),
                other => other,
            };
            let aggregate = match below_projection {
                LogicalPlan::Filter(f) => f.input.as_ref(),
                other => other,
            };
            match aggregate {
                LogicalPlan::Aggregate(a) if std::ptr::eq(aggregate, plan) => Ok(Some((a, None))),
                LogicalPlan::Aggregate(a) => Ok(Some((a, Some(plan)))),
                _ => Err(refused()),
            }
        }
        _ => Err(unsupported(
            "more than one GROUP BY in a materialized view is not supported yet",
        )),
    }
}

impl CompiledView {
    /// Runs one delta (rows of the source table, with hidden columns)
    /// through the view's graph.
    /// `watermark_us` is the view's watermark before this delta: rows
    /// for windows that closed by then are dropped (a HOP row may still
    /// count in its open windows).
    pub async fn apply(
        &mut self,
        delta: Vec<RecordBatch>,
        ctx: Arc<datafusion::execution::TaskContext>,
        watermark_us: Option<i64>,
    ) -> Result<(), SluiceError> {
        self.apply_input(0, delta, Vec::new(), ctx, watermark_us)
            .await
    }

    /// A view over no table: its rows, computed once (its pipeline over
    /// no input rows).
    pub async fn compute_constant(
        &mut self,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        self.run_insert(ctx, None).await
    }

    /// Runs the pipeline over the rows in its slots, as inserted rows.
    async fn run_insert(
        &mut self,
        ctx: Arc<datafusion::execution::TaskContext>,
        watermark_us: Option<i64>,
    ) -> Result<(), SluiceError> {
        let closing = self.closing;
        match &mut self.pipeline {
            Pipeline::Rows { plan, rows } => {
                let insert = self.graph.collect_rows_apart(plan, ctx, 1).await?;
                rows.apply(
                    0,
                    &Delta {
                        insert,
                        retract: Vec::new(),
                    },
                )?;
                Ok(())
            }
            Pipeline::Aggregate(agg) => {
                let out = self.graph.collect_rows_apart(&agg.input, ctx, 1).await?;
                let graph = &self.graph;
                for b in &out {
                    match (closing.filter(|c| c.time_index.is_some()), watermark_us) {
                        (Some(c), Some(w)) => {
                            let open = agg.rows_of_open_windows(
                                b,
                                c.group_index,
                                w.saturating_sub(c.lateness_us)
                                    .saturating_sub(c.key_before_end_us),
                            )?;
                            agg.feed_rows_apart(&open, false, |row, e| {
                                graph.record_failed_row(row, 1, e)
                            })?
                        }
                        _ => agg.feed_rows_apart(b, false, |row, e| {
                            graph.record_failed_row(row, 1, e)
                        })?,
                    }
                }
                Ok(())
            }
        }
    }

    /// Takes back rows applied before (earlier versions of keys of a keyed
    /// table): a filter's rows they produced leave the view, an aggregate
    /// retracts them from their groups.
    pub async fn retract(
        &mut self,
        rows: Vec<RecordBatch>,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        self.apply_input(0, Vec::new(), rows, ctx, None).await
    }

    /// Runs the pipeline over the rows in its slots, as retracted rows.
    async fn run_retract(
        &mut self,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        match &mut self.pipeline {
            Pipeline::Rows { plan, rows } => {
                let retract = self.graph.collect_rows_apart(plan, ctx, -1).await?;
                rows.apply(
                    0,
                    &Delta {
                        insert: Vec::new(),
                        retract,
                    },
                )?;
                Ok(())
            }
            Pipeline::Aggregate(agg) => {
                let out = self.graph.collect_rows_apart(&agg.input, ctx, -1).await?;
                let graph = &self.graph;
                out.iter().try_for_each(|b| {
                    agg.feed_rows_apart(b, true, |row, e| graph.record_failed_row(row, -1, e))
                })
            }
        }
    }

    /// The one path of every delta: source `source`'s inserted and
    /// taken-back rows through the graph's stages (joins, aggregates below
    /// them; none for most views) in order, then the last operator (rows
    /// or an aggregate), its inserted rows first. `watermark_us` is as
    /// for [`CompiledView::apply`].
    pub async fn apply_input(
        &mut self,
        source: usize,
        insert: Vec<RecordBatch>,
        retract: Vec<RecordBatch>,
        ctx: Arc<datafusion::execution::TaskContext>,
        watermark_us: Option<i64>,
    ) -> Result<(), SluiceError> {
        let insert: Vec<RecordBatch> = insert.into_iter().filter(|b| b.num_rows() > 0).collect();
        let retract: Vec<RecordBatch> = retract.into_iter().filter(|b| b.num_rows() > 0).collect();
        if insert.is_empty() && retract.is_empty() {
            return Ok(());
        }
        self.step(source, insert, retract, None, ctx, watermark_us)
            .await
    }

    /// Sends up what the graph's operators hold before any input (a
    /// global aggregate's one row below a join), once, for a view that
    /// did not start from a checkpoint; nothing otherwise.
    pub async fn start(
        &mut self,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        if !self.graph.unstarted() {
            return Ok(());
        }
        self.step(NO_SOURCE, Vec::new(), Vec::new(), None, ctx, None)
            .await
    }

    /// The sources' watermarks moved (by source; `None` where a source
    /// has none): interval joins drop what went out of reach, and what
    /// they emit (outer joins' final NULL-padded rows) takes the path of
    /// a delta from there up.
    pub async fn advance_source_watermarks(
        &mut self,
        watermarks: &[Option<i64>],
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        if self.graph.bands().is_empty() {
            return Ok(());
        }
        self.step(
            NO_SOURCE,
            Vec::new(),
            Vec::new(),
            Some(watermarks),
            ctx,
            None,
        )
        .await?;
        // Windows whose time came through the joins close after what the
        // joins emitted at these watermarks has reached them.
        let horizon = self
            .close_horizon
            .as_deref()
            .and_then(|h| TimeReach::at(h, watermarks));
        match (horizon, &mut self.pipeline) {
            (Some(w), Pipeline::Aggregate(agg)) => {
                let closed = agg.advance_watermark(0, w)?;
                self.closed.extend(closed.insert);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The view's allowed lateness, for its interval joins.
    pub fn allowed_lateness_us(&self) -> i64 {
        self.graph.lateness_us()
    }

    /// Which columns of each source (by index into the source's rows)
    /// interval joins bound by its watermark: rows behind it there are
    /// late for the view.
    /// A window join's column comes with its window size: a row is late
    /// there once its window has closed.
    pub fn band_columns(&self, source: usize, schema: &Schema) -> Vec<(usize, Option<i64>)> {
        self.graph
            .bands()
            .iter()
            .filter(|(s, _, _)| *s == source)
            .filter_map(|(_, c, w)| Some((schema.index_of(c).ok()?, *w)))
            .collect()
    }

    async fn step(
        &mut self,
        source: usize,
        insert: Vec<RecordBatch>,
        retract: Vec<RecordBatch>,
        watermarks: Option<&[Option<i64>]>,
        ctx: Arc<datafusion::execution::TaskContext>,
        watermark_us: Option<i64>,
    ) -> Result<(), SluiceError> {
        let outputs = self
            .graph
            .propagate(source, &insert, &retract, watermarks, ctx.clone())
            .await;
        let outputs = match outputs {
            Ok(o) => o,
            Err(e) => {
                self.graph.clear();
                return Err(e);
            }
        };
        let reaches_top = |rows: &[RecordBatch], inserted: bool| {
            !rows.is_empty()
                || outputs.iter().any(|o| match inserted {
                    true => !o.insert.is_empty(),
                    false => !o.retract.is_empty(),
                })
        };
        if reaches_top(&insert, true) {
            self.graph.fill(source, &insert, &outputs, true);
            let result = self.run_insert(ctx.clone(), watermark_us).await;
            self.graph.clear();
            result?;
        }
        if reaches_top(&retract, false) {
            self.graph.fill(source, &retract, &outputs, false);
            let result = self.run_retract(ctx).await;
            self.graph.clear();
            result?;
        }
        Ok(())
    }

    /// Every operator's counters, innermost first.
    pub fn operator_stats(&self) -> Vec<crate::stream::operators::operator::OperatorStats> {
        let mut out = self.graph.stats();
        out.push(match &self.pipeline {
            Pipeline::Aggregate(agg) => agg.stats(),
            Pipeline::Rows { rows, .. } => rows.stats(),
        });
        out
    }

    /// The joins' state for a checkpoint (None without joins): what it
    /// gained since the last capture (false), or all of it (true).
    pub fn operator_state(
        &mut self,
        whole: bool,
    ) -> Result<Option<(Vec<OperatorPart>, bool)>, SluiceError> {
        self.graph.capture(whole)
    }

    /// The rows of the sources on which the view's plans fail, for a
    /// checkpoint.
    pub fn failed_rows(&self) -> Vec<sluice_catalog::FailedRowEntry> {
        self.graph.failed_rows()
    }

    /// Puts back the failed rows a checkpoint kept.
    pub fn restore_failed_rows(&self, saved: &[sluice_catalog::FailedRowEntry]) {
        self.graph.restore_failed_rows(saved);
    }

    /// Puts back the joins' state from a checkpoint.
    pub fn restore_operators(
        &mut self,
        files: &[RestoredPart],
        shared: bool,
    ) -> Result<(), SluiceError> {
        self.graph.restore(files, shared)
    }

    /// Closes the windows the watermark has passed (see [`WindowClosing`]).
    pub fn close_windows(&mut self, watermark_us: i64) -> Result<(), SluiceError> {
        // Windows whose time comes through joins close by the horizon
        // (see `advance_source_watermarks`), not by one table's watermark.
        let (Some(_), None, Pipeline::Aggregate(agg)) =
            (&self.closing, &self.close_horizon, &mut self.pipeline)
        else {
            return Ok(());
        };
        let closed = agg.advance_watermark(0, watermark_us)?;
        self.closed.extend(closed.insert);
        Ok(())
    }

    /// Whether a rows view's rows are not only appended: its input takes
    /// rows back, or its ORDER BY puts new rows among the old.
    fn rewrites_rows(&self) -> bool {
        self.retracting || self.order.is_some()
    }

    /// The view's rows as of the last applied delta, in its ORDER BY's
    /// order if it has one.
    pub fn snapshot(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        // Rows of the sources that fail leave no answer to give.
        if let Some(e) = self.graph.failed_rows_error() {
            return Err(e);
        }
        self.rows_without_failed()
    }

    /// The view's rows as [`Self::snapshot`] gives them, leaving out the
    /// rows of the sources that fail rather than failing: what a change
    /// log compares against.
    pub fn rows_without_failed(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        let rows = self.unordered_snapshot()?;
        // Ordered rows come in order; an aggregate's groups are sorted.
        let arranged = matches!(&self.pipeline, Pipeline::Rows { rows, .. } if rows.is_ordered());
        match &self.order {
            Some(order) if !rows.is_empty() && !arranged => {
                Ok(vec![order.sort(&self.schema, &rows)?])
            }
            _ => Ok(rows),
        }
    }

    /// The view's rows as of the last applied delta: final rows of closed
    /// windows, then (unless the view emits on close) the open groups.
    fn unordered_snapshot(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        let mut out = self.closed.clone();
        let emit_open = !self.closing.is_some_and(|c| c.emit_on_close);
        match &mut self.pipeline {
            Pipeline::Rows { rows, .. } => {
                for b in rows.rows()? {
                    out.push(RecordBatch::try_new(
                        self.schema.clone(),
                        b.columns().to_vec(),
                    )?);
                }
            }
            Pipeline::Aggregate(agg) if emit_open => out.extend(agg.rows(&self.schema)?),
            Pipeline::Aggregate(_) => {}
        }
        Ok(out)
    }

    /// Time the aggregate spent copying columns that published rows held,
    /// since the last call: part of what publishing costs.
    pub fn take_copy_time(&mut self) -> std::time::Duration {
        match &mut self.pipeline {
            Pipeline::Aggregate(agg) => agg.take_copy_time(),
            Pipeline::Rows { .. } => std::time::Duration::ZERO,
        }
    }

    /// True when published rows never change: new rows are only appended.
    pub fn append_only(&self) -> bool {
        if self.order.is_some() {
            // Published in order: a new row may land among the old.
            return false;
        }
        match &self.pipeline {
            Pipeline::Rows { .. } => !self.rewrites_rows(),
            Pipeline::Aggregate(_) => self.closing.is_some_and(|c| c.emit_on_close),
        }
    }

    /// Rows the view has appended for good, oldest first: a filter's rows,
    /// or the final rows of closed windows, from batch `from` on. A
    /// checkpoint writes each once.
    pub fn appended_since(&self, from: usize) -> Result<Vec<RecordBatch>, SluiceError> {
        let batches = match &self.pipeline {
            // Rows that can be taken back are state, not appended for good.
            Pipeline::Rows { .. } if self.rewrites_rows() => return Ok(Vec::new()),
            Pipeline::Rows { rows, .. } => rows.batches(),
            Pipeline::Aggregate(_) => &self.closed,
        };
        batches
            .iter()
            .skip(from)
            .map(|b| {
                Ok(RecordBatch::try_new(
                    self.schema.clone(),
                    b.columns().to_vec(),
                )?)
            })
            .collect()
    }

    /// How many batches [`CompiledView::appended_since`] counts from.
    pub fn appended_batches(&self) -> usize {
        match &self.pipeline {
            Pipeline::Rows { .. } if self.rewrites_rows() => 0,
            Pipeline::Rows { rows, .. } => rows.batches().len(),
            Pipeline::Aggregate(_) => self.closed.len(),
        }
    }

    /// Open aggregate state for a checkpoint (nothing for a filter view
    /// over an append-only table).
    pub fn state_batches(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        let rewrites = self.rewrites_rows();
        match &mut self.pipeline {
            // A filter over a keyed table rewrites its rows each epoch.
            Pipeline::Rows { rows, .. } if rewrites => {
                let held = rows.snapshot()?.concat();
                if held.is_empty() {
                    return Ok(Vec::new());
                }
                Ok(vec![compute::concat_batches(&self.schema, held.iter())?])
            }
            Pipeline::Rows { .. } => Ok(Vec::new()),
            Pipeline::Aggregate(agg) => Ok(agg.snapshot()?.concat()),
        }
    }

    /// Puts back what a checkpoint held: appended rows and open groups.
    pub fn restore(
        &mut self,
        appended: Vec<RecordBatch>,
        groups: Vec<RecordBatch>,
    ) -> Result<(), SluiceError> {
        let appended = appended.into_iter().filter(|b| b.num_rows() > 0);
        let rewrites = self.rewrites_rows();
        match &mut self.pipeline {
            Pipeline::Rows { rows, .. } => {
                rows.extend(appended);
                if rewrites {
                    rows.restore(0, &groups)?;
                }
            }
            Pipeline::Aggregate(agg) => {
                self.closed.extend(appended);
                agg.restore(0, &groups)?;
            }
        }
        Ok(())
    }

    /// Rows of state held: groups for an aggregate, rows for a filter,
    /// and the rows the joins keep.
    pub fn state_rows(&self) -> u64 {
        let joins: u64 = self.graph.stats().iter().map(|s| s.state_rows).sum();
        joins
            + match &self.pipeline {
                Pipeline::Rows { rows, .. } => rows.stats().state_rows,
                Pipeline::Aggregate(agg) => agg.groups() as u64,
            }
    }
}
