//! The over-window operator: window functions over partitions (`rank()`,
//! `dense_rank()`, `row_number()`, `lag`, `lead`, running `sum() OVER
//! (PARTITION BY ... ORDER BY ...)`, ...), whose rows come out with the
//! functions' values appended.
//!
//! Deltas: the partitions a delta touches are computed again, before and
//! after it, with DataFusion's window functions over the partition's rows
//! in order; rows whose values changed are taken back and sent again, the
//! others stay. Other partitions are not touched. Within a partition only
//! the rows a change can reach are computed ([`WindowReach`]): from the
//! first changed row, back by how far the functions read ahead (`lead`,
//! `n FOLLOWING`) and then by how far they read behind (`lag`, `n
//! PRECEDING`, as context), to the start of that row's peers; `row_number`,
//! `rank` and `dense_rank` there count on from the rows before. A row
//! appended at the end of its partition's order (events in time order)
//! thus costs a few rows, not the partition. Functions that read the
//! partition's whole prefix (a running `sum`, `first_value` from `UNBOUNDED
//! PRECEDING`) or all of it (`ntile`, `percent_rank`, `cume_dist`, frames to
//! `UNBOUNDED FOLLOWING`) compute the partition whole (no PARTITION BY is
//! one partition: every change then costs the whole input).
//!
//! State: every row of every partition ([`RankedGroups`]: by PARTITION BY
//! values, in ORDER BY order, ties by the whole row, so that `row_number()`
//! and `lag` among peers give one definite answer).
//!
//! Checkpoint: every held row with its count, whole each time.
//!
//! Watermark: nothing for a view that emits on update; partitions stay
//! while they have rows.
//!
//! Under `EMIT ON WINDOW CLOSE` ([`CloseOnWatermark`]) the ORDER BY's first
//! key is the source's WATERMARK column, ascending, and the input only
//! grows; rows behind the watermark (less the allowed lateness) are late
//! and dropped before they reach the operator. A row is then final once
//! its time is behind that horizon and so are the rows its functions read
//! after it (`lead(x, n)`, `ROWS ... n FOLLOWING`: the next n rows of its
//! partition; `RANGE ... FOLLOWING`: that much time after it): nothing can
//! arrive before it in its partition any more. A delta only adds rows to
//! the state; a watermark computes the partitions whose first unemitted
//! row may have become final, from that row (less the rows the functions
//! read behind it, as for a change), and emits the rows that did, once
//! and for good. The checkpoint then has a second part: how many rows of each
//! partition have been emitted.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, RecordBatch, TimestampMicrosecondArray, UInt64Array,
};
use arrow::compute::{self, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::operator::{Delta, Operator, OperatorStats, StatePart};
use super::ranked_groups::{minus, Bytes, OutputRows, Ranked, RankedGroups};
use crate::error::SluiceError;

/// How far an over-window's functions read around a row, which bounds what
/// a change can alter (see the module's header).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowReach {
    /// Rows before a row its values read; `None`: the partition's whole
    /// prefix.
    pub behind: Option<u64>,
    /// Rows after a row its values read; `None`: the whole partition.
    pub ahead: Option<u64>,
    /// Functions (by index) that number rows from the partition's first:
    /// `row_number` and `rank` (true: `dense_rank`).
    pub numbering: Vec<(usize, bool)>,
}

pub struct OverWindowOperator {
    groups: RankedGroups,
    reach: WindowReach,
    functions: Vec<Arc<dyn WindowExpr>>,
    input: SchemaRef,
    output: SchemaRef,
    output_rows: RowConverter,
    description: String,
    rows_in: u64,
    rows_out: u64,
    closing: Option<Closing>,
}

/// When an over-window under `EMIT ON WINDOW CLOSE` may emit a row (see
/// the module's header).
#[derive(Debug, Clone, Copy)]
pub struct CloseOnWatermark {
    /// The ORDER BY's first key (the source's WATERMARK column) in the
    /// input.
    pub time_index: usize,
    /// How many rows after a row its functions read.
    pub rows_after: u64,
    /// How far after a row's time its functions read.
    pub time_after_us: i64,
    pub lateness_us: i64,
}

