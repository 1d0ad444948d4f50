//! A log table as a DataFusion table: scans read committed frames lazily,
//! seeking by `_partition` and `_offset` predicates; inserts go through
//! [`super::sink::LogSink`].

use std::fmt;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::stream;

use crate::log::keyed::{latest_records, staged_latest, KeyCodec, KeySet};
use crate::log::{FrameMeta, Snapshot, StagedWrites, TableLog};

use super::sink::LogSink;

pub struct LogTableProvider {
    table: Arc<TableLog>,
    schema: SchemaRef,
    mode: ScanMode,
    /// Inserts leave out rows whose key is live (keyed tables).
    on_conflict_do_nothing: bool,
    /// Read at these ends (per partition) rather than the latest commit
    /// (`AS OF`): the rows below them, nothing a transaction staged.
    at: Option<Vec<u64>>,
}

/// Suffix of the name under which `INSERT ... ON CONFLICT DO NOTHING` into
/// a keyed table finds the table (the handler rewrites the target).
pub const ON_CONFLICT_DO_NOTHING: &str = "#on_conflict_do_nothing";

/// What a scan of the log returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScanMode {
    /// Every record (an append-only table).
    Records,
    /// The latest live record of each key (a keyed table).
    Latest,
    /// Every record with `_op` (`changelog(t)` of a keyed table).
    Changelog,
}

impl fmt::Debug for LogTableProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogTableProvider({})", self.table.def().name)
    }
}

impl LogTableProvider {
    /// The table it reads or writes.
    pub fn table_name(&self) -> String {
        self.table.name()
    }

    /// Whether it reads this table (not one dropped before it was created).
    pub fn reads(&self, table: &Arc<TableLog>) -> bool {
        Arc::ptr_eq(&self.table, table)
    }

    /// The column whose bounds frame headers keep (the watermark column, or
    /// the first timestamp column).
    fn time_column(&self) -> Option<String> {
        let def = self.table.def();
        def.event_time_index()
            .and_then(|i| def.columns.get(i))
            .map(|c| c.name.clone())
    }

    pub fn new(table: Arc<TableLog>) -> Self {
        // Every column is nullable to DataFusion: NOT NULL is enforced by the
        // sink with PostgreSQL's error, not by the planner.
        let q = table.def().query_schema();
        let fields: Vec<Field> = q
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let mode = if table.def().is_keyed() {
            ScanMode::Latest
        } else {
            ScanMode::Records
        };
        LogTableProvider {
            schema: Arc::new(Schema::new(fields)),
            table,
            mode,
            on_conflict_do_nothing: false,
            at: None,
        }
    }

    /// The table as it was when `ends` (per partition) were its ends.
    pub fn at(mut self, ends: Vec<u64>) -> Self {
        self.at = Some(ends);
        self
    }

    /// The keyed table whose latest records a scan of this reads (not
    /// its changelog, not the target of an INSERT).
    pub fn keyed_latest(&self) -> Option<&Arc<TableLog>> {
        (self.mode == ScanMode::Latest && !self.on_conflict_do_nothing).then_some(&self.table)
    }

    /// The table as the target of `INSERT ... ON CONFLICT DO NOTHING`.
    pub fn on_conflict_do_nothing(mut self) -> Self {
        self.on_conflict_do_nothing = true;
        self
    }

    /// `changelog(t)`: every record of a keyed table with `_op`.
    pub fn changelog(table: Arc<TableLog>) -> Self {
        LogTableProvider {
            schema: table.def().changelog_schema(),
            table,
            mode: ScanMode::Changelog,
            on_conflict_do_nothing: false,
            at: None,
        }
    }

    /// The names of the columns some index of the table leads with or
    /// holds.
    fn indexed_columns(&self) -> Vec<String> {
        let def = self.table.def();
        let mut names: Vec<String> = self
            .table
            .indexes()
            .iter()
            .flat_map(|i| i.columns().iter().map(|&c| def.columns[c].name.clone()))
            .collect();
        names.dedup();
        names
    }

