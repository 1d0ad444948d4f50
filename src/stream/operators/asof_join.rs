//! The ASOF join of a view: each left row (a probe) meets the right row of
//! its keys nearest in time on one side of it (see
//! `crate::query::asof_join` for the match, ties and options).
//!
//! Emission: a view that emits on update (the default) emits a probe's
//! row as soon as it arrives and, when a right row arriving (or taken
//! back, from a keyed table) changes its match, takes the row back and
//! emits the new one. Under `EMIT ON WINDOW CLOSE` a probe waits until the
//! right input's horizon (its watermark less the allowed lateness) has
//! passed the probe's time (looking back), or its match (looking ahead),
//! and is then emitted once, final. Right rows behind that horizon are
//! late: dropped before they reach the operator and counted in the view's
//! late rows, so a final row never changes.
//!
//! State: per key, the right rows in order of (time, `_partition,
//! _offset`), and the probes still pending (not final), each with what it
//! emitted. Rows are kept in arrow-row form. A probe is final once the
//! right horizon has passed it; it then leaves the state (unless the left
//! input takes rows back: a keyed table's probe may be taken back later).
//! The right rows are bounded by the floor, the oldest time a probe now
//! or to come can have (the oldest pending probe, and the left input's
//! horizon): per key, the rows at or after the floor plus the one latest
//! row before it (looking back; none looking ahead), and none older than
//! the lookback bound before the floor. Without a left watermark, or over
//! a right input that takes rows back (a keyed table: a deleted version
//! brings back the one before), every right row is kept; so are the rows
//! before the floor as known at (one ingested later may be the match of a
//! later probe).
//!
//! Checkpoint: the right rows (the right input's columns) and the pending
//! probes (the left input's columns, and what each emitted), whole each
//! time. Restoring loads them; the horizons come back with the view's
//! clocks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, Int64Array, Int8Array, RecordBatch, UInt32Array};
use arrow::compute;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::logical_expr::Operator as CmpOp;

use super::operator::{canonical_key, Delta, Operator, OperatorStats, StatePart};
use crate::error::SluiceError;
use crate::query::asof_exec::{micros, AsofSpec};

type Key = Box<[u8]>;

/// An output row: the probe's row and the right row it shows (None: NULLs).
type Pair = (Box<[u8]>, Option<Box<[u8]>>);

/// A decoded batch with, per row, the bound and known-at times (left) or
/// the ingestion time (right), and the tie-break bytes (right).
type DecodedBatch = (Decoded, Vec<Option<i64>>, Vec<Option<i64>>, Vec<Box<[u8]>>);

/// A right row's place in its key's order: time, tie-break bytes, and a
/// number telling equal rows apart.
type Rank = (i64, Box<[u8]>, u64);

struct RightRow {
    row: Box<[u8]>,
    ingested: Option<i64>,
}

#[derive(Clone, PartialEq)]
enum Emitted {
    Nothing,
    Nulls,
    Row(Rank),
}

struct Probe {
    row: Box<[u8]>,
    bound: Option<i64>,
    known_at: Option<i64>,
    emitted: Emitted,
}

/// A batch's rows: keys (None with a NULL), times (None when NULL), the
/// whole rows.
struct Decoded {
    keys: Vec<Option<Key>>,
    times: Vec<Option<i64>>,
    rows: Vec<Box<[u8]>>,
}

pub struct AsofJoinOperator {
    spec: Arc<AsofSpec>,
    emit_on_close: bool,
    lateness_us: i64,
    /// Whether each input takes rows back.
    retracting: [bool; 2],
    schema: SchemaRef,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    keys: RowConverter,
    ties: RowConverter,
    left_rows: RowConverter,
    right_rows: RowConverter,
    right: HashMap<Key, BTreeMap<Rank, RightRow>>,
    /// Right rows at or after the floor, by time (what the floor passes
    /// next).
    right_by_time: BTreeSet<(i64, u64, Key)>,
    /// The latest right row before the floor of each key, by time (what
    /// the lookback bound passes next).
    lingering: BTreeSet<(i64, u64, Key)>,
    probes: HashMap<Key, BTreeMap<(i64, u64), Probe>>,
    probes_by_time: BTreeSet<(i64, u64, Key)>,
    /// Each input's horizon (watermark less the allowed lateness).
    horizons: [Option<i64>; 2],
    floor: Option<i64>,
    seq: u64,
    right_count: u64,
    right_bytes: u64,
    probe_count: u64,
    probe_bytes: u64,
    rows_in: u64,
    rows_out: u64,
    description: String,
}