/// What an over-window under `EMIT ON WINDOW CLOSE` keeps beside its rows.
struct Closing {
    rule: CloseOnWatermark,
    /// Rows (copies counted) emitted of each partition, from its first.
    emitted: HashMap<Bytes, u64>,
    /// Partitions with rows not emitted yet, by the time of the first of
    /// them (`i64::MAX` for a NULL time, which never closes).
    due: BTreeSet<(i64, Bytes)>,
    /// The key of each partition in `due`.
    first_pending: HashMap<Bytes, i64>,
}

impl Closing {
    fn note_pending(&mut self, group: &Bytes, time_us: i64) {
        match self.first_pending.get(group) {
            Some(&t) if t <= time_us => {}
            Some(&t) => {
                self.due.remove(&(t, group.clone()));
                self.due.insert((time_us, group.clone()));
                self.first_pending.insert(group.clone(), time_us);
            }
            None => {
                self.due.insert((time_us, group.clone()));
                self.first_pending.insert(group.clone(), time_us);
            }
        }
    }

    fn settle(&mut self, group: &Bytes, next_pending: Option<i64>) {
        if let Some(t) = self.first_pending.remove(group) {
            self.due.remove(&(t, group.clone()));
        }
        if let Some(t) = next_pending {
            self.due.insert((t, group.clone()));
            self.first_pending.insert(group.clone(), t);
        }
    }
}