    /// The offsets (per partition, in order) of the records below `ends`
    /// that the best index for `filters` finds; None when no index helps.
    async fn index_places(&self, filters: &[Expr], ends: &[u64]) -> Result<Option<Vec<Vec<u64>>>> {
        let def = self.table.def();
        let mut best = None;
        for index in self.table.indexes() {
            let columns: Vec<(String, arrow::datatypes::DataType)> = index
                .columns()
                .iter()
                .zip(index.types())
                .map(|(&c, ty)| (def.columns[c].name.clone(), ty.clone()))
                .collect();
            if let Some((used, ranges)) = super::index_bounds::key_ranges(filters, &columns) {
                if best.as_ref().is_none_or(|(u, _, _)| used > *u) {
                    best = Some((used, index, ranges));
                }
            }
        }
        let Some((_, index, ranges)) = best else {
            return Ok(None);
        };
        match index.places(&self.table, ends, &ranges).await {
            Ok(places) => Ok(Some(places)),
            // A frame the index could not read (a segment in the object
            // store that does not answer): the scan reads what it can and
            // says what is missing.
            Err(e) => {
                tracing::warn!(index = %index.name, error = %e, "index not used");
                Ok(None)
            }
        }
    }

    /// The latest live record of each key, from each partition's records
    /// below `ends`.
    fn scan_latest(
        &self,
        projection: &[usize],
        projected: SchemaRef,
        limit: Option<usize>,
        staged: &[RecordBatch],
        ends: Vec<u64>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The transaction's own records replace the committed versions of
        // the keys it wrote.
        let (hidden, staged_rows) = match staged.is_empty() {
            true => (None, None),
            false => {
                let external = crate::error::into_datafusion::<crate::log::LogError>;
                let codec = KeyCodec::new(&self.table.def()).map_err(external)?;
                let (keys, rows) =
                    staged_latest(&self.table.def(), &codec, staged).map_err(external)?;
                (Some(Arc::new(keys)), rows)
            }
        };
        let mut streams: Vec<Arc<dyn PartitionStream>> = ends
            .iter()
            .enumerate()
            .map(|(k, &end)| {
                Arc::new(LatestStream {
                    table: self.table.clone(),
                    partition: k,
                    end,
                    projection: projection.to_vec(),
                    schema: projected.clone(),
                    hidden: hidden.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        if let Some(rows) = staged_rows {
            streams.push(Arc::new(StagedStream::new(
                &self.table,
                vec![rows],
                projection,
                projected.clone(),
            )?));
        }
        streaming_scan(projected, streams, limit)
    }
}

/// A scan that runs one stream per partition.
pub(crate) fn streaming_scan(
    schema: SchemaRef,
    streams: Vec<Arc<dyn PartitionStream>>,
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(Arc::new(StreamingTableExec::try_new(
        schema,
        streams,
        None,
        [],
        false,
        limit,
    )?))
}

/// What the pushed-down filters allow: which partitions, which offsets.
#[derive(Debug, Clone)]
struct ScanBounds {
    partitions: Option<Vec<u32>>,
    lo: u64,
    hi: u64,
    /// A predicate on `_offset` set `lo`.
    lo_asked: bool,
    /// The column frame headers keep event-time bounds of, and the range
    /// (inclusive, microseconds) predicates on it allow.
    time_column: Option<String>,
    time_lo: i64,
    time_hi: i64,
}

tokio::task_local! {
    /// Notices a query's scans raise (reads below the retained start),
    /// sent to the client before the query's rows.
    pub static SCAN_NOTICES: Arc<parking_lot::Mutex<Vec<String>>>;
}

impl ScanBounds {
    fn from_filters(filters: &[Expr], time_column: Option<&str>) -> ScanBounds {
        let mut b = ScanBounds {
            partitions: None,
            lo: 0,
            hi: u64::MAX,
            lo_asked: false,
            time_column: time_column.map(str::to_string),
            time_lo: i64::MIN,
            time_hi: i64::MAX,
        };
        for f in filters {
            b.apply(f);
        }
        b
    }

    fn apply(&mut self, expr: &Expr) {
        match expr {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::And,
                right,
            }) => {
                self.apply(left);
                self.apply(right);
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if self.is_time_bound(left, right) => {
                let (col, ns, op) = match (column_name(left), literal_time_ns(right)) {
                    (Some(_), Some(v)) => (true, v, *op),
                    _ => match (literal_time_ns(left), op.swap()) {
                        (Some(v), Some(op)) => (true, v, op),
                        _ => (false, 0, *op),
                    },
                };
                // Stored times are whole microseconds: bounds round inward.
                let floor = i64::try_from(ns.div_euclid(1_000)).unwrap_or(i64::MAX);
                let ceil = i64::try_from(-(-ns).div_euclid(1_000)).unwrap_or(i64::MAX);
                if col {
                    let (lo, hi) = match op {
                        Operator::Eq => (Some(ceil), Some(floor)),
                        Operator::Gt => (Some(floor.saturating_add(1)), None),
                        Operator::GtEq => (Some(ceil), None),
                        Operator::Lt => (None, Some(ceil.saturating_sub(1))),
                        Operator::LtEq => (None, Some(floor)),
                        _ => (None, None),
                    };
                    if let Some(lo) = lo {
                        self.time_lo = self.time_lo.max(lo);
                    }
                    if let Some(hi) = hi {
                        self.time_hi = self.time_hi.min(hi);
                    }
                }
            }
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (col, op, value) = match (
                    column_name(left),
                    literal_i64(right),
                    column_name(right),
                    literal_i64(left),
                ) {
                    (Some(c), Some(v), _, _) => (c, *op, v),
                    (_, _, Some(c), Some(v)) => match op.swap() {
                        Some(op) => (c, op, v),
                        None => return,
                    },
                    _ => return,
                };
                match (col.as_str(), op) {
                    ("_partition", Operator::Eq) => {
                        let p = u32::try_from(value).ok();
                        self.partitions = Some(match (&self.partitions, p) {
                            (Some(ps), Some(p)) if ps.contains(&p) => vec![p],
                            (None, Some(p)) => vec![p],
                            _ => vec![],
                        });
                    }
                    ("_offset", Operator::Eq | Operator::GtEq | Operator::Gt) => {
                        self.lo_asked = true;
                        self.apply_offset(op, value);
                    }
                    ("_offset", _) => self.apply_offset(op, value),
                    _ => {}
                }
            }
            Expr::Between(between)
                if !between.negated && column_name(&between.expr).as_deref() == Some("_offset") =>
            {
                self.lo_asked = true;
                self.apply_between(between);
            }
            _ => {}
        }
    }

    /// True for a comparison of the event-time column with a timestamp.
    fn is_time_bound(&self, left: &Expr, right: &Expr) -> bool {
        let Some(time) = &self.time_column else {
            return false;
        };
        match (column_name(left), column_name(right)) {
            (Some(c), None) => &c == time && literal_time_ns(right).is_some(),
            (None, Some(c)) => &c == time && literal_time_ns(left).is_some(),
            _ => false,
        }
    }

    /// Frames whose event-time bounds can hold rows the predicates allow.
    fn may_hold(&self, meta: &FrameMeta) -> bool {
        if self.time_lo == i64::MIN && self.time_hi == i64::MAX {
            return true;
        }
        meta.header.max_event_us >= self.time_lo && meta.header.min_event_us <= self.time_hi
    }

    fn apply_offset(&mut self, op: Operator, value: i64) {
        match op {
            Operator::Eq => {
                let v = value.max(0) as u64;
                self.lo = self.lo.max(v);
                self.hi = self.hi.min(v.saturating_add(1));
            }
            Operator::GtEq => self.lo = self.lo.max(value.max(0) as u64),
            Operator::Gt => self.lo = self.lo.max(value.saturating_add(1).max(0) as u64),
            Operator::Lt => self.hi = self.hi.min(value.max(0) as u64),
            Operator::LtEq => self.hi = self.hi.min(value.saturating_add(1).max(0) as u64),
            _ => {}
        }
    }

    fn apply_between(&mut self, between: &datafusion::logical_expr::Between) {
        if let (Some(lo), Some(hi)) = (literal_i64(&between.low), literal_i64(&between.high)) {
            self.lo = self.lo.max(lo.max(0) as u64);
            self.hi = self.hi.min(hi.saturating_add(1).max(0) as u64);
        }
    }
}

fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Column(c) => Some(c.name.clone()),
        Expr::Cast(c) => column_name(&c.expr),
        Expr::TryCast(c) => column_name(&c.expr),
        _ => None,
    }
}

