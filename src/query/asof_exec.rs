//! The batch ASOF join: a merge of both inputs sorted by (keys, time).
//!
//! Each input is required sorted (DataFusion sorts it, spilling within
//! the query memory) and, when there are keys, hash-partitioned by them,
//! so partitions run side by side. Walking the left input in order, the
//! right cursor only moves forward: looking back (`>=`, `>`) the match is
//! the last right row passed (rows of equal time sorted by `_partition,
//! _offset`, so the latest wins); looking ahead (`<=`, `<`) it is the
//! first right row not passed (rows of equal time sorted latest first).
//! With `as_known_at`, a passed row not yet ingested at the probe's time
//! waits in a heap (by ingestion time) until a later probe knows it, and
//! the match is the greatest (time, ties) among the rows known.
//!
//! State: the current right batch and the batches a match still points
//! into (and, as known at, the rows waiting).

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{cast, interleave, take};
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use datafusion::arrow::compute::SortOptions;
use datafusion::common::{DFSchema, Result};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::{
    EquivalenceProperties, LexRequirement, OrderingRequirements, PhysicalExpr,
    PhysicalSortRequirement,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use super::asof_join::AsofJoinNode;

/// What an ASOF join computes, over physical expressions of its inputs.
#[derive(Debug)]
pub struct AsofSpec {
    pub keep_unmatched: bool,
    pub op: Operator,
    pub left_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub right_keys: Vec<Arc<dyn PhysicalExpr>>,
    pub left_time: Arc<dyn PhysicalExpr>,
    pub right_time: Arc<dyn PhysicalExpr>,
    pub bound: Option<Arc<dyn PhysicalExpr>>,
    pub bound_strict: bool,
    pub known: Option<(Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>)>,
    pub ties: Vec<Arc<dyn PhysicalExpr>>,
    /// How far before a probe's time (after it, looking ahead) its bound
    /// is, when that is a constant.
    pub lookback_us: Option<i64>,
    pub key_types: Vec<DataType>,
    pub time_type: DataType,
    pub described: String,
}

impl AsofSpec {
    /// The node's expressions planned over its inputs' schemas.
    pub fn plan(
        node: &AsofJoinNode,
        left: &DFSchema,
        right: &DFSchema,
        planned: impl Fn(&Expr, &DFSchema) -> Result<Arc<dyn PhysicalExpr>>,
    ) -> Result<AsofSpec> {
        let all = |exprs: &[Expr], s: &DFSchema| -> Result<Vec<Arc<dyn PhysicalExpr>>> {
            exprs.iter().map(|e| planned(e, s)).collect()
        };
        let left_arrow = left.as_arrow();
        let left_keys = all(&node.left_keys, left)?;
        let key_types = left_keys
            .iter()
            .map(|k| k.data_type(left_arrow))
            .collect::<Result<Vec<_>>>()?;
        let left_time = planned(&node.left_time, left)?;
        Ok(AsofSpec {
            keep_unmatched: node.keep_unmatched,
            op: node.op,
            right_keys: all(&node.right_keys, right)?,
            time_type: left_time.data_type(left_arrow)?,
            left_keys,
            key_types,
            left_time,
            right_time: planned(&node.right_time, right)?,
            bound: node.bound.as_ref().map(|b| planned(b, left)).transpose()?,
            bound_strict: node.bound_strict,
            known: match &node.known {
                Some((l, r)) => Some((planned(l, left)?, planned(r, right)?)),
                None => None,
            },
            ties: all(&node.ties, right)?,
            lookback_us: node.lookback_us,
            described: node.describe(),
        })
    }

    pub fn backward(&self) -> bool {
        matches!(self.op, Operator::GtEq | Operator::Gt)
    }

    /// The order each input is read in.
    fn orderings(&self) -> [LexRequirement; 2] {
        let asc = SortOptions {
            descending: false,
            nulls_first: true,
        };
        let ties = SortOptions {
            descending: !self.backward(),
            nulls_first: true,
        };
        let req = |e: &Arc<dyn PhysicalExpr>, o: SortOptions| {
            PhysicalSortRequirement::new(e.clone(), Some(o))
        };
        let mut left: Vec<_> = self.left_keys.iter().map(|k| req(k, asc)).collect();
        left.push(req(&self.left_time, asc));
        let mut right: Vec<_> = self.right_keys.iter().map(|k| req(k, asc)).collect();
        right.push(req(&self.right_time, asc));
        right.extend(self.ties.iter().map(|t| req(t, ties)));
        let lex = |v: Vec<PhysicalSortRequirement>| LexRequirement::new(v).ok_or(());
        // Never empty: each holds the time.
        match (lex(left), lex(right)) {
            (Ok(l), Ok(r)) => [l, r],
            _ => unreachable!("an ASOF join's ordering holds its time"),
        }
    }
}

/// The batch ASOF join (see the module header).
#[derive(Debug)]
pub struct AsofJoinExec {
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    spec: Arc<AsofSpec>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl AsofJoinExec {
    pub fn try_new(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
        spec: Arc<AsofSpec>,
        schema: SchemaRef,
    ) -> Result<AsofJoinExec> {
        let partitioning = match spec.left_keys.is_empty() {
            true => Partitioning::UnknownPartitioning(1),
            false => left.properties().output_partitioning().clone(),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(AsofJoinExec {
            left,
            right,
            spec,
            schema,
            properties,
        })
    }
}

impl DisplayAs for AsofJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "AsofJoinExec: {}", self.spec.described)
    }
}