/// A time column's values in microseconds (`i64::MAX` for NULL).
fn times_us(column: &ArrayRef) -> Result<Vec<i64>, SluiceError> {
    let cast = compute::cast(column, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let times = cast
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .ok_or_else(|| {
            SluiceError::Internal("an over-window's time column is no timestamp".into())
        })?;
    Ok((0..times.len())
        .map(|i| match times.is_valid(i) {
            true => times.value(i),
            false => i64::MAX,
        })
        .collect())
}

impl OverWindowOperator {
    /// `functions` share `partition_by` and `order_by`; `output` is the
    /// input's columns then one per function.
    pub fn new(
        input: SchemaRef,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        functions: Vec<Arc<dyn WindowExpr>>,
        output: SchemaRef,
        description: String,
    ) -> Result<OverWindowOperator, SluiceError> {
        if output.fields().len() != input.fields().len() + functions.len() {
            return Err(SluiceError::Internal(format!(
                "an over-window of {} columns and {} functions cannot give {}",
                input.fields().len(),
                functions.len(),
                output.fields().len()
            )));
        }
        let output_fields = output
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(OverWindowOperator {
            groups: RankedGroups::new(input.clone(), partition_by, order_by)?,
            reach: WindowReach::default(),
            functions,
            input,
            output_rows: RowConverter::new(output_fields)?,
            output,
            description,
            rows_in: 0,
            rows_out: 0,
            closing: None,
        })
    }

    /// How far the functions read: what a change recomputes.
    pub fn with_reach(mut self, reach: WindowReach) -> OverWindowOperator {
        self.reach = reach;
        self
    }

    /// Applies a delta (emit on update): the touched partitions' rows a
    /// change can reach, computed before and after it.
    fn update(&mut self, delta: &Delta) -> Result<Delta, SluiceError> {
        let (mut inserted, mut retracted) = (Vec::new(), Vec::new());
        for (batches, into) in [
            (&delta.insert, &mut inserted),
            (&delta.retract, &mut retracted),
        ] {
            for b in batches.iter().filter(|b| b.num_rows() > 0) {
                self.rows_in += b.num_rows() as u64;
                into.extend(self.groups.keyed(b)?);
            }
        }
        // Each touched partition's first changed row.
        let mut first: HashMap<Bytes, (Bytes, Bytes)> = HashMap::new();
        for k in inserted.iter().chain(&retracted) {
            let key = (k.order.clone(), k.row.clone());
            match first.get_mut(&k.group) {
                Some(f) if *f <= key => {}
                Some(f) => *f = key,
                None => {
                    first.insert(k.group.clone(), key);
                }
            }
        }
        let mut before = Vec::with_capacity(first.len());
        for (group, key) in first {
            let from = self.change_start(&group, &key);
            let (old, _) = self.evaluate_from(&group, from)?;
            before.push((group, from, old));
        }
        // Inserts first: a delta may take back a row it also inserts.
        for k in inserted {
            self.groups.add(k, 1);
        }
        for k in retracted {
            self.groups.take(k, "over-window")?;
        }
        let mut out = Delta::default();
        for (group, from, old) in before {
            let (new, _) = self.evaluate_from(&group, from)?;
            let (gone, came) = (minus(&old, &new), minus(&new, &old));
            self.rows_out += came.len() as u64;
            if !gone.is_empty() {
                out.retract.push(self.rows(&gone)?);
            }
            if !came.is_empty() {
                out.insert.push(self.rows(&came)?);
            }
        }
        Ok(out)
    }

    /// The first row (by position, copies counted) a change at `key`
    /// may alter or needs as context, at the start of its peers: the rows
    /// before it are the same before and after the change, and so is
    /// where its peers start (the changed row's own peers start where the
    /// rows of smaller ORDER BY values end, in either state).
    fn change_start(&self, group: &[u8], key: &(Bytes, Bytes)) -> u64 {
        let (Some(ranked), Some(behind), Some(ahead)) = (
            self.groups.group(group),
            self.reach.behind,
            self.reach.ahead,
        ) else {
            return 0;
        };
        let smaller = (key.0.clone(), Bytes::default());
        let peers_of_change: u64 = ranked.range(..smaller).map(|(_, c)| *c).sum();
        let target = peers_of_change.saturating_sub(ahead).saturating_sub(behind);
        if target == peers_of_change {
            return target;
        }
        // A row before the changed one's peers: its own peers start there.
        peers_start_at(ranked, target)
    }

    /// The output rows of a partition's rows from position `from` (a
    /// peer group's start; 0 for all) on, each copy once, with those input
    /// rows: the functions computed over them, numbering functions counting
    /// on from the rows before.
    fn evaluate_from(
        &self,
        group: &[u8],
        from: u64,
    ) -> Result<(OutputRows, Option<RecordBatch>), SluiceError> {
        let Some(ranked) = self.groups.group(group) else {
            return Ok((Vec::new(), None));
        };
        let (rest, dense_before) = rows_before(ranked, from);
        let rows = rest.flat_map(|((_, row), copies)| std::iter::repeat_n(row, *copies as usize));
        let columns = self.groups.columns(rows)?;
        if columns.first().is_none_or(|c| c.is_empty()) {
            return Ok((Vec::new(), None));
        }
        let batch = RecordBatch::try_new(self.input.clone(), columns)?;
        let mut columns = batch.columns().to_vec();
        for (i, (f, field)) in self
            .functions
            .iter()
            .zip(&self.output.fields()[self.input.fields().len()..])
            .enumerate()
        {
            let mut values = f.evaluate(&batch)?;
            let numbering = self.reach.numbering.iter().find(|(n, _)| *n == i);
            if let (Some((_, dense)), true) = (numbering, from > 0) {
                let offset = if *dense { dense_before } else { from };
                let counted = compute::cast(&values, &DataType::Int64)?;
                let offset = arrow::array::Int64Array::new_scalar(offset as i64);
                values = arrow::compute::kernels::numeric::add(&counted, &offset)?;
            }
            columns.push(compute::cast(&values, field.data_type())?);
        }
        let rows = self.output_rows.convert_columns(&columns)?;
        Ok((
            rows.iter().map(|r| (Box::from(r.as_ref()), 0)).collect(),
            Some(batch),
        ))
    }

    /// Emits each row once, when it is final (`EMIT ON WINDOW CLOSE`).
    pub fn closing_on_watermark(mut self, rule: CloseOnWatermark) -> OverWindowOperator {
        self.closing = Some(Closing {
            rule,
            emitted: HashMap::new(),
            due: BTreeSet::new(),
            first_pending: HashMap::new(),
        });
        self
    }

    /// Adds a delta's rows without emitting (`EMIT ON WINDOW CLOSE`): its
    /// input only grows.
    fn hold(&mut self, delta: &Delta) -> Result<Delta, SluiceError> {
        let Some(closing) = self.closing.as_mut() else {
            return Ok(Delta::default());
        };
        if delta.retract.iter().any(|b| b.num_rows() > 0) {
            return Err(SluiceError::Internal(
                "an over-window that emits on window close took a row back".into(),
            ));
        }
        for b in delta.insert.iter().filter(|b| b.num_rows() > 0) {
            self.rows_in += b.num_rows() as u64;
            let times = times_us(b.column(closing.rule.time_index))?;
            for (k, t) in self.groups.keyed(b)?.into_iter().zip(times) {
                closing.note_pending(&k.group, t);
                self.groups.add(k, 1);
            }
        }
        Ok(Delta::default())
    }

    /// The rows that became final at `watermark_us`.
    fn close(&mut self, watermark_us: i64) -> Result<Delta, SluiceError> {
        let Some(mut closing) = self.closing.take() else {
            return Ok(Delta::default());
        };
        let came = self.final_rows(&mut closing, watermark_us);
        self.closing = Some(closing);
        let came = came?;
        self.rows_out += came.len() as u64;
        let mut out = Delta::default();
        if !came.is_empty() {
            out.insert.push(self.rows(&came)?);
        }
        Ok(out)
    }

    /// The rows not emitted yet that are final at `watermark_us`.
    fn final_rows(
        &self,
        closing: &mut Closing,
        watermark_us: i64,
    ) -> Result<OutputRows, SluiceError> {
        let rule = closing.rule;
        let horizon = watermark_us.saturating_sub(rule.lateness_us);
        let due: Vec<Bytes> = closing
            .due
            .iter()
            .take_while(|(t, _)| t.saturating_add(rule.time_after_us) < horizon)
            .map(|(_, g)| g.clone())
            .collect();
        let mut came = Vec::new();
        for group in due {
            // The rows emitted are final: computing starts at the first
            // row not emitted, less the rows the functions read behind it.
            let emitted = closing.emitted.entry(group.clone()).or_default();
            let from = match (self.groups.group(&group), self.reach.behind) {
                (Some(ranked), Some(behind)) => {
                    peers_start_at(ranked, emitted.saturating_sub(behind))
                }
                _ => 0,
            };
            let (rows, batch) = self.evaluate_from(&group, from)?;
            let times = match &batch {
                Some(b) => times_us(b.column(rule.time_index))?,
                None => Vec::new(),
            };
            // Times ascend: the closed rows are a prefix (from the first).
            let closed = from + times.iter().take_while(|t| **t < horizon).count() as u64;
            let finals = from
                + times
                    .iter()
                    .enumerate()
                    .take_while(|(i, t)| {
                        (from + *i as u64).saturating_add(rule.rows_after) < closed
                            && t.saturating_add(rule.time_after_us) < horizon
                    })
                    .count() as u64;
            if finals > *emitted {
                let (start, end) = ((*emitted - from) as usize, (finals - from) as usize);
                came.extend(rows[start..end].iter().cloned());
                *emitted = finals;
            }
            let next = times.get((*emitted - from) as usize).copied();
            closing.settle(&group, next);
        }
        Ok(came)
    }

    /// The rows emitted of each partition, for a checkpoint.
    fn emitted_part(closing: &Closing) -> Result<RecordBatch, SluiceError> {
        let (groups, counts): (Vec<&[u8]>, Vec<u64>) = closing
            .emitted
            .iter()
            .map(|(g, n)| (g.as_ref(), *n))
            .unzip();
        let schema = Schema::new(vec![
            Field::new("partition", DataType::Binary, false),
            Field::new("emitted", DataType::UInt64, false),
        ]);
        Ok(RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(BinaryArray::from(groups)),
                Arc::new(UInt64Array::from(counts)),
            ],
        )?)
    }

    /// After a restore: which partitions have rows not emitted yet.
    fn find_pending(&mut self) -> Result<(), SluiceError> {
        let Some(closing) = self.closing.as_mut() else {
            return Ok(());
        };
        closing.due.clear();
        closing.first_pending.clear();
        let mut pending = Vec::new();
        for (group, ranked) in self.groups.iter() {
            let emitted = closing.emitted.get(group).copied().unwrap_or(0);
            let mut seen = 0u64;
            for ((_, row), copies) in ranked {
                seen += copies;
                if seen > emitted {
                    pending.push((group.clone(), row.clone()));
                    break;
                }
            }
        }
        for (group, row) in pending {
            let columns = self.groups.columns([&row])?;
            let t = times_us(&columns[closing.rule.time_index])?
                .first()
                .copied()
                .unwrap_or(i64::MAX);
            closing.note_pending(&group, t);
        }
        Ok(())
    }

    fn rows(&self, rows: &[(Bytes, u64)]) -> Result<RecordBatch, SluiceError> {
        let parser = self.output_rows.parser();
        let columns = self
            .output_rows
            .convert_rows(rows.iter().map(|(r, _)| parser.parse(r)))?;
        Ok(RecordBatch::try_new(self.output.clone(), columns)?)
    }
}