/// An integer constant (through casts), as a filter compares with it.
pub fn literal_i64(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::Int8(Some(x)) => Some(*x as i64),
            ScalarValue::Int16(Some(x)) => Some(*x as i64),
            ScalarValue::Int32(Some(x)) => Some(*x as i64),
            ScalarValue::Int64(Some(x)) => Some(*x),
            ScalarValue::UInt32(Some(x)) => Some(*x as i64),
            ScalarValue::UInt64(Some(x)) => i64::try_from(*x).ok(),
            _ => None,
        },
        Expr::Cast(c) => literal_i64(&c.expr),
        _ => None,
    }
}

/// A timestamp literal in nanoseconds.
fn literal_time_ns(e: &Expr) -> Option<i128> {
    match e {
        Expr::Literal(v, _) => match v {
            ScalarValue::TimestampSecond(Some(x), _) => Some(*x as i128 * 1_000_000_000),
            ScalarValue::TimestampMillisecond(Some(x), _) => Some(*x as i128 * 1_000_000),
            ScalarValue::TimestampMicrosecond(Some(x), _) => Some(*x as i128 * 1_000),
            ScalarValue::TimestampNanosecond(Some(x), _) => Some(*x as i128),
            _ => None,
        },
        Expr::Cast(c) => literal_time_ns(&c.expr),
        _ => None,
    }
}

