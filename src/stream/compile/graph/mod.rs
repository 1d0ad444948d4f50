//! The joins of a view's dataflow, and how deltas flow through them.
//!
//! A view's optimized plan is cut at each `Join` (innermost first): the
//! join's two inputs become physical plans run on each delta, as the
//! single-source pipeline runs its plan, and the join itself becomes a
//! [`JoinOperator`] whose output the plan above reads through a leaf node
//! ([`StageOutput`]) in place of the join. What remains on top, with no join
//! in it, is the view's pipeline (rows, or an aggregate).
//!
//! Every source of the view (a table) has one slot that all the scans of it
//! read. A delta of one source runs each join's inputs, innermost join
//! first, twice (the rows it inserts, then those it retracts), feeds them
//! to the join, and leaves each join's output in its leaf's slot for the
//! plans above.
//!
//! State: the joins' (see [`JoinOperator`]); the plans keep none.

mod row_stages;
mod run;

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchemaRef, JoinType};
use datafusion::execution::context::{QueryPlanner, SessionState};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{lit, Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use sluice_catalog::StatePartId;

use super::band::{
    find_band, scalar_duration_us, source_column, time_reach, trace_expr, TimeReach, TracedColumn,
};
use super::failed_rows::FailedRows;
use crate::checkpoint::{OperatorPart, RestoredPart};
use crate::error::SluiceError;
use crate::query::asof_exec::AsofSpec;
use crate::query::asof_join::AsofJoinNode;
use crate::stream::operators::aggregate::AggregatePipeline;
use crate::stream::operators::asof_join::AsofJoinOperator;
use crate::stream::operators::delta::{delta_exec, DeltaSlot};
use crate::stream::operators::dynamic_filter::DynamicFilterOperator;
use crate::stream::operators::interval_join::{BandSide, IntervalJoinOperator};
use crate::stream::operators::join::{JoinOperator, JoinSide};
use crate::stream::operators::operator::nullable;
use crate::stream::operators::operator::{Delta, Operator, OperatorStats, StatePart};
use crate::stream::operators::over_window::{CloseOnWatermark, OverWindowOperator, WindowReach};
use crate::stream::operators::top_n::{TopNOperator, TopNSpec};

/// The `source` of [`JoinGraph::propagate`] when only watermarks move.
pub const NO_SOURCE: usize = usize::MAX;

/// Where the plan above a join reads the join's output.
pub struct StageOutput {
    id: usize,
    /// "join" or "aggregate".
    kind: &'static str,
    schema: DFSchemaRef,
    slot: DeltaSlot,
    /// Per output column, what it is traced back to a source (an
    /// aggregate's `window_end` key; see [`TracedColumn::stage`]).
    traced: Vec<Option<TracedColumn>>,
    /// Per output column, how the watermarks bound its values to come
    /// (an interval join's time columns).
    reach: Vec<Option<TimeReach>>,
}

impl StageOutput {
    /// What output column `index` is, traced back to a source.
    pub fn traced(&self, index: usize) -> Option<TracedColumn> {
        self.traced.get(index).cloned().flatten()
    }

    /// How the watermarks bound output column `index`'s values to come.
    pub fn reach(&self, index: usize) -> Option<TimeReach> {
        self.reach.get(index).cloned().flatten()
    }
}

impl fmt::Debug for StageOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StageOutput({})", self.id)
    }
}

impl PartialEq for StageOutput {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for StageOutput {}

impl PartialOrd for StageOutput {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.id.partial_cmp(&other.id)
    }
}

impl Hash for StageOutput {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

impl UserDefinedLogicalNodeCore for StageOutput {
    fn name(&self) -> &str {
        "StageOutput"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "OperatorOutput: {} {}", self.kind, self.id)
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        _inputs: Vec<LogicalPlan>,
    ) -> datafusion::common::Result<Self> {
        Ok(StageOutput {
            id: self.id,
            kind: self.kind,
            schema: self.schema.clone(),
            slot: self.slot.clone(),
            traced: self.traced.clone(),
            reach: self.reach.clone(),
        })
    }
}

/// Plans [`StageOutput`] leaves as readers of their slots.
#[derive(Debug)]
pub struct ViewQueryPlanner;

struct StageOutputPlanner;

#[async_trait]
impl ExtensionPlanner for StageOutputPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn datafusion::logical_expr::UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        _physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _planning_ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> datafusion::common::Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(leaf) = node.as_any().downcast_ref::<StageOutput>() else {
            return Ok(None);
        };
        Ok(Some(delta_exec(
            Arc::new(leaf.schema.as_arrow().clone()),
            leaf.slot.clone(),
        )?))
    }
}

#[async_trait]
impl QueryPlanner for ViewQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn datafusion::catalog::Session,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(StageOutputPlanner)])
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}

/// One input of a stage: the plan that computes it per delta, and what it
/// reads.
struct StageInput {
    plan: Arc<dyn ExecutionPlan>,
    /// Sources (by index) its scans read.
    sources: Vec<usize>,
    /// Stages (by index) whose output it reads.
    stages: Vec<usize>,
    /// The plan, as EXPLAIN shows it.
    shown: String,
    /// The source whose watermark moves this input's time (an interval
    /// join's side).
    watermark: Option<usize>,
}

/// A join, or an aggregate below a join, with the plans of its inputs.
struct Stage {
    operator: Box<dyn Operator>,
    /// "join" or "aggregate".
    kind: &'static str,
    inputs: Vec<StageInput>,
    /// Where the plan above reads this stage's output.
    slot: DeltaSlot,
    /// Whether it takes rows back from inputs that never do (an outer,
    /// semi or anti join; an aggregate whose rows change).
    retracts: bool,
}