fn internal(what: &str) -> SluiceError {
    SluiceError::Internal(format!("ASOF join: {what}"))
}

/// Times as i64s in their order: a date or timestamp in µs, an integer
/// as it is, a float by its bits (ordered as the numbers are), a numeric
/// by its unscaled value (both sides and the bound have one type). Casting
/// a number to a timestamp would drop its fraction: 5.25 and 5.75 would
/// tie.
fn ordinals(column: &ArrayRef) -> Result<Vec<Option<i64>>, SluiceError> {
    use arrow::array::AsArray;
    use arrow::datatypes::{Decimal128Type, Float64Type, Int64Type};
    let t = column.data_type();
    if t.is_temporal() {
        return micros(column).map_err(SluiceError::from);
    }
    Ok(match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let f = compute::cast(column, &DataType::Float64)?;
            f.as_primitive::<Float64Type>()
                .iter()
                .map(|v| {
                    v.map(|v| {
                        let bits = (v + 0.0).to_bits() as i64;
                        if bits < 0 {
                            bits ^ i64::MAX
                        } else {
                            bits
                        }
                    })
                })
                .collect()
        }
        DataType::Decimal128(_, _) => column
            .as_primitive::<Decimal128Type>()
            .iter()
            .map(|v| v.map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64))
            .collect(),
        t if t.is_integer() => compute::cast(column, &DataType::Int64)?
            .as_primitive::<Int64Type>()
            .iter()
            .collect(),
        t => {
            return Err(SluiceError::Unsupported(format!(
                "an ASOF JOIN in a materialized view matches on a time, a date or a number, not {t}"
            )))
        }
    })
}

/// Column `i` of a checkpoint's probes, of the type it was written as.
fn state_column<T: Array + Clone + 'static>(
    batch: &RecordBatch,
    i: usize,
    what: &str,
) -> Result<T, SluiceError> {
    batch
        .column(i)
        .as_any()
        .downcast_ref::<T>()
        .cloned()
        .ok_or_else(|| internal(what))
}