fn is_seekable(e: &Expr, time_column: Option<&str>) -> bool {
    let b = ScanBounds::from_filters(std::slice::from_ref(e), time_column);
    b.partitions.is_some()
        || b.lo_asked
        || b.hi < u64::MAX
        || b.time_lo > i64::MIN
        || b.time_hi < i64::MAX
}

#[async_trait]
impl TableProvider for LogTableProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Inexact: the scan uses them to choose frames; DataFusion still
        // filters the rows. The latest version of a key needs every frame.
        let indexed = self.indexed_columns();
        Ok(filters
            .iter()
            .map(|f| {
                if (self.mode != ScanMode::Latest && is_seekable(f, self.time_column().as_deref()))
                    || (self.mode != ScanMode::Changelog
                        && super::index_bounds::usable(f, &indexed))
                {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let bounds = ScanBounds::from_filters(filters, self.time_column().as_deref());
        let projection: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let projected = Arc::new(self.schema.project(&projection)?);
        // Inside a transaction, its own records not yet committed.
        let staged: Vec<RecordBatch> = match self.mode {
            _ if self.at.is_some() => vec![],
            ScanMode::Changelog => vec![],
            _ => state
                .config()
                .get_extension::<parking_lot::Mutex<StagedWrites>>()
                .map(|s| s.lock().records(self.table.def().id).to_vec())
                .unwrap_or_default(),
        };
        // A REPEATABLE READ transaction reads what its snapshot holds.
        let ends = match (&self.at, state.config().get_extension::<Snapshot>()) {
            (Some(at), _) => at.clone(),
            (None, Some(snapshot)) => snapshot.ends(&self.table),
            (None, None) => self.table.commits().borrow().clone(),
        };
        // An index narrows the records to read; the filters still run.
        let mut indexed = match self.mode {
            ScanMode::Changelog => None,
            _ => self.index_places(filters, &ends).await?,
        };
        // A table keyed by row streams its frames, leaving out deleted
        // rows, tombstones and holes (its transaction's own writes aside).
        let deleted_rows = match self.mode == ScanMode::Latest && staged.is_empty() {
            true => self
                .table
                .deleted_rows(&ends)
                .await
                .map_err(crate::error::into_datafusion)?,
            false => None,
        };
        if self.mode == ScanMode::Latest && deleted_rows.is_none() {
            indexed = match indexed {
                Some(places) if staged.is_empty() => self
                    .table
                    .latest_live(&ends, &places)
                    .await
                    .map_err(crate::error::into_datafusion)?,
                _ => None,
            };
            if indexed.is_none() {
                return self.scan_latest(&projection, projected, limit, &staged, ends);
            }
        }
        let mut streams: Vec<Arc<dyn PartitionStream>> = Vec::new();
        for (k, part) in self.table.partitions().iter().enumerate() {
            if let Some(ps) = &bounds.partitions {
                if !ps.contains(&(k as u32)) {
                    continue;
                }
            }
            let unreadable = part.unreadable_segments();
            for key in &unreadable {
                let notice = format!(
                    "partition {k} of \"{}\": segment {key} in the object store is unreadable; its rows are missing",
                    self.table.def().name
                );
                let _ = SCAN_NOTICES.try_with(|n| n.lock().push(notice));
            }
            let start = part.start_offset();
            if unreadable.is_empty() && bounds.lo_asked && bounds.lo < start {
                part.note_read_below_start();
                let notice = format!(
                    "partition {k} of \"{}\": offsets below {start} were deleted by retention; reading from {start}",
                    self.table.def().name
                );
                let _ = SCAN_NOTICES.try_with(|n| n.lock().push(notice));
            }
            let end = ends.get(k).copied().unwrap_or(0);
            let mut frames = part.frames_in_range(bounds.lo, bounds.hi.min(end));
            frames.retain(|f| bounds.may_hold(f));
            let keep = indexed
                .as_mut()
                .map(|places| Arc::new(std::mem::take(&mut places[k])));
            if let Some(keep) = &keep {
                frames.retain(|f| {
                    let at = keep.partition_point(|&o| o < f.header.base_offset);
                    keep.get(at).is_some_and(|&o| o < f.end_offset())
                });
            }
            streams.push(Arc::new(FrameStream {
                table: self.table.clone(),
                partition: k,
                end,
                frames,
                projection: projection.clone(),
                schema: projected.clone(),
                data_columns: self.table.def().columns.len(),
                changelog: self.mode == ScanMode::Changelog,
                keep,
                deleted: deleted_rows
                    .as_ref()
                    .map(|d| Arc::new(d.get(k).cloned().unwrap_or_default())),
            }));
        }
        if !staged.is_empty() {
            streams.push(Arc::new(StagedStream::new(
                &self.table,
                staged,
                &projection,
                projected.clone(),
            )?));
        }
        if streams.is_empty() {
            streams.push(Arc::new(FrameStream {
                table: self.table.clone(),
                partition: 0,
                end: 0,
                frames: vec![],
                projection: projection.clone(),
                schema: projected.clone(),
                data_columns: self.table.def().columns.len(),
                changelog: false,
                keep: None,
                deleted: None,
            }));
        }
        streaming_scan(projected, streams, limit)
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.mode == ScanMode::Changelog {
            return Err(DataFusionError::Plan(
                "changelog() is read-only; write to the table".into(),
            ));
        }
        if self.at.is_some() {
            return Err(DataFusionError::Plan(
                "a table read AS OF a position is read-only; write to the table".into(),
            ));
        }
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} is not supported on append-only tables"
            )));
        }
        Ok(Arc::new(DataSinkExec::new(
            input,
            Arc::new(LogSink::new(
                self.table.clone(),
                self.schema.clone(),
                self.on_conflict_do_nothing,
            )),
            None,
        )))
    }
}