/// A band's time column on one input (see [`JoinGraph::band_time`]).
struct BandTime {
    /// The source whose watermark moves it, and its column there.
    source: usize,
    column: String,
    /// The column's index in the input.
    index: usize,
    /// The TUMBLE window it is the start or end of, if it is one.
    window_us: Option<i64>,
    /// It is the window's end.
    end: bool,
    /// The aggregate stage whose `window_end` key it is.
    stage: Option<usize>,
}

/// The joins of a view (and the aggregates below them), innermost first.
pub struct JoinGraph {
    stages: Vec<Stage>,
    /// The slot of each source of the view.
    source_slots: Vec<DeltaSlot>,
    /// Source names, to find which source a scan reads.
    source_names: Vec<String>,
    /// Each source's event time: its WATERMARK column, if it has one and
    /// never takes rows back (an append-only table).
    source_times: Vec<Option<String>>,
    /// The view's allowed lateness.
    lateness_us: i64,
    /// The sources and columns of interval and window joins' bands (with
    /// the window size of a window join): rows behind the watermark there
    /// are late.
    bands: Vec<(usize, String, Option<i64>)>,
    /// Whether each source may take rows back (a keyed table, a view whose
    /// rows change in place).
    source_retracts: Vec<bool>,
    /// The bounds filters put on `ROW_NUMBER()` outputs, by the window
    /// function's output name: how many rows each Top-N gives.
    row_number_limits: Vec<(String, usize)>,
    /// The query's own ORDER BY ... FETCH FIRST n ROWS WITH TIES: the first
    /// Top-N lifted (the outermost) keeps the rows that tie with its last.
    ties_pending: bool,
    /// Aggregates lifted so far, as the query wrote them, each with the
    /// entries of `lifted_stages` its lifting added and the plan reading
    /// its stage: the same aggregate written again reads that stage.
    lifted_aggregates: Vec<LiftedAggregate>,
    /// The stage each lifted operator is, in lifting order: how stages
    /// were numbered before a repeated aggregate shared its stage (one per
    /// lifted operator), which checkpoints written then still use.
    lifted_stages: Vec<usize>,
    /// The next capture writes every stage whole: the state came from a
    /// checkpoint numbered otherwise.
    capture_whole_next: bool,
    /// The operators' rows before any input (a global aggregate's one
    /// row) have not gone up yet: the view did not start from a
    /// checkpoint, and nothing has run through the graph.
    unstarted: bool,
    /// The view says `EMIT ON WINDOW CLOSE`: an over-window emits its rows
    /// once final.
    emit_on_close: bool,
    /// The stage that emits rows only once the watermark makes them final
    /// (an over-window under `EMIT ON WINDOW CLOSE`).
    closing_stage: Option<usize>,
    /// Rows of the sources on which a plan of the view fails.
    failed: parking_lot::Mutex<FailedRows>,
}

/// An aggregate below a join or another aggregate, lifted as a stage.
struct LiftedAggregate {
    aggregate: datafusion::logical_expr::Aggregate,
    /// Its entries in [`JoinGraph::lifted_stages`] (its input's stages,
    /// then its own).
    lifted: std::ops::Range<usize>,
    output: LogicalPlan,
}

impl JoinGraph {
    pub fn new(source_names: Vec<String>, source_slots: Vec<DeltaSlot>) -> JoinGraph {
        JoinGraph {
            stages: Vec::new(),
            source_slots,
            source_names,
            source_times: Vec::new(),
            lateness_us: 0,
            bands: Vec::new(),
            source_retracts: Vec::new(),
            row_number_limits: Vec::new(),
            ties_pending: false,
            lifted_aggregates: Vec::new(),
            lifted_stages: Vec::new(),
            capture_whole_next: false,
            unstarted: true,
            emit_on_close: false,
            closing_stage: None,
            failed: Default::default(),
        }
    }

    /// The view says `EMIT ON WINDOW CLOSE`.
    pub fn with_emit_on_close(mut self, emit_on_close: bool) -> JoinGraph {
        self.emit_on_close = emit_on_close;
        self
    }

    /// Whether the graph's last stage emits rows only once final (see
    /// `closing_stage`): the view's rows are then appended for good.
    pub fn last_stage_closes(&self) -> bool {
        self.closing_stage.is_some() && self.closing_stage == self.stages.len().checked_sub(1)
    }

    /// Whether the operators' rows before any input are still to be sent
    /// up (by the next [`JoinGraph::propagate`]).
    pub fn unstarted(&self) -> bool {
        self.unstarted && !self.stages.is_empty()
    }

    /// The query ends in `FETCH FIRST n ROWS WITH TIES`.
    pub fn with_ties(mut self, ties: bool) -> JoinGraph {
        self.ties_pending = ties;
        self
    }

    /// Which sources may take rows back: what a Top-N must keep.
    pub fn with_retracting_sources(mut self, retracts: Vec<bool>) -> JoinGraph {
        self.source_retracts = retracts;
        self
    }

    /// Each source's watermarked time column (see `source_times`), and
    /// the view's allowed lateness: what interval joins need.
    pub fn with_source_times(mut self, times: Vec<Option<String>>, lateness_us: i64) -> JoinGraph {
        self.source_times = times;
        self.lateness_us = lateness_us;
        self
    }

    pub fn lateness_us(&self) -> i64 {
        self.lateness_us
    }

    /// The sources and time columns whose late rows interval joins must
    /// not see.
    pub fn bands(&self) -> &[(usize, String, Option<i64>)] {
        &self.bands
    }

    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Each stage's counters, innermost first.
    pub fn stats(&self) -> Vec<OperatorStats> {
        self.stages.iter().map(|s| s.operator.stats()).collect()
    }

    /// Whether some stage takes rows back even when its inputs never do.
    pub fn retracts(&self) -> bool {
        self.stages.iter().any(|s| s.retracts)
    }

