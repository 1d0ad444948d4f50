//! The aggregate operator of a view's dataflow: one `GROUP BY` (with
//! HAVING and a projection above it), run with DataFusion accumulators.
//!
//! State: per group, its key and one accumulator per aggregate (and, when
//! the input takes rows back, how many input rows the group holds, so that
//! a group whose rows are all gone leaves the view). Inputs that take rows
//! back get accumulators that can retract: DataFusion's sliding ones for
//! COUNT, SUM and AVG, and [`RetractableMinMax`] for MIN, MAX and
//! COUNT(DISTINCT). Inputs that never take rows back, with aggregates that
//! DataFusion vectorizes (COUNT, SUM, AVG, MIN, MAX, ...), keep their groups
//! instead in [`VectorizedGroups`]: keys interned in one hash table, each
//! aggregate one column of state over all groups. A global aggregate (no
//! GROUP BY) has its one row before any input; inside the graph that row
//! goes up when the view starts from nothing ([`Operator::start`]), so
//! that each later change can take it back.
//!
//! Checkpoint: one batch with the view's current row of each group, the
//! group keys and every accumulator's `state()` ([`AggregatePipeline::state_batches`]);
//! restore merges those states into fresh accumulators.
//!
//! Watermark: for windows that close by the watermark, a window's groups
//! are emitted for good and dropped once the watermark passes its end plus
//! the allowed lateness ([`AggregatePipeline::close_windows`]); later rows
//! for it are late. Inside the graph (below an interval join that bands on
//! the window's end), they are dropped without being emitted again, since
//! their rows went out as they changed. Other groups live as long as the
//! view.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    new_empty_array, Array, ArrayRef, Int64Array, RecordBatch, RecordBatchOptions, UInt32Array,
};
use arrow::compute;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::{Accumulator, Aggregate, LogicalPlan};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
#[allow(deprecated)]
use datafusion::physical_planner::create_aggregate_expr_and_maybe_filter;

use super::operator::{canonical_key, nullable, unsupported};
use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::retract::{RetractableDistinct, RetractableMinMax};
use super::retract_collect::{CollectKind, RetractableCollect};
use super::vectorized_groups::{GroupColumns, VectorizedGroups};
use crate::error::SluiceError;

/// The aggregates that skip NULL arguments, so that a FILTER can leave a
/// row out by making its arguments NULL.
const NULL_SKIPPING: [&str; 12] = [
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "string_agg",
    "stddev",
    "stddev_pop",
    "var",
    "var_pop",
];

/// Running aggregates per group: DataFusion accumulators fed with each
/// delta's rows of that group.
pub struct AggregatePipeline {
    pub(crate) input: Arc<dyn ExecutionPlan>,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// Each aggregate's FILTER (WHERE ...), if it has one.
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    agg_schema: SchemaRef,
    output: Option<Vec<Arc<dyn PhysicalExpr>>>,
    /// HAVING, over the aggregate's rows.
    having: Option<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    /// Group index by the key's row bytes (looked up without allocating).
    groups: HashMap<Vec<u8>, usize, ahash::RandomState>,
    keys: Vec<OwnedRow>,
    accumulators: Vec<Vec<Box<dyn Accumulator>>>,
    /// The source takes rows back (a keyed table): accumulators that can
    /// retract, and rows per group, so that a group whose rows are all
    /// gone leaves the view.
    retracting: bool,
    group_rows: Vec<i64>,
    /// The view's row schema, and how its windows close (the position of
    /// `window_end` among the keys, and the allowed lateness).
    view_schema: SchemaRef,
    closing: Option<(usize, i64)>,
    /// What the closing key adds up to its window's end: 0 for a
    /// `window_end`, the size for a `window_start` (inside the graph).
    closing_offset_us: i64,
    description: String,
    rows_in: u64,
    /// Inside the graph (below a join): each delta emits the changed
    /// groups' rows, their old rows taken back, in this schema.
    emits_changes: Option<SchemaRef>,
    rows_out: u64,
    /// The groups of an input that never takes rows back, held as
    /// DataFusion's hash aggregation holds them (then `groups`, `keys` and
    /// `accumulators` stay empty); None for inputs that retract, global
    /// aggregates, aggregates inside the graph, and aggregates with no
    /// vectorized accumulator.
    vectorized: Option<VectorizedGroups>,
    /// The earliest `window_end` among the vectorized groups, so that a
    /// watermark that closes none of them costs nothing.
    earliest_end: Option<i64>,
    /// Inside the graph: input rows whose keys or arguments failed, for
    /// the graph to count ([`Operator::take_failed_rows`]).
    failed_rows: Vec<super::operator::FailedRow>,
}