/// The frames of one partition chosen for a scan, read one at a time.
struct FrameStream {
    table: Arc<TableLog>,
    partition: usize,
    /// Rows at and after this offset are left out (a read `AS OF`
    /// offsets inside a frame).
    end: u64,
    frames: Vec<FrameMeta>,
    projection: Vec<usize>,
    schema: SchemaRef,
    data_columns: usize,
    /// Rows of `changelog(t)`: with `_op` after the table's columns.
    changelog: bool,
    /// Only the records at these offsets (in order), which an index found.
    keep: Option<Arc<Vec<u64>>>,
    /// A table keyed by row: the offsets of deleted rows, left out with
    /// tombstones and holes.
    deleted: Option<Arc<std::collections::HashSet<u64>>>,
}

impl fmt::Debug for FrameStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FrameStream({} p{}, {} frames)",
            self.table.def().name,
            self.partition,
            self.frames.len()
        )
    }
}

impl PartitionStream for FrameStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let partition = self.partition;
        let projection = self.projection.clone();
        let schema = self.schema.clone();
        let data_columns = self.data_columns;
        let frames = self.frames.clone();
        let out_schema = schema.clone();
        let changelog = self.changelog;
        let keep = self.keep.clone();
        let deleted = self.deleted.clone();
        let end = self.end;
        let append_only = self.table.def().is_append_only();
        let s = stream::iter(frames).then(move |meta| {
            let part = table.partitions()[partition].clone();
            let projection = projection.clone();
            let out_schema = out_schema.clone();
            let keep = keep.clone();
            let deleted = deleted.clone();
            async move {
                let mut batch = part
                    .read_frame(&meta)
                    .await
                    .map_err(crate::error::into_datafusion)?;
                if meta.end_offset() > end {
                    let n = end.saturating_sub(meta.header.base_offset) as usize;
                    batch = batch.slice(0, n.min(batch.num_rows()));
                }
                if changelog {
                    // The row count is given: a projection of no columns
                    // (count(*)) still has rows.
                    return changelog_frame(&batch, &meta, partition as i32, data_columns, false)?
                        .project(&projection)
                        .and_then(|b| {
                            RecordBatch::try_new_with_options(
                                out_schema.clone(),
                                b.columns().to_vec(),
                                &arrow::record_batch::RecordBatchOptions::new()
                                    .with_row_count(Some(b.num_rows())),
                            )
                        })
                        .map_err(DataFusionError::from);
                }
                let mut rows = project_frame(
                    &batch,
                    &meta,
                    partition as i32,
                    &projection,
                    data_columns,
                    &out_schema,
                )?;
                // Rows an erasure removed from an append-only table (holes
                // nothing else marks) are left out, by their offsets.
                let erased = match append_only {
                    true => part.erased_mask(meta.header.base_offset, batch.num_rows()),
                    false => None,
                };
                if let Some(keep) = keep {
                    // Index places of a table keyed by row may be rows
                    // since deleted: only live ones are kept.
                    let keep: Vec<u64> = match (&deleted, &erased) {
                        (_, Some(erased)) => {
                            let base = meta.header.base_offset;
                            keep.iter()
                                .copied()
                                .filter(|o| {
                                    o.checked_sub(base)
                                        .and_then(|i| usize::try_from(i).ok())
                                        .is_some_and(|i| i < erased.len() && erased.value(i))
                                })
                                .collect()
                        }
                        (Some(deleted), None) => {
                            let live = live_offsets(
                                &batch,
                                data_columns,
                                meta.header.base_offset,
                                deleted,
                            );
                            keep.iter().copied().filter(|o| live.contains(o)).collect()
                        }
                        (None, None) => keep.to_vec(),
                    };
                    return kept_rows(&rows, meta.header.base_offset, &keep);
                }
                if let Some(erased) = &erased {
                    rows = arrow::compute::filter_record_batch(&rows, erased)?;
                }
                if let Some(deleted) = deleted {
                    rows = live_rows(
                        &batch,
                        &rows,
                        data_columns,
                        meta.header.base_offset,
                        &deleted,
                    )?;
                }
                Ok(rows)
            }
        });
        // A frame of a large statement holds many more rows than a batch
        // of the plan (a COPY's frames are megabytes): it is handed on in
        // pieces of the session's batch size, each its own copy, so that
        // operators that hold batches (a sort within `--query-memory`)
        // count and spill them piece by piece.
        let batch_rows = ctx.session_config().batch_size().max(1);
        let s = s.flat_map(move |rows| {
            let pieces = match rows {
                Ok(rows) if rows.num_rows() > 2 * batch_rows => in_pieces(&rows, batch_rows),
                other => vec![other],
            };
            stream::iter(pieces)
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, s))
    }
}

