//! The interval join: an equi-join whose condition also bounds how far
//! apart the two inputs' event times are (`b.t BETWEEN a.t AND a.t +
//! INTERVAL '10 seconds'`, see `band.rs`), over inputs whose time columns
//! carry watermarks. INNER, LEFT, RIGHT and FULL. A window join (two
//! TUMBLEs of one size joined on `window_start`) is the same operator with
//! a band of 0 on the window starts, whose rows leave when the other side
//! closes their window.
//!
//! Deltas: an input is either append-only (a table's rows: rows only
//! arrive) or *changing*: the rows of an aggregate grouped by the
//! `window_end` of a TUMBLE over a watermarked table (Nexmark q7), which
//! are taken back and replaced while their window is open and never after
//! the watermark passes their `window_end`. Any other input that takes
//! rows back is refused at CREATE. A row of one side is matched with the
//! other side's state rows of the same key whose time is in its band, the
//! join's whole condition decides each pair, and the row is then kept for
//! the other side's later rows. A row taken back takes back its pairs with
//! the rows held on the other side.
//!
//! Watermark: a side's watermark less the view's allowed lateness is its
//! horizon: rows behind it are late, dropped before they reach the join
//! and listed as the view's late rows (see `view.rs`), so no later row of
//! that side has an earlier time (and, on a changing side, no row before
//! it changes). A row of the other side whose band lies wholly behind the
//! horizon can match nothing more and leaves the state (a changing side's
//! row also waits for its own horizon to pass it); on a preserved side
//! (LEFT, RIGHT, FULL) a row that never matched, or whose matches were
//! all taken back, is then emitted with NULLs for the other side, once
//! and for good (it is final, like a window emitted on close); a preserved
//! row whose key or time is NULL can never match and is emitted so at
//! once. State is thus bounded by the rows of one band plus the
//! watermarks' delay, not by the stream.
//!
//! State: per side, the rows still in reach, indexed by the arrow-row
//! bytes of the join key, with each row's time and how many rows of the
//! other side it is paired with. Rows that leave are marked gone and the
//! batches rewritten once gone rows outnumber live ones.
//!
//! Checkpoint: each side's live rows with a `matches` column, whole each
//! time (rows leave as the watermarks move, so there is no append-only
//! gain to write). Restoring loads them; the horizons come back with the
//! view's clocks.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray, UInt32Array,
};
use arrow::compute;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::row::{RowConverter, SortField};
use datafusion::common::JoinType;
use datafusion::physical_expr::PhysicalExpr;

use super::join::{joined_rows, Source};
use super::operator::canonical_key;
use super::operator::{Delta, Operator, OperatorStats, StatePart};
use crate::error::SluiceError;

/// A join key in arrow-row form.
type RowKey = Box<[u8]>;

/// Each row's key (`None` when it has a NULL) and time (`None` when NULL).
type KeysAndTimes = (Vec<Option<RowKey>>, Vec<Option<i64>>);

/// Where a row of a side's state is.
#[derive(Clone, Copy)]
struct Entry {
    batch: u32,
    row: u32,
}

/// One input of the interval join and the rows of it still in reach.
pub struct BandSide {
    pub schema: SchemaRef,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_rows: RowConverter,
    /// The time column's index in `schema`.
    time: usize,
    batches: Vec<RecordBatch>,
    /// Per batch: each row's time (microseconds), whether it is still
    /// held, and how many rows of the other side it matched (pairs that
    /// were emitted and not taken back).
    times: Vec<Vec<i64>>,
    alive: Vec<Vec<bool>>,
    matched: Vec<Vec<u32>>,
    /// Per batch: the earliest time of a row still held.
    earliest: Vec<i64>,
    index: HashMap<Box<[u8]>, Vec<Entry>, ahash::RandomState>,
    held: u64,
    live: u64,
    /// Whole rows in arrow-row form, to find a row taken back; set when
    /// the side's rows may change (see [`IntervalJoinOperator::changing`]).
    whole_rows: Option<RowConverter>,
}

impl BandSide {
    pub fn new(
        schema: SchemaRef,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        time: usize,
    ) -> Result<BandSide, SluiceError> {
        let key_fields = keys
            .iter()
            .map(|k| k.data_type(&schema).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BandSide {
            key_rows: RowConverter::new(key_fields)?,
            schema,
            keys,
            time,
            batches: Vec::new(),
            times: Vec::new(),
            alive: Vec::new(),
            matched: Vec::new(),
            earliest: Vec::new(),
            index: HashMap::default(),
            held: 0,
            live: 0,
            whole_rows: None,
        })
    }