/// A batch's rows that compute, with their keys and arguments (see
/// [`AggregatePipeline::computable_inputs`]).
struct ComputedInputs {
    rows: usize,
    keys: Vec<ArrayRef>,
    args: Vec<Vec<ArrayRef>>,
    retract: bool,
}

impl AggregatePipeline {
    pub(crate) async fn new(
        state: &SessionState,
        aggregate: &Aggregate,
        projection: Option<&LogicalPlan>,
        retracting: bool,
    ) -> Result<AggregatePipeline, SluiceError> {
        let input = state.create_physical_plan(&aggregate.input).await?;
        let in_schema: &DFSchema = aggregate.input.schema();
        let group_exprs = aggregate
            .group_expr
            .iter()
            .map(|e| state.create_physical_expr(e.clone(), in_schema))
            .collect::<Result<Vec<_>, _>>()?;
        let mut aggs = Vec::new();
        let mut filters = Vec::new();
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
            // A FILTER clause makes the rows it leaves out NULL arguments,
            // which these aggregates skip (adding and taking back alike).
            if filter.is_some() && !NULL_SKIPPING.contains(&agg.fun().name()) {
                return Err(unsupported(format!(
                    "FILTER on {} is not supported in a materialized view (COUNT, SUM, AVG, MIN, MAX, bool_and, bool_or, string_agg, stddev and variance take it)",
                    agg.fun().name()
                )));
            }
            aggs.push(agg);
            filters.push(filter);
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
        let key_schema = Arc::new(Schema::new(
            group_exprs
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    Ok(Field::new(
                        format!("__key_{i}"),
                        e.data_type(input.schema().as_ref())?,
                        true,
                    ))
                })
                .collect::<Result<Vec<_>, SluiceError>>()?,
        ));
        let vectorized = match retracting {
            true => None,
            false => VectorizedGroups::try_new(key_schema, &aggs)?,
        };
        let mut pipeline = AggregatePipeline {
            input,
            group_exprs,
            aggs,
            filters,
            agg_schema,
            output,
            having,
            converter: RowConverter::new(fields)?,
            groups: HashMap::default(),
            keys: Vec::new(),
            accumulators: Vec::new(),
            retracting,
            group_rows: Vec::new(),
            view_schema: Arc::new(Schema::empty()),
            closing: None,
            closing_offset_us: 0,
            description: format!(
                "GROUP BY {} computing {}",
                match aggregate.group_expr.is_empty() {
                    true => "()".to_string(),
                    false => aggregate
                        .group_expr
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                aggregate
                    .aggr_expr
                    .iter()
                    .map(|e| e.schema_name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            rows_in: 0,
            emits_changes: None,
            rows_out: 0,
            vectorized,
            earliest_end: None,
            failed_rows: Vec::new(),
        };
        if retracting {
            for a in &pipeline.aggs {
                let name = a.fun().name().to_lowercase();
                let supported =
                    match a.is_distinct() {
                        true => matches!(name.as_str(), "count" | "min" | "max")
                            || a.expressions().iter().skip(1).all(|e| {
                                e.downcast_ref::<datafusion::physical_expr::expressions::Literal>()
                                    .is_some()
                            }),
                        false => {
                            matches!(
                                name.as_str(),
                                "count"
                                    | "sum"
                                    | "avg"
                                    | "mean"
                                    | "min"
                                    | "max"
                                    | "stddev"
                                    | "stddev_pop"
                                    | "var"
                                    | "var_pop"
                            ) || CollectKind::of(&name).is_some()
                        }
                    };
                if !supported {
                    return Err(unsupported(format!(
                        "{} is not supported here: this view takes rows back (it reads a table with a key or one UPDATE and DELETE change, or has an outer, semi or anti join), which COUNT, SUM, AVG, MIN, MAX, stddev, variance, bool_and, bool_or, string_agg, array_agg, first_value and last_value can, and DISTINCT over one column (other arguments constant)",
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
            "count" if a.is_distinct() => Ok(Box::new(RetractableMinMax::count_distinct(
                self.argument_type(a)?,
            )?)),
            _ if a.is_distinct() => {
                let input = self.argument_type(a)?;
                let aggregate = self
                    .aggs
                    .iter()
                    .find(|x| std::ptr::eq(x.as_ref(), a))
                    .cloned()
                    .ok_or_else(|| SluiceError::Internal("an aggregate not of its view".into()))?;
                Ok(Box::new(RetractableDistinct::new(aggregate, input)?))
            }
            name => match CollectKind::of(name) {
                Some(kind) => {
                    let schema = self.input.schema();
                    let arguments = a
                        .expressions()
                        .iter()
                        .map(|e| e.data_type(schema.as_ref()))
                        .collect::<Result<Vec<_>, _>>()?;
                    let ordering = a
                        .order_bys()
                        .iter()
                        .map(|o| Ok((o.expr.data_type(schema.as_ref())?, o.options)))
                        .collect::<Result<Vec<_>, SluiceError>>()?;
                    Ok(Box::new(RetractableCollect::new(
                        kind,
                        arguments,
                        ordering,
                        a.field().data_type().clone(),
                    )?))
                }
                None => Ok(a.create_sliding_accumulator()?),
            },
        }
    }

    /// The type of an aggregate's first argument, over this input.
    fn argument_type(&self, a: &AggregateFunctionExpr) -> Result<DataType, SluiceError> {
        a.expressions()
            .first()
            .map(|e| e.data_type(self.input.schema().as_ref()))
            .transpose()?
            .ok_or_else(|| unsupported(format!("{} of no column", a.name())))
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
    #[cfg(test)]
    pub(crate) fn update(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        self.feed(batch, false)
    }

    #[cfg(test)]
    /// Takes back pre-aggregation rows fed before (earlier versions of
    /// keys of a keyed table). Rows of groups no longer held (closed
    /// windows) are ignored.
    pub(crate) fn retract(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        self.feed(batch, true)
    }

    /// The view's rows have `schema`; `closing`: where `window_end` is
    /// among the keys and the allowed lateness, for windows that close by
    /// the watermark.
    /// The view's row schema, and how its windows close: the window key's
    /// position among the GROUP BY keys, the allowed lateness, and how far
    /// the key is before the window's end (a `window_start` key).
    pub(crate) fn attach(&mut self, schema: SchemaRef, closing: Option<(usize, i64, i64)>) {
        self.view_schema = schema;
        self.closing = closing.map(|(key, lateness, _)| (key, lateness));
        self.closing_offset_us = closing.map_or(0, |(_, _, before_end)| before_end);
    }

    /// Makes the aggregate an operator inside the graph: each delta emits
    /// the rows (in `schema`, the aggregate's own) of the groups it changed,
    /// and takes back their rows before.
    pub(crate) fn emit_changes(&mut self, schema: SchemaRef) {
        // The rows of the groups a delta touched, before and after, are
        // read group by group.
        self.vectorized = None;
        self.view_schema = schema.clone();
        self.emits_changes = Some(schema);
    }

    /// Inside the graph: drops the groups of windows the watermark closed
    /// (key `group_index` is their `window_end`, or their `window_start`
    /// when `offset_us`, the window's size, is added to it), without
    /// emitting anything, since their rows went out as they changed. Rows
    /// of a closed window are then late for the view, so none comes.
    pub(crate) fn close_windows_silently(
        &mut self,
        group_index: usize,
        lateness_us: i64,
        offset_us: i64,
    ) {
        self.closing = Some((group_index, lateness_us));
        self.closing_offset_us = offset_us;
    }

    /// The groups of `n` rows whose GROUP BY values are `keys` (those
    /// groups that exist now).
    fn groups_of_keys(
        &self,
        keys: &[ArrayRef],
        n: usize,
        into: &mut Vec<usize>,
    ) -> Result<(), SluiceError> {
        if n == 0 {
            return Ok(());
        }
        if self.group_exprs.is_empty() {
            into.push(0);
            return Ok(());
        }
        let rows = self.converter.convert_columns(keys)?;
        into.extend((0..n).filter_map(|i| self.groups.get(rows.row(i).as_ref()).copied()));
        Ok(())
    }

    /// The GROUP BY values of each row.
    fn group_keys(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, SluiceError> {
        let n = batch.num_rows();
        Ok(self
            .group_exprs
            .iter()
            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
            .map(|c| c.map(canonical_key))
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// Of `groups`, those that are rows of the aggregate: a group whose
    /// rows were all taken back is none (a global aggregate keeps its one
    /// row).
    fn shown(&self, groups: impl Iterator<Item = usize>) -> Vec<usize> {
        groups
            .filter(|&g| !self.retracting || self.group_exprs.is_empty() || self.group_rows[g] > 0)
            .collect()
    }

    /// The rows of those of `groups` that are rows of the aggregate.
    fn visible_rows(
        &mut self,
        schema: &SchemaRef,
        groups: &[usize],
    ) -> Result<RecordBatch, SluiceError> {
        let shown = self.shown(groups.iter().copied());
        self.rows_of(schema, &shown, true)
    }

    #[cfg(test)]
    fn feed(&mut self, batch: &RecordBatch, retract: bool) -> Result<(), SluiceError> {
        let n = batch.num_rows();
        self.rows_in += n as u64;
        if n == 0 {
            return Ok(());
        }
        let (key_columns, args) = self.inputs(batch)?;
        self.feed_inputs(n, key_columns, args, retract)
    }

    /// [`Self::update`] (or, `retract`, [`Self::retract`]) of the rows of
    /// `batch` whose keys and arguments compute; each row on which they
    /// fail with an error of the data (a division by zero) is given to
    /// `failed` instead, and the state is as if it never came (see
    /// `stream::compile::failed_rows`).
    pub(crate) fn feed_rows_apart(
        &mut self,
        batch: &RecordBatch,
        retract: bool,
        mut failed: impl FnMut(&RecordBatch, &SluiceError) -> Result<(), SluiceError>,
    ) -> Result<(), SluiceError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        match self.inputs(batch) {
            Ok((keys, args)) => {
                self.rows_in += n as u64;
                return self.feed_inputs(n, keys, args, retract);
            }
            Err(e) if e.is_data_exception() => {}
            Err(e) => return Err(e),
        }
        for row in 0..n {
            let one = batch.slice(row, 1);
            match self.inputs(&one) {
                Ok((keys, args)) => {
                    self.rows_in += 1;
                    self.feed_inputs(1, keys, args, retract)?;
                }
                Err(e) if e.is_data_exception() => failed(&one, &e)?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The keys and arguments of the rows of `batch` that compute; the
    /// rows on which they fail with an error of the data go to
    /// `failed_rows` (+1, or -1 when `retract`). None when no row is left.
    fn computable_inputs(
        &mut self,
        batch: &RecordBatch,
        retract: bool,
    ) -> Result<Option<ComputedInputs>, SluiceError> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(None);
        }
        let computed = |(keys, args), rows| ComputedInputs {
            rows,
            keys,
            args,
            retract,
        };
        match self.inputs(batch) {
            Ok(inputs) => return Ok(Some(computed(inputs, n))),
            Err(e) if e.is_data_exception() => {}
            Err(e) => return Err(e),
        }
        let mut keep = Vec::with_capacity(n);
        for row in 0..n {
            let one = batch.slice(row, 1);
            match self.inputs(&one) {
                Ok(_) => keep.push(true),
                Err(e) if e.is_data_exception() => {
                    keep.push(false);
                    self.failed_rows
                        .push((one, if retract { -1 } else { 1 }, e));
                }
                Err(e) => return Err(e),
            }
        }
        let good = compute::filter_record_batch(batch, &arrow::array::BooleanArray::from(keep))?;
        if good.num_rows() == 0 {
            return Ok(None);
        }
        Ok(Some(computed(self.inputs(&good)?, good.num_rows())))
    }

    /// The GROUP BY keys and each aggregate's arguments (NULL where its
    /// FILTER leaves the row out) of the rows of `batch`: computing them
    /// changes nothing.
    #[allow(clippy::type_complexity)]
    fn inputs(
        &self,
        batch: &RecordBatch,
    ) -> Result<(Vec<ArrayRef>, Vec<Vec<ArrayRef>>), SluiceError> {
        let n = batch.num_rows();
        let key_columns = self.group_keys(batch)?;
        let mut args: Vec<Vec<ArrayRef>> = self
            .aggs
            .iter()
            .map(|a| {
                // An ordered aggregate (`string_agg(x, ',' ORDER BY y)`)
                // takes its ORDER BY columns after its arguments.
                a.expressions()
                    .iter()
                    .chain(a.order_bys().iter().map(|o| &o.expr))
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;
        for (columns, filter) in args.iter_mut().zip(&self.filters) {
            let Some(filter) = filter else { continue };
            let passed = filter.evaluate(batch)?.into_array(n)?;
            let passed = passed
                .as_any()
                .downcast_ref::<arrow::array::BooleanArray>()
                .ok_or_else(|| SluiceError::Internal("a FILTER that is not boolean".into()))?;
            // A row the filter does not pass (false or NULL) is a NULL
            // argument.
            let left_out: arrow::array::BooleanArray = (0..n)
                .map(|i| Some(!(passed.is_valid(i) && passed.value(i))))
                .collect();
            for c in columns.iter_mut() {
                *c = compute::nullif(c.as_ref(), &left_out)?;
            }
        }
        Ok((key_columns, args))
    }

    /// Feeds `n` rows' keys and arguments (see [`Self::inputs`]).
    fn feed_inputs(
        &mut self,
        n: usize,
        key_columns: Vec<ArrayRef>,
        args: Vec<Vec<ArrayRef>>,
        retract: bool,
    ) -> Result<(), SluiceError> {
        if let Some(groups) = self.vectorized.as_mut() {
            if retract {
                return Err(SluiceError::Internal(
                    "rows taken back from an aggregate over rows that stay".into(),
                ));
            }
            groups.update(&key_columns, &args)?;
            if let Some((group_index, _)) = self.closing {
                let earliest = earliest_end(&key_columns[group_index])?;
                self.earliest_end = match (self.earliest_end, earliest) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            return Ok(());
        }
        let mut rows_of: Vec<(usize, Vec<u32>)> = Vec::new();
        let mut slot_of: HashMap<usize, usize, ahash::RandomState> = HashMap::default();
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
        // The arguments reordered once so that each group's rows are
        // contiguous; each group's accumulators then take a slice of them
        // (many groups get a few rows each per delta, and a gather per
        // group and argument cost more than the accumulating).
        let in_order = rows_of.len() == 1 && rows_of[0].1.len() == n;
        let bounds: Vec<(usize, usize, usize)> = {
            let mut start = 0;
            rows_of
                .iter()
                .map(|(g, idx)| {
                    let b = (*g, start, idx.len());
                    start += idx.len();
                    b
                })
                .collect()
        };
        let args: Vec<Vec<ArrayRef>> = match in_order {
            true => args,
            false => {
                let order = UInt32Array::from(
                    rows_of
                        .into_iter()
                        .flat_map(|(_, idx)| idx)
                        .collect::<Vec<u32>>(),
                );
                args.iter()
                    .map(|cols| {
                        cols.iter()
                            .map(|c| compute::take(c.as_ref(), &order, None))
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        for (g, start, len) in bounds {
            for (a, acc) in self.accumulators[g].iter_mut().enumerate() {
                let taken: Vec<ArrayRef> = args[a].iter().map(|c| c.slice(start, len)).collect();
                if retract {
                    acc.retract_batch(&taken)?;
                } else {
                    acc.update_batch(&taken)?;
                }
            }
            self.group_rows[g] += if retract { -(len as i64) } else { len as i64 };
        }
        Ok(())
    }

    /// The view's rows now: one per group (in batches, one per piece of
    /// the key table for vectorized groups).
    pub(crate) fn rows(&mut self, schema: &SchemaRef) -> Result<Vec<RecordBatch>, SluiceError> {
        if let Some(groups) = self.vectorized.as_mut() {
            return groups
                .read()?
                .into_iter()
                .map(|(piece, values)| {
                    let mut columns = piece.keys;
                    columns.extend(values);
                    self.finish(schema, columns, true)
                })
                .collect();
        }
        let all = self.shown(0..self.accumulators.len());
        Ok(vec![self.rows_of(schema, &all, true)?])
    }

    /// Emits the rows of the windows whose `window_end` is at or before
    /// `threshold_us`, and drops their state.
    pub(crate) fn close_windows(
        &mut self,
        schema: &SchemaRef,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<Option<RecordBatch>, SluiceError> {
        if self.vectorized.is_some() {
            return self.close_vectorized_windows(schema, group_index, threshold_us);
        }
        let closed = self.closed_groups(group_index, threshold_us)?;
        if closed.is_empty() {
            return Ok(None);
        }
        let batch = self.rows_of(schema, &closed, true)?;
        self.drop_groups(&closed);
        Ok(Some(batch))
    }

    /// Drops the groups of the windows whose key `group_index` is at or
    /// before `threshold_us`, emitting nothing (inside the graph, where
    /// their rows went out as they changed).
    fn drop_closed_windows(
        &mut self,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<(), SluiceError> {
        let closed = self.closed_groups(group_index, threshold_us)?;
        self.drop_groups(&closed);
        Ok(())
    }

    fn drop_groups(&mut self, groups: &[usize]) {
        if groups.is_empty() {
            return;
        }
        let mut keep = vec![true; self.keys.len()];
        for &g in groups {
            keep[g] = false;
        }
        self.retain_groups(&keep);
    }

    /// The groups whose key `group_index` (a window's end) is at or before
    /// `threshold_us`.
    fn closed_groups(
        &self,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<Vec<usize>, SluiceError> {
        if self.keys.is_empty() {
            return Ok(Vec::new());
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
        Ok((0..ends.len())
            .filter(|&g| ends.is_valid(g) && ends.value(g) <= threshold_us)
            .collect())
    }

    /// The pre-aggregation rows whose window is still open.
    pub(crate) fn rows_of_open_windows(
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
        self.finish(schema, columns, having)
    }

    /// The view's rows from the aggregate's (the group keys, then each
    /// aggregate's value): HAVING applied when `having`, then the
    /// projection.
    fn finish(
        &self,
        schema: &SchemaRef,
        columns: Vec<ArrayRef>,
        having: bool,
    ) -> Result<RecordBatch, SluiceError> {
        let n = match columns.first() {
            Some(c) => c.len(),
            None => 0,
        };
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

    /// [`AggregatePipeline::close_windows`] for vectorized groups: the
    /// closed groups leave in one pass.
    fn close_vectorized_windows(
        &mut self,
        schema: &SchemaRef,
        group_index: usize,
        threshold_us: i64,
    ) -> Result<Option<RecordBatch>, SluiceError> {
        if self.earliest_end.is_none_or(|e| e > threshold_us) {
            return Ok(None);
        }
        let Some(groups) = self.vectorized.as_mut() else {
            return Ok(None);
        };
        let mut earliest_open = None;
        let closed = groups.split(|keys| {
            let ends = as_micros(&keys[group_index])?;
            Ok((0..ends.len())
                .map(|g| {
                    let closed = ends.is_valid(g) && ends.value(g) <= threshold_us;
                    if !closed && ends.is_valid(g) {
                        earliest_open = Some(
                            earliest_open.map_or(ends.value(g), |e: i64| e.min(ends.value(g))),
                        );
                    }
                    Some(closed)
                })
                .collect())
        })?;
        self.earliest_end = earliest_open;
        if closed.len() == 0 {
            return Ok(None);
        }
        let values = groups.evaluate(&closed)?;
        let mut columns = closed.keys;
        columns.extend(values);
        Ok(Some(self.finish(schema, columns, true)?))
    }

    /// Time spent copying columns the view's published rows held, since
    /// the last call.
    pub(crate) fn take_copy_time(&mut self) -> std::time::Duration {
        self.vectorized
            .as_mut()
            .map_or(std::time::Duration::ZERO, |g| g.take_copy_time())
    }

    /// The key table's pieces (of vectorized groups) grow to `bytes`.
    #[cfg(test)]
    pub(crate) fn set_piece_bytes(&mut self, bytes: usize) {
        if let Some(groups) = self.vectorized.as_mut() {
            groups.set_piece_bytes(bytes);
        }
    }

    /// The plan that turns a delta into pre-aggregation rows.
    #[cfg(test)]
    pub(crate) fn input(&self) -> Arc<dyn ExecutionPlan> {
        self.input.clone()
    }

    /// For the audit: whether a fresh accumulator of the first aggregate,
    /// fed these pre-aggregation rows, changes its result or its state by
    /// reporting `state()`.
    #[cfg(test)]
    pub(crate) fn state_is_consumed_by_state(
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

    pub(crate) fn groups(&self) -> usize {
        match &self.vectorized {
            Some(groups) => groups.len(),
            None => self.accumulators.len(),
        }
    }

    /// The open groups as one batch for a checkpoint: the view's current
    /// rows of those groups (readable by any Parquet reader), then the group
    /// keys and every accumulator's `state()`, from which
    /// [`AggregatePipeline::restore_groups`] rebuilds the accumulators.
    pub(crate) fn state_batches(
        &mut self,
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        if self.vectorized.is_some() {
            return self.vectorized_state_batches(schema);
        }
        self.drop_empty_groups();
        let n = self.accumulators.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let all: Vec<usize> = (0..n).collect();
        // One row per group: HAVING does not apply to the saved state.
        // Rows that do not compute now (a division by a count that is
        // zero) are saved as NULLs: a restart computes them again from the
        // state, which is whole.
        let current = match self.rows_of(schema, &all, false) {
            Ok(rows) => rows,
            Err(e) if e.is_data_exception() => {
                let nullable: Vec<Field> = schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect();
                RecordBatch::try_new_with_options(
                    Arc::new(Schema::new(nullable)),
                    schema
                        .fields()
                        .iter()
                        .map(|f| arrow::array::new_null_array(f.data_type(), n))
                        .collect(),
                    &RecordBatchOptions::new().with_row_count(Some(n)),
                )?
            }
            Err(e) => return Err(e),
        };
        let keys = match self.group_exprs.is_empty() {
            true => Vec::new(),
            false => self
                .converter
                .convert_rows(self.keys.iter().map(|k| k.row()))?,
        };
        let mut captured: Vec<Vec<ArrayRef>> = Vec::with_capacity(self.aggs.len());
        for a in 0..self.aggs.len() {
            let states = self
                .accumulators
                .iter_mut()
                .map(|accs| accs[a].state())
                .collect::<Result<Vec<Vec<ScalarValue>>, _>>()?;
            let width = states.first().map(|s| s.len()).unwrap_or(0);
            captured.push(
                (0..width)
                    .map(|j| ScalarValue::iter_to_array(states.iter().map(|s| s[j].clone())))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
        // `state()` may move an accumulator's contents out (DataFusion's
        // COUNT(DISTINCT) over strings takes its set), so the live
        // accumulators are rebuilt from what was captured, exactly as a
        // restart rebuilds them: taking a checkpoint never changes the view.
        for g in 0..n {
            self.accumulators[g] = self.new_accumulators()?;
            self.merge_states(g, &captured, g)?;
        }
        let group_rows: Option<ArrayRef> = match self.retracting {
            true => Some(Arc::new(Int64Array::from(self.group_rows.clone()))),
            false => None,
        };
        checkpoint_batch(schema, current, keys, group_rows, captured).map(|b| vec![b])
    }

    /// Forgets the groups whose rows were all taken back, key and
    /// accumulators: they are no rows of the view, a later row of the same
    /// key starts the group afresh, and a deleted key is then in no
    /// checkpoint (nor held in memory). Runs at checkpoints, between deltas.
    fn drop_empty_groups(&mut self) {
        if !self.retracting || self.group_exprs.is_empty() || self.group_rows.iter().all(|&r| r > 0)
        {
            return;
        }
        let keep: Vec<bool> = self.group_rows.iter().map(|&r| r > 0).collect();
        self.retain_groups(&keep);
    }

    /// Keeps the groups `g` with `keep[g]` (in order), and indexes them
    /// again.
    fn retain_groups(&mut self, keep: &[bool]) {
        let mut keep_keys = Vec::new();
        let mut keep_accs = Vec::new();
        let mut keep_rows = Vec::new();
        for (((key, accs), rows), kept) in self
            .keys
            .drain(..)
            .zip(self.accumulators.drain(..))
            .zip(self.group_rows.drain(..))
            .zip(keep)
        {
            if *kept {
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
    }

    /// [`AggregatePipeline::state_batches`] of vectorized groups: the same
    /// columns, a batch per piece of the key table.
    fn vectorized_state_batches(
        &mut self,
        schema: &SchemaRef,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let Some(groups) = self.vectorized.as_mut() else {
            return Ok(Vec::new());
        };
        groups
            .read()?
            .into_iter()
            .map(|(piece, values)| {
                let mut current = piece.keys.clone();
                current.extend(values);
                let current = self.finish(schema, current, false)?;
                checkpoint_batch(schema, current, piece.keys, None, piece.states)
            })
            .collect()
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

    /// Rebuilds the open groups from a batch written by `state_batches`.
    pub(crate) fn restore_groups(&mut self, batch: &RecordBatch) -> Result<(), SluiceError> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .cloned()
                .ok_or_else(|| SluiceError::Internal(format!("checkpoint lacks column {name}")))
        };
        let keys = (0..self.group_exprs.len())
            .map(|i| column(&format!("__key_{i}")).map(canonical_key))
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
        if let Some(groups) = self.vectorized.as_mut() {
            // The next watermark looks at every restored group's window.
            self.earliest_end = Some(i64::MIN);
            return groups.load(&GroupColumns { keys, states });
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

impl Operator for AggregatePipeline {
    /// Inside the graph, a global aggregate's one row (unless HAVING
    /// leaves it out): the row every later delta takes back first.
    fn start(&mut self) -> Result<Delta, SluiceError> {
        let Some(schema) = self.emits_changes.clone() else {
            return Ok(Delta::default());
        };
        if !self.group_exprs.is_empty() {
            return Ok(Delta::default());
        }
        let row = self.visible_rows(&schema, &[0])?;
        self.rows_out += row.num_rows() as u64;
        Ok(Delta {
            insert: vec![row],
            retract: Vec::new(),
        })
    }

    /// Feeds the rows; emits nothing, since the view reads its groups
    /// whole ([`AggregatePipeline::rows`]).
    fn apply(&mut self, _input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        // Every batch's keys and arguments first, so that a row that fails
        // is set aside before anything changes.
        let mut computed = Vec::with_capacity(delta.insert.len() + delta.retract.len());
        for (b, retract) in delta
            .insert
            .iter()
            .map(|b| (b, false))
            .chain(delta.retract.iter().map(|b| (b, true)))
        {
            computed.extend(self.computable_inputs(b, retract)?);
        }
        let Some(schema) = self.emits_changes.clone() else {
            for c in computed {
                self.rows_in += c.rows as u64;
                self.feed_inputs(c.rows, c.keys, c.args, c.retract)?;
            }
            return Ok(Delta::default());
        };
        let mut before = Vec::new();
        for c in &computed {
            self.groups_of_keys(&c.keys, c.rows, &mut before)?;
        }
        before.sort_unstable();
        before.dedup();
        let old = self.visible_rows(&schema, &before)?;
        let existed = self.keys.len();
        for c in computed {
            self.rows_in += c.rows as u64;
            self.feed_inputs(c.rows, c.keys, c.args, c.retract)?;
        }
        // The groups changed: those the rows were in, and the ones they
        // made (new groups are added at the end).
        let mut after = before;
        after.extend(existed..self.keys.len());
        let new = self.visible_rows(&schema, &after)?;
        self.rows_out += (old.num_rows() + new.num_rows()) as u64;
        Ok(Delta {
            insert: vec![new],
            retract: vec![old],
        })
    }

    /// Emits the final rows of the windows the watermark closed.
    fn advance_watermark(
        &mut self,
        _input: usize,
        watermark_us: i64,
    ) -> Result<Delta, SluiceError> {
        let Some((group_index, lateness_us)) = self.closing else {
            return Ok(Delta::default());
        };
        // A window is closed once its end is at or below the threshold;
        // its key is that far before its end.
        let threshold = watermark_us
            .saturating_sub(lateness_us)
            .saturating_sub(self.closing_offset_us);
        if self.emits_changes.is_some() {
            self.drop_closed_windows(group_index, threshold)?;
            return Ok(Delta::default());
        }
        let schema = self.view_schema.clone();
        Ok(Delta {
            insert: self
                .close_windows(&schema, group_index, threshold)?
                .into_iter()
                .collect(),
            retract: Vec::new(),
        })
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let schema = self.view_schema.clone();
        Ok(vec![self.state_batches(&schema)?])
    }

    fn take_failed_rows(&mut self) -> Vec<super::operator::FailedRow> {
        std::mem::take(&mut self.failed_rows)
    }

    fn restore(&mut self, _part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        rows.iter().try_for_each(|b| self.restore_groups(b))
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "aggregate",
            description: self.description.clone(),
            state_rows: self.groups() as u64,
            state_bytes: match &self.vectorized {
                Some(groups) => groups.size() as u64,
                None => self
                    .accumulators
                    .iter()
                    .flatten()
                    .map(|a| a.size() as u64)
                    .sum(),
            },
            input_rows: self.rows_in,
            output_rows: match self.emits_changes {
                Some(_) => self.rows_out,
                None => self.groups() as u64,
            },
        }
    }
}

/// A `window_end` column as microseconds.
fn as_micros(column: &ArrayRef) -> Result<arrow::array::TimestampMicrosecondArray, SluiceError> {
    let ends = compute::cast(
        column,
        &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
    )?;
    ends.as_any()
        .downcast_ref::<arrow::array::TimestampMicrosecondArray>()
        .cloned()
        .ok_or_else(|| SluiceError::Internal("window_end is not a timestamp".into()))
}

/// The earliest `window_end` of a delta's rows.
fn earliest_end(column: &ArrayRef) -> Result<Option<i64>, SluiceError> {
    Ok(compute::min(&as_micros(column)?))
}

/// The batch a checkpoint writes for an aggregate: the view's current row
/// of each group (readable by any Parquet reader), then the group keys
/// (`__key_i`), the rows per group of a retracting input (`__rows`), and
/// each aggregate's state columns (`__state_a_j`).
fn checkpoint_batch(
    schema: &SchemaRef,
    current: RecordBatch,
    keys: Vec<ArrayRef>,
    group_rows: Option<ArrayRef>,
    states: Vec<Vec<ArrayRef>>,
) -> Result<RecordBatch, SluiceError> {
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let mut columns: Vec<ArrayRef> = current.columns().to_vec();
    let mut add = |name: String, column: ArrayRef| {
        fields.push(Field::new(name, column.data_type().clone(), true));
        columns.push(column);
    };
    for (i, k) in keys.into_iter().enumerate() {
        add(format!("__key_{i}"), k);
    }
    if let Some(rows) = group_rows {
        add("__rows".to_string(), rows);
    }
    for (a, of_agg) in states.into_iter().enumerate() {
        for (j, column) in of_agg.into_iter().enumerate() {
            add(format!("__state_{a}_{j}"), column);
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}