/// `rows` as copies of at most `size` rows each.
fn in_pieces(rows: &RecordBatch, size: usize) -> Vec<Result<RecordBatch, DataFusionError>> {
    (0..rows.num_rows())
        .step_by(size)
        .map(|at| {
            let n = size.min(rows.num_rows() - at);
            let indices = arrow::array::UInt32Array::from_iter_values(at as u32..(at + n) as u32);
            let columns = rows
                .columns()
                .iter()
                .map(|c| arrow::compute::take(c.as_ref(), &indices, None))
                .collect::<Result<Vec<_>, _>>()?;
            RecordBatch::try_new_with_options(
                rows.schema(),
                columns,
                &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
            )
            .map_err(DataFusionError::from)
        })
        .collect()
}

use futures::StreamExt;

/// The offsets of a stored frame's live rows (see [`live_rows`]).
fn live_offsets(
    batch: &RecordBatch,
    data_columns: usize,
    base: u64,
    deleted: &std::collections::HashSet<u64>,
) -> std::collections::HashSet<u64> {
    let flags = crate::log::keyed::deleted_flags_at(batch, data_columns);
    (0..batch.num_rows())
        .map(|i| base + i as u64)
        .filter(|o| {
            crate::log::keyed::record_kind(flags, (o - base) as usize) == Some(false)
                && !deleted.contains(o)
        })
        .collect()
}