#[allow(deprecated)]
impl ExecutionPlan for AsofJoinExec {
    fn name(&self) -> &str {
        "AsofJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        self.input_distribution_requirements().into_per_child()
    }

    fn input_distribution_requirements(
        &self,
    ) -> datafusion::physical_plan::distribution_requirements::InputDistributionRequirements {
        use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
        match self.spec.left_keys.is_empty() {
            true => InputDistributionRequirements::new(vec![Distribution::SinglePartition; 2]),
            // Partition i of each side holds the same keys.
            false => InputDistributionRequirements::co_partitioned(vec![
                Distribution::HashPartitioned(self.spec.left_keys.clone()),
                Distribution::HashPartitioned(self.spec.right_keys.clone()),
            ]),
        }
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        let [l, r] = self.spec.orderings();
        vec![
            Some(OrderingRequirements::from(l)),
            Some(OrderingRequirements::from(r)),
        ]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.left, &self.right]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(
            &Arc<dyn PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        let s = &self.spec;
        let all = s
            .left_keys
            .iter()
            .chain(&s.right_keys)
            .chain([&s.left_time, &s.right_time])
            .chain(&s.bound)
            .chain(s.known.iter().flat_map(|(l, r)| [l, r]))
            .chain(&s.ties);
        datafusion::physical_plan::apply_expression_roots(all, f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [left, right]: [Arc<dyn ExecutionPlan>; 2] = children
            .try_into()
            .map_err(|_| DataFusionError::Internal("ASOF JOIN has two inputs".into()))?;
        Ok(Arc::new(AsofJoinExec::try_new(
            left,
            right,
            self.spec.clone(),
            self.schema.clone(),
        )?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let left = self.left.execute(partition, context.clone())?;
        let right = self.right.execute(partition, context)?;
        let merge = AsofMerge::new(self.spec.clone(), self.schema.clone(), right)?;
        let stream =
            futures::stream::try_unfold((left, merge), |(mut left, mut merge)| async move {
                loop {
                    let Some(batch) = left.next().await.transpose()? else {
                        return Ok(None);
                    };
                    let out = merge.probe(&batch).await?;
                    if out.num_rows() > 0 {
                        return Ok(Some((out, (left, merge))));
                    }
                }
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}

/// A right batch being read: its rows in row form.
struct RightBatch {
    id: u64,
    batch: RecordBatch,
    keys: Rows,
    times: Rows,
    /// Key or time NULL: never a match.
    skip: Vec<bool>,
    /// Ingestion times in µs (as known at).
    ingested: Option<Vec<Option<i64>>>,
    /// (time, ties) in row form (as known at).
    ranks: Option<Rows>,
    pos: usize,
}

/// A right row a probe may match.
#[derive(Clone)]
struct Candidate {
    batch: u64,
    row: usize,
    /// Its time in row form; None while it is in the cursor's batch (read
    /// there: most rows passed are never a probe's match, and owning each
    /// one's time cost an allocation per right row).
    time: Option<OwnedRow>,
    rank: Option<OwnedRow>,
}

/// A passed right row not yet ingested at the probes' times.
struct Waiting {
    ingested: i64,
    candidate: Candidate,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        self.ingested == other.ingested
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        self.ingested.cmp(&other.ingested)
    }
}

/// The merge's state over one partition.
struct AsofMerge {
    spec: Arc<AsofSpec>,
    schema: SchemaRef,
    right: SendableRecordBatchStream,
    right_done: bool,
    current: Option<RightBatch>,
    next_id: u64,
    /// Batches matches point into, by id.
    batches: HashMap<u64, RecordBatch>,
    keys: RowConverter,
    times: RowConverter,
    ranks: Option<RowConverter>,
    /// The key the best candidate and the waiting rows are of.
    group: Option<OwnedRow>,
    best: Option<Candidate>,
    waiting: BinaryHeap<Reverse<Waiting>>,
    /// One row of NULLs of the right input's columns.
    nulls: RecordBatch,
}

fn evaluate(e: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    e.evaluate(batch)?.into_array(batch.num_rows())
}

/// Times as µs since the epoch (a timestamp's zone is its instant's).
pub(crate) fn micros(column: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let as_us = match column.data_type() {
        DataType::Timestamp(_, tz) => cast(
            column,
            &DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        )?,
        _ => cast(column, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
    };
    let ints = cast(&as_us, &DataType::Int64)?;
    Ok(ints.as_primitive::<Int64Type>().iter().collect())
}

/// Rows with a NULL in one of `columns`.
fn nulls_of(columns: &[ArrayRef], n: usize) -> Vec<bool> {
    (0..n)
        .map(|i| columns.iter().any(|c| c.is_null(i)))
        .collect()
}

/// The join's keys of a batch, as one column at least (a constant when
/// there are no keys), each float's -0 made +0 as `=` reads it.
fn key_columns(keys: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    if keys.is_empty() {
        return Ok(vec![Arc::new(arrow::array::BooleanArray::from(vec![
            true;
            batch
                .num_rows(
                )
        ]))]);
    }
    keys.iter()
        .map(|k| evaluate(k, batch).map(super::join_keys::canonical_key))
        .collect()
}

/// A right row of the cursor's batch as a candidate; `own`: with its
/// time copied out (a row kept past the batch, as a waiting one is).
fn candidate_at(c: &RightBatch, at: usize, own: bool) -> Candidate {
    Candidate {
        batch: c.id,
        row: at,
        time: own.then(|| c.times.row(at).owned()),
        rank: c.ranks.as_ref().map(|r| r.row(at).owned()),
    }
}

impl AsofMerge {
    fn new(
        spec: Arc<AsofSpec>,
        schema: SchemaRef,
        right: SendableRecordBatchStream,
    ) -> Result<AsofMerge> {
        let key_types = match spec.key_types.is_empty() {
            true => vec![DataType::Boolean],
            false => spec.key_types.clone(),
        };
        let keys = RowConverter::new(key_types.into_iter().map(SortField::new).collect())?;
        let times = RowConverter::new(vec![SortField::new(spec.time_type.clone())])?;
        let ranks = match &spec.known {
            Some(_) => {
                let rs = right.schema();
                let mut fields = vec![SortField::new(spec.time_type.clone())];
                for t in &spec.ties {
                    fields.push(SortField::new(t.data_type(&rs)?));
                }
                Some(RowConverter::new(fields)?)
            }
            None => None,
        };
        let width = schema.fields().len() - right.schema().fields().len();
        let nulls = RecordBatch::try_new_with_options(
            super::join_keys::nullable(&arrow::datatypes::Schema::new(
                schema.fields()[width..].to_vec(),
            )),
            schema.fields()[width..]
                .iter()
                .map(|f| new_null_array(f.data_type(), 1))
                .collect(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        Ok(AsofMerge {
            spec,
            schema,
            right,
            right_done: false,
            current: None,
            next_id: 0,
            batches: HashMap::new(),
            keys,
            times,
            ranks,
            group: None,
            best: None,
            waiting: BinaryHeap::new(),
            nulls,
        })
    }

    /// Makes `current` a batch with rows left, reading more; false at the end.
    async fn fill(&mut self) -> Result<bool> {
        loop {
            if self
                .current
                .as_ref()
                .is_some_and(|c| c.pos < c.batch.num_rows())
            {
                return Ok(true);
            }
            // The cursor leaves its batch: the best candidate keeps its
            // time.
            if let (Some(best), Some(c)) = (self.best.as_mut(), self.current.as_ref()) {
                if best.time.is_none() && best.batch == c.id {
                    best.time = Some(c.times.row(best.row).owned());
                }
            }
            if self.right_done {
                return Ok(false);
            }
            let Some(batch) = self.right.next().await.transpose()? else {
                self.right_done = true;
                self.current = None;
                return Ok(false);
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let spec = &self.spec;
            let key_columns = key_columns(&spec.right_keys, &batch)?;
            let time = evaluate(&spec.right_time, &batch)?;
            let mut skip = nulls_of(&key_columns, batch.num_rows());
            for (i, s) in skip.iter_mut().enumerate() {
                *s |= time.is_null(i);
            }
            let ingested = match &spec.known {
                Some((_, r)) => Some(micros(&evaluate(r, &batch)?)?),
                None => None,
            };
            let ranks = match &self.ranks {
                Some(conv) => {
                    let mut cols = vec![time.clone()];
                    for t in &spec.ties {
                        cols.push(evaluate(t, &batch)?);
                    }
                    Some(conv.convert_columns(&cols)?)
                }
                None => None,
            };
            let id = self.next_id;
            self.next_id += 1;
            // Kept while a candidate or the cursor points into it.
            self.batches.insert(id, batch.clone());
            self.current = Some(RightBatch {
                id,
                keys: self.keys.convert_columns(&key_columns)?,
                times: self.times.convert_columns(&[time])?,
                skip,
                ingested,
                ranks,
                pos: 0,
                batch,
            });
        }
    }

    /// Moves the right cursor past its row.
    fn step(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.pos += 1;
        }
    }

    fn offer(&mut self, candidate: Candidate) {
        let better = match (&self.best, &candidate.rank) {
            (Some(best), Some(rank)) => best.rank.as_ref().is_none_or(|b| rank.row() > b.row()),
            _ => true,
        };
        if better {
            self.best = Some(candidate);
        }
    }

    /// The left batch's rows with their matches.
    async fn probe(&mut self, batch: &RecordBatch) -> Result<RecordBatch> {
        let spec = self.spec.clone();
        let n = batch.num_rows();
        let key_columns = key_columns(&spec.left_keys, batch)?;
        let time = evaluate(&spec.left_time, batch)?;
        let mut skip = nulls_of(&key_columns, n);
        for (i, s) in skip.iter_mut().enumerate() {
            *s |= time.is_null(i);
        }
        let keys = self.keys.convert_columns(&key_columns)?;
        let times = self.times.convert_columns(&[time])?;
        let bounds = match &spec.bound {
            Some(b) => {
                let b = evaluate(b, batch)?;
                let nulls: Vec<bool> = (0..n).map(|i| b.is_null(i)).collect();
                Some((self.times.convert_columns(&[b])?, nulls))
            }
            None => None,
        };
        let known = match &spec.known {
            Some((l, _)) => Some(micros(&evaluate(l, batch)?)?),
            None => None,
        };
        let backward = spec.backward();
        let mut matched: Vec<Option<(u64, usize)>> = Vec::with_capacity(n);
        for i in 0..n {
            if skip[i] {
                matched.push(None);
                continue;
            }
            let key = keys.row(i);
            let t = times.row(i);
            if self.group.as_ref().is_none_or(|g| g.row() != key) {
                self.group = Some(key.owned());
                self.best = None;
                self.waiting.clear();
            }
            let known_at = known.as_ref().map(|k| k[i]);
            // As known at: rows passed earlier that this probe knows.
            if let Some(Some(at)) = known_at {
                while self.waiting.peek().is_some_and(|w| w.0.ingested <= at) {
                    if let Some(Reverse(w)) = self.waiting.pop() {
                        self.offer(w.candidate);
                    }
                }
            }
            let mut ahead: Option<Candidate> = None;
            while self.fill().await? {
                let Some(c) = self.current.as_ref() else {
                    break;
                };
                let r = c.pos;
                if c.skip[r] {
                    self.step();
                    continue;
                }
                match c.keys.row(r).cmp(&key) {
                    Ordering::Less => {
                        self.step();
                        continue;
                    }
                    Ordering::Greater => break,
                    Ordering::Equal => {}
                }
                let rt = c.times.row(r);
                if backward {
                    let passes = match spec.op {
                        Operator::GtEq => rt <= t,
                        _ => rt < t,
                    };
                    if !passes {
                        break;
                    }
                    let ingested = c.ingested.as_ref().map(|g| g[r]);
                    match (ingested, known_at) {
                        (None, _) => self.best = Some(candidate_at(c, r, false)),
                        (Some(Some(ing)), Some(Some(at))) if ing <= at => {
                            let candidate = candidate_at(c, r, true);
                            self.offer(candidate)
                        }
                        (Some(Some(ing)), _) => self.waiting.push(Reverse(Waiting {
                            ingested: ing,
                            candidate: candidate_at(c, r, true),
                        })),
                        // Never ingested: never known.
                        (Some(None), _) => {}
                    }
                    self.step();
                } else {
                    let behind = match spec.op {
                        Operator::LtEq => rt < t,
                        _ => rt <= t,
                    };
                    if behind {
                        self.step();
                        continue;
                    }
                    ahead = Some(candidate_at(c, r, false));
                    break;
                }
            }
            let found = match backward {
                true => match known_at {
                    Some(None) => None,
                    _ => self.best.clone(),
                },
                false => ahead,
            };
            let found = found.filter(|c| match &bounds {
                None => true,
                Some((_, nulls)) if nulls[i] => false,
                Some((b, _)) => {
                    // A candidate without its time is in the cursor's batch.
                    let rt = match (&c.time, &self.current) {
                        (Some(t), _) => t.row(),
                        (None, Some(cur)) => cur.times.row(c.row),
                        (None, None) => return false,
                    };
                    let b = b.row(i);
                    match (backward, spec.bound_strict) {
                        (true, false) => rt >= b,
                        (true, true) => rt > b,
                        (false, false) => rt <= b,
                        (false, true) => rt < b,
                    }
                }
            });
            matched.push(found.map(|c| (c.batch, c.row)));
        }
        let out = self.assemble(batch, &matched)?;
        self.forget();
        Ok(out)
    }

    /// Drops batches no match, waiting row or cursor points into.
    fn forget(&mut self) {
        let mut live: Vec<u64> = self.best.iter().map(|b| b.batch).collect();
        live.extend(self.waiting.iter().map(|w| w.0.candidate.batch));
        live.extend(self.current.as_ref().map(|c| c.id));
        self.batches.retain(|id, _| live.contains(id));
    }

    fn assemble(
        &self,
        batch: &RecordBatch,
        matched: &[Option<(u64, usize)>],
    ) -> Result<RecordBatch> {
        let (left_columns, matched): (Vec<ArrayRef>, Vec<Option<(u64, usize)>>) =
            match self.spec.keep_unmatched {
                true => (batch.columns().to_vec(), matched.to_vec()),
                false => {
                    let rows: Vec<u32> = (0..matched.len())
                        .filter(|&i| matched[i].is_some())
                        .map(|i| i as u32)
                        .collect();
                    let idx = UInt32Array::from(rows);
                    (
                        batch
                            .columns()
                            .iter()
                            .map(|c| take(c, &idx, None))
                            .collect::<std::result::Result<_, _>>()?,
                        matched.iter().filter(|m| m.is_some()).cloned().collect(),
                    )
                }
            };
        // Source 0 is the row of NULLs; then each batch matched into.
        let mut sources: Vec<&RecordBatch> = vec![&self.nulls];
        let mut at: HashMap<u64, usize> = HashMap::new();
        let mut indices = Vec::with_capacity(matched.len());
        for m in &matched {
            indices.push(match m {
                None => (0, 0),
                Some((id, row)) => {
                    let s = match at.get(id) {
                        Some(s) => *s,
                        None => {
                            let b = self.batches.get(id).ok_or_else(|| {
                                DataFusionError::Internal("an ASOF match's batch is gone".into())
                            })?;
                            sources.push(b);
                            at.insert(*id, sources.len() - 1);
                            sources.len() - 1
                        }
                    };
                    (s, *row)
                }
            });
        }
        let mut columns = left_columns;
        for c in 0..self.nulls.num_columns() {
            let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
            columns.push(interleave(&arrays, &indices)?);
        }
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(matched.len())),
        )?)
    }
}
