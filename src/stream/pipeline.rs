//! Compiling a view's query into an incremental pipeline.
//!
//! Supported shapes: filters and projections of one table (rows are
//! appended), and one `GROUP BY` with COUNT, COUNT(DISTINCT), SUM, MIN, MAX
//! and AVG (running DataFusion accumulators per group), optionally over
//! `TUMBLE` windows. Everything else is refused with 0A000 at CREATE.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    new_empty_array, Array, ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::compute;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Accumulator, Aggregate, Expr, LogicalPlan};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{collect, ExecutionPlan};
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::Statement as DfStatement;
use sluice_sql::sqlparser::ast;
use sluice_sql::{hide_system_columns, rewrite_window_functions};

use crate::error::SluiceError;
use crate::log::{LogStore, TableLog};

use super::retract::RetractableMinMax;
use super::view::{View, ViewManager};
use crate::query::LogTableProvider;

use super::delta::{DeltaSlot, DeltaTable};
use super::graph::{check_volatile, JoinGraph, ViewQueryPlanner};

const AGGREGATES: [&str; 5] = ["count", "sum", "min", "max", "avg"];

/// Where a view's rows come from: a table's log, or the rows another view
/// appends (a filter/projection view or an EMIT ON WINDOW CLOSE view, whose
/// rows never change once published).
#[derive(Clone)]
pub enum ViewSource {
    Table(Arc<TableLog>),
    View(Arc<View>),
    /// Several tables, joined or unioned; offsets are each table's
    /// partitions in turn.
    Tables(Vec<Arc<TableLog>>),
}

impl ViewSource {
    pub fn name(&self) -> String {
        match self {
            ViewSource::Table(t) => t.def.name.clone(),
            ViewSource::View(v) => v.def.name.clone(),
            ViewSource::Tables(ts) => ts
                .iter()
                .map(|t| t.def.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Whether the view reads `relation`.
    pub fn reads(&self, relation: &str) -> bool {
        match self {
            ViewSource::Table(t) => t.def.name == relation,
            ViewSource::View(v) => v.def.name == relation,
            ViewSource::Tables(ts) => ts.iter().any(|t| t.def.name == relation),
        }
    }

    /// The tables the view reads, in the order of its offsets.
    pub fn tables(&self) -> Vec<Arc<TableLog>> {
        match self {
            ViewSource::Table(t) => vec![t.clone()],
            ViewSource::View(_) => vec![],
            ViewSource::Tables(ts) => ts.clone(),
        }
    }

    /// The table and its partition at position `k` of the view's offsets.
    pub fn partition_at(&self, k: usize) -> Option<(Arc<TableLog>, usize)> {
        let mut at = 0;
        for t in self.tables() {
            let n = t.partitions().len();
            if k < at + n {
                return Some((t, k - at));
            }
            at += n;
        }
        None
    }

    /// Committed end offsets of the tables read, in the order of the
    /// view's offsets (None for a view over a view).
    pub fn committed_ends(&self) -> Option<Vec<u64>> {
        match self {
            ViewSource::View(_) => None,
            _ => Some(
                self.tables()
                    .iter()
                    .flat_map(|t| t.commits().borrow().clone())
                    .collect(),
            ),
        }
    }

    /// Where `table`'s partitions lie in the view's offsets.
    pub fn offsets_of(&self, table: &str) -> Option<std::ops::Range<usize>> {
        match self {
            ViewSource::Table(t) if t.def.name == table => Some(0..t.partitions().len()),
            ViewSource::Tables(ts) => {
                let mut at = 0;
                for t in ts {
                    let n = t.partitions().len();
                    if t.def.name == table {
                        return Some(at..at + n);
                    }
                    at += n;
                }
                None
            }
            _ => None,
        }
    }
}

/// A view's query, ready to run on deltas of its source.
pub struct CompiledView {
    pub source: ViewSource,
    pub schema: SchemaRef,
    pub slot: DeltaSlot,
    pub pipeline: Pipeline,
    /// The view's joins, run before the pipeline (none for most views).
    graph: JoinGraph,
    /// Set when the view's windows close by the source's watermark.
    pub closing: Option<WindowClosing>,
    /// Final rows of closed windows.
    closed: Vec<RecordBatch>,
    /// The source takes rows back (a keyed table).
    pub retracting: bool,
}

/// How a windowed aggregate view's windows close: a window is final once
/// the watermark passes `window_end + lateness`; its row is emitted for good
/// and its state dropped, and rows arriving for it later are late.
#[derive(Debug, Clone, Copy)]
pub struct WindowClosing {
    /// Index of the window's time column in the source rows.
    pub time_index: usize,
    pub size_us: i64,
    /// Windows start every `slide_us` (the size, for TUMBLE).
    pub slide_us: i64,
    pub lateness_us: i64,
    pub emit_on_close: bool,
    /// Position of `window_end` among the GROUP BY keys.
    group_index: usize,
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
        rows: Vec<RecordBatch>,
    },
    Aggregate(Box<AggregatePipeline>),
}

fn unsupported(what: impl Into<String>) -> SluiceError {
    SluiceError::Unsupported(what.into())
}

fn nullable(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ))
}