/// Of a frame of a table keyed by row (`batch` stored, `rows` projected),
/// the rows that are live: not a tombstone, not a hole, not deleted.
fn live_rows(
    batch: &RecordBatch,
    rows: &RecordBatch,
    data_columns: usize,
    base: u64,
    deleted: &std::collections::HashSet<u64>,
) -> Result<RecordBatch> {
    let flags = crate::log::keyed::deleted_flags_at(batch, data_columns);
    let live: arrow::array::BooleanArray = (0..rows.num_rows())
        .map(|i| {
            Some(
                crate::log::keyed::record_kind(flags, i) == Some(false)
                    && !deleted.contains(&(base + i as u64)),
            )
        })
        .collect();
    Ok(arrow::compute::filter_record_batch(rows, &live)?)
}

/// A keyed table's records in `changelog(t)` form: the table's columns,
/// `_op` ('upsert' or 'delete'), then the hidden columns.
/// Holes compaction left are dropped, or with `keep_holes` kept as rows
/// whose `_op` is NULL (for a reader that counts rows by offset).
pub(crate) fn changelog_frame(
    batch: &RecordBatch,
    meta: &FrameMeta,
    partition: i32,
    data_columns: usize,
    keep_holes: bool,
) -> Result<RecordBatch> {
    use arrow::array::Array;
    let n = batch.num_rows();
    let mut fields: Vec<Field> = batch.schema().fields()[..data_columns]
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns()[..data_columns].to_vec();
    let deleted = batch
        .columns()
        .get(data_columns)
        .and_then(|c| c.as_any().downcast_ref::<arrow::array::BooleanArray>());
    let ops: arrow::array::StringArray = (0..n)
        .map(|i| match deleted {
            Some(d) if d.is_null(i) => None,
            Some(d) if d.value(i) => Some("delete"),
            _ => Some("upsert"),
        })
        .collect();
    fields.push(Field::new(
        sluice_catalog::OP_COLUMN,
        arrow::datatypes::DataType::Utf8,
        true,
    ));
    columns.push(Arc::new(ops));
    let hidden_schema = Arc::new(Schema::new(vec![
        Field::new("_partition", arrow::datatypes::DataType::Int32, false),
        Field::new("_offset", arrow::datatypes::DataType::Int64, false),
        Field::new(
            "_ingested_at",
            arrow::datatypes::DataType::Timestamp(
                arrow::datatypes::TimeUnit::Microsecond,
                Some("+00:00".into()),
            ),
            false,
        ),
    ]));
    let hidden = project_frame(
        batch,
        meta,
        partition,
        &[data_columns, data_columns + 1, data_columns + 2],
        data_columns,
        &hidden_schema,
    )?;
    fields.extend(hidden_schema.fields().iter().map(|f| f.as_ref().clone()));
    columns.extend(hidden.columns().iter().cloned());
    let all = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
    // Holes compaction left are no records.
    match deleted {
        Some(d) if d.null_count() > 0 && !keep_holes => {
            let present: arrow::array::BooleanArray = (0..n).map(|i| Some(d.is_valid(i))).collect();
            Ok(arrow::compute::filter_record_batch(&all, &present)?)
        }
        _ => Ok(all),
    }
}

/// A transaction's own records, not yet committed: they have no
/// partition, offset or ingestion time yet, so those read as NULL.
struct StagedStream {
    rows: Vec<RecordBatch>,
    schema: SchemaRef,
}

impl StagedStream {
    fn new(
        table: &TableLog,
        staged: Vec<RecordBatch>,
        projection: &[usize],
        schema: SchemaRef,
    ) -> Result<StagedStream> {
        let data_columns = table.def().columns.len();
        let rows = staged
            .iter()
            .map(|b| {
                let n = b.num_rows();
                let columns: Vec<ArrayRef> = projection
                    .iter()
                    .enumerate()
                    .map(|(j, &i)| match i < data_columns {
                        true => b.column(i).clone(),
                        false => arrow::array::new_null_array(schema.field(j).data_type(), n),
                    })
                    .collect();
                RecordBatch::try_new_with_options(
                    schema.clone(),
                    columns,
                    &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
                )
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(StagedStream { rows, schema })
    }
}

impl fmt::Debug for StagedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StagedStream({} batches)", self.rows.len())
    }
}