    /// Lets this side's rows be taken back (found by their whole value).
    fn track_rows(&mut self) -> Result<(), SluiceError> {
        let fields = self
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        self.whole_rows = Some(RowConverter::new(fields)?);
        Ok(())
    }

    /// Where each row of `batch` is held (a live row of the same key, time
    /// and value, each held row found once); `None` for a row not held.
    fn find(
        &self,
        batch: &RecordBatch,
        keys: &[Option<RowKey>],
        times: &[Option<i64>],
    ) -> Result<Vec<Option<Entry>>, SluiceError> {
        let converter = self.whole_rows.as_ref().ok_or_else(|| {
            SluiceError::Internal("an interval join's input took rows back".into())
        })?;
        let wanted = converter.convert_columns(batch.columns())?;
        // Held rows already found for an earlier row of the batch (two
        // equal rows taken back are two held rows).
        let mut taken: std::collections::HashSet<(u32, u32), ahash::RandomState> =
            Default::default();
        let mut found = Vec::with_capacity(batch.num_rows());
        for (i, key) in keys.iter().enumerate() {
            let (Some(key), Some(t)) = (key, times[i]) else {
                found.push(None);
                continue;
            };
            let mut hit = None;
            for e in self.index.get(key).into_iter().flatten() {
                let (b, r) = (e.batch as usize, e.row as usize);
                if !self.alive[b][r] || self.times[b][r] != t || taken.contains(&(e.batch, e.row)) {
                    continue;
                }
                let held = converter.convert_columns(self.batches[b].slice(r, 1).columns())?;
                if held.row(0) == wanted.row(i) {
                    hit = Some(*e);
                    break;
                }
            }
            if let Some(e) = hit {
                taken.insert((e.batch, e.row));
            }
            found.push(hit);
        }
        Ok(found)
    }

    /// Stops holding a row.
    fn forget(&mut self, e: Entry) {
        let (b, r) = (e.batch as usize, e.row as usize);
        if std::mem::take(&mut self.alive[b][r]) {
            self.live -= 1;
        }
    }

    /// Each row's key bytes (`None` when it has a NULL) and time (`None`
    /// when NULL): a row with either never matches.
    fn keys_and_times(&self, batch: &RecordBatch) -> Result<KeysAndTimes, SluiceError> {
        let columns: Vec<ArrayRef> = self
            .keys
            .iter()
            .map(|k| {
                k.evaluate(batch)?
                    .into_array(batch.num_rows())
                    .map(canonical_key)
            })
            .collect::<Result<_, _>>()?;
        let rows = self.key_rows.convert_columns(&columns)?;
        let keys = (0..batch.num_rows())
            .map(|i| {
                (!columns.iter().any(|c| c.is_null(i))).then(|| Box::from(rows.row(i).as_ref()))
            })
            .collect();
        let time = compute::cast(
            batch.column(self.time),
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let time = time
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| {
                SluiceError::Internal("an interval join's time is not a timestamp".into())
            })?;
        let times = (0..time.len())
            .map(|i| time.is_valid(i).then(|| time.value(i)))
            .collect();
        Ok((keys, times))
    }

    /// Keeps the rows of `batch` that can match (a key and a time), with
    /// how many rows each matched already.
    fn keep(
        &mut self,
        batch: RecordBatch,
        keys: Vec<Option<RowKey>>,
        times: &[Option<i64>],
        matched: Vec<u32>,
    ) {
        let b = self.batches.len() as u32;
        let mut alive = vec![false; batch.num_rows()];
        let mut earliest = i64::MAX;
        for (i, key) in keys.into_iter().enumerate() {
            let (Some(key), Some(t)) = (key, times[i]) else {
                continue;
            };
            alive[i] = true;
            earliest = earliest.min(t);
            self.live += 1;
            self.index.entry(key).or_default().push(Entry {
                batch: b,
                row: i as u32,
            });
        }
        self.held += batch.num_rows() as u64;
        self.times
            .push(times.iter().map(|t| t.unwrap_or(i64::MIN)).collect());
        self.alive.push(alive);
        self.matched.push(matched);
        self.earliest.push(earliest);
        self.batches.push(batch);
    }