impl AsofJoinOperator {
    pub fn new(
        spec: Arc<AsofSpec>,
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        schema: SchemaRef,
        emit_on_close: bool,
        lateness_us: i64,
        retracting: [bool; 2],
    ) -> Result<AsofJoinOperator, SluiceError> {
        let keys = match spec.key_types.is_empty() {
            true => vec![SortField::new(DataType::Boolean)],
            false => spec.key_types.iter().cloned().map(SortField::new).collect(),
        };
        let ties = spec
            .ties
            .iter()
            .map(|t| t.data_type(&right_schema).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        let whole = |s: &Schema| {
            RowConverter::new(
                s.fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )
        };
        let t = &spec.time_type;
        if !(t.is_temporal()
            || t.is_integer()
            || t.is_floating()
            || matches!(t, DataType::Decimal128(_, _)))
        {
            return Err(SluiceError::Unsupported(format!(
                "an ASOF JOIN in a materialized view matches on a time, a date or a number, not {t}"
            )));
        }
        let description = spec.described.clone();
        let mut op = AsofJoinOperator {
            keys: RowConverter::new(keys)?,
            ties: RowConverter::new(ties)?,
            left_rows: whole(&left_schema)?,
            right_rows: whole(&right_schema)?,
            spec,
            emit_on_close,
            lateness_us,
            retracting,
            schema,
            left_schema,
            right_schema,
            right: HashMap::new(),
            right_by_time: BTreeSet::new(),
            lingering: BTreeSet::new(),
            probes: HashMap::new(),
            probes_by_time: BTreeSet::new(),
            horizons: [None, None],
            floor: None,
            seq: 0,
            right_count: 0,
            right_bytes: 0,
            probe_count: 0,
            probe_bytes: 0,
            rows_in: 0,
            rows_out: 0,
            description,
        };
        op.description = format!("{}; {}", op.description, op.keeps());
        Ok(op)
    }

    /// What `EXPLAIN MATERIALIZED VIEW` says the operator keeps.
    pub fn keeps(&self) -> String {
        let pending = match (self.emit_on_close, self.retracting[0]) {
            (_, true) => "every probe (the left input takes rows back)",
            (true, false) => "each probe until the right input's watermark passes it, then emits it once",
            (false, false) => "each probe until the right input's watermark passes it (emitted at once, corrected by retraction)",
        };
        let right = if self.retracting[1] {
            "every right row (the right input takes rows back)".to_string()
        } else if self.spec.known.is_some() {
            "the right rows at or after the oldest pending probe or the left watermark (and every earlier one as known at)".to_string()
        } else if self.spec.backward() {
            format!(
                "per key the right rows at or after the oldest pending probe or the left watermark, plus one before it{}",
                if self.spec.bound.is_some() { ", none before the lookback bound" } else { "" }
            )
        } else {
            "the right rows at or after the oldest pending probe or the left watermark".to_string()
        };
        format!("keeps {pending}; keeps {right}")
    }

    fn decode(&self, batch: &RecordBatch, left: bool) -> Result<DecodedBatch, SluiceError> {
        let spec = &self.spec;
        let n = batch.num_rows();
        let (key_exprs, time_expr) = match left {
            true => (&spec.left_keys, &spec.left_time),
            false => (&spec.right_keys, &spec.right_time),
        };
        let key_columns: Vec<ArrayRef> = match key_exprs.is_empty() {
            true => vec![Arc::new(arrow::array::BooleanArray::from(vec![true; n]))],
            false => key_exprs
                .iter()
                .map(|k| k.evaluate(batch)?.into_array(n).map(canonical_key))
                .collect::<Result<_, _>>()?,
        };
        let key_rows = self.keys.convert_columns(&key_columns)?;
        let keys = (0..n)
            .map(|i| {
                (!key_columns.iter().any(|c| c.is_null(i)))
                    .then(|| Box::from(key_rows.row(i).as_ref()))
            })
            .collect();
        let times = ordinals(&time_expr.evaluate(batch)?.into_array(n)?)?;
        let whole = match left {
            true => self.left_rows.convert_columns(batch.columns())?,
            false => self.right_rows.convert_columns(batch.columns())?,
        };
        let rows = (0..n).map(|i| Box::from(whole.row(i).as_ref())).collect();
        // Left: the lookback bound and the time known at; right: the
        // ingestion time and the tie-break bytes.
        let (first, second, ties) = match left {
            true => (
                match &spec.bound {
                    Some(b) => ordinals(&b.evaluate(batch)?.into_array(n)?)?,
                    None => vec![None; n],
                },
                match &spec.known {
                    Some((l, _)) => micros(&l.evaluate(batch)?.into_array(n)?)?,
                    None => vec![None; n],
                },
                Vec::new(),
            ),
            false => {
                let ingested = match &spec.known {
                    Some((_, r)) => micros(&r.evaluate(batch)?.into_array(n)?)?,
                    None => vec![None; n],
                };
                let tie_columns = spec
                    .ties
                    .iter()
                    .map(|t| t.evaluate(batch)?.into_array(n))
                    .collect::<Result<Vec<_>, _>>()?;
                let ties = match tie_columns.is_empty() {
                    true => vec![Box::default(); n],
                    false => {
                        let r = self.ties.convert_columns(&tie_columns)?;
                        (0..n).map(|i| Box::from(r.row(i).as_ref())).collect()
                    }
                };
                (ingested, vec![None; n], ties)
            }
        };
        Ok((Decoded { keys, times, rows }, first, second, ties))
    }

    /// The match of a probe among the key's right rows.
    fn best(&self, key: &[u8], t: i64, bound: Option<i64>, known_at: Option<i64>) -> Option<Rank> {
        let rows = self.right.get(key)?;
        let spec = &self.spec;
        if spec.known.is_some() && known_at.is_none() {
            return None;
        }
        let fits_bound = |time: i64| match (bound, spec.backward(), spec.bound_strict) {
            (None, _, _) => true,
            (Some(b), true, false) => time >= b,
            (Some(b), true, true) => time > b,
            (Some(b), false, false) => time <= b,
            (Some(b), false, true) => time < b,
        };
        if spec.backward() {
            let upper = match spec.op {
                CmpOp::GtEq => t.saturating_add(1),
                _ => t,
            };
            for (rank, row) in rows.range(..(upper, Box::default(), 0)).rev() {
                if !fits_bound(rank.0) {
                    return None;
                }
                let known = match (known_at, row.ingested) {
                    (Some(at), Some(ing)) => ing <= at,
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                if known {
                    return Some(rank.clone());
                }
            }
            None
        } else {
            let lower = match spec.op {
                CmpOp::LtEq => t,
                _ => t.saturating_add(1),
            };
            let (first, _) = rows.range((lower, Box::default(), 0)..).next()?;
            let time = first.0;
            if !fits_bound(time) {
                return None;
            }
            // The latest of the rows at that time.
            rows.range((time, Box::default(), 0)..(time.saturating_add(1), Box::default(), 0))
                .next_back()
                .map(|(r, _)| r.clone())
        }
    }

    /// Output rows for (probe, match) pairs.
    fn output(&self, pairs: &[(&[u8], Option<&[u8]>)]) -> Result<Vec<RecordBatch>, SluiceError> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let lp = self.left_rows.parser();
        let left = self
            .left_rows
            .convert_rows(pairs.iter().map(|(l, _)| lp.parse(l)))?;
        let rp = self.right_rows.parser();
        let matched: Vec<&[u8]> = pairs.iter().filter_map(|(_, r)| *r).collect();
        let right = self
            .right_rows
            .convert_rows(matched.iter().map(|r| rp.parse(r)))?;
        let mut at = 0u32;
        let idx: UInt32Array = pairs
            .iter()
            .map(|(_, r)| {
                r.map(|_| {
                    at += 1;
                    at - 1
                })
            })
            .collect();
        let mut columns = left;
        for c in right {
            columns.push(compute::take(&c, &idx, None)?);
        }
        Ok(vec![RecordBatch::try_new(self.schema.clone(), columns)?])
    }

    fn right_row(&self, key: &[u8], rank: &Rank) -> Option<&[u8]> {
        self.right.get(key)?.get(rank).map(|r| r.row.as_ref())
    }

    /// What a probe emitting `e` shows on the right: None for nothing.
    fn shown<'a>(&'a self, key: &[u8], e: &Emitted) -> Option<Option<&'a [u8]>> {
        match e {
            Emitted::Nothing => None,
            Emitted::Nulls => Some(None),
            Emitted::Row(rank) => Some(self.right_row(key, rank)),
        }
    }

    fn emitted_for(&self, found: &Option<Rank>) -> Emitted {
        match (found, self.spec.keep_unmatched) {
            (Some(r), _) => Emitted::Row(r.clone()),
            (None, true) => Emitted::Nulls,
            (None, false) => Emitted::Nothing,
        }
    }

    /// Whether a probe's answer can no longer change: the right horizon
    /// passed it (looking back) or its match (looking ahead).
    fn is_final(&self, t: i64, emitted: &Emitted, bound: Option<i64>) -> bool {
        if self.retracting[1] {
            return false;
        }
        let Some(h) = self.horizons[1] else {
            return false;
        };
        if self.spec.backward() {
            return t < h;
        }
        match emitted {
            Emitted::Row(rank) => rank.0 < h,
            _ => bound.is_some_and(|b| b < h),
        }
    }

    fn add_probe(&mut self, key: Key, t: i64, probe: Probe) {
        self.seq += 1;
        self.probe_count += 1;
        self.probe_bytes += probe.row.len() as u64;
        self.probes_by_time.insert((t, self.seq, key.clone()));
        self.probes
            .entry(key)
            .or_default()
            .insert((t, self.seq), probe);
    }

    fn remove_probe(&mut self, key: &Key, at: (i64, u64)) -> Option<Probe> {
        let probes = self.probes.get_mut(key)?;
        let p = probes.remove(&at)?;
        if probes.is_empty() {
            self.probes.remove(key);
        }
        self.probes_by_time.remove(&(at.0, at.1, key.clone()));
        self.probe_count -= 1;
        self.probe_bytes -= p.row.len() as u64;
        Some(p)
    }

    fn apply_left(&mut self, delta: &Delta, out: &mut Delta) -> Result<(), SluiceError> {
        let mut inserted: Vec<Pair> = Vec::new();
        let mut retracted: Vec<Pair> = Vec::new();
        for batch in &delta.retract {
            let (d, _, _, _) = self.decode(batch, true)?;
            for i in 0..batch.num_rows() {
                let (Some(key), Some(t)) = (&d.keys[i], d.times[i]) else {
                    if self.spec.keep_unmatched {
                        retracted.push((d.rows[i].clone(), None));
                    }
                    continue;
                };
                let found = self.probes.get(key).and_then(|ps| {
                    ps.range((t, 0)..=(t, u64::MAX))
                        .find(|(_, p)| p.row == d.rows[i])
                        .map(|(at, _)| *at)
                });
                let Some(at) = found else { continue };
                if let Some(p) = self.remove_probe(key, at) {
                    if let Some(right) = self.shown(key, &p.emitted) {
                        retracted.push((p.row.clone(), right.map(Box::from)));
                    }
                }
            }
        }
        for batch in &delta.insert {
            self.rows_in += batch.num_rows() as u64;
            let (d, bounds, known, _) = self.decode(batch, true)?;
            for i in 0..batch.num_rows() {
                let (Some(key), Some(t)) = (d.keys[i].clone(), d.times[i]) else {
                    if self.spec.keep_unmatched {
                        inserted.push((d.rows[i].clone(), None));
                    }
                    continue;
                };
                let found = self.best(&key, t, bounds[i], known[i]);
                let answer = self.emitted_for(&found);
                let is_final = self.is_final(t, &answer, bounds[i]);
                let emitted = match (self.emit_on_close, is_final) {
                    (true, false) => Emitted::Nothing,
                    _ => answer,
                };
                if let Some(right) = self.shown(&key, &emitted) {
                    inserted.push((d.rows[i].clone(), right.map(Box::from)));
                }
                if !is_final || self.retracting[0] {
                    self.add_probe(
                        key,
                        t,
                        Probe {
                            row: d.rows[i].clone(),
                            bound: bounds[i],
                            known_at: known[i],
                            emitted,
                        },
                    );
                }
            }
        }
        self.push(out, &inserted, &retracted)
    }

    fn push(
        &mut self,
        out: &mut Delta,
        inserted: &[Pair],
        retracted: &[Pair],
    ) -> Result<(), SluiceError> {
        fn pairs(v: &[Pair]) -> Vec<(&[u8], Option<&[u8]>)> {
            v.iter().map(|(l, r)| (l.as_ref(), r.as_deref())).collect()
        }
        self.rows_out += inserted.len() as u64;
        out.insert.extend(self.output(&pairs(inserted))?);
        out.retract.extend(self.output(&pairs(retracted))?);
        Ok(())
    }

    fn apply_right(&mut self, delta: &Delta, out: &mut Delta) -> Result<(), SluiceError> {
        // Per key, the earliest and latest time a right row came or went.
        let mut changed: HashMap<Key, (i64, i64)> = HashMap::new();
        let mut note = |key: &Key, t: i64| {
            let e = changed.entry(key.clone()).or_insert((t, t));
            e.0 = e.0.min(t);
            e.1 = e.1.max(t);
        };
        let mut inserted = Vec::new();
        let mut retracted = Vec::new();
        // Rows taken back leave first: their probes' rows must be
        // retracted with the right row they showed.
        let mut gone: Vec<(Key, Rank, Box<[u8]>)> = Vec::new();
        for batch in &delta.retract {
            let (d, _, _, ties) = self.decode(batch, false)?;
            for (i, tie) in ties.into_iter().enumerate() {
                let (Some(key), Some(t)) = (&d.keys[i], d.times[i]) else {
                    continue;
                };
                let Some(rows) = self.right.get_mut(key) else {
                    continue;
                };
                let found = rows
                    .range((t, tie.clone(), 0)..=(t, tie.clone(), u64::MAX))
                    .find(|(_, r)| r.row == d.rows[i])
                    .map(|(rank, _)| rank.clone());
                let Some(rank) = found else { continue };
                if let Some(r) = rows.get(&rank) {
                    gone.push((key.clone(), rank.clone(), r.row.clone()));
                }
                note(key, t);
            }
        }
        // Probes showing a row that goes: retract now, while it is held.
        for (key, rank, row) in &gone {
            let Some(probes) = self.probes.get(key) else {
                continue;
            };
            for p in probes.values() {
                if p.emitted == Emitted::Row(rank.clone()) {
                    retracted.push((p.row.clone(), Some(row.clone())));
                }
            }
        }
        for (key, rank, row) in gone {
            if let Some(rows) = self.right.get_mut(&key) {
                if rows.remove(&rank).is_some() {
                    self.right_count -= 1;
                    self.right_bytes -= row.len() as u64;
                }
                if rows.is_empty() {
                    self.right.remove(&key);
                }
            }
            self.right_by_time.remove(&(rank.0, rank.2, key.clone()));
            self.lingering.remove(&(rank.0, rank.2, key.clone()));
            // Their probes show nothing until recomputed below.
            if let Some(probes) = self.probes.get_mut(&key) {
                for p in probes.values_mut() {
                    if p.emitted == Emitted::Row(rank.clone()) {
                        p.emitted = Emitted::Nothing;
                    }
                }
            }
        }
        for batch in &delta.insert {
            self.rows_in += batch.num_rows() as u64;
            let (d, ingested, _, ties) = self.decode(batch, false)?;
            for i in 0..batch.num_rows() {
                let (Some(key), Some(t)) = (d.keys[i].clone(), d.times[i]) else {
                    continue;
                };
                self.seq += 1;
                let rank: Rank = (t, ties[i].clone(), self.seq);
                self.right_count += 1;
                self.right_bytes += d.rows[i].len() as u64;
                self.right_by_time.insert((t, self.seq, key.clone()));
                self.right.entry(key.clone()).or_default().insert(
                    rank,
                    RightRow {
                        row: d.rows[i].clone(),
                        ingested: ingested[i],
                    },
                );
                note(&key, t);
            }
        }
        // Probes whose match may have changed: recomputed; under EMIT ON
        // WINDOW CLOSE they have emitted nothing yet.
        if !self.emit_on_close || self.retracting[0] {
            let mut updates: Vec<(Key, (i64, u64), Emitted)> = Vec::new();
            for (key, (first, last)) in changed.iter() {
                let Some(probes) = self.probes.get(key) else {
                    continue;
                };
                // A right row at time c can be the match of probes at or
                // after c looking back, at or before it looking ahead.
                let reached: Box<dyn Iterator<Item = (&(i64, u64), &Probe)>> =
                    match self.spec.backward() {
                        true => Box::new(probes.range((*first, 0)..)),
                        false => Box::new(probes.range(..=(*last, u64::MAX))),
                    };
                for (at, p) in reached {
                    if self.emit_on_close && p.emitted == Emitted::Nothing {
                        continue;
                    }
                    let found = self.best(key, at.0, p.bound, p.known_at);
                    let now = self.emitted_for(&found);
                    if now != p.emitted {
                        updates.push((key.clone(), *at, now));
                    }
                }
            }
            for (key, at, now) in updates {
                let Some(p) = self.probes.get(&key).and_then(|ps| ps.get(&at)) else {
                    continue;
                };
                if let Some(right) = self.shown(&key, &p.emitted) {
                    retracted.push((p.row.clone(), right.map(Box::from)));
                }
                if let Some(right) = self.shown(&key, &now) {
                    inserted.push((p.row.clone(), right.map(Box::from)));
                }
                if let Some(p) = self.probes.get_mut(&key).and_then(|ps| ps.get_mut(&at)) {
                    p.emitted = now;
                }
            }
        }
        self.push(out, &inserted, &retracted)?;
        self.prune();
        Ok(())
    }

    /// Emits (under EMIT ON WINDOW CLOSE) and lets go of the probes the
    /// right horizon made final.
    fn finalize(&mut self, out: &mut Delta) -> Result<(), SluiceError> {
        let Some(h) = self.horizons[1] else {
            return Ok(());
        };
        if self.retracting[1] {
            return Ok(());
        }
        let candidates: Vec<(i64, u64, Key)> = self
            .probes_by_time
            .range(..(h, 0, Box::default()))
            .cloned()
            .collect();
        let mut inserted = Vec::new();
        for (t, seq, key) in candidates {
            let Some(p) = self.probes.get(&key).and_then(|ps| ps.get(&(t, seq))) else {
                continue;
            };
            let answer = match self.emit_on_close {
                true => self.emitted_for(&self.best(&key, t, p.bound, p.known_at)),
                false => p.emitted.clone(),
            };
            if !self.is_final(t, &answer, p.bound) {
                continue;
            }
            if self.emit_on_close && p.emitted == Emitted::Nothing {
                if let Some(right) = self.shown(&key, &answer) {
                    inserted.push((p.row.clone(), right.map(Box::from)));
                }
            }
            if self.retracting[0] {
                if let Some(p) = self
                    .probes
                    .get_mut(&key)
                    .and_then(|ps| ps.get_mut(&(t, seq)))
                {
                    p.emitted = answer;
                }
            } else {
                self.remove_probe(&key, (t, seq));
            }
        }
        self.push(out, &inserted, &[])
    }

    /// Drops the right rows no probe now or to come can match (see the
    /// module header).
    fn prune(&mut self) {
        if self.retracting[1] || self.retracting[0] {
            return;
        }
        let Some(left_horizon) = self.horizons[0] else {
            return;
        };
        let oldest = self.probes_by_time.first().map(|p| p.0).unwrap_or(i64::MAX);
        let floor = left_horizon.min(oldest);
        if self.floor.is_some_and(|f| f >= floor) {
            return;
        }
        self.floor = Some(floor);
        let backward = self.spec.backward();
        let below: Vec<(i64, u64, Key)> = self
            .right_by_time
            .range(..(floor, 0, Box::default()))
            .cloned()
            .collect();
        for entry in below {
            self.right_by_time.remove(&entry);
            let (t, seq, key) = entry;
            if !backward {
                self.drop_right(&key, t, seq);
                continue;
            }
            if self.spec.known.is_some() {
                continue;
            }
            // Keep the latest row before the floor; drop those before it.
            let Some(rows) = self.right.get(&key) else {
                continue;
            };
            let Some(latest) = rows
                .range(..(floor, Box::default(), 0))
                .next_back()
                .map(|(r, _)| r.clone())
            else {
                continue;
            };
            let older: Vec<(i64, u64)> = rows
                .range(..latest.clone())
                .map(|(r, _)| (r.0, r.2))
                .collect();
            for (ot, os) in older {
                self.lingering.remove(&(ot, os, key.clone()));
                self.drop_right(&key, ot, os);
            }
            self.lingering.insert((latest.0, latest.2, key.clone()));
        }
        // The lookback bound before the floor: nothing older matches.
        if let (true, Some(b)) = (backward, self.lookback_us()) {
            let cutoff = floor.saturating_sub(b);
            let old: Vec<(i64, u64, Key)> = self
                .lingering
                .range(..(cutoff, 0, Box::default()))
                .cloned()
                .collect();
            for (t, seq, key) in old {
                self.lingering.remove(&(t, seq, key.clone()));
                self.drop_right(&key, t, seq);
            }
        }
    }

    /// The lookback of a constant `tolerance` (how far before a probe's
    /// time its bound is), when the bound is one.
    fn lookback_us(&self) -> Option<i64> {
        self.spec.lookback_us
    }

    /// What the operator keeps, as `EXPLAIN MATERIALIZED VIEW` says.
    pub fn explained(&self) -> String {
        self.keeps()
    }

    fn drop_right(&mut self, key: &Key, t: i64, seq: u64) {
        let Some(rows) = self.right.get_mut(key) else {
            return;
        };
        let rank = rows
            .range((t, Box::default(), 0)..(t.saturating_add(1), Box::default(), 0))
            .find(|(r, _)| r.2 == seq)
            .map(|(r, _)| r.clone());
        if let Some(rank) = rank {
            if let Some(r) = rows.remove(&rank) {
                self.right_count -= 1;
                self.right_bytes -= r.row.len() as u64;
            }
        }
        if rows.is_empty() {
            self.right.remove(key);
        }
    }

    fn state_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .left_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("__asof_emitted", DataType::Int8, false));
        fields.push(Field::new("__asof_time", DataType::Int64, true));
        fields.push(Field::new("__asof_ties", DataType::Binary, true));
        Arc::new(Schema::new(fields))
    }
}