impl PartitionStream for StagedStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let rows: Vec<Result<RecordBatch>> = self.rows.iter().cloned().map(Ok).collect();
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream::iter(rows),
        ))
    }
}

/// One partition's latest live records of each key.
struct LatestStream {
    table: Arc<TableLog>,
    partition: usize,
    end: u64,
    projection: Vec<usize>,
    schema: SchemaRef,
    /// Keys a transaction wrote: their committed versions are not read.
    hidden: Option<Arc<KeySet>>,
}

impl fmt::Debug for LatestStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LatestStream({} p{})",
            self.table.def().name,
            self.partition
        )
    }
}

impl PartitionStream for LatestStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let table = self.table.clone();
        let k = self.partition;
        let end = self.end;
        let projection = self.projection.clone();
        let schema = self.schema.clone();
        let out_schema = schema.clone();
        let hidden = self.hidden.clone();
        let batches = async move {
            let external = crate::error::into_datafusion::<crate::log::LogError>;
            let def = &table.def();
            let codec = KeyCodec::new(def).map_err(external)?;
            let part = &table.partitions()[k];
            let mut latest = latest_records(def, &codec, part, end)
                .await
                .map_err(external)?;
            if let Some(hidden) = &hidden {
                let mut keys = Vec::with_capacity(latest.frames.len());
                for (_, batch) in &latest.frames {
                    keys.push(codec.keys(batch).map_err(external)?);
                }
                latest
                    .live
                    .retain(|&(f, i)| !hidden.contains(keys[f].row(i).as_ref()));
            }
            let mut out = Vec::new();
            for group in latest.live.chunk_by(|a, b| a.0 == b.0) {
                let (meta, batch) = &latest.frames[group[0].0];
                let rows = project_frame(
                    batch,
                    meta,
                    k as i32,
                    &projection,
                    def.columns.len(),
                    &out_schema,
                )?;
                if rows.num_columns() == 0 {
                    // COUNT(*): only how many rows.
                    let options = arrow::record_batch::RecordBatchOptions::new()
                        .with_row_count(Some(group.len()));
                    out.push(RecordBatch::try_new_with_options(
                        out_schema.clone(),
                        vec![],
                        &options,
                    )?);
                    continue;
                }
                let idx = arrow::array::UInt32Array::from_iter_values(
                    group.iter().map(|(_, i)| *i as u32),
                );
                out.push(arrow::compute::take_record_batch(&rows, &idx)?);
            }
            Ok::<_, DataFusionError>(out)
        };
        let s = stream::once(batches).flat_map(|r| match r {
            Ok(v) => stream::iter(v.into_iter().map(Ok).collect::<Vec<_>>()),
            Err(e) => stream::iter(vec![Err(e)]),
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, s))
    }
}

/// The rows of a frame (its first at `base`) whose offsets `keep` holds.
fn kept_rows(rows: &RecordBatch, base: u64, keep: &[u64]) -> Result<RecordBatch> {
    let n = rows.num_rows() as u64;
    let from = keep.partition_point(|&o| o < base);
    let to = keep.partition_point(|&o| o < base + n);
    let mut mask = vec![false; rows.num_rows()];
    for &o in &keep[from..to] {
        mask[(o - base) as usize] = true;
    }
    Ok(arrow::compute::filter_record_batch(
        rows,
        &arrow::array::BooleanArray::from(mask),
    )?)
}

/// Builds the projected batch of a frame, materialising the hidden columns.
pub(crate) fn project_frame(
    batch: &RecordBatch,
    meta: &FrameMeta,
    partition: i32,
    projection: &[usize],
    data_columns: usize,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(projection.len());
    for &i in projection {
        let col: ArrayRef = if i < data_columns {
            batch.column(i).clone()
        } else {
            match i - data_columns {
                0 => Arc::new(Int32Array::from(vec![partition; n])),
                1 => {
                    let base = meta.header.base_offset as i64;
                    Arc::new(Int64Array::from_iter_values(base..base + n as i64))
                }
                _ => Arc::new(
                    TimestampMicrosecondArray::from(vec![meta.header.ingested_at_us; n])
                        .with_timezone("+00:00"),
                ),
            }
        };
        columns.push(col);
    }
    let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &options,
    )?)
}