/// Plans a view's query against a delta source and checks its shape.
pub async fn compile(
    query: &ast::Query,
    store: &LogStore,
    views: &ViewManager,
    config: SessionConfig,
    emit: EmitOptions,
) -> Result<CompiledView, SluiceError> {
    let mut stmt = ast::Statement::Query(Box::new(query.clone()));
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
    if relations.is_empty() {
        return Err(unsupported("a materialized view must read a table"));
    }
    let mut sources = Vec::with_capacity(relations.len());
    for name in &relations {
        sources.push(match (store.table(name), views.view(name)) {
            (Some(t), _) => ViewSource::Table(t),
            (None, Some(v)) => ViewSource::View(v),
            (None, None) => return Err(SluiceError::UndefinedTable(name.clone())),
        });
    }
    let source = match sources.as_slice() {
        [one] => one.clone(),
        _ => ViewSource::Tables(
            sources
                .iter()
                .map(|s| match s {
                    ViewSource::Table(t) => Ok(t.clone()),
                    other => Err(unsupported(format!(
                        "a materialized view that combines \"{}\" with other relations must read tables only; \"{}\" is a materialized view",
                        other.name(),
                        other.name()
                    ))),
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    let tables: Vec<String> = sources
        .iter()
        .filter(|s| matches!(s, ViewSource::Table(_)))
        .map(|s| s.name())
        .collect();
    hide_system_columns(&mut stmt, |t| tables.iter().any(|n| n == t));

    // One partition: the physical plans run once per delta, and a
    // repartitioning plan cannot be executed twice.
    let state = datafusion::execution::SessionStateBuilder::new_from_existing(
        SessionContext::new_with_config(config.with_target_partitions(1)).state(),
    )
    .with_query_planner(Arc::new(ViewQueryPlanner))
    .build();
    let ctx = SessionContext::new_with_state(state);
    ctx.add_analyzer_rule(Arc::new(crate::query::CheckedArithmetic));
    ctx.register_udaf(crate::query::checked_sum());
    let mut slots = Vec::with_capacity(sources.len());
    for (name, source) in relations.iter().zip(&sources) {
        let schema = match source {
            ViewSource::View(v) => v.schema.clone(),
            ViewSource::Table(t) => {
                datafusion::datasource::TableProvider::schema(&LogTableProvider::new(t.clone()))
            }
            ViewSource::Tables(_) => return Err(unsupported("nested sources")),
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
    let slot = slots[0].clone();
    let state = ctx.state();
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(stmt)))
        .await?;
    let plan = state.optimize(&plan)?;
    check_nodes(&plan)?;
    let schema = nullable(plan.schema().as_arrow());
    let has_join = plan.exists(|n| Ok(matches!(n, LogicalPlan::Join(_))))?;
    if has_join {
        check_volatile(&plan)?;
    }
    let mut graph = JoinGraph::new(relations.clone(), slots);
    let plan = graph.lift_joins(plan, &state).await?;

    let aggregate = find_aggregate(&plan)?;
    // Windows close by the watermark when the view groups by the window of
    // a TUMBLE over the source's WATERMARK column.
    let table = match (&source, graph.is_empty()) {
        (ViewSource::Table(t), true) => Some(t.clone()),
        _ => None,
    };
    let watermark = table.as_ref().and_then(|t| t.def.options.watermark.clone());
    let closing = match (&windows[..], &watermark, aggregate, &table) {
        ([w], Some(mark), Some((agg, _)), Some(source)) if w.column == mark.column => {
            let group_index = agg
                .group_expr
                .iter()
                .position(|e| matches!(e, Expr::Column(c) if c.name == "window_end"));
            match (
                group_index,
                w.size_us,
                w.slide_us,
                source.def.column_index(&w.column),
            ) {
                (Some(group_index), Some(size_us), Some(slide_us), Some(time_index)) => {
                    Some(WindowClosing {
                        time_index,
                        size_us,
                        slide_us,
                        lateness_us: emit.allowed_lateness_us,
                        emit_on_close: emit.emit_on_window_close,
                        group_index,
                    })
                }
                _ => None,
            }
        }
        _ => None,
    };
    if emit.emit_on_window_close && closing.is_none() {
        return Err(unsupported(match graph.is_empty() && sources.len() == 1 {
            true => "EMIT ON WINDOW CLOSE needs GROUP BY window_end over TUMBLE or HOP of the \
                     table's WATERMARK column with constant INTERVAL sizes",
            false => "EMIT ON WINDOW CLOSE is not supported for materialized views with joins or over several tables yet",
        }));
    }
    // A keyed table's new versions and tombstones, or a source view's rows
    // changing in place, take earlier rows back; so does an outer, semi
    // or anti join as matches come and go.
    let retracting = sources.iter().any(|s| match s {
        ViewSource::Table(t) => t.def.is_keyed(),
        ViewSource::View(v) => !v.append_only,
        ViewSource::Tables(_) => true,
    }) || graph
        .operators()
        .any(|j| j.join_type != datafusion::common::JoinType::Inner);
    if retracting && closing.is_some() {
        return Err(unsupported(
            "windows that close by the watermark are not supported over keyed tables yet (a later version could reopen a final window); group by the window without a WATERMARK on the table",
        ));
    }
    let pipeline = match aggregate {
        None => Pipeline::Rows {
            plan: state.create_physical_plan(&plan).await?,
            rows: Vec::new(),
        },
        Some((aggregate, projection)) => Pipeline::Aggregate(Box::new(
            AggregatePipeline::new(&ctx, aggregate, projection, retracting).await?,
        )),
    };
    Ok(CompiledView {
        source,
        schema,
        slot,
        pipeline,
        graph,
        closing,
        closed: Vec::new(),
        retracting,
    })
}

/// Removes one row equal to each row of `gone` from `rows`.
fn remove_rows(
    schema: &SchemaRef,
    rows: &mut Vec<RecordBatch>,
    gone: &[RecordBatch],
) -> Result<(), SluiceError> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let mut pending: HashMap<Vec<u8>, usize> = HashMap::new();
    for b in gone {
        let encoded = converter.convert_columns(b.columns())?;
        for r in encoded.iter() {
            *pending.entry(r.as_ref().to_vec()).or_insert(0) += 1;
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    let mut kept = Vec::with_capacity(rows.len());
    for b in rows.drain(..) {
        let encoded = converter.convert_columns(b.columns())?;
        let keep: arrow::array::BooleanArray = encoded
            .iter()
            .map(|r| match pending.get_mut(r.as_ref()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    Some(false)
                }
                _ => Some(true),
            })
            .collect();
        let b = compute::filter_record_batch(&b, &keep)?;
        if b.num_rows() > 0 {
            kept.push(b);
        }
    }
    *rows = kept;
    Ok(())
}

/// Refuses plan nodes the incremental pipeline cannot maintain.
fn check_nodes(plan: &LogicalPlan) -> Result<(), SluiceError> {
    let mut bad = None;
    plan.apply(|node| {
        match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Unnest(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::TableScan(_) => {}
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
                            "aggregate {name} is not supported in materialized views (supported: COUNT, COUNT(DISTINCT), SUM, MIN, MAX, AVG)"
                        ));
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
            }
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

/// The view's one aggregate, with at most a projection above it.
pub(super) fn find_aggregate(
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

/// Running aggregates per group: DataFusion accumulators fed with each
/// delta's rows of that group.
pub(super) struct AggregatePipeline {
    input: Arc<dyn ExecutionPlan>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    agg_schema: SchemaRef,
    output: Option<Vec<Arc<dyn PhysicalExpr>>>,
    /// HAVING, over the aggregate's rows.
    having: Option<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    /// Group index by the key's row bytes (looked up without allocating).
    groups: HashMap<Vec<u8>, usize>,
    keys: Vec<OwnedRow>,
    accumulators: Vec<Vec<Box<dyn Accumulator>>>,
    /// The source takes rows back (a keyed table): accumulators that can
    /// retract, and rows per group, so that a group whose rows are all
    /// gone leaves the view.
    retracting: bool,
    group_rows: Vec<i64>,
}

impl AggregatePipeline {
    pub(super) async fn new(
        ctx: &SessionContext,
        aggregate: &Aggregate,
        projection: Option<&LogicalPlan>,
        retracting: bool,
    ) -> Result<AggregatePipeline, SluiceError> {
        let state = ctx.state();
        let input = state.create_physical_plan(&aggregate.input).await?;
        let in_schema: &DFSchema = aggregate.input.schema();
        let group_exprs = aggregate
            .group_expr
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), in_schema))
            .collect::<Result<Vec<_>, _>>()?;
        let mut aggs = Vec::new();
        for e in &aggregate.aggr_expr {
            // The lowering helper is deprecated in favour of a builder
            // whose API is still settling; this is the documented call.
            #[allow(deprecated)]
            let (agg, filter, _) = create_aggregate_expr_and_maybe_filter(
                e,
                in_schema,
                input.schema().as_ref(),
                state.execution_props(),
            )?;
            if filter.is_some() {
                return Err(unsupported(
                    "aggregate FILTER clauses are not supported yet",
                ));
            }
            aggs.push(agg);
        }
        let agg_schema = nullable(aggregate.schema.as_arrow());
        let output = match projection {
            Some(LogicalPlan::Projection(p)) => Some(
                p.expr
                    .iter()
                    .map(|e| state.create_physical_expr(e.clone(), &aggregate.schema))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            _ => None,
        };
        // HAVING: a filter over the aggregate's rows, below the projection.
        let having = match projection {
            Some(LogicalPlan::Projection(p)) => match p.input.as_ref() {
                LogicalPlan::Filter(f) => Some(&f.predicate),
                _ => None,
            },
            Some(LogicalPlan::Filter(f)) => Some(&f.predicate),
            _ => None,
        };
        let having = match having {
            Some(e) => Some(state.create_physical_expr(e.clone(), &aggregate.schema)?),
            None => None,
        };
        let fields = group_exprs
            .iter()
            .map(|e| e.data_type(input.schema().as_ref()).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        let mut pipeline = AggregatePipeline {
            input,
            group_exprs,
            aggs,
            agg_schema,
            output,
            having,
            converter: RowConverter::new(fields)?,
            groups: HashMap::new(),
            keys: Vec::new(),
            accumulators: Vec::new(),
            retracting,
            group_rows: Vec::new(),
        };
        if retracting {
            for a in &pipeline.aggs {
                let name = a.fun().name().to_lowercase();
                let supported = match a.is_distinct() {
                    true => matches!(name.as_str(), "count" | "min" | "max"),
                    false => matches!(
                        name.as_str(),
                        "count" | "sum" | "avg" | "mean" | "min" | "max"
                    ),
                };
                if !supported {
                    return Err(unsupported(format!(
                        "{} is not supported here: this view takes rows back (it reads a keyed table, or has an outer, semi or anti join), which COUNT, COUNT(DISTINCT), SUM, AVG, MIN and MAX can",
                        a.name()
                    )));
                }
            }
        }
        if pipeline.group_exprs.is_empty() {
            // A global aggregate has its one row even before any input.
            let accs = pipeline.new_accumulators()?;
            pipeline.accumulators.push(accs);
            pipeline.group_rows.push(0);
        }
        Ok(pipeline)
    }

    /// One accumulator per aggregate for a new group.
    fn new_accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>, SluiceError> {
        self.aggs.iter().map(|a| self.new_accumulator(a)).collect()
    }

    fn new_accumulator(
        &self,
        a: &AggregateFunctionExpr,
    ) -> Result<Box<dyn Accumulator>, SluiceError> {
        if !self.retracting {
            return Ok(a.create_accumulator()?);
        }
        match a.fun().name().to_lowercase().as_str() {
            name @ ("min" | "max") => Ok(Box::new(RetractableMinMax::new(
                name == "max",
                a.field().data_type().clone(),
            )?)),
            "count" if a.is_distinct() => {
                let input = a
                    .expressions()
                    .first()
                    .map(|e| e.data_type(self.input.schema().as_ref()))
                    .transpose()?
                    .ok_or_else(|| unsupported("COUNT(DISTINCT) of no column"))?;
                Ok(Box::new(RetractableMinMax::count_distinct(input)?))
            }
            _ => Ok(a.create_sliding_accumulator()?),
        }
    }

    fn group_for(&mut self, key: OwnedRow) -> Result<usize, SluiceError> {
        if let Some(g) = self.groups.get(key.row().as_ref()) {
            return Ok(*g);
        }
        let g = self.keys.len();
        let accs = self.new_accumulators()?;
        self.accumulators.push(accs);
        self.group_rows.push(0);
        self.keys.push(key.clone());
        self.groups.insert(key.row().as_ref().to_vec(), g);
        Ok(g)
    }

    /// Feeds the pre-aggregation rows of one delta.
    pub(super) fn update(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        self.feed(batch, false)
    }

    /// Takes back pre-aggregation rows fed before (earlier versions of
    /// keys of a keyed table). Rows of groups no longer held (closed
    /// windows) are ignored.
    pub(super) fn retract(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        self.feed(batch, true)
    }

    fn feed(&mut self, batch: &RecordBatch, retract: bool) -> Result<(), SluiceError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let key_columns = self
            .group_exprs
            .iter()
            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
            .collect::<Result<Vec<_>, _>>()?;
        let args: Vec<Vec<ArrayRef>> = self
            .aggs
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;
        let mut rows_of: Vec<(usize, Vec<u32>)> = Vec::new();
        let mut slot_of: HashMap<usize, usize> = HashMap::new();
        if self.group_exprs.is_empty() {
            rows_of.push((0, (0..n as u32).collect()));
        } else {
            let rows = self.converter.convert_columns(&key_columns)?;
            for i in 0..n {
                let row = rows.row(i);
                let g = match self.groups.get(row.as_ref()) {
                    Some(g) => *g,
                    None if retract => continue,
                    None => self.group_for(row.owned())?,
                };
                let s = *slot_of.entry(g).or_insert_with(|| {
                    rows_of.push((g, Vec::new()));
                    rows_of.len() - 1
                });
                rows_of[s].1.push(i as u32);
            }
        }
        for (g, idx) in rows_of {
            let count = idx.len() as i64;
            let idx = UInt32Array::from(idx);
            for (a, acc) in self.accumulators[g].iter_mut().enumerate() {
                let taken = args[a]
                    .iter()
                    .map(|c| compute::take(c.as_ref(), &idx, None))
                    .collect::<Result<Vec<_>, _>>()?;
                if retract {
                    acc.retract_batch(&taken)?;
                } else {
                    acc.update_batch(&taken)?;
                }
            }
            self.group_rows[g] += if retract { -count } else { count };
        }
        Ok(())
    }

    /// The view's rows now: one per group.
    pub(super) fn snapshot(&mut self, schema: &SchemaRef) -> Result<RecordBatch, SluiceError> {
        // A group whose rows were all taken back is no row of the view
        // (a global aggregate keeps its one row).
        let all: Vec<usize> = (0..self.accumulators.len())
            .filter(|&g| !self.retracting || self.group_exprs.is_empty() || self.group_rows[g] > 0)
            .collect();
        self.rows_of(schema, &all, true)
    }

    /// Emits the rows of the windows whose `window_end` is at or before
    /// `threshold_us`, and drops their state.
    fn close_windows(
        &mut self,
        schema: &SchemaRef,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<Option<RecordBatch>, SluiceError> {
        if self.keys.is_empty() {
            return Ok(None);
        }
        let keys = self
            .converter
            .convert_rows(self.keys.iter().map(|k| k.row()))?;
        let ends = arrow::compute::cast(
            &keys[group_index],
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )?;
        let ends = ends
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
            .ok_or_else(|| SluiceError::Internal("window_end is not a timestamp".into()))?;
        let closed: Vec<usize> = (0..ends.len())
            .filter(|&g| ends.is_valid(g) && ends.value(g) <= threshold_us)
            .collect();
        if closed.is_empty() {
            return Ok(None);
        }
        let batch = self.rows_of(schema, &closed, true)?;
        let mut is_closed = vec![false; self.keys.len()];
        for g in closed {
            is_closed[g] = true;
        }
        let mut keep_keys = Vec::new();
        let mut keep_accs = Vec::new();
        let mut keep_rows = Vec::new();
        for (((key, accs), rows), gone) in self
            .keys
            .drain(..)
            .zip(self.accumulators.drain(..))
            .zip(self.group_rows.drain(..))
            .zip(is_closed)
        {
            if !gone {
                keep_keys.push(key);
                keep_accs.push(accs);
                keep_rows.push(rows);
            }
        }
        self.group_rows = keep_rows;
        self.groups = keep_keys
            .iter()
            .enumerate()
            .map(|(g, k)| (k.row().as_ref().to_vec(), g))
            .collect();
        self.keys = keep_keys;
        self.accumulators = keep_accs;
        Ok(Some(batch))
    }

    /// The pre-aggregation rows whose window is still open.
    fn rows_of_open_windows(
        &self,
        batch: &RecordBatch,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<RecordBatch, SluiceError> {
        let n = batch.num_rows();
        let ends = self.group_exprs[group_index]
            .evaluate(batch)
            .and_then(|v| v.into_array(n))?;
        let ends = arrow::compute::cast(
            &ends,
            &arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
        )?;
        let Some(ends) = ends
            .as_any()
            .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        else {
            return Ok(batch.clone());
        };
        let open: arrow::array::BooleanArray = (0..n)
            .map(|i| Some(!(ends.is_valid(i) && ends.value(i) <= threshold_us)))
            .collect();
        Ok(arrow::compute::filter_record_batch(batch, &open)?)
    }

    /// Output rows of the given groups (those HAVING keeps, when
    /// `having`).
    fn rows_of(
        &mut self,
        schema: &SchemaRef,
        groups: &[usize],
        having: bool,
    ) -> Result<RecordBatch, SluiceError> {
        let n = groups.len();
        let mut columns: Vec<ArrayRef> = if self.group_exprs.is_empty() {
            vec![]
        } else {
            self.converter
                .convert_rows(groups.iter().map(|&g| self.keys[g].row()))?
        };
        for a in 0..self.aggs.len() {
            let values = groups
                .iter()
                .map(|&g| self.accumulators[g][a].evaluate())
                .collect::<Result<Vec<ScalarValue>, _>>()?;
            let field = self.agg_schema.field(self.group_exprs.len() + a);
            columns.push(if values.is_empty() {
                new_empty_array(field.data_type())
            } else {
                ScalarValue::iter_to_array(values)?
            });
        }
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        let agg_batch =
            RecordBatch::try_new_with_options(self.agg_schema.clone(), columns, &options)?;
        let agg_batch = match self.having.as_ref().filter(|_| having) {
            Some(h) => {
                let keep = h.evaluate(&agg_batch)?.into_array(n)?;
                let keep = keep
                    .as_any()
                    .downcast_ref::<arrow::array::BooleanArray>()
                    .ok_or_else(|| SluiceError::Internal("HAVING is not boolean".into()))?;
                compute::filter_record_batch(&agg_batch, keep)?
            }
            None => agg_batch,
        };
        let n = agg_batch.num_rows();
        let options = RecordBatchOptions::new().with_row_count(Some(n));
        match &self.output {
            None => Ok(RecordBatch::try_new_with_options(
                schema.clone(),
                agg_batch.columns().to_vec(),
                &options,
            )?),
            Some(exprs) => {
                let cols = exprs
                    .iter()
                    .map(|e| e.evaluate(&agg_batch).and_then(|v| v.into_array(n)))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(RecordBatch::try_new_with_options(
                    schema.clone(),
                    cols,
                    &options,
                )?)
            }
        }
    }

    /// The plan that turns a delta into pre-aggregation rows.
    #[cfg(test)]
    pub(super) fn input(&self) -> Arc<dyn ExecutionPlan> {
        self.input.clone()
    }

    /// For the audit: whether a fresh accumulator of the first aggregate,
    /// fed these pre-aggregation rows, changes its result or its state by
    /// reporting `state()`.
    #[cfg(test)]
    pub(super) fn state_is_consumed_by_state(
        &self,
        batches: &[RecordBatch],
    ) -> Result<bool, SluiceError> {
        let Some(agg) = self.aggs.first() else {
            return Ok(false);
        };
        let mut acc = self.new_accumulator(agg)?;
        for b in batches {
            let n = b.num_rows();
            let args = agg
                .expressions()
                .iter()
                .map(|e| e.evaluate(b).and_then(|v| v.into_array(n)))
                .collect::<Result<Vec<_>, _>>()?;
            acc.update_batch(&args)?;
        }
        let before = acc.evaluate()?;
        let first = acc.state()?;
        let second = acc.state()?;
        Ok(acc.evaluate()? != before || first != second)
    }

    pub fn groups(&self) -> usize {
        self.accumulators.len()
    }

    /// The open groups as one batch for a checkpoint: the view's current
    /// rows of those groups (readable by any Parquet reader), then the group
    /// keys and every accumulator's `state()`, from which
    /// [`AggregatePipeline::restore`] rebuilds the accumulators.
    pub(super) fn state_batch(
        &mut self,
        schema: &SchemaRef,
    ) -> Result<Option<RecordBatch>, SluiceError> {
        let n = self.accumulators.len();
        if n == 0 {
            return Ok(None);
        }
        let all: Vec<usize> = (0..n).collect();
        // One row per group: HAVING does not apply to the saved state.
        let current = self.rows_of(schema, &all, false)?;
        let mut fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let mut columns: Vec<ArrayRef> = current.columns().to_vec();
        if !self.group_exprs.is_empty() {
            let keys = self
                .converter
                .convert_rows(self.keys.iter().map(|k| k.row()))?;
            for (i, k) in keys.into_iter().enumerate() {
                fields.push(Field::new(
                    format!("__key_{i}"),
                    k.data_type().clone(),
                    true,
                ));
                columns.push(k);
            }
        }
        if self.retracting {
            fields.push(Field::new("__rows", DataType::Int64, true));
            columns.push(Arc::new(Int64Array::from(self.group_rows.clone())));
        }
        let mut captured: Vec<Vec<ArrayRef>> = Vec::with_capacity(self.aggs.len());
        for a in 0..self.aggs.len() {
            let states = self
                .accumulators
                .iter_mut()
                .map(|accs| accs[a].state())
                .collect::<Result<Vec<Vec<ScalarValue>>, _>>()?;
            let width = states.first().map(|s| s.len()).unwrap_or(0);
            let mut of_agg = Vec::with_capacity(width);
            for j in 0..width {
                let column = ScalarValue::iter_to_array(states.iter().map(|s| s[j].clone()))?;
                fields.push(Field::new(
                    format!("__state_{a}_{j}"),
                    column.data_type().clone(),
                    true,
                ));
                columns.push(column.clone());
                of_agg.push(column);
            }
            captured.push(of_agg);
        }
        // `state()` may move an accumulator's contents out (DataFusion's
        // COUNT(DISTINCT) over strings takes its set), so the live
        // accumulators are rebuilt from what was captured, exactly as a
        // restart rebuilds them: taking a checkpoint never changes the view.
        for g in 0..n {
            self.accumulators[g] = self.new_accumulators()?;
            self.merge_states(g, &captured, g)?;
        }
        Ok(Some(RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            columns,
        )?))
    }

    /// Merges row `i` of captured state columns (per aggregate, as
    /// `state_batch` writes them) into the accumulators of group `g`.
    fn merge_states(
        &mut self,
        g: usize,
        states: &[Vec<ArrayRef>],
        i: usize,
    ) -> Result<(), SluiceError> {
        for (acc, columns) in self.accumulators[g].iter_mut().zip(states) {
            let slices: Vec<ArrayRef> = columns.iter().map(|c| c.slice(i, 1)).collect();
            acc.merge_batch(&slices)?;
        }
        Ok(())
    }

    /// Rebuilds the open groups from a batch written by `state_batch`.
    pub(super) fn restore(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| SluiceError::Internal(format!("checkpoint lacks column {name}")))
        };
        let keys = (0..self.group_exprs.len())
            .map(|i| column(&format!("__key_{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut states: Vec<Vec<ArrayRef>> = Vec::new();
        for a in 0..self.aggs.len() {
            // As many state columns as this kind of accumulator has.
            let width = self.new_accumulator(&self.aggs[a])?.state()?.len();
            states.push(
                (0..width)
                    .map(|j| column(&format!("__state_{a}_{j}")))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
        let rows = if keys.is_empty() {
            None
        } else {
            Some(self.converter.convert_columns(&keys)?)
        };
        let group_rows = batch
            .column_by_name("__rows")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>().cloned());
        for i in 0..batch.num_rows() {
            let g = match &rows {
                Some(rows) => self.group_for(rows.row(i).owned())?,
                None => 0,
            };
            self.merge_states(g, &states, i)?;
            if let Some(rows) = &group_rows {
                self.group_rows[g] += rows.value(i);
            }
        }
        Ok(())
    }
}

impl CompiledView {
    /// Runs one delta (rows of the source table, with hidden columns)
    /// through the pipeline.
    /// `watermark_us` is the view's watermark before this delta: rows
    /// for windows that closed by then are dropped (a HOP row may still
    /// count in its open windows).
    pub async fn apply(
        &mut self,
        delta: Vec<RecordBatch>,
        ctx: Arc<datafusion::execution::TaskContext>,
        watermark_us: Option<i64>,
    ) -> Result<(), SluiceError> {
        if !self.graph.is_empty() {
            return self.apply_input(0, delta, Vec::new(), ctx).await;
        }
        *self.slot.lock() = delta;
        let result = self.run_insert(ctx, watermark_us).await;
        self.slot.lock().clear();
        result
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
                let out = collect(plan.clone(), ctx).await?;
                rows.extend(out.into_iter().filter(|b| b.num_rows() > 0));
                Ok(())
            }
            Pipeline::Aggregate(agg) => {
                let out = collect(agg.input.clone(), ctx).await?;
                for b in &out {
                    match (closing, watermark_us) {
                        (Some(c), Some(w)) => {
                            let open = agg.rows_of_open_windows(
                                b,
                                c.group_index,
                                w.saturating_sub(c.lateness_us),
                            )?;
                            agg.update(&open)?
                        }
                        _ => agg.update(b)?,
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
        if rows.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        if !self.graph.is_empty() {
            return self.apply_input(0, Vec::new(), rows, ctx).await;
        }
        *self.slot.lock() = rows;
        let result = self.run_retract(ctx).await;
        self.slot.lock().clear();
        result
    }

    /// Runs the pipeline over the rows in its slots, as retracted rows.
    async fn run_retract(
        &mut self,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        match &mut self.pipeline {
            Pipeline::Rows { plan, rows } => {
                let gone = collect(plan.clone(), ctx).await?;
                remove_rows(&self.schema, rows, &gone)
            }
            Pipeline::Aggregate(agg) => {
                let out = collect(agg.input.clone(), ctx).await?;
                out.iter().try_for_each(|b| agg.retract(b))
            }
        }
    }

    /// Applies a delta of source `source` (rows it inserts, rows it takes
    /// back) through the view's joins, then the pipeline.
    pub async fn apply_input(
        &mut self,
        source: usize,
        insert: Vec<RecordBatch>,
        retract: Vec<RecordBatch>,
        ctx: Arc<datafusion::execution::TaskContext>,
    ) -> Result<(), SluiceError> {
        let insert: Vec<RecordBatch> = insert.into_iter().filter(|b| b.num_rows() > 0).collect();
        let retract: Vec<RecordBatch> = retract.into_iter().filter(|b| b.num_rows() > 0).collect();
        if insert.is_empty() && retract.is_empty() {
            return Ok(());
        }
        let outputs = self
            .graph
            .propagate(source, &insert, &retract, ctx.clone())
            .await;
        let outputs = match outputs {
            Ok(o) => o,
            Err(e) => {
                self.graph.clear();
                return Err(e);
            }
        };
        self.graph.fill(source, &insert, &outputs, true);
        let result = self.run_insert(ctx.clone(), None).await;
        self.graph.clear();
        result?;
        self.graph.fill(source, &retract, &outputs, false);
        let result = self.run_retract(ctx).await;
        self.graph.clear();
        result
    }

    /// The joins' state for a checkpoint (None without joins).
    pub fn operator_state(&self) -> Result<Option<RecordBatch>, SluiceError> {
        self.graph.snapshot()
    }

    /// Puts back the joins' state from a checkpoint.
    pub fn restore_operators(&mut self, batches: &[RecordBatch]) -> Result<(), SluiceError> {
        self.graph.restore(batches)
    }

    /// Closes the windows the watermark has passed (see [`WindowClosing`]).
    pub fn close_windows(&mut self, watermark_us: i64) -> Result<(), SluiceError> {
        let (Some(closing), Pipeline::Aggregate(agg)) = (&self.closing, &mut self.pipeline) else {
            return Ok(());
        };
        let threshold = watermark_us.saturating_sub(closing.lateness_us);
        if let Some(batch) = agg.close_windows(&self.schema, closing.group_index, threshold)? {
            self.closed.push(batch);
        }
        Ok(())
    }

    /// The view's rows as of the last applied delta: final rows of closed
    /// windows, then (unless the view emits on close) the open groups.
    pub fn snapshot(&mut self) -> Result<Vec<RecordBatch>, SluiceError> {
        let mut out = self.closed.clone();
        let emit_open = !self.closing.is_some_and(|c| c.emit_on_close);
        match &mut self.pipeline {
            Pipeline::Rows { rows, .. } => {
                for b in rows.iter() {
                    out.push(RecordBatch::try_new(
                        self.schema.clone(),
                        b.columns().to_vec(),
                    )?);
                }
            }
            Pipeline::Aggregate(agg) if emit_open => out.push(agg.snapshot(&self.schema)?),
            Pipeline::Aggregate(_) => {}
        }
        Ok(out)
    }

    /// True when published rows never change: new rows are only appended.
    pub fn append_only(&self) -> bool {
        match &self.pipeline {
            Pipeline::Rows { .. } => !self.retracting,
            Pipeline::Aggregate(_) => self.closing.is_some_and(|c| c.emit_on_close),
        }
    }

    /// Rows the view has appended for good, oldest first: a filter's rows,
    /// or the final rows of closed windows, from batch `from` on. A
    /// checkpoint writes each once.
    pub fn appended_since(&self, from: usize) -> Result<Vec<RecordBatch>, SluiceError> {
        let batches = match &self.pipeline {
            // Rows that can be taken back are state, not appended for good.
            Pipeline::Rows { .. } if self.retracting => return Ok(Vec::new()),
            Pipeline::Rows { rows, .. } => rows,
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
            Pipeline::Rows { .. } if self.retracting => 0,
            Pipeline::Rows { rows, .. } => rows.len(),
            Pipeline::Aggregate(_) => self.closed.len(),
        }
    }

    /// Open aggregate state for a checkpoint (None for a filter view).
    pub fn state_batch(&mut self) -> Result<Option<RecordBatch>, SluiceError> {
        match &mut self.pipeline {
            // A filter over a keyed table rewrites its rows each epoch.
            Pipeline::Rows { rows, .. } if self.retracting => {
                if rows.is_empty() {
                    return Ok(None);
                }
                Ok(Some(compute::concat_batches(&self.schema, rows.iter())?))
            }
            Pipeline::Rows { .. } => Ok(None),
            Pipeline::Aggregate(agg) => agg.state_batch(&self.schema),
        }
    }

    /// Puts back what a checkpoint held: appended rows and open groups.
    pub fn restore(
        &mut self,
        appended: Vec<RecordBatch>,
        groups: Vec<RecordBatch>,
    ) -> Result<(), SluiceError> {
        let appended = appended.into_iter().filter(|b| b.num_rows() > 0);
        match &mut self.pipeline {
            Pipeline::Rows { rows, .. } => {
                rows.extend(appended);
                if self.retracting {
                    rows.extend(groups.into_iter().filter(|b| b.num_rows() > 0));
                }
            }
            Pipeline::Aggregate(agg) => {
                self.closed.extend(appended);
                for g in &groups {
                    agg.restore(g)?;
                }
            }
        }
        Ok(())
    }

    /// Rows of state held: groups for an aggregate, rows for a filter,
    /// and the rows the joins keep.
    pub fn state_rows(&self) -> u64 {
        let joins: u64 = self.graph.operators().map(|j| j.state_rows()).sum();
        joins
            + match &self.pipeline {
                Pipeline::Rows { rows, .. } => rows.iter().map(|b| b.num_rows() as u64).sum(),
                Pipeline::Aggregate(agg) => agg.groups() as u64,
            }
    }
}