impl Operator for AsofJoinOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        let mut out = Delta::default();
        match input {
            0 => self.apply_left(delta, &mut out)?,
            _ => self.apply_right(delta, &mut out)?,
        }
        Ok(out)
    }

    fn advance_watermark(&mut self, input: usize, watermark_us: i64) -> Result<Delta, SluiceError> {
        let horizon = watermark_us.saturating_sub(self.lateness_us);
        let side = input.min(1);
        if self.horizons[side].is_some_and(|h| h >= horizon) {
            return Ok(Delta::default());
        }
        self.horizons[side] = Some(horizon);
        let mut out = Delta::default();
        if side == 1 {
            self.finalize(&mut out)?;
        }
        self.prune();
        Ok(out)
    }

    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let rp = self.right_rows.parser();
        let rights: Vec<&RightRow> = self.right.values().flat_map(|m| m.values()).collect();
        let right = match rights.is_empty() {
            true => Vec::new(),
            false => {
                let columns = self
                    .right_rows
                    .convert_rows(rights.iter().map(|r| rp.parse(&r.row)))?;
                vec![RecordBatch::try_new(self.right_schema.clone(), columns)?]
            }
        };
        let lp = self.left_rows.parser();
        let probes: Vec<&Probe> = self.probes.values().flat_map(|m| m.values()).collect();
        let left = match probes.is_empty() {
            true => Vec::new(),
            false => {
                let mut columns = self
                    .left_rows
                    .convert_rows(probes.iter().map(|p| lp.parse(&p.row)))?;
                let kind: Int8Array = probes
                    .iter()
                    .map(|p| match p.emitted {
                        Emitted::Nothing => 0i8,
                        Emitted::Nulls => 1,
                        Emitted::Row(_) => 2,
                    })
                    .collect();
                let time: Int64Array = probes
                    .iter()
                    .map(|p| match &p.emitted {
                        Emitted::Row(r) => Some(r.0),
                        _ => None,
                    })
                    .collect();
                let ties: BinaryArray = probes
                    .iter()
                    .map(|p| match &p.emitted {
                        Emitted::Row(r) => Some(r.1.as_ref()),
                        _ => None,
                    })
                    .collect();
                columns.push(Arc::new(kind));
                columns.push(Arc::new(time));
                columns.push(Arc::new(ties));
                vec![RecordBatch::try_new(self.state_schema(), columns)?]
            }
        };
        Ok(vec![right, left])
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        for batch in rows {
            if batch.num_rows() == 0 {
                continue;
            }
            match part {
                0 => {
                    let batch =
                        RecordBatch::try_new(self.right_schema.clone(), batch.columns().to_vec())?;
                    let mut out = Delta::default();
                    let delta = Delta {
                        insert: vec![batch],
                        retract: Vec::new(),
                    };
                    self.apply_right(&delta, &mut out)?;
                    self.rows_in = self
                        .rows_in
                        .saturating_sub(delta.insert[0].num_rows() as u64);
                }
                _ => {
                    let width = self.left_schema.fields().len();
                    if batch.num_columns() != width + 3 {
                        return Err(internal("a checkpoint's probes have other columns"));
                    }
                    let left = RecordBatch::try_new(
                        self.left_schema.clone(),
                        batch.columns()[..width].to_vec(),
                    )?;
                    let kind = state_column::<Int8Array>(batch, width, "emitted kinds")?;
                    let time = state_column::<Int64Array>(batch, width + 1, "emitted times")?;
                    let ties = state_column::<BinaryArray>(batch, width + 2, "emitted ties")?;
                    let (d, bounds, known, _) = self.decode(&left, true)?;
                    for i in 0..left.num_rows() {
                        let (Some(key), Some(t)) = (d.keys[i].clone(), d.times[i]) else {
                            continue;
                        };
                        let emitted = match kind.value(i) {
                            0 => Emitted::Nothing,
                            1 => Emitted::Nulls,
                            _ => {
                                let (rt, tie) = (time.value(i), ties.value(i));
                                let rank = self.right.get(&key).and_then(|rows| {
                                    rows.range(
                                        (rt, Box::from(tie), 0)..=(rt, Box::from(tie), u64::MAX),
                                    )
                                    .next()
                                    .map(|(r, _)| r.clone())
                                });
                                match rank {
                                    Some(r) => Emitted::Row(r),
                                    None => {
                                        return Err(internal(
                                            "a probe's match is not in the checkpoint",
                                        ))
                                    }
                                }
                            }
                        };
                        self.add_probe(
                            key,
                            t,
                            Probe {
                                row: d.rows[i].clone(),
                                bound: bounds[i],
                                known_at: known[i],
                                emitted,
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "asof join",
            description: self.description.clone(),
            state_rows: self.right_count + self.probe_count,
            state_bytes: self.right_bytes + self.probe_bytes,
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}