/// Where the peers of the row at position `target` (copies counted)
/// start.
fn peers_start_at(ranked: &Ranked, target: u64) -> u64 {
    let (mut at, mut peers_start, mut last) = (0u64, 0u64, None);
    for ((order, _), copies) in ranked.iter() {
        if last != Some(order) {
            peers_start = at;
            last = Some(order);
        }
        if at + copies > target {
            return peers_start;
        }
        at += copies;
    }
    peers_start
}

/// The rows of a partition from position `from` (a key's first copy) on,
/// and how many distinct ORDER BY values come before it.
fn rows_before(ranked: &Ranked, from: u64) -> (impl Iterator<Item = (&(Bytes, Bytes), &u64)>, u64) {
    let (mut at, mut distinct, mut last) = (0u64, 0u64, None);
    let mut rest = ranked.iter().peekable();
    while let Some(((order, _), copies)) = rest.peek() {
        if at >= from {
            break;
        }
        if last != Some(order) {
            distinct += 1;
            last = Some(order);
        }
        at += **copies;
        rest.next();
    }
    (rest, distinct)
}

impl Operator for OverWindowOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input != 0 {
            return Err(SluiceError::Internal(format!(
                "an over-window has no input {input}"
            )));
        }
        if self.closing.is_some() {
            return self.hold(delta);
        }
        self.update(delta)
    }

    fn advance_watermark(
        &mut self,
        _input: usize,
        watermark_us: i64,
    ) -> Result<Delta, SluiceError> {
        self.close(watermark_us)
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let mut parts = self.groups.state_parts()?;
        if let Some(closing) = &self.closing {
            parts.push(vec![Self::emitted_part(closing)?]);
        }
        Ok(parts)
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        match (part, self.closing.as_mut()) {
            (1, Some(closing)) => {
                for b in rows {
                    let (Some(groups), Some(counts)) = (
                        b.column_by_name("partition")
                            .and_then(|c| c.as_any().downcast_ref::<BinaryArray>()),
                        b.column_by_name("emitted")
                            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>()),
                    ) else {
                        return Err(SluiceError::Internal(
                            "the checkpoint's over-window state has unexpected columns".into(),
                        ));
                    };
                    for i in 0..b.num_rows() {
                        closing
                            .emitted
                            .insert(Box::from(groups.value(i)), counts.value(i));
                    }
                }
            }
            _ => self.groups.restore_part(part, rows, "over-window")?,
        }
        self.find_pending()
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "over-window",
            description: self.description.clone(),
            state_rows: self.groups.held(),
            state_bytes: self.groups.state_bytes(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}