    /// Drops the rows whose time is before `threshold`; returns those of
    /// them that never matched.
    fn drop_before(&mut self, threshold: i64) -> Vec<Entry> {
        let mut unmatched = Vec::new();
        for b in 0..self.batches.len() {
            if self.earliest[b] >= threshold {
                continue;
            }
            let mut earliest = i64::MAX;
            for r in 0..self.times[b].len() {
                if !self.alive[b][r] {
                    continue;
                }
                let t = self.times[b][r];
                if t >= threshold {
                    earliest = earliest.min(t);
                    continue;
                }
                self.alive[b][r] = false;
                self.live -= 1;
                if self.matched[b][r] == 0 {
                    unmatched.push(Entry {
                        batch: b as u32,
                        row: r as u32,
                    });
                }
            }
            self.earliest[b] = earliest;
        }
        unmatched
    }

    /// Rewrites the state as its live rows once gone rows outnumber them.
    fn compact(&mut self) -> Result<(), SluiceError> {
        if self.held == 0 || self.held < 2 * self.live || (self.held < 4096 && self.live > 0) {
            return Ok(());
        }
        let (live, matched) = self.live_rows()?;
        self.batches.clear();
        self.times.clear();
        self.alive.clear();
        self.matched.clear();
        self.earliest.clear();
        self.index.clear();
        self.held = 0;
        self.live = 0;
        self.load(live, matched)
    }

    /// The live rows as one batch, and how many rows each matched.
    fn live_rows(&self) -> Result<(RecordBatch, Vec<u32>), SluiceError> {
        let mut refs = Vec::with_capacity(self.live as usize);
        let mut matched = Vec::with_capacity(self.live as usize);
        for (b, alive) in self.alive.iter().enumerate() {
            for (r, &a) in alive.iter().enumerate() {
                if a {
                    refs.push((b, r));
                    matched.push(self.matched[b][r]);
                }
            }
        }
        if refs.is_empty() {
            return Ok((RecordBatch::new_empty(self.schema.clone()), matched));
        }
        let batches: Vec<&RecordBatch> = self.batches.iter().collect();
        Ok((compute::interleave_record_batch(&batches, &refs)?, matched))
    }

    /// Takes rows (from a checkpoint or a compaction) into the state.
    fn load(&mut self, rows: RecordBatch, matched: Vec<u32>) -> Result<(), SluiceError> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let rows = RecordBatch::try_new(self.schema.clone(), rows.columns().to_vec())?;
        let (keys, times) = self.keys_and_times(&rows)?;
        self.keep(rows, keys, &times, matched);
        Ok(())
    }

    fn state_bytes(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| b.get_array_memory_size() as u64 + 10 * b.num_rows() as u64)
            .sum()
    }
}

pub struct IntervalJoinOperator {
    sides: [BandSide; 2],
    /// `right.t - left.t` of a pair that can match lies in `[lo_us, hi_us]`.
    lo_us: i64,
    hi_us: i64,
    /// The join's whole condition (band and any other comparison), over
    /// the joined row.
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// Whether each side's unmatched rows are emitted NULL-padded.
    preserved: [bool; 2],
    /// Whether each side's rows may be taken back while their time is at
    /// or after the side's own horizon (a windowed aggregate's rows, which
    /// change until the watermark passes their `window_end`).
    changing: [bool; 2],
    lateness_us: i64,
    /// Each side's horizon: its watermark less the allowed lateness (and,
    /// for a window join, less a window: see [`IntervalJoinOperator::windowed`]).
    horizon: [i64; 2],
    /// Per side, how far behind the horizon the earliest time a row can
    /// still bring is: 0 for an event time, a window less 1 µs for a
    /// window start.
    reach_back_us: [i64; 2],
    /// "interval join", or "window join" once [`IntervalJoinOperator::windowed`].
    kind: &'static str,
    schema: SchemaRef,
    description: String,
    rows_in: u64,
    rows_out: u64,
}

/// A delta's pairs with the other side's state that pass the join's
/// condition: the joined rows, and per pair the delta row and the state
/// row.
struct Pairs {
    joined: Option<RecordBatch>,
    rows: Vec<(u32, Entry)>,
}