    /// The stages as `EXPLAIN MATERIALIZED VIEW` shows them, outermost
    /// first.
    pub fn explain(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (j, stage) in self.stages.iter().enumerate().rev() {
            let keeps = match stage.kind {
                "join" => "keeps every live row of both inputs",
                "interval join" => {
                    "keeps each input's rows until the other input's watermark passes their band"
                }
                "window join" => "keeps each input's rows until the other input closes their window",
                "top-n" => "keeps each group's rows in order (only the first N where no input takes rows back)",
                // Its description says what it keeps.
                "asof join" => "",
                _ => "keeps its groups; emits the changed groups' rows",
            };
            let description = stage.operator.stats().description;
            lines.push(match keeps.is_empty() {
                true => format!("{} {j}: {description}", stage.kind),
                false => format!("{} {j}: {description}; {keeps}", stage.kind),
            });
            let sides: &[&str] = match stage.inputs.len() {
                2 => &["left input", "right input"],
                _ => &["input"],
            };
            for (side, input) in sides.iter().zip(&stage.inputs) {
                lines.push(format!("  {side}, computed per delta:"));
                lines.extend(input.shown.lines().map(|l| format!("    {l}")));
            }
        }
        lines
    }

    /// Replaces every join of `plan`, every aggregate below a join or
    /// another aggregate, and every Top-N, by a [`StageOutput`] leaf and a
    /// stage of this graph, innermost first.
    pub fn lift_joins<'a>(
        &'a mut self,
        plan: LogicalPlan,
        state: &'a SessionState,
        under_join: bool,
    ) -> futures::future::BoxFuture<'a, Result<LogicalPlan, SluiceError>> {
        Box::pin(async move {
            let join = match plan {
                LogicalPlan::Join(join) => join,
                LogicalPlan::Aggregate(aggregate) if under_join => {
                    return self.lift_aggregate(aggregate, state).await;
                }
                LogicalPlan::Window(window) => return self.lift_row_number(window, state).await,
                LogicalPlan::Limit(limit) => return self.lift_limit(limit, state).await,
                LogicalPlan::Sort(sort) if sort.fetch.is_some() => {
                    let limit = sort.fetch.unwrap_or_default();
                    return self.lift_top_n(sort, 0, limit, state).await;
                }
                LogicalPlan::Extension(e) if e.node.as_any().is::<AsofJoinNode>() => {
                    let Some(node) = e.node.as_any().downcast_ref::<AsofJoinNode>() else {
                        return Err(bad_state("an ASOF join"));
                    };
                    return self.lift_asof(node.clone(), state).await;
                }
                plan => {
                    if let LogicalPlan::Filter(filter) = &plan {
                        self.note_row_number_limits(filter);
                    }
                    if let LogicalPlan::Projection(projection) = &plan {
                        if let Some(lifted) = self.lift_dynamic_filter(projection, state).await? {
                            return Ok(lifted);
                        }
                    }
                    let inputs = plan.inputs().into_iter().cloned().collect::<Vec<_>>();
                    if inputs.is_empty() {
                        return Ok(plan);
                    }
                    // An aggregate below the view's aggregate is a stage
                    // too, whose changing rows the one above takes in.
                    let below = under_join || matches!(plan, LogicalPlan::Aggregate(_));
                    let mut lifted = Vec::with_capacity(inputs.len());
                    for input in inputs {
                        lifted.push(self.lift_joins(input, state, below).await?);
                    }
                    return Ok(plan.with_new_exprs(plan.expressions(), lifted)?);
                }
            };
            let left = self
                .lift_joins(join.left.as_ref().clone(), state, true)
                .await?;
            let right = self
                .lift_joins(join.right.as_ref().clone(), state, true)
                .await?;
            let band = join
                .filter
                .as_ref()
                .and_then(|f| find_band(f, left.schema(), right.schema()))
                .filter(|b| {
                    [(&left, &b.left), (&right, &b.right)].iter().all(|(p, c)| {
                        p.schema()
                            .qualified_field_from_column(c)
                            .is_ok_and(|(_, f)| f.data_type().is_temporal())
                    })
                });
            let window = self.window_pair(&join, &left, &right)?;
            let bound = match (band, window) {
                (Some(b), _) => Some((b.left, b.right, (b.lo_us, b.hi_us), None)),
                (None, Some((l, r, size))) => Some((l, r, (0, 0), Some(size))),
                (None, None) => None,
            };
            // A join with no equality whose one input has one row at most
            // (a scalar subquery, decorrelated): every row of the other
            // input meets that row, under one constant key.
            let single_row = join.on.is_empty()
                && [&join.left, &join.right]
                    .iter()
                    .any(|side| at_most_one_row(side));
            check_join(&join, single_row)?;
            let (left_keys, right_keys): (Vec<Expr>, Vec<Expr>) = match single_row {
                true => (vec![lit(true)], vec![lit(true)]),
                false => join.on.iter().cloned().unzip(),
            };
            let (mut left_input, left_schema, left_keys) =
                self.side(&left, &left_keys, state).await?;
            let (mut right_input, right_schema, right_keys) =
                self.side(&right, &right_keys, state).await?;
            // Over both inputs' columns: a semi or anti join's own schema
            // has one side's alone (and is refused with a filter below).
            let filter = match &join.filter {
                Some(f) => {
                    let both = join.left.schema().join(join.right.schema())?;
                    Some(state.create_physical_expr(f.clone(), &both)?)
                }
                None => None,
            };
            let nulls_match =
                join.null_equality == datafusion::common::NullEquality::NullEqualsNull;
            let equals = if nulls_match {
                "IS NOT DISTINCT FROM"
            } else {
                "="
            };
            let description = format!(
                "{} JOIN ON {}{}",
                join_kind(join.join_type),
                match join.on.is_empty() {
                    true => "true".to_string(),
                    false => join
                        .on
                        .iter()
                        .map(|(l, r)| format!("{l} {equals} {r}"))
                        .collect::<Vec<_>>()
                        .join(" AND "),
                },
                join.filter
                    .as_ref()
                    .map(|f| format!(" AND {f}"))
                    .unwrap_or_default()
            );
            let schema = Arc::new(join.schema.as_arrow().clone());
            if let Some((left_time, right_time, band, window)) = bound {
                let left_time = self.band_time(&left, &left_time)?;
                let right_time = self.band_time(&right, &right_time)?;
                left_input.watermark = Some(left_time.source);
                right_input.watermark = Some(right_time.source);
                let mut operator = IntervalJoinOperator::new(
                    join.join_type,
                    BandSide::new(left_schema, left_keys, left_time.index)?,
                    BandSide::new(right_schema, right_keys, right_time.index)?,
                    band,
                    filter,
                    self.lateness_us,
                    schema,
                    description,
                )?;
                if let Some(size) = window {
                    operator = operator.windowed(size);
                }
                // A changing side keyed by window_start: its rows change
                // until a window after their time, so its horizon is a
                // window (less 1 µs) behind the watermark.
                for (side, time) in [&left_time, &right_time].into_iter().enumerate() {
                    if let (Some(_), false, Some(size)) = (time.stage, time.end, time.window_us) {
                        operator = operator.reaching_back(side, size - 1);
                    }
                }
                let operator =
                    operator.changing([left_time.stage.is_some(), right_time.stage.is_some()])?;
                for time in [&left_time, &right_time] {
                    // A windowed aggregate's rows: its windows close by the
                    // source's watermark, and rows of a closed window are
                    // late for the whole view.
                    let late_window = match time.stage {
                        Some(j) => {
                            self.stages[j].inputs[0].watermark = Some(time.source);
                            time.window_us
                        }
                        None => window,
                    };
                    self.bands
                        .push((time.source, time.column.clone(), late_window));
                }
                // Its time columns' values to come: a new row of one side
                // may pair with the other side's rows as far back as the
                // band reaches.
                let mut reach = vec![None; join.schema.fields().len()];
                if window.is_none() {
                    let width = left.schema().fields().len();
                    let plain = |r: Option<TimeReach>| r.filter(|r| r.window.is_none());
                    let left_reach = plain(self.reach_of(&left, left_time.index));
                    let right_reach = plain(self.reach_of(&right, right_time.index));
                    if let (Some(l), Some(r)) = (left_reach, right_reach) {
                        let shifted = |h: &[(usize, i64)], by: i64| {
                            h.iter()
                                .map(|(s, o)| (*s, o.saturating_add(by)))
                                .collect::<Vec<_>>()
                        };
                        let joined = |own: &[(usize, i64)], other: Vec<(usize, i64)>| TimeReach {
                            horizon: own.iter().copied().chain(other).collect(),
                            window: None,
                        };
                        // right.t - left.t lies in [lo, hi]. A column of a
                        // side bounded as its time is (the time itself, or
                        // a TUMBLE window of it: one WATERMARK column per
                        // source) is bounded so after the join too.
                        let sides = [
                            (&left, 0, &l.horizon, shifted(&r.horizon, -band.1)),
                            (&right, width, &r.horizon, shifted(&l.horizon, band.0)),
                        ];
                        for (plan, at, own, other) in sides {
                            for i in 0..plan.schema().fields().len() {
                                let Some(column) = self.reach_of(plan, i) else {
                                    continue;
                                };
                                if column.horizon != *own {
                                    continue;
                                }
                                if let Some(slot) = reach.get_mut(at + i) {
                                    *slot = Some(TimeReach {
                                        window: column.window,
                                        ..joined(own, other.clone())
                                    });
                                }
                            }
                        }
                    }
                }
                return Ok(self.push_stage(
                    Box::new(operator),
                    match window {
                        Some(_) => "window join",
                        None => "interval join",
                    },
                    vec![left_input, right_input],
                    false,
                    join.schema.clone(),
                    Vec::new(),
                    reach,
                ));
            }
            let operator = JoinOperator::new(
                join.join_type,
                JoinSide::new(left_schema, left_keys)?.matching_nulls(nulls_match),
                JoinSide::new(right_schema, right_keys)?.matching_nulls(nulls_match),
                filter,
                schema,
                description,
            )?;
            Ok(self.push_stage(
                Box::new(operator),
                "join",
                vec![left_input, right_input],
                join.join_type != JoinType::Inner,
                join.schema.clone(),
                Vec::new(),
                Vec::new(),
            ))
        })
    }

    /// An ASOF join: a stage of [`AsofJoinOperator`]. A side whose time
    /// is its table's WATERMARK column moves with that watermark (its late
    /// rows are dropped); under `EMIT ON WINDOW CLOSE` the right side must
    /// have one, and the operator is the stage that closes.
    async fn lift_asof(
        &mut self,
        node: AsofJoinNode,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let left = self.lift_joins(node.left.clone(), state, true).await?;
        let right = self.lift_joins(node.right.clone(), state, true).await?;
        let (mut left_input, left_schema, _) = self.side(&left, &[], state).await?;
        let (mut right_input, right_schema, _) = self.side(&right, &[], state).await?;
        let spec = AsofSpec::plan(&node, left.schema(), right.schema(), |e, s| {
            state.create_physical_expr(e.clone(), s)
        })?;
        // The source and column whose watermark bounds a side's time.
        let watermarked = |plan: &LogicalPlan, time: &Expr| -> Option<(usize, String)> {
            let mut e = time;
            while let Expr::Cast(c) = e {
                e = &c.expr;
            }
            let Expr::Column(c) = e else { return None };
            let i = plan.schema().index_of_column(c).ok()?;
            let t = source_column(plan, i)?;
            if t.window_us.is_some() || t.stage.is_some() {
                return None;
            }
            Some((self.marked(&t.source, &t.column)?, t.column))
        };
        let marks = [
            watermarked(&left, &node.left_time),
            watermarked(&right, &node.right_time),
        ];
        let retracting = [
            self.input_retracts(&left_input),
            self.input_retracts(&right_input),
        ];
        if self.emit_on_close && (marks[1].is_none() || retracting[1]) {
            return Err(SluiceError::Unsupported(
                "EMIT ON WINDOW CLOSE over an ASOF JOIN needs the right input's time to be an append-only table's WATERMARK column: the watermark is what makes a probe's match final; leave out EMIT ON WINDOW CLOSE (the view then emits on update)".into(),
            ));
        }
        for (input, mark) in [&mut left_input, &mut right_input].into_iter().zip(&marks) {
            if let Some((source, column)) = mark {
                input.watermark = Some(*source);
                self.bands.push((*source, column.clone(), None));
            }
        }
        let operator = AsofJoinOperator::new(
            Arc::new(spec),
            left_schema,
            right_schema,
            Arc::new(node.schema.as_arrow().clone()),
            self.emit_on_close,
            self.lateness_us,
            retracting,
        )?;
        if self.emit_on_close {
            self.closing_stage = Some(self.stages.len());
        }
        Ok(self.push_stage(
            Box::new(operator),
            "asof join",
            vec![left_input, right_input],
            !self.emit_on_close,
            node.schema.clone(),
            Vec::new(),
            Vec::new(),
        ))
    }

    /// A window join's pair of keys: an equality of the `window_start`s
    /// of two TUMBLEs (over each input's source), and their size.
    /// Refuses two windows of different sizes.
    fn window_pair(
        &self,
        join: &datafusion::logical_expr::Join,
        left: &LogicalPlan,
        right: &LogicalPlan,
    ) -> Result<Option<(Column, Column, i64)>, SluiceError> {
        let window = |plan: &LogicalPlan, e: &Expr| {
            let Expr::Column(c) = e else { return None };
            let index = plan.schema().index_of_column(c).ok()?;
            let traced = source_column(plan, index).filter(|t| !t.end && t.stage.is_none())?;
            let size = traced.window_us?;
            Some((c.clone(), size))
        };
        for (l, r) in &join.on {
            let (Some((lc, ls)), Some((rc, rs))) = (window(left, l), window(right, r)) else {
                continue;
            };
            if ls != rs {
                return Err(SluiceError::Unsupported(format!(
                    "a window join needs windows of one size on both inputs: {lc} is a window of {} and {rc} one of {}; a row could otherwise match rows of windows that never close together",
                    show_duration(ls),
                    show_duration(rs)
                )));
            }
            return Ok(Some((lc, rc, ls)));
        }
        Ok(None)
    }

    /// The source and column a band's time `column` of input `plan` is
    /// (or, for a window join, bins): an append-only table's WATERMARK
    /// column, so that the watermark bounds what can still match, or the
    /// `window_start` or `window_end` key of an aggregate stage over one
    /// (whose rows change until the watermark passes the window's end).
    fn band_time(&self, plan: &LogicalPlan, column: &Column) -> Result<BandTime, SluiceError> {
        let index = plan.schema().index_of_column(column)?;
        let traced = source_column(plan, index).and_then(|t| {
            let source = self.source_names.iter().position(|s| *s == t.source)?;
            Some((source, t))
        });
        let refuse = |why: String, hint: &str| {
            Err(SluiceError::Unsupported(format!(
                "the join's time band on {column} needs {why}: the watermark is what lets the join drop rows the other input can no longer match{hint}"
            )))
        };
        let Some((source, traced)) = traced else {
            return refuse(
                format!(
                    "{column} to be a column of a table, passed through unchanged, or the window_start or window_end of a TUMBLE over one that an aggregate groups by (HOP windows are not supported there)"
                ),
                "",
            );
        };
        match self.source_times.get(source).cloned().flatten() {
            Some(mark) if mark == traced.column => Ok(BandTime {
                source,
                column: traced.column,
                index,
                window_us: traced.window_us,
                end: traced.end,
                stage: traced.stage,
            }),
            Some(_) | None => {
                let table = &self.source_names[source];
                refuse(
                    format!(
                        "a watermark on {table}.{}, an append-only table's WATERMARK column (a keyed table or a view has none)",
                        traced.column
                    ),
                    " (declare WATERMARK FOR <column> AS <column> - INTERVAL '...' in CREATE TABLE)",
                )
            }
        }
    }

    /// An aggregate below a join: a stage whose output is the rows of the
    /// groups each delta changed (their old rows taken back). A group key
    /// that is the `window_end` or `window_start` of a TUMBLE over an
    /// append-only table's WATERMARK column is traced as such, so that an
    /// interval join above can bound its state by it (see
    /// [`JoinGraph::band_time`]); its windows then close by the watermark.
    async fn lift_aggregate(
        &mut self,
        aggregate: datafusion::logical_expr::Aggregate,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        if let Some(shared) = self.shared_aggregate(&aggregate)? {
            return Ok(shared);
        }
        let first = self.lifted_stages.len();
        let original = aggregate.clone();
        let output = self.lift_new_aggregate(aggregate, state).await?;
        self.lifted_aggregates.push(LiftedAggregate {
            aggregate: original,
            lifted: first..self.lifted_stages.len(),
            output: output.clone(),
        });
        Ok(output)
    }

    /// The plan reading the stage of an aggregate lifted before that
    /// computes what `aggregate` does: the same input, grouped by the same
    /// keys (in any order), computing its aggregates among others (the
    /// optimizer drops those a query does not read). A projection puts the
    /// columns in this one's order. Nexmark's q5 counts each auction's
    /// bids per window twice, once for the rows and once for the maximum.
    fn shared_aggregate(
        &mut self,
        aggregate: &datafusion::logical_expr::Aggregate,
    ) -> Result<Option<LogicalPlan>, SluiceError> {
        let same_keys = |earlier: &datafusion::logical_expr::Aggregate| {
            let keys = &aggregate.group_expr;
            if keys.len() != earlier.group_expr.len()
                || keys.iter().any(|k| matches!(k, Expr::GroupingSet(_)))
            {
                return (keys == &earlier.group_expr).then(|| (0..keys.len()).collect());
            }
            distinct_positions(keys, &earlier.group_expr)
        };
        let Some((order, computed, lifted, output)) = self.lifted_aggregates.iter().find_map(|l| {
            if l.aggregate.input != aggregate.input {
                return None;
            }
            let order: Vec<usize> = same_keys(&l.aggregate)?;
            let computed = distinct_positions(&aggregate.aggr_expr, &l.aggregate.aggr_expr)?;
            Some((order, computed, l.lifted.clone(), l.output.clone()))
        }) else {
            return Ok(None);
        };
        // Numbered as before sharing, this aggregate and its input's
        // stages were stages of their own, holding the same state.
        let again = self.lifted_stages[lifted].to_vec();
        self.lifted_stages.extend(again);
        let width = output.schema().fields().len();
        let keys_out = aggregate.schema.fields().len() - computed.len();
        let from: Vec<usize> = (0..keys_out)
            .map(|i| order.get(i).copied().unwrap_or(i))
            .chain(computed.iter().map(|&a| keys_out + a))
            .collect();
        if from.len() == width && from.iter().enumerate().all(|(i, &k)| i == k) {
            return Ok(Some(output));
        }
        let columns = from
            .iter()
            .enumerate()
            .map(|(i, &from)| {
                let (q, f) = output.schema().qualified_field(from);
                let (aq, af) = aggregate.schema.qualified_field(i);
                Expr::Column(Column::new(q.cloned(), f.name()))
                    .alias_qualified(aq.cloned(), af.name())
            })
            .collect();
        let projection = datafusion::logical_expr::Projection::try_new(columns, Arc::new(output))?;
        Ok(Some(LogicalPlan::Projection(projection)))
    }

    async fn lift_new_aggregate(
        &mut self,
        aggregate: datafusion::logical_expr::Aggregate,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let input = self
            .lift_joins(aggregate.input.as_ref().clone(), state, true)
            .await?;
        let aggregate = datafusion::logical_expr::Aggregate::try_new(
            Arc::new(input.clone()),
            aggregate.group_expr.clone(),
            aggregate.aggr_expr.clone(),
        )?;
        // Its rows change in place, so it takes rows back like a keyed
        // table: retractable accumulators.
        let mut operator = AggregatePipeline::new(state, &aggregate, None, true).await?;
        operator.emit_changes(Arc::new(aggregate.schema.as_arrow().clone()));
        let id = self.stages.len();
        let mut traced = vec![None; aggregate.schema.fields().len()];
        let window_key = aggregate.group_expr.iter().enumerate().find_map(|(i, e)| {
            let t = trace_expr(e, &input)?;
            let source = self.source_names.iter().position(|s| *s == t.source)?;
            let marked = self.source_times.get(source).cloned().flatten();
            (t.stage.is_none() && t.window_us.is_some() && marked == Some(t.column.clone()))
                .then_some((i, t))
        });
        if let Some((i, t)) = window_key {
            let offset = match t.end {
                true => 0,
                false => t.window_us.unwrap_or_default(),
            };
            operator.close_windows_silently(i, self.lateness_us, offset);
            traced[i] = Some(TracedColumn {
                stage: Some(id),
                ..t
            });
        }
        let (stage_input, _, _) = self.side(&input, &[], state).await?;
        let stage_input = StageInput {
            plan: operator.input.clone(),
            ..stage_input
        };
        Ok(self.push_stage(
            Box::new(operator),
            "aggregate",
            vec![stage_input],
            true,
            aggregate.schema.clone(),
            traced,
            Vec::new(),
        ))
    }

    /// Whether rows reaching a stage through `input` may be taken back:
    /// it reads a source that takes rows back, or a stage that does.
    fn input_retracts(&self, input: &StageInput) -> bool {
        input
            .sources
            .iter()
            .any(|&s| self.source_retracts.get(s).copied().unwrap_or(true))
            || input.stages.iter().any(|&j| {
                let stage = &self.stages[j];
                stage.retracts || stage.inputs.iter().any(|i| self.input_retracts(i))
            })
    }

    /// Adds a stage; `traced` and `reach` describe its output columns
    /// (what each is traced back to, how the watermarks bound it).
    #[allow(clippy::too_many_arguments)]
    fn push_stage(
        &mut self,
        operator: Box<dyn Operator>,
        kind: &'static str,
        inputs: Vec<StageInput>,
        retracts: bool,
        schema: DFSchemaRef,
        traced: Vec<Option<TracedColumn>>,
        reach: Vec<Option<TimeReach>>,
    ) -> LogicalPlan {
        let id = self.stages.len();
        self.lifted_stages.push(id);
        let slot = DeltaSlot::default();
        self.stages.push(Stage {
            operator,
            kind,
            inputs,
            slot: slot.clone(),
            retracts,
        });
        LogicalPlan::Extension(Extension {
            node: Arc::new(StageOutput {
                id,
                kind,
                schema,
                slot,
                traced,
                reach,
            }),
        })
    }

    /// The source index of `source`'s WATERMARK column `column`, when it
    /// has one there.
    pub fn marked(&self, source: &str, column: &str) -> Option<usize> {
        let s = self.source_names.iter().position(|n| n == source)?;
        (self.source_times.get(s).cloned().flatten().as_deref() == Some(column)).then_some(s)
    }

    /// [`time_reach`] of an output column of a plan over this graph's
    /// stages.
    pub fn reach_of(&self, plan: &LogicalPlan, index: usize) -> Option<TimeReach> {
        time_reach(plan, index, &|s, c| self.marked(s, c))
    }

    /// What the horizon of `reach` is, as `EXPLAIN` shows it.
    pub fn show_horizon(&self, horizon: &[(usize, i64)]) -> String {
        horizon
            .iter()
            .map(|(s, offset)| {
                let name = self.source_names.get(*s).map(String::as_str).unwrap_or("?");
                match offset {
                    0 => format!("the watermark of {name}"),
                    o if *o < 0 => format!("the watermark of {name} less {}", show_duration(-o)),
                    o => format!("the watermark of {name} plus {}", show_duration(*o)),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    async fn side(
        &self,
        plan: &LogicalPlan,
        keys: &[Expr],
        state: &SessionState,
    ) -> Result<(StageInput, SchemaRef, Vec<Arc<dyn PhysicalExpr>>), SluiceError> {
        let physical = state.create_physical_plan(plan).await?;
        let keys = keys
            .iter()
            .map(|k| state.create_physical_expr(k.clone(), plan.schema()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sources = Vec::new();
        let mut joins = Vec::new();
        plan.apply(|n| {
            match n {
                LogicalPlan::TableScan(scan) => {
                    let name = scan.table_name.table();
                    if let Some(i) = self.source_names.iter().position(|s| s == name) {
                        sources.push(i);
                    }
                }
                LogicalPlan::Extension(e) => {
                    if let Some(leaf) = e.node.as_any().downcast_ref::<StageOutput>() {
                        joins.push(leaf.id);
                    }
                }
                _ => {}
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok((
            StageInput {
                plan: physical.clone(),
                sources,
                stages: joins,
                shown: plan.display_indent().to_string(),
                watermark: None,
            },
            physical.schema(),
            keys,
        ))
    }
}

/// Where each of `wanted` stands in `among`, each in its own place; None
/// when one is missing.
fn distinct_positions(wanted: &[Expr], among: &[Expr]) -> Option<Vec<usize>> {
    let at: Vec<usize> = wanted
        .iter()
        .map(|w| among.iter().position(|e| e == w))
        .collect::<Option<_>>()?;
    let mut seen = at.clone();
    seen.sort_unstable();
    seen.dedup();
    (seen.len() == at.len()).then_some(at)
}

/// A window size as an interval: "5 seconds", "1500 milliseconds".
fn show_duration(us: i64) -> String {
    match (us % 1_000_000, us % 1000) {
        (0, _) => format!("{} seconds", us / 1_000_000),
        (_, 0) => format!("{} milliseconds", us / 1000),
        _ => format!("{us} microseconds"),
    }
}

/// A join type as SQL names it.
fn join_kind(t: JoinType) -> &'static str {
    match t {
        JoinType::Inner => "INNER",
        JoinType::Left => "LEFT",
        JoinType::Right => "RIGHT",
        JoinType::Full => "FULL",
        JoinType::LeftSemi => "LEFT SEMI",
        JoinType::LeftAnti => "LEFT ANTI",
        JoinType::RightSemi => "RIGHT SEMI",
        JoinType::RightAnti => "RIGHT ANTI",
        JoinType::LeftMark => "LEFT MARK",
        JoinType::RightMark => "RIGHT MARK",
    }
}

fn bad_state(what: &str) -> SluiceError {
    SluiceError::Internal(format!("the checkpoint's join state is damaged: {what}"))
}

/// Whether `plan` gives one row at most: a global aggregate (no GROUP BY)
/// under projections, filters and aliases.
fn at_most_one_row(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(a) => a.group_expr.is_empty(),
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.inputs().first().is_some_and(|i| at_most_one_row(i))
        }
        _ => false,
    }
}

/// Refuses joins the dataflow cannot keep exact, naming what to change.
/// `single_row`: one input has one row at most (no equality needed).
fn check_join(join: &datafusion::logical_expr::Join, single_row: bool) -> Result<(), SluiceError> {
    let refuse = |m: String| Err(SluiceError::Unsupported(m));
    if join.on.is_empty() && !single_row {
        return refuse(
            "a join in a materialized view needs an equality between columns of its two inputs (ON a.k = b.k); cross joins and joins on inequalities alone are not supported".into(),
        );
    }
    // An input is computed afresh from each delta, but for its joins and
    // aggregates, which are stages of their own.
    for input in [&join.left, &join.right] {
        let mut bad = None;
        input.apply(|n| {
            let what = match n {
                LogicalPlan::Window(_) => "a window function",
                LogicalPlan::Limit(_) | LogicalPlan::Sort(_) => "ORDER BY or LIMIT",
                _ => return Ok(TreeNodeRecursion::Continue),
            };
            bad = Some(what);
            Ok(TreeNodeRecursion::Stop)
        })?;
        if let Some(what) = bad {
            return refuse(format!(
                "a join over {what} is not supported in materialized views yet"
            ));
        }
    }
    if join.null_aware {
        return refuse(
            "NOT IN (subquery) over a column that may be NULL is not supported in materialized views; use NOT EXISTS, or make the column NOT NULL".into(),
        );
    }
    if matches!(join.join_type, JoinType::LeftMark | JoinType::RightMark) {
        return refuse(
            "this subquery (IN or EXISTS under OR or NOT of a nullable column) is not supported in materialized views; write it as a join".into(),
        );
    }
    let mut changing = None;
    for e in join
        .on
        .iter()
        .flat_map(|(l, r)| [l, r])
        .chain(join.filter.iter())
    {
        if let Some(f) = not_immutable(e, datafusion::logical_expr::Volatility::Immutable)? {
            changing = Some(f);
        }
    }
    if let Some(f) = changing {
        return refuse(format!(
            "{f}() in a join condition of a materialized view gives a different answer each time it runs, so rows could not be taken back exactly; compute it in the source table instead"
        ));
    }
    Ok(())
}

/// The first function in `e` whose volatility is above `allowed`.
fn not_immutable(
    e: &Expr,
    allowed: datafusion::logical_expr::Volatility,
) -> Result<Option<String>, SluiceError> {
    let mut found = None;
    e.apply(|n| {
        if let Expr::ScalarFunction(f) = n {
            if f.func.signature().volatility > allowed {
                found = Some(f.func.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// Refuses volatile functions (`random()`) anywhere in a view with joins:
/// a row taken back must compute to the row that was added.
pub fn check_volatile(plan: &LogicalPlan) -> Result<(), SluiceError> {
    let mut found = None;
    plan.apply(|n| {
        for e in n.expressions() {
            let f = not_immutable(&e, datafusion::logical_expr::Volatility::Stable)
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
            if let Some(f) = f {
                found = Some(f);
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match found {
        Some(f) => Err(SluiceError::Unsupported(format!(
            "{f}() gives a different answer each time it runs; a materialized view with joins cannot use it, since rows it takes back must compute as they did when added"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BinaryArray, Int64Array, UInt32Array, UInt8Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::Column;

    use super::*;

    /// A graph of one inner join of (k, v) with (k, w) on k.
    fn one_join() -> JoinGraph {
        let side = |name: &str| {
            let schema = Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, true),
                Field::new(name, DataType::Int64, true),
            ]));
            JoinSide::new(schema, vec![Arc::new(Column::new("k", 0))]).unwrap()
        };
        let (left, right) = (side("v"), side("w"));
        let schema = Arc::new(Schema::new(
            [
                left.schema.fields().to_vec(),
                right.schema.fields().to_vec(),
            ]
            .concat(),
        ));
        let join =
            JoinOperator::new(JoinType::Inner, left, right, None, schema, "ON k".into()).unwrap();
        let mut graph = JoinGraph::new(Vec::new(), Vec::new());
        graph.stages.push(Stage {
            operator: Box::new(join),
            kind: "join",
            inputs: Vec::new(),
            slot: DeltaSlot::default(),
            retracts: false,
        });
        graph
    }

    fn rows(name: &str, k: Vec<i64>, v: Vec<i64>) -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
            (name, Arc::new(Int64Array::from(v)) as ArrayRef),
        ])
        .unwrap()
    }

    fn ipc(batch: &RecordBatch) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    /// A checkpoint numbered before repeated aggregates shared a stage
    /// (one stage per lifted operator) restores into today's stages: a
    /// copy's parts are skipped (the first holds the same), and the next
    /// capture writes every stage whole, in today's numbers.
    #[test]
    fn restores_a_checkpoint_numbered_before_stages_were_shared() {
        let mut graph = one_join();
        let second = one_join().stages.pop().unwrap();
        graph.stages.push(second);
        // Lifted as stage 0, stage 0 again (shared), then stage 1.
        graph.lifted_stages = vec![0, 0, 1];
        let left = rows("v", vec![1, 2], vec![10, 20]);
        let right = rows("w", vec![1], vec![5]);
        let part = |stage, part, rows: &RecordBatch| RestoredPart {
            id: Some(StatePartId { stage, part }),
            rows: vec![rows.clone()],
        };
        let old = [part(0, 0, &left), part(1, 0, &left), part(2, 1, &right)];
        graph.restore(&old, false).unwrap();
        let held: Vec<u64> = graph.stats().iter().map(|s| s.state_rows).collect();
        assert_eq!(held, [2, 1]);
        let (parts, whole) = graph.capture(false).unwrap().unwrap();
        assert!(whole);
        let stages: Vec<u32> = parts.iter().map(|p| p.id.stage).collect();
        assert!(stages.iter().all(|&s| s < 2), "{stages:?}");
        // Numbered as today, the same parts are not renumbered.
        let mut today = one_join();
        today.stages.push(one_join().stages.pop().unwrap());
        today.lifted_stages = vec![0, 0, 1];
        today
            .restore(&[part(0, 0, &left), part(1, 1, &right)], true)
            .unwrap();
        let held: Vec<u64> = today.stats().iter().map(|s| s.state_rows).collect();
        assert_eq!(held, [2, 1]);
        assert!(!today.capture(false).unwrap().unwrap().1);
    }

    /// A checkpoint written before each part had a file of its own (one
    /// row per stage and part, Arrow IPC bytes) restores, and the next
    /// capture writes the restored state part by part.
    #[test]
    fn restores_the_earlier_state_format_and_captures_parts() {
        let left = rows("v", vec![1, 2, 2], vec![10, 20, 21]);
        let right = rows("w", vec![2], vec![200]);
        let old = RecordBatch::try_from_iter(vec![
            (
                "operator",
                Arc::new(UInt32Array::from(vec![0, 0])) as ArrayRef,
            ),
            ("side", Arc::new(UInt8Array::from(vec![0, 1])) as ArrayRef),
            (
                "state",
                Arc::new(BinaryArray::from_vec(vec![&ipc(&left), &ipc(&right)])) as ArrayRef,
            ),
        ])
        .unwrap();
        let mut graph = one_join();
        graph
            .restore(
                &[RestoredPart {
                    id: None,
                    rows: vec![old],
                }],
                false,
            )
            .unwrap();
        assert_eq!(graph.stats()[0].state_rows, 4);
        // Nothing was gained since the restore.
        let (parts, whole) = graph.capture(false).unwrap().unwrap();
        assert!(!whole);
        assert!(parts
            .iter()
            .all(|p| p.rows.iter().all(|b| b.num_rows() == 0)));

        // A right row taken out: the next capture is the whole state.
        graph.stages[0]
            .operator
            .apply(
                1,
                &Delta {
                    insert: Vec::new(),
                    retract: vec![right.clone()],
                },
            )
            .unwrap();
        let (parts, whole) = graph.capture(false).unwrap().unwrap();
        assert!(whole);
        let mut again = one_join();
        let files: Vec<RestoredPart> = parts
            .into_iter()
            .map(|p| RestoredPart {
                id: Some(p.id),
                rows: p.rows,
            })
            .collect();
        again.restore(&files, true).unwrap();
        assert_eq!(again.stats()[0].state_rows, 3);
    }
}
