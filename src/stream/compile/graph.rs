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

    /// Remembers the bounds a filter puts on a `ROW_NUMBER()` below it
    /// (`rn <= 3`, `rn < 4`, `rn = 1`): the Top-N of that window function.
    fn note_row_number_limits(&mut self, filter: &datafusion::logical_expr::Filter) {
        use datafusion::logical_expr::{BinaryExpr, Operator as Op};
        for conjunct in split_conjunction(&filter.predicate) {
            let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
                continue;
            };
            let (column, op, bound) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), other) => (c, *op, other),
                (other, Expr::Column(c)) => match op.swap() {
                    Some(op) => (c, op, other),
                    None => continue,
                },
                _ => continue,
            };
            let Some(bound) = crate::query::literal_i64(bound) else {
                continue;
            };
            let limit = match op {
                Op::LtEq | Op::Eq => bound,
                Op::Lt => bound - 1,
                _ => continue,
            };
            let Ok(index) = filter.input.schema().index_of_column(column) else {
                continue;
            };
            if let Some(name) = window_output(&filter.input, index) {
                let limit = limit.max(0) as usize;
                match self.row_number_limits.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, l)) => *l = (*l).min(limit),
                    None => self.row_number_limits.push((name, limit)),
                }
            }
        }
    }

    /// `ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..)` that a filter
    /// above bounds: a Top-N stage whose rows come out numbered.
    async fn lift_row_number(
        &mut self,
        window: datafusion::logical_expr::Window,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let refuse = || {
            Err(SluiceError::Unsupported(
                "window functions in a materialized view are supported only as a Top-N: \
                 ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) AS rn in a subquery, \
                 filtered by rn <= N outside it"
                    .into(),
            ))
        };
        let [expr] = window.window_expr.as_slice() else {
            return self.lift_over_window(window, state).await;
        };
        let Expr::WindowFunction(f) = expr.clone().unalias_nested().data else {
            return refuse();
        };
        let is_row_number = matches!(&f.fun,
            datafusion::logical_expr::WindowFunctionDefinition::WindowUDF(u) if u.name() == "row_number");
        let name = window
            .schema
            .field(window.input.schema().fields().len())
            .name()
            .clone();
        let limit = self
            .row_number_limits
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l);
        // ROW_NUMBER() that a filter above bounds is a Top-N; any other
        // window function an over-window.
        let Some(limit) = limit
            .filter(|_| is_row_number && f.params.args.is_empty() && f.params.filter.is_none())
        else {
            return self.lift_over_window(window, state).await;
        };
        let input = self
            .lift_joins(window.input.as_ref().clone(), state, true)
            .await?;
        let partition_by = f
            .params
            .partition_by
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), input.schema()))
            .collect::<Result<Vec<_>, _>>()?;
        self.push_top_n(
            input,
            partition_by,
            &f.params.order_by,
            (0, limit, false),
            window.schema.clone(),
            state,
        )
        .await
    }

    /// A projection of one input of an inner join with a scalar subquery's
    /// one row, whose only condition compares that input with the row
    /// (`WHERE amount > (SELECT avg(credit) FROM accounts)`, decorrelated):
    /// a dynamic filter stage, which sends on only the rows that cross the
    /// threshold when it moves. None for any other shape (the join then
    /// pairs every row with the one row).
    async fn lift_dynamic_filter(
        &mut self,
        projection: &datafusion::logical_expr::Projection,
        state: &SessionState,
    ) -> Result<Option<LogicalPlan>, SluiceError> {
        use datafusion::logical_expr::BinaryExpr;
        let LogicalPlan::Join(join) = projection.input.as_ref() else {
            return Ok(None);
        };
        let (Some(condition), true, JoinType::Inner) =
            (&join.filter, join.on.is_empty(), join.join_type)
        else {
            return Ok(None);
        };
        let (rows, one) = match (at_most_one_row(&join.left), at_most_one_row(&join.right)) {
            (_, true) => (join.left.as_ref(), join.right.as_ref()),
            (true, false) => (join.right.as_ref(), join.left.as_ref()),
            (false, false) => return Ok(None),
        };
        let within = |e: &Expr, plan: &LogicalPlan| {
            let columns = e.column_refs();
            !columns.is_empty() && columns.iter().all(|c| plan.schema().has_column(c))
        };
        if !projection
            .expr
            .iter()
            .all(|e| e.column_refs().iter().all(|c| rows.schema().has_column(c)))
        {
            return Ok(None);
        }
        let [Expr::BinaryExpr(BinaryExpr { left, op, right })] =
            split_conjunction(condition).as_slice()
        else {
            return Ok(None);
        };
        use datafusion::logical_expr::Operator as Op;
        if !matches!(
            op,
            Op::Lt | Op::LtEq | Op::Gt | Op::GtEq | Op::Eq | Op::NotEq
        ) {
            return Ok(None);
        }
        let (value, op, threshold) = if within(left, rows) && within(right, one) {
            (left.as_ref(), *op, right.as_ref())
        } else if within(right, rows) && within(left, one) {
            match op.swap() {
                Some(swapped) => (right.as_ref(), swapped, left.as_ref()),
                None => return Ok(None),
            }
        } else {
            return Ok(None);
        };
        let lifted_rows = self.lift_joins(rows.clone(), state, true).await?;
        let lifted_one = self.lift_joins(one.clone(), state, true).await?;
        let value_expr = state.create_physical_expr(value.clone(), lifted_rows.schema())?;
        let threshold_expr = state.create_physical_expr(threshold.clone(), lifted_one.schema())?;
        let (rows_input, rows_schema, _) = self.side(&lifted_rows, &[], state).await?;
        let (one_input, one_schema, _) = self.side(&lifted_one, &[], state).await?;
        let operator = DynamicFilterOperator::new(
            rows_schema,
            value_expr,
            op,
            threshold_expr,
            &one_schema,
            format!("{value} {op} {threshold}, crossing rows sent as the threshold moves"),
        )?;
        let output = self.push_stage(
            Box::new(operator),
            "dynamic filter",
            vec![rows_input, one_input],
            true,
            rows.schema().clone(),
            Vec::new(),
            Vec::new(),
        );
        let projection = datafusion::logical_expr::Projection::try_new(
            projection.expr.clone(),
            Arc::new(output),
        )?;
        Ok(Some(LogicalPlan::Projection(projection)))
    }

    /// Window functions that share one PARTITION BY and ORDER BY: an
    /// over-window stage whose rows are its input's with the functions'
    /// values appended.
    async fn lift_over_window(
        &mut self,
        window: datafusion::logical_expr::Window,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let refuse = |why: String| Err(SluiceError::Unsupported(why));
        let mut spec = None;
        for e in &window.window_expr {
            let Expr::WindowFunction(f) = e.clone().unalias_nested().data else {
                return refuse(format!("{e} is not a window function"));
            };
            if f.params.filter.is_some() {
                return refuse(
                    "FILTER on a window function is not supported in materialized views".into(),
                );
            }
            let this = (f.params.partition_by.clone(), f.params.order_by.clone());
            match &spec {
                None => spec = Some(this),
                Some(s) if *s == this => {}
                Some(_) => {
                    return refuse(
                        "window functions of one query level in a materialized view need one PARTITION BY and ORDER BY; compute the others in a subquery".into(),
                    )
                }
            }
        }
        let Some((partition_by, order_by)) = spec else {
            return refuse("a window with no functions".into());
        };
        let input = self
            .lift_joins(window.input.as_ref().clone(), state, true)
            .await?;
        let in_schema = input.schema();
        let partition = partition_by
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), in_schema))
            .collect::<Result<Vec<_>, _>>()?;
        let order = order_by
            .iter()
            .map(|s| {
                Ok((
                    state.create_physical_expr(s.expr.clone(), in_schema)?,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        let planning =
            datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default();
        let functions = window
            .window_expr
            .iter()
            .map(|e| {
                datafusion::physical_planner::create_window_expr(
                    e,
                    in_schema,
                    state.execution_props(),
                    &planning,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (mut stage_input, input_schema, _) = self.side(&input, &[], state).await?;
        let logical: Vec<_> = window
            .window_expr
            .iter()
            .filter_map(|e| match e.clone().unalias_nested().data {
                Expr::WindowFunction(f) => Some(*f),
                _ => None,
            })
            .collect();
        let closing = match self.emit_on_close {
            true => {
                let (rule, source, column) =
                    self.close_on_watermark(&input, &order_by, &logical)?;
                if self.input_retracts(&stage_input) {
                    return refuse(
                        "EMIT ON WINDOW CLOSE over window functions needs an input that only grows (an append-only table with a WATERMARK); leave out EMIT ON WINDOW CLOSE".into(),
                    );
                }
                stage_input.watermark = Some(source);
                self.bands.push((source, column, None));
                Some(rule)
            }
            false => None,
        };
        let reach = window_reach(&logical);
        let recomputes = match (reach.behind, reach.ahead, partition_by.is_empty()) {
            _ if closing.is_some() => {
                "a watermark computes a partition's rows from its first not emitted"
            }
            (Some(_), Some(_), true) => "a change recomputes the rows from its peers on",
            (Some(_), Some(_), false) => {
                "a change recomputes its partition's rows from its peers on"
            }
            (_, _, true) => "every change recomputes all rows",
            (_, _, false) => "a change recomputes its partition",
        };
        let description = format!(
            "{} over {} ({recomputes})",
            window
                .window_expr
                .iter()
                .map(|e| e.schema_name().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            match partition_by.is_empty() {
                true => "one partition".to_string(),
                false => format!(
                    "partitions by {}",
                    partition_by
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        );
        let description = match closing {
            Some(_) => format!("{description}; a row is emitted once the watermark makes it final"),
            None => description,
        };
        let mut operator = OverWindowOperator::new(
            input_schema,
            partition,
            order,
            functions,
            nullable(window.schema.as_arrow()),
            description,
        )?;
        operator = operator.with_reach(reach);
        if let Some(rule) = closing {
            operator = operator.closing_on_watermark(rule);
            self.closing_stage = Some(self.stages.len());
        }
        Ok(self.push_stage(
            Box::new(operator),
            "over-window",
            vec![stage_input],
            closing.is_none(),
            window.schema.clone(),
            Vec::new(),
            Vec::new(),
        ))
    }

    /// When an over-window under `EMIT ON WINDOW CLOSE` may emit a row:
    /// its ORDER BY must start with a source's WATERMARK column,
    /// ascending, and its functions read a bounded way past the row.
    /// Returns the rule, the source and its column.
    fn close_on_watermark(
        &self,
        input: &LogicalPlan,
        order_by: &[datafusion::logical_expr::SortExpr],
        functions: &[datafusion::logical_expr::expr::WindowFunction],
    ) -> Result<(CloseOnWatermark, usize, String), SluiceError> {
        let refuse = |why: &str| {
            Err(SluiceError::Unsupported(format!(
                "EMIT ON WINDOW CLOSE over window functions {why}; leave out EMIT ON WINDOW CLOSE (the view then emits on update)"
            )))
        };
        // NULLS FIRST would put a row that is never final (its time is
        // NULL) before the others of its partition.
        let first = match order_by.first() {
            Some(s) if s.asc && !s.nulls_first => &s.expr,
            _ => {
                return refuse(
                    "needs ORDER BY the table's WATERMARK column first, ascending (NULLS LAST)",
                )
            }
        };
        let traced = match first {
            Expr::Column(c) => input
                .schema()
                .index_of_column(c)
                .ok()
                .and_then(|i| Some((i, source_column(input, i)?))),
            _ => None,
        };
        let marked = traced.and_then(|(i, t)| {
            let s = self.marked(&t.source, &t.column)?;
            (t.window_us.is_none() && t.stage.is_none()).then_some((i, s, t.column))
        });
        let Some((time_index, source, column)) = marked else {
            return refuse("needs ORDER BY the table's WATERMARK column first, ascending");
        };
        let mut rule = CloseOnWatermark {
            time_index,
            rows_after: 0,
            time_after_us: 0,
            lateness_us: self.lateness_us,
        };
        use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
        for f in functions {
            let name = f.fun.name().to_ascii_lowercase();
            let ignores_nulls = f.params.null_treatment
                == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls);
            match name.as_str() {
                // Past NULLs, it reads any number of rows ahead.
                "lead" if ignores_nulls => {
                    return refuse(
                        "cannot emit lead() IGNORE NULLS, which reads any number of rows ahead",
                    )
                }
                "ntile" | "percent_rank" | "cume_dist" => {
                    return refuse(&format!(
                        "cannot emit {name}(), which reads its partition's every row"
                    ))
                }
                "row_number" | "rank" | "dense_rank" | "lag" => continue,
                "lead" => {
                    let Some(n) = offset_argument(f) else {
                        return refuse("needs lead()'s offset to be a constant");
                    };
                    rule.rows_after = rule.rows_after.max(n);
                    continue;
                }
                _ => {}
            }
            let frame = &f.params.window_frame;
            match (&frame.end_bound, &frame.units) {
                (WindowFrameBound::Preceding(_) | WindowFrameBound::CurrentRow, _) => {}
                (WindowFrameBound::Following(v), _) if v.is_null() => {
                    return refuse("cannot emit a frame that ends at UNBOUNDED FOLLOWING")
                }
                (WindowFrameBound::Following(v), WindowFrameUnits::Rows) => {
                    let Some(n) = row_count(v) else {
                        return refuse("needs a constant ROWS ... FOLLOWING");
                    };
                    rule.rows_after = rule.rows_after.max(n);
                }
                (WindowFrameBound::Following(v), WindowFrameUnits::Range) => {
                    let Some(us) = scalar_duration_us(v) else {
                        return refuse("needs RANGE ... FOLLOWING to be a constant INTERVAL");
                    };
                    rule.time_after_us = rule.time_after_us.max(us);
                }
                (WindowFrameBound::Following(_), WindowFrameUnits::Groups) => {
                    return refuse("cannot emit a GROUPS frame that ends after the current row")
                }
            }
        }
        Ok((rule, source, column))
    }

    /// `ORDER BY .. LIMIT N`: a Top-N stage of one group.
    async fn lift_limit(
        &mut self,
        limit: datafusion::logical_expr::Limit,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        use datafusion::logical_expr::{FetchType, SkipType};
        let refuse = |why: &str| Err(SluiceError::Unsupported(why.into()));
        let SkipType::Literal(offset) = limit.get_skip_type()? else {
            return refuse("OFFSET in a materialized view takes a constant number of rows");
        };
        let fetch = match limit.get_fetch_type()? {
            FetchType::Literal(Some(fetch)) => fetch,
            // OFFSET alone: every row after the first ones.
            FetchType::Literal(None) => usize::MAX,
            FetchType::UnsupportedExpr => {
                return refuse("LIMIT in a materialized view takes a constant number of rows")
            }
        };
        let LogicalPlan::Sort(sort) = limit.input.as_ref().clone() else {
            return refuse(
                "LIMIT and OFFSET in a materialized view need ORDER BY: the view keeps the rows at those places in that order (a Top-N)",
            );
        };
        // The optimizer may have pushed offset + limit into the sort.
        let fetch = match sort.fetch {
            Some(f) => f.saturating_sub(offset).min(fetch),
            None => fetch,
        };
        self.lift_top_n(sort, offset, fetch, state).await
    }

    async fn lift_top_n(
        &mut self,
        sort: datafusion::logical_expr::Sort,
        offset: usize,
        limit: usize,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        // Pre-order: the outermost Top-N is lifted first.
        let with_ties = std::mem::take(&mut self.ties_pending);
        let input = self
            .lift_joins(sort.input.as_ref().clone(), state, true)
            .await?;
        let schema = input.schema().clone();
        self.push_top_n(
            input,
            Vec::new(),
            &sort.expr,
            (offset, limit, with_ties),
            schema,
            state,
        )
        .await
    }

    /// The Top-N stage over `input` (lifted), giving rows of `schema`.
    async fn push_top_n(
        &mut self,
        input: LogicalPlan,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: &[datafusion::logical_expr::SortExpr],
        (offset, limit, with_ties): (usize, usize, bool),
        schema: DFSchemaRef,
        state: &SessionState,
    ) -> Result<LogicalPlan, SluiceError> {
        let order = order_by
            .iter()
            .map(|s| {
                let e = state.create_physical_expr(s.expr.clone(), input.schema())?;
                Ok((
                    e,
                    arrow::compute::SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                ))
            })
            .collect::<Result<Vec<_>, SluiceError>>()?;
        let (stage_input, input_schema, _) = self.side(&input, &[], state).await?;
        let input_retracts = self.input_retracts(&stage_input);
        let numbered = schema.fields().len() > input.schema().fields().len();
        let places = match (offset, limit) {
            (0, limit) => format!("first {limit}"),
            (offset, usize::MAX) => format!("all after the first {offset}"),
            (offset, limit) => format!("{limit} after the first {offset}"),
        };
        let places = match with_ties {
            true => format!("{places} with ties"),
            false => places,
        };
        let description = format!(
            "{}{places} by {}",
            match partition_by.is_empty() {
                true => String::new(),
                false => format!(
                    "per {}: ",
                    partition_by
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            order_by
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let operator = TopNOperator::new(
            TopNSpec {
                partition_by,
                order_by: order,
                offset,
                limit,
                with_ties,
                numbered,
                input_retracts,
            },
            input_schema,
            nullable(schema.as_arrow()),
            description,
        )?;
        Ok(self.push_stage(
            Box::new(operator),
            "top-n",
            vec![stage_input],
            true,
            schema,
            Vec::new(),
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

    /// Runs a delta of source `source` through every join, leaving each
    /// join's output (inserts, retractions) for the plans above. Returns
    /// the outputs by join. With `watermarks` (by source), each stage then
    /// moves the watermarks of its inputs that have one, and what that
    /// emits goes on up as well; `source` is then `NO_SOURCE` when no
    /// source's rows come with them. The first call of a graph that did
    /// not come from a checkpoint first sends up what each operator holds
    /// before any input ([`Operator::start`]).
    pub async fn propagate(
        &mut self,
        source: usize,
        insert: &[RecordBatch],
        retract: &[RecordBatch],
        watermarks: Option<&[Option<i64>]>,
        ctx: Arc<TaskContext>,
    ) -> Result<Vec<Delta>, SluiceError> {
        let mut outputs: Vec<Delta> = Vec::with_capacity(self.stages.len());
        let starting = std::mem::take(&mut self.unstarted);
        for j in 0..self.stages.len() {
            let mut out = match starting {
                true => self.stages[j].operator.start()?,
                false => Delta::default(),
            };
            for side in 0..self.stages[j].inputs.len() {
                let input = &self.stages[j].inputs[side];
                // An input that reads no table (`FROM (VALUES ...)`) has
                // its rows once, when the graph starts.
                let constant = starting && input.sources.is_empty() && input.stages.is_empty();
                let reads_delta = input.sources.contains(&source)
                    || constant
                    || input
                        .stages
                        .iter()
                        .any(|&c| !outputs[c].insert.is_empty() || !outputs[c].retract.is_empty());
                if !reads_delta {
                    continue;
                }
                let plan = input.plan.clone();
                let children = input.stages.clone();
                let ins = match constant {
                    true => collect(plan.clone(), ctx.clone())
                        .await?
                        .into_iter()
                        .filter(|b| b.num_rows() > 0)
                        .collect(),
                    false => {
                        self.run(
                            &plan,
                            source,
                            insert,
                            &children,
                            &outputs,
                            true,
                            ctx.clone(),
                        )
                        .await?
                    }
                };
                let ret = self
                    .run(
                        &plan,
                        source,
                        retract,
                        &children,
                        &outputs,
                        false,
                        ctx.clone(),
                    )
                    .await?;
                let o = self.stages[j].operator.apply(
                    side,
                    &Delta {
                        insert: ins,
                        retract: ret,
                    },
                )?;
                // Numbered past every slot and the last aggregate's input.
                let slot = self.source_slots.len() + self.stages.len() + 1 + j;
                for (row, sign, e) in self.stages[j].operator.take_failed_rows() {
                    self.failed.lock().record_row(slot, &row, sign, &e)?;
                }
                out.insert.extend(o.insert);
                out.retract.extend(o.retract);
            }
            if let Some(marks) = watermarks {
                for side in 0..self.stages[j].inputs.len() {
                    let mark = self.stages[j].inputs[side]
                        .watermark
                        .and_then(|s| marks.get(s).copied().flatten());
                    if let Some(w) = mark {
                        let o = self.stages[j].operator.advance_watermark(side, w)?;
                        out.insert.extend(o.insert);
                        out.retract.extend(o.retract);
                    }
                }
            }
            outputs.push(out);
        }
        Ok(outputs)
    }

    /// Runs one input plan with `rows` in the slot of `source` (the
    /// others empty) and the given joins' inserted (or retracted) rows in
    /// theirs.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        source: usize,
        rows: &[RecordBatch],
        joins: &[usize],
        outputs: &[Delta],
        inserted: bool,
        ctx: Arc<TaskContext>,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let child_rows = |c: usize| match inserted {
            true => &outputs[c].insert,
            false => &outputs[c].retract,
        };
        if rows.is_empty() && joins.iter().all(|&c| child_rows(c).is_empty()) {
            return Ok(Vec::new());
        }
        self.fill(source, rows, outputs, inserted);
        let result = self
            .collect_rows_apart(plan, ctx, if inserted { 1 } else { -1 })
            .await;
        self.clear();
        Ok(result?.into_iter().filter(|b| b.num_rows() > 0).collect())
    }

    /// `plan` over what the slots hold, with the rows on which it fails set
    /// aside (see [`failed_rows`](super::failed_rows)); `sign` is +1 for
    /// inserted rows, -1 for rows taken back.
    pub async fn collect_rows_apart(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        ctx: Arc<TaskContext>,
        sign: i64,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let slots: Vec<DeltaSlot> = self
            .source_slots
            .iter()
            .chain(self.stages.iter().map(|s| &s.slot))
            .cloned()
            .collect();
        super::failed_rows::collect_rows_apart(plan, ctx, &slots, sign, &self.failed).await
    }

    /// Counts a row of the view's last aggregate's input as failed (see
    /// [`failed_rows`](super::failed_rows)).
    pub fn record_failed_row(
        &self,
        row: &RecordBatch,
        sign: i64,
        error: &SluiceError,
    ) -> Result<(), SluiceError> {
        // Numbered past every slot: these rows come from no one slot.
        let slot = self.source_slots.len() + self.stages.len();
        self.failed.lock().record_row(slot, row, sign, error)
    }

    /// The error reads of the view fail with while rows of its sources fail.
    pub fn failed_rows_error(&self) -> Option<SluiceError> {
        self.failed.lock().error()
    }

    /// The failed rows, for a checkpoint.
    pub fn failed_rows(&self) -> Vec<sluice_catalog::FailedRowEntry> {
        self.failed.lock().saved()
    }

    /// The failed rows a checkpoint kept.
    pub fn restore_failed_rows(&self, saved: &[sluice_catalog::FailedRowEntry]) {
        self.failed.lock().restore(saved);
    }

    /// Puts `rows` in the slot of `source`, and every join's inserted (or
    /// retracted) rows in its leaf's slot.
    pub fn fill(&self, source: usize, rows: &[RecordBatch], outputs: &[Delta], inserted: bool) {
        for (i, slot) in self.source_slots.iter().enumerate() {
            *slot.lock() = match i == source {
                true => rows.to_vec(),
                false => Vec::new(),
            };
        }
        for (stage, out) in self.stages.iter().zip(outputs) {
            *stage.slot.lock() = match inserted {
                true => out.insert.clone(),
                false => out.retract.clone(),
            };
        }
    }

    pub fn clear(&self) {
        for slot in &self.source_slots {
            slot.lock().clear();
        }
        for stage in &self.stages {
            stage.slot.lock().clear();
        }
    }

    /// Every stage's state for a checkpoint, part by part (a join's
    /// sides), as the batches the stages hold. When every stage only
    /// gained rows since the last capture, that is all it holds, and the
    /// second value is false; otherwise (or when `whole` asks) it holds the
    /// whole state (true).
    pub fn capture(
        &mut self,
        whole: bool,
    ) -> Result<Option<(Vec<OperatorPart>, bool)>, SluiceError> {
        if self.stages.is_empty() {
            return Ok(None);
        }
        if whole || self.capture_whole_next {
            return self.capture_whole();
        }
        let mut gains = Vec::with_capacity(self.stages.len());
        for stage in &mut self.stages {
            gains.push(stage.operator.appended_since_capture()?);
        }
        if gains.iter().all(|g| g.is_some()) {
            let parts = gains.into_iter().map(|g| g.unwrap_or_default()).collect();
            return Ok(Some((numbered_parts(parts), false)));
        }
        self.capture_whole()
    }

    /// Every operator's whole state (which resets what each has gained).
    fn capture_whole(&mut self) -> Result<Option<(Vec<OperatorPart>, bool)>, SluiceError> {
        self.capture_whole_next = false;
        let mut parts = Vec::with_capacity(self.stages.len());
        for stage in &mut self.stages {
            parts.push(stage.operator.snapshot()?);
        }
        Ok(Some((numbered_parts(parts), true)))
    }

    /// Puts back what [`JoinGraph::capture`] wrote, in the order written
    /// (a whole state, then what it gained). `shared` says the checkpoint
    /// numbers each stage once; before stages were shared, it numbered
    /// them as lifted (see `lifted_stages`), and the next capture then
    /// writes them whole, in today's numbers.
    pub fn restore(&mut self, files: &[RestoredPart], shared: bool) -> Result<(), SluiceError> {
        // The checkpoint's state already went up through the graph,
        // including the rows each operator had before any input.
        self.unstarted = false;
        let renumbered = !shared && self.lifted_stages.iter().enumerate().any(|(i, &s)| i != s);
        for file in files {
            match file.id {
                Some(id) => {
                    self.restore_part(id.stage, id.part as usize, &file.rows, renumbered)?
                }
                None => {
                    for b in &file.rows {
                        self.restore_ipc_parts(b, renumbered)?;
                    }
                }
            }
        }
        self.capture_whole_next |= renumbered;
        Ok(())
    }

    fn restore_part(
        &mut self,
        stage: u32,
        part: usize,
        rows: &[RecordBatch],
        renumbered: bool,
    ) -> Result<(), SluiceError> {
        let mut stage = stage as usize;
        if renumbered {
            let Some(&now) = self.lifted_stages.get(stage) else {
                return Err(bad_state("an operator the view does not have"));
            };
            // A repeated aggregate's copy held what the first one holds.
            if self.lifted_stages.iter().position(|&s| s == now) != Some(stage) {
                return Ok(());
            }
            stage = now;
        }
        let stage = self
            .stages
            .get_mut(stage)
            .ok_or_else(|| bad_state("an operator the view does not have"))?;
        stage.operator.restore(part, rows)
    }

    /// A state file of an earlier version: a row per stage and part, the
    /// rows in Arrow IPC form.
    fn restore_ipc_parts(&mut self, b: &RecordBatch, renumbered: bool) -> Result<(), SluiceError> {
        let (Some(op), Some(side), Some(state)) = (
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::UInt32Array>(),
            b.column(1)
                .as_any()
                .downcast_ref::<arrow::array::UInt8Array>(),
            b.column(2)
                .as_any()
                .downcast_ref::<arrow::array::BinaryArray>(),
        ) else {
            return Err(bad_state("unexpected columns"));
        };
        for i in 0..b.num_rows() {
            let reader = arrow::ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(state.value(i)),
                None,
            )?;
            let rows = reader.collect::<Result<Vec<_>, _>>()?;
            self.restore_part(op.value(i), side.value(i) as usize, &rows, renumbered)?;
        }
        Ok(())
    }
}

/// Stages' state parts, each named by its stage and part.
fn numbered_parts(stages: Vec<Vec<StatePart>>) -> Vec<OperatorPart> {
    let mut out = Vec::new();
    for (stage, parts) in stages.into_iter().enumerate() {
        for (part, rows) in parts.into_iter().enumerate() {
            out.push(OperatorPart {
                id: StatePartId {
                    stage: stage as u32,
                    part: part as u32,
                },
                rows,
            });
        }
    }
    out
}

/// `lag`'s or `lead`'s offset (1 when not given), when a constant; a
/// negative offset reads the other way, which counts as 0 here.
fn offset_argument(f: &datafusion::logical_expr::expr::WindowFunction) -> Option<u64> {
    match f.params.args.get(1) {
        None => Some(1),
        Some(Expr::Literal(v, _)) => match v.clone().cast_to(&arrow::datatypes::DataType::Int64) {
            Ok(datafusion::common::ScalarValue::Int64(Some(n))) => Some(n.max(0) as u64),
            _ => None,
        },
        Some(_) => None,
    }
}

/// A ROWS frame bound's count of rows.
fn row_count(v: &datafusion::common::ScalarValue) -> Option<u64> {
    match v.clone().cast_to(&arrow::datatypes::DataType::UInt64) {
        Ok(datafusion::common::ScalarValue::UInt64(n)) => n,
        _ => None,
    }
}

/// How far window functions read around a row (see [`WindowReach`]):
/// `lag` and `lead` their offsets, aggregates and value functions their
/// ROWS frames; a RANGE or GROUPS offset or an unbounded start reaches the
/// whole prefix, and an unbounded end or a function of the whole
/// partition (`ntile`, `percent_rank`, `cume_dist`) everything.
fn window_reach(functions: &[datafusion::logical_expr::expr::WindowFunction]) -> WindowReach {
    use datafusion::logical_expr::{WindowFrameBound, WindowFrameUnits};
    let mut reach = WindowReach {
        behind: Some(0),
        ahead: Some(0),
        numbering: Vec::new(),
    };
    let widen = |mine: &mut Option<u64>, theirs: Option<u64>| {
        *mine = match (*mine, theirs) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        }
    };
    for (i, f) in functions.iter().enumerate() {
        let name = f.fun.name().to_ascii_lowercase();
        // IGNORE NULLS reads past any number of NULLs.
        let ignores_nulls = f.params.null_treatment
            == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls);
        let (behind, ahead) = match name.as_str() {
            _ if ignores_nulls => (None, None),
            "row_number" | "rank" => {
                reach.numbering.push((i, false));
                (Some(0), Some(0))
            }
            "dense_rank" => {
                reach.numbering.push((i, true));
                (Some(0), Some(0))
            }
            "lag" => (offset_argument(f), Some(0)),
            "lead" => (Some(0), offset_argument(f)),
            "ntile" | "percent_rank" | "cume_dist" => (None, None),
            _ => {
                let frame = &f.params.window_frame;
                let rows = frame.units == WindowFrameUnits::Rows;
                let behind = match &frame.start_bound {
                    WindowFrameBound::Preceding(v) if rows && !v.is_null() => row_count(v),
                    WindowFrameBound::Preceding(_) => None,
                    _ => Some(0),
                };
                let ahead = match &frame.end_bound {
                    WindowFrameBound::Following(v) if rows && !v.is_null() => row_count(v),
                    WindowFrameBound::Following(_) => None,
                    _ => Some(0),
                };
                (behind, ahead)
            }
        };
        widen(&mut reach.behind, behind);
        widen(&mut reach.ahead, ahead);
    }
    reach
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

/// The name of the `ROW_NUMBER()` (or other window function) output that
/// column `index` of `plan` passes on unchanged, through projections,
/// renames and filters.
fn window_output(plan: &LogicalPlan, index: usize) -> Option<String> {
    match plan {
        LogicalPlan::Window(w) if index >= w.input.schema().fields().len() => {
            Some(w.schema.field(index).name().clone())
        }
        LogicalPlan::Projection(p) => {
            let Expr::Column(c) = p.expr.get(index)?.clone().unalias_nested().data else {
                return None;
            };
            let at = p.input.schema().index_of_column(&c).ok()?;
            window_output(&p.input, at)
        }
        LogicalPlan::SubqueryAlias(a) => window_output(&a.input, index),
        LogicalPlan::Filter(f) => window_output(&f.input, index),
        _ => None,
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