impl IntervalJoinOperator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        join_type: JoinType,
        left: BandSide,
        right: BandSide,
        band_us: (i64, i64),
        filter: Option<Arc<dyn PhysicalExpr>>,
        lateness_us: i64,
        schema: SchemaRef,
        description: String,
    ) -> Result<IntervalJoinOperator, SluiceError> {
        let preserved = match join_type {
            JoinType::Inner => [false, false],
            JoinType::Left => [true, false],
            JoinType::Right => [false, true],
            JoinType::Full => [true, true],
            other => {
                return Err(SluiceError::Unsupported(format!(
                    "a {other} join with a time band is not supported in materialized views; use INNER, LEFT, RIGHT or FULL"
                )))
            }
        };
        Ok(IntervalJoinOperator {
            sides: [left, right],
            lo_us: band_us.0,
            hi_us: band_us.1,
            filter,
            preserved,
            changing: [false, false],
            lateness_us,
            horizon: [i64::MIN, i64::MIN],
            reach_back_us: [0, 0],
            kind: "interval join",
            schema,
            description,
            rows_in: 0,
            rows_out: 0,
        })
    }

    /// A window join: each side's time is the `window_start` of a TUMBLE
    /// of `size_us` (the band is 0: the same window). A row is late once
    /// its window has closed (its end is at or behind the horizon), so the
    /// earliest window a side can still bring starts a window less 1 µs
    /// behind its horizon; a row leaves once the other side has closed its
    /// window.
    pub fn windowed(mut self, size_us: i64) -> IntervalJoinOperator {
        self.reach_back_us = [size_us - 1, size_us - 1];
        self.kind = "window join";
        self
    }

    /// Side `side`'s rows can still bring times down to `us` behind its
    /// horizon: an aggregate's `window_start`, which changes until the
    /// watermark passes the window's end.
    pub fn reaching_back(mut self, side: usize, us: i64) -> IntervalJoinOperator {
        if let Some(r) = self.reach_back_us.get_mut(side) {
            *r = us;
        }
        self
    }

    /// Sides whose rows change until their own horizon passes them: rows
    /// there may be taken back, and a row stays held (to take its pairs
    /// back) until it can no longer change, as well as no longer match.
    pub fn changing(mut self, sides: [bool; 2]) -> Result<IntervalJoinOperator, SluiceError> {
        for (side, changes) in sides.iter().enumerate() {
            if *changes {
                self.sides[side].track_rows()?;
            }
        }
        self.changing = sides;
        Ok(self)
    }

    /// Rows of `side` earlier than this can match no row the other side
    /// can still bring (and, on a changing side, can no longer change).
    fn threshold(&self, side: usize) -> i64 {
        let reach = match side {
            // Left rows: a right row at t matches lefts in [t - hi, t - lo].
            0 => self.horizon[1].saturating_sub(self.hi_us),
            _ => self.horizon[0].saturating_add(self.lo_us),
        };
        match self.changing[side] {
            true => reach.min(self.horizon[side]),
            false => reach,
        }
    }

    /// Whether a pair with these times is inside the band.
    fn in_band(&self, left_t: i64, right_t: i64) -> bool {
        let d = right_t.saturating_sub(left_t);
        d >= self.lo_us && d <= self.hi_us
    }

    fn shown(&self) -> [Option<(&SchemaRef, &[RecordBatch])>; 2] {
        [0, 1].map(|s| Some((&self.sides[s].schema, self.sides[s].batches.as_slice())))
    }

    /// The pairs the rows of `batch` (of `side`; only those `wanted`) make
    /// with the other side's state: in the band, and through the join's
    /// whole condition.
    fn pairs(
        &self,
        side: usize,
        batch: &RecordBatch,
        keys: &[Option<RowKey>],
        times: &[Option<i64>],
        wanted: impl Fn(usize) -> bool,
    ) -> Result<Pairs, SluiceError> {
        let other = 1 - side;
        let o = &self.sides[other];
        let mut pairs = Vec::new();
        let mut rows = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let (Some(key), Some(t)) = (key, times[i]) else {
                continue;
            };
            if !wanted(i) {
                continue;
            }
            let Some(entries) = o.index.get(key) else {
                continue;
            };
            for e in entries {
                let (b, r) = (e.batch as usize, e.row as usize);
                if !o.alive[b][r] {
                    continue;
                }
                let ot = o.times[b][r];
                let fits = match side {
                    0 => self.in_band(t, ot),
                    _ => self.in_band(ot, t),
                };
                if !fits {
                    continue;
                }
                let mine = Source::Delta(i as u32);
                let theirs = Source::State(e.batch, e.row);
                pairs.push(match side {
                    0 => (mine, theirs),
                    _ => (theirs, mine),
                });
                rows.push((i as u32, *e));
            }
        }
        if pairs.is_empty() {
            return Ok(Pairs { joined: None, rows });
        }
        let joined = joined_rows(&self.schema, self.shown(), Some((side, batch)), &pairs)?;
        let keep = match &self.filter {
            Some(f) => {
                let keep = f.evaluate(&joined)?.into_array(joined.num_rows())?;
                keep.as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| SluiceError::Internal("join condition is not boolean".into()))?
                    .clone()
            }
            None => BooleanArray::from(vec![true; joined.num_rows()]),
        };
        let rows = rows
            .into_iter()
            .enumerate()
            .filter(|(p, _)| keep.is_valid(*p) && keep.value(*p))
            .map(|(_, r)| r)
            .collect();
        let joined = compute::filter_record_batch(&joined, &keep)?;
        Ok(Pairs {
            joined: (joined.num_rows() > 0).then_some(joined),
            rows,
        })
    }

    /// The rows of `batch` (of `side`) that can never match, NULL-padded,
    /// when the side is preserved: those with a NULL key or time.
    fn never_matching(
        &self,
        side: usize,
        batch: &RecordBatch,
        keys: &[Option<RowKey>],
        times: &[Option<i64>],
    ) -> Result<Option<RecordBatch>, SluiceError> {
        if !self.preserved[side] {
            return Ok(None);
        }
        let rows: Vec<(Source, Source)> = (0..batch.num_rows())
            .filter(|&i| keys[i].is_none() || times[i].is_none())
            .map(|i| match side {
                0 => (Source::Delta(i as u32), Source::Null),
                _ => (Source::Null, Source::Delta(i as u32)),
            })
            .collect();
        if rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(joined_rows(
            &self.schema,
            self.shown(),
            Some((side, batch)),
            &rows,
        )?))
    }

    /// Sends `batches` on (into a delta's inserts or retractions), counted.
    fn emit(&mut self, into: &mut Vec<RecordBatch>, batches: impl Iterator<Item = RecordBatch>) {
        for b in batches {
            self.rows_out += b.num_rows() as u64;
            into.push(b);
        }
    }

    /// A delta of `side`: its pairs with the other side's state, its
    /// NULL-padded rows that can never match, then its rows kept.
    fn apply_batch(&mut self, side: usize, batch: &RecordBatch) -> Result<Delta, SluiceError> {
        let other = 1 - side;
        let (keys, times) = self.sides[side].keys_and_times(batch)?;
        let pairs = self.pairs(side, batch, &keys, &times, |_| true)?;
        let mut out = Delta::default();
        let mut matched = vec![0u32; batch.num_rows()];
        for (i, e) in &pairs.rows {
            matched[*i as usize] += 1;
            self.sides[other].matched[e.batch as usize][e.row as usize] += 1;
        }
        // A preserved row with a NULL key or time can never match.
        let never = self.never_matching(side, batch, &keys, &times)?;
        self.emit(&mut out.insert, pairs.joined.into_iter().chain(never));
        self.sides[side].keep(batch.clone(), keys, &times, matched);
        // Rows already beyond the other side's reach leave at once.
        out.insert.extend(self.drop_side(side)?.insert);
        Ok(out)
    }

    /// Rows of a changing `side` taken back: their pairs with the other
    /// side's state are taken back, and they leave the state. A row still
    /// changing is always held (it leaves only once its own horizon has
    /// passed it), and every row it was paired with and could still pair
    /// with is held too, so this takes back exactly what it brought.
    fn retract_batch(&mut self, side: usize, batch: &RecordBatch) -> Result<Delta, SluiceError> {
        let other = 1 - side;
        let (keys, times) = self.sides[side].keys_and_times(batch)?;
        let held = self.sides[side].find(batch, &keys, &times)?;
        if let Some(i) = (0..batch.num_rows())
            .find(|&i| keys[i].is_some() && times[i].is_some() && held[i].is_none())
        {
            return Err(SluiceError::Internal(format!(
                "an interval join was asked to take back a row it does not hold (row {i} of a delta of its {} input)",
                ["left", "right"][side]
            )));
        }
        let pairs = self.pairs(side, batch, &keys, &times, |i| held[i].is_some())?;
        let mut out = Delta::default();
        for (_, e) in &pairs.rows {
            let count = &mut self.sides[other].matched[e.batch as usize][e.row as usize];
            *count = count.saturating_sub(1);
        }
        let never = self.never_matching(side, batch, &keys, &times)?;
        self.emit(&mut out.retract, pairs.joined.into_iter().chain(never));
        for e in held.into_iter().flatten() {
            self.sides[side].forget(e);
        }
        Ok(out)
    }

    /// Drops the rows of `side` the other side can no longer match; the
    /// preserved side's unmatched ones are emitted NULL-padded.
    fn drop_side(&mut self, side: usize) -> Result<Delta, SluiceError> {
        let threshold = self.threshold(side);
        let gone = self.sides[side].drop_before(threshold);
        let mut out = Delta::default();
        if self.preserved[side] && !gone.is_empty() {
            let rows: Vec<(Source, Source)> = gone
                .iter()
                .map(|e| {
                    let mine = Source::State(e.batch, e.row);
                    match side {
                        0 => (mine, Source::Null),
                        _ => (Source::Null, mine),
                    }
                })
                .collect();
            self.rows_out += rows.len() as u64;
            out.insert
                .push(joined_rows(&self.schema, self.shown(), None, &rows)?);
        }
        self.sides[side].compact()?;
        Ok(out)
    }
}

impl Operator for IntervalJoinOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input > 1 {
            return Err(SluiceError::Internal(format!(
                "a join has no input {input}"
            )));
        }
        let mut out = Delta::default();
        // Rows taken back first: a row that changed leaves with its pairs
        // before its new value pairs again.
        for batch in delta.retract.iter().filter(|b| b.num_rows() > 0) {
            if !self.changing[input] {
                return Err(SluiceError::Internal(
                    "an interval join's input took rows back".into(),
                ));
            }
            self.rows_in += batch.num_rows() as u64;
            let o = self.retract_batch(input, batch)?;
            out.insert.extend(o.insert);
            out.retract.extend(o.retract);
        }
        for batch in delta.insert.iter().filter(|b| b.num_rows() > 0) {
            self.rows_in += batch.num_rows() as u64;
            out.insert.extend(self.apply_batch(input, batch)?.insert);
        }
        Ok(out)
    }

    /// Side `input`'s watermark moved: the other side's rows it puts out
    /// of reach leave, and so do the side's own rows that could still
    /// change until now.
    fn advance_watermark(&mut self, input: usize, watermark_us: i64) -> Result<Delta, SluiceError> {
        if input > 1 {
            return Ok(Delta::default());
        }
        let horizon = watermark_us
            .saturating_sub(self.lateness_us)
            .saturating_sub(self.reach_back_us[input]);
        if horizon <= self.horizon[input] {
            return Ok(Delta::default());
        }
        self.horizon[input] = horizon;
        let mut out = self.drop_side(1 - input)?;
        if self.changing[input] {
            out.insert.extend(self.drop_side(input)?.insert);
        }
        Ok(out)
    }

    /// Each side's live rows with a `matches` column: how many rows of the
    /// other side each is paired with.
    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let mut parts = Vec::with_capacity(2);
        for side in &self.sides {
            let (rows, matched) = side.live_rows()?;
            let mut fields = rows.schema().fields().to_vec();
            fields.push(Arc::new(Field::new("matches", DataType::UInt32, false)));
            let mut columns = rows.columns().to_vec();
            columns.push(Arc::new(UInt32Array::from(matched)));
            parts.push(vec![RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?]);
        }
        Ok(parts)
    }

    /// Takes back what [`IntervalJoinOperator::snapshot`] wrote; a state
    /// written before matches were counted has a `matched` flag instead
    /// (its joins never took rows back, so a flag is all they used).
    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        let side = self
            .sides
            .get_mut(part)
            .ok_or_else(|| SluiceError::Internal(format!("a join has no side {part}")))?;
        let width = side.schema.fields().len();
        let damaged = || {
            SluiceError::Internal(
                "the checkpoint's interval join state has unexpected columns".into(),
            )
        };
        for batch in rows {
            if batch.num_columns() != width + 1 {
                return Err(damaged());
            }
            let column = batch.column(width);
            let matched: Vec<u32> = if let Some(c) = column.as_any().downcast_ref::<UInt32Array>() {
                c.values().to_vec()
            } else if let Some(c) = column.as_any().downcast_ref::<BooleanArray>() {
                (0..c.len()).map(|i| c.value(i) as u32).collect()
            } else {
                return Err(damaged());
            };
            side.load(batch.project(&(0..width).collect::<Vec<_>>())?, matched)?;
        }
        Ok(())
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: self.kind,
            description: self.description.clone(),
            state_rows: self.sides[0].live + self.sides[1].live,
            state_bytes: self.sides.iter().map(|s| s.state_bytes()).sum(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}
