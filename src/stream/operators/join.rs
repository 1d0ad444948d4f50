//! The incremental equi-join operator of a view's dataflow.
//!
//! Deltas: each input sends rows to insert and rows to retract (weight +1
//! and -1). A delta on one side is joined with the other side's state and
//! then added to its own (ΔL⋈R, then L+=ΔL; the same for the right), so
//! that applying the left's delta and then the right's gives exactly
//! (L+ΔL)⋈(R+ΔR) − L⋈R, self-joins included. A delta row whose join key
//! fails with an error of the data (a division by zero), and a joined
//! pair whose residual condition fails so, are set aside with their weight
//! for the graph to count (`stream::compile::failed_rows`), neither stored
//! nor emitted: taken back, they fail again and count back out.
//!
//! State: every live row of each side, indexed by the arrow-row bytes of
//! its join key (rows whose key has a NULL never match and are kept apart).
//! A retraction removes one equal row (found by comparing the arrow-row
//! form of the key's rows, made for a batch the first time a retraction
//! needs it). Outer joins (LEFT, RIGHT, and FULL, which preserves both
//! sides) keep nothing more: a preserved row has its NULL-padded twin
//! exactly while no row of the other side shares its key, so the twin
//! comes and goes when that side's count for the key crosses zero. Semi and anti joins emit the preserved row
//! while some (no) row of the other side shares its key.
//!
//! Checkpoint: each side's live rows ([`JoinOperator::snapshot`]), or
//! only the batches a side gained since the last checkpoint while no row
//! was taken out; each side is a Parquet file of its own columns. The
//! index is rebuilt from them on restore.
//!
//! Watermark: none yet. A join of two endless streams keeps every row of
//! both, which `EXPLAIN MATERIALIZED VIEW` will say once it exists.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::compute;
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::JoinType;
use datafusion::physical_expr::PhysicalExpr;

use super::operator::canonical_key;
use super::operator::{Delta, Operator, OperatorStats, StatePart};
use crate::error::SluiceError;

/// One row of a side's state: where it is.
struct Entry {
    batch: u32,
    row: u32,
}

/// One input of the join and its state.
pub struct JoinSide {
    pub schema: SchemaRef,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_rows: RowConverter,
    whole_rows: RowConverter,
    batches: Vec<RecordBatch>,
    /// Rows in `batches`, live or taken out.
    held: u64,
    /// The rows of a batch in arrow-row form, to find the row a
    /// retraction names; made the first time one does (a side that never
    /// retracts never pays for them).
    whole: Vec<Option<Rows>>,
    /// Batches the last checkpoint capture held: the later ones are what
    /// the state gained since, unless `rewritten`.
    captured: usize,
    /// A row was taken out (or the state compacted) since the last
    /// capture: the next one writes the whole side.
    rewritten: bool,
    /// Live rows by join key.
    index: HashMap<Box<[u8]>, Vec<Entry>, ahash::RandomState>,
    /// Live rows whose key has a NULL.
    null_keyed: Vec<Entry>,
    live: u64,
    /// NULL keys match each other (`IS NOT DISTINCT FROM`).
    nulls_match: bool,
}

impl JoinSide {
    pub fn new(
        schema: SchemaRef,
        keys: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<JoinSide, SluiceError> {
        let key_fields = keys
            .iter()
            .map(|k| k.data_type(&schema).map(SortField::new))
            .collect::<Result<Vec<_>, _>>()?;
        let row_fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(JoinSide {
            key_rows: RowConverter::new(key_fields)?,
            whole_rows: RowConverter::new(row_fields)?,
            schema,
            keys,
            batches: Vec::new(),
            held: 0,
            whole: Vec::new(),
            captured: 0,
            rewritten: false,
            index: HashMap::default(),
            null_keyed: Vec::new(),
            live: 0,
            nulls_match: false,
        })
    }

    /// Keys holding NULLs match each other, as `IS NOT DISTINCT FROM`
    /// joins them.
    pub fn matching_nulls(mut self, nulls_match: bool) -> JoinSide {
        self.nulls_match = nulls_match;
        self
    }

    /// The join key of each row, and which rows have a NULL in it.
    fn keys_of(&self, batch: &RecordBatch) -> Result<(Rows, Vec<bool>), SluiceError> {
        let columns: Vec<ArrayRef> = self
            .keys
            .iter()
            .map(|k| {
                k.evaluate(batch)?
                    .into_array(batch.num_rows())
                    .map(canonical_key)
            })
            .collect::<Result<_, _>>()?;
        let null: Vec<bool> = (0..batch.num_rows())
            .map(|i| !self.nulls_match && columns.iter().any(|c| c.is_null(i)))
            .collect();
        Ok((self.key_rows.convert_columns(&columns)?, null))
    }

    fn matches(&self, key: Option<&[u8]>) -> &[Entry] {
        match key.and_then(|k| self.index.get(k)) {
            Some(v) => v,
            None => &[],
        }
    }

    fn insert(&mut self, key: Option<&[u8]>, entry: Entry) {
        self.live += 1;
        match key {
            // Most rows find their key present: no key copied for them.
            Some(k) => match self.index.get_mut(k) {
                Some(list) => list.push(entry),
                None => {
                    self.index.insert(Box::from(k), vec![entry]);
                }
            },
            None => self.null_keyed.push(entry),
        }
    }

    /// Keeps a batch (its rows are then entries' `batch`).
    fn push_batch(&mut self, batch: RecordBatch) -> u32 {
        self.held += batch.num_rows() as u64;
        self.batches.push(batch);
        self.whole.push(None);
        (self.batches.len() - 1) as u32
    }

    /// Removes one live row with key `key` equal to `row` (arrow-row
    /// bytes).
    fn remove(&mut self, key: Option<&[u8]>, row: &[u8]) -> Result<(), SluiceError> {
        let candidates: Vec<u32> = {
            let list = match key {
                Some(k) => self.index.get(k),
                None => Some(&self.null_keyed),
            };
            list.map(|l| l.iter().map(|e| e.batch).collect())
                .unwrap_or_default()
        };
        for b in candidates {
            if self.whole[b as usize].is_none() {
                let rows = self
                    .whole_rows
                    .convert_columns(self.batches[b as usize].columns())?;
                self.whole[b as usize] = Some(rows);
            }
        }
        let list = match key {
            Some(k) => self.index.get_mut(k),
            None => Some(&mut self.null_keyed),
        };
        let Some(list) = list else {
            return Err(gone_missing());
        };
        let whole = &self.whole;
        let Some(at) = list.iter().position(|e| {
            whole[e.batch as usize]
                .as_ref()
                .is_some_and(|rows| rows.row(e.row as usize).as_ref() == row)
        }) else {
            return Err(gone_missing());
        };
        list.swap_remove(at);
        self.rewritten = true;
        if list.is_empty() {
            if let Some(k) = key {
                self.index.remove(k);
            }
        }
        self.live -= 1;
        Ok(())
    }

    /// Rows added since the last capture, or `None` when rows were taken
    /// out meanwhile; either way, what follows counts from now.
    fn appended_since_capture(&mut self) -> Option<Vec<RecordBatch>> {
        let appended = (!self.rewritten).then(|| self.batches[self.captured..].to_vec());
        self.captured = self.batches.len();
        self.rewritten = false;
        appended
    }

    /// The live rows: the batches held when none was taken out, else one
    /// batch of the live rows gathered.
    fn live_batches(&self) -> Result<Vec<RecordBatch>, SluiceError> {
        if self.held == self.live {
            return Ok(self.batches.clone());
        }
        Ok(vec![self.live_rows()?])
    }

    /// The live rows, as one batch.
    pub fn live_rows(&self) -> Result<RecordBatch, SluiceError> {
        let refs: Vec<(usize, usize)> = self
            .index
            .values()
            .flatten()
            .chain(self.null_keyed.iter())
            .map(|e| (e.batch as usize, e.row as usize))
            .collect();
        if refs.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let batches: Vec<&RecordBatch> = self.batches.iter().collect();
        Ok(compute::interleave_record_batch(&batches, &refs)?)
    }

    pub fn live(&self) -> u64 {
        self.live
    }

    /// Rewrites the state as its live rows alone once retracted rows (a
    /// keyed table's old versions) outnumber them: a side joined on its
    /// primary key then holds one row per key.
    fn compact(&mut self) -> Result<(), SluiceError> {
        if self.held < 4096 || self.held < 2 * self.live {
            return Ok(());
        }
        let live = self.live_rows()?;
        self.batches.clear();
        self.held = 0;
        self.whole.clear();
        self.rewritten = true;
        self.index.clear();
        self.null_keyed.clear();
        self.live = 0;
        self.load(&live)
    }

    /// Takes `rows` into the state (emitting nothing).
    fn load(&mut self, rows: &RecordBatch) -> Result<(), SluiceError> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let rows = RecordBatch::try_new(self.schema.clone(), rows.columns().to_vec())?;
        let (keys, null) = self.keys_of(&rows)?;
        let b = self.push_batch(rows);
        for (i, &has_null) in null.iter().enumerate() {
            let key = (!has_null).then(|| keys.row(i));
            self.insert(
                key.as_ref().map(|k| k.as_ref()),
                Entry {
                    batch: b,
                    row: i as u32,
                },
            );
        }
        Ok(())
    }
}

fn gone_missing() -> SluiceError {
    SluiceError::Internal("a join input retracted a row it never sent".into())
}

/// Where one side of an output row comes from.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// Row of the delta being applied.
    Delta(u32),
    /// Row of that side's state.
    State(u32, u32),
    /// NULLs (the padding of an outer join).
    Null,
}

/// Output rows as they are found: weight +1 or -1 each.
#[derive(Default)]
struct Found {
    insert: Vec<(Source, Source)>,
    retract: Vec<(Source, Source)>,
}

impl Found {
    fn push(&mut self, weight: i8, row: (Source, Source)) {
        match weight > 0 {
            true => self.insert.push(row),
            false => self.retract.push(row),
        }
    }
}

/// The joined rows `rows` names: for each side shown (its schema and the
/// state batches `Source::State` points into), its columns, taken from
/// the delta `batch` of side `delta.0`, the state, or NULLs.
pub(crate) fn joined_rows(
    schema: &SchemaRef,
    sides: [Option<(&SchemaRef, &[RecordBatch])>; 2],
    delta: Option<(usize, &RecordBatch)>,
    rows: &[(Source, Source)],
) -> Result<RecordBatch, SluiceError> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (s, shown) in sides.iter().enumerate() {
        let Some((side_schema, batches)) = shown else {
            continue;
        };
        let delta_batch = delta.filter(|d| d.0 == s).map(|d| d.1);
        for c in 0..side_schema.fields().len() {
            let field = side_schema.field(c);
            let null = new_null_array(field.data_type(), 1);
            let mut arrays: Vec<&dyn Array> = Vec::with_capacity(batches.len() + 2);
            arrays.push(null.as_ref());
            let delta_at = arrays.len();
            if let Some(b) = delta_batch {
                arrays.push(b.column(c).as_ref());
            }
            let state_at = arrays.len();
            // The delta's own side is never taken from its state.
            if delta_batch.is_none() {
                arrays.extend(batches.iter().map(|b| b.column(c).as_ref()));
            }
            let indices: Vec<(usize, usize)> = rows
                .iter()
                .map(|r| match if s == 0 { r.0 } else { r.1 } {
                    Source::Null => (0, 0),
                    Source::Delta(i) => (delta_at, i as usize),
                    Source::State(b, i) => (state_at + b as usize, i as usize),
                })
                .collect();
            columns.push(compute::interleave(&arrays, &indices)?);
        }
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

pub struct JoinOperator {
    pub join_type: JoinType,
    pub sides: [JoinSide; 2],
    /// The residual condition, over the joined row (inner joins only).
    filter: Option<Arc<dyn PhysicalExpr>>,
    pub schema: SchemaRef,
    /// `LEFT JOIN ON a.k = b.k`, as EXPLAIN shows it.
    description: String,
    pub rows_in: u64,
    pub rows_out: u64,
    /// Input rows whose join key, and joined rows whose condition, failed
    /// with an error of the data since the graph last took them
    /// ([`Operator::take_failed_rows`]); the join went on without them.
    failed_rows: Vec<super::operator::FailedRow>,
}

impl JoinOperator {
    /// `schema`: the joined rows' (both sides' columns, or the preserved
    /// side's alone for a semi or anti join).
    pub fn new(
        join_type: JoinType,
        left: JoinSide,
        right: JoinSide,
        filter: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
        description: String,
    ) -> Result<JoinOperator, SluiceError> {
        if !matches!(
            join_type,
            JoinType::Inner
                | JoinType::Left
                | JoinType::Right
                | JoinType::Full
                | JoinType::LeftSemi
                | JoinType::LeftAnti
                | JoinType::RightSemi
                | JoinType::RightAnti
        ) {
            return Err(SluiceError::Unsupported(format!(
                "{join_type} joins are not supported in materialized views"
            )));
        }
        if filter.is_some() && join_type != JoinType::Inner {
            return Err(SluiceError::Unsupported(format!(
                "a {join_type} join in a materialized view can only compare its two inputs with equalities of columns (put other conditions in WHERE, or use an inner join)"
            )));
        }
        Ok(JoinOperator {
            join_type,
            sides: [left, right],
            filter,
            schema,
            description,
            rows_in: 0,
            rows_out: 0,
            failed_rows: Vec::new(),
        })
    }

    /// The rows of `batch` (a delta of `side`) whose join key computes;
    /// each row on which it fails with an error of the data goes to
    /// `failed_rows` with `weight` instead, so that a row set aside when
    /// inserted is set aside again (not looked for) when taken back.
    fn keyable_rows(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        weight: i8,
    ) -> Result<RecordBatch, SluiceError> {
        match self.sides[side].keys_of(batch) {
            Ok(_) => return Ok(batch.clone()),
            Err(e) if e.is_data_exception() => {}
            Err(e) => return Err(e),
        }
        let mut keep = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let one = batch.slice(row, 1);
            match self.sides[side].keys_of(&one) {
                Ok(_) => keep.push(true),
                Err(e) if e.is_data_exception() => {
                    keep.push(false);
                    self.failed_rows.push((one, i64::from(weight), e));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(compute::filter_record_batch(
            batch,
            &BooleanArray::from(keep),
        )?)
    }

    /// The joined rows the residual condition keeps; where it fails on a
    /// row with an error of the data, that row goes to `failed_rows` with
    /// `weight` (a pair failing when it came fails again when it goes).
    fn filtered(&mut self, joined: RecordBatch, weight: i8) -> Result<RecordBatch, SluiceError> {
        let Some(filter) = self.filter.clone() else {
            return Ok(joined);
        };
        let condition = |rows: &RecordBatch| -> Result<BooleanArray, SluiceError> {
            let keep = filter.evaluate(rows)?.into_array(rows.num_rows())?;
            keep.as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .ok_or_else(|| SluiceError::Internal("join condition is not boolean".into()))
        };
        let keep = match condition(&joined) {
            Ok(keep) => keep,
            Err(e) if e.is_data_exception() => {
                let mut keep = Vec::with_capacity(joined.num_rows());
                for row in 0..joined.num_rows() {
                    let one = joined.slice(row, 1);
                    match condition(&one) {
                        Ok(k) => keep.push(k.is_valid(0) && k.value(0)),
                        Err(e) if e.is_data_exception() => {
                            keep.push(false);
                            self.failed_rows.push((one, i64::from(weight), e));
                        }
                        Err(e) => return Err(e),
                    }
                }
                BooleanArray::from(keep)
            }
            Err(e) => return Err(e),
        };
        Ok(compute::filter_record_batch(&joined, &keep)?)
    }

    /// Whether an outer, semi or anti join keeps the rows of `side` (a
    /// FULL join keeps both sides').
    fn preserves(&self, side: usize) -> bool {
        match self.join_type {
            JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti => side == 0,
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti => side == 1,
            JoinType::Full => true,
            _ => false,
        }
    }

    fn emits_pairs(&self) -> bool {
        matches!(
            self.join_type,
            JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
        )
    }

    fn is_semi(&self) -> bool {
        matches!(self.join_type, JoinType::LeftSemi | JoinType::RightSemi)
    }

    fn is_anti(&self) -> bool {
        matches!(self.join_type, JoinType::LeftAnti | JoinType::RightAnti)
    }

    /// Applies a delta of `side` (0 left, 1 right); returns the joined
    /// rows it inserts and retracts.
    fn apply_side(
        &mut self,
        side: usize,
        insert: &[RecordBatch],
        retract: &[RecordBatch],
    ) -> Result<Delta, SluiceError> {
        let mut out = Delta::default();
        for (batch, weight) in insert
            .iter()
            .map(|b| (b, 1i8))
            .chain(retract.iter().map(|b| (b, -1i8)))
        {
            if batch.num_rows() == 0 {
                continue;
            }
            self.rows_in += batch.num_rows() as u64;
            let batch = &self.keyable_rows(side, batch, weight)?;
            if batch.num_rows() == 0 {
                continue;
            }
            let found = self.apply_batch(side, batch, weight)?;
            for (rows, into, sign) in [
                (&found.insert, &mut out.insert, 1i8),
                (&found.retract, &mut out.retract, -1i8),
            ] {
                if rows.is_empty() {
                    continue;
                }
                let joined = self.build(side, batch, rows)?;
                let joined = self.filtered(joined, sign)?;
                self.rows_out += joined.num_rows() as u64;
                if joined.num_rows() > 0 {
                    into.push(joined);
                }
            }
        }
        self.sides[side].compact()?;
        Ok(out)
    }

    fn apply_batch(
        &mut self,
        side: usize,
        batch: &RecordBatch,
        weight: i8,
    ) -> Result<Found, SluiceError> {
        let other = 1 - side;
        let pairs = self.emits_pairs();
        let (semi, anti) = (self.is_semi(), self.is_anti());
        let (keys, null) = self.sides[side].keys_of(batch)?;
        // A retraction's rows in arrow-row form, to find each one.
        let (stored, retracted) = match weight > 0 {
            true => (Some(self.sides[side].push_batch(batch.clone())), None),
            false => (
                None,
                Some(
                    self.sides[side]
                        .whole_rows
                        .convert_columns(batch.columns())?,
                ),
            ),
        };
        // (left, right) in output order.
        let pair = |mine: Source, theirs: Source| match side {
            0 => (mine, theirs),
            _ => (theirs, mine),
        };
        let mut found = Found::default();
        for (i, &has_null) in null.iter().enumerate() {
            let key = (!has_null).then(|| keys.row(i));
            let key = key.as_ref().map(|k| k.as_ref());
            let delta = Source::Delta(i as u32);
            let matches = self.sides[other].matches(key);
            if pairs {
                for m in matches {
                    found.push(weight, pair(delta, Source::State(m.batch, m.row)));
                }
            }
            if self.preserves(side) {
                let keep = match (semi, anti) {
                    (true, _) => !matches.is_empty(),
                    (_, true) => matches.is_empty(),
                    _ => matches.is_empty(),
                };
                if keep {
                    found.push(weight, pair(delta, Source::Null));
                }
            }
            // This side's count for the key crossing zero makes the other
            // (preserved) side's padded, semi or anti rows come or go.
            let counts = self.preserves(other) && key.is_some();
            let before = match counts {
                true => self.sides[side].matches(key).len(),
                false => 0,
            };
            match (stored, &retracted) {
                (Some(b), _) => self.sides[side].insert(
                    key,
                    Entry {
                        batch: b,
                        row: i as u32,
                    },
                ),
                (None, Some(rows)) => self.sides[side].remove(key, rows.row(i).as_ref())?,
                (None, None) => return Err(gone_missing()),
            }
            let after = match counts {
                true => self.sides[side].matches(key).len(),
                false => 0,
            };
            if counts && (before == 0) != (after == 0) {
                // Appeared: padded and anti rows go, semi rows come.
                let appeared: i8 = if after > 0 { 1 } else { -1 };
                let w = if semi { appeared } else { -appeared };
                for m in self.sides[other].matches(key) {
                    found.push(w, pair(Source::Null, Source::State(m.batch, m.row)));
                }
            }
        }
        Ok(found)
    }

    /// The output rows `rows` names, for a delta `batch` of `side`.
    fn build(
        &self,
        side: usize,
        batch: &RecordBatch,
        rows: &[(Source, Source)],
    ) -> Result<RecordBatch, SluiceError> {
        // A semi or anti join outputs the preserved side alone.
        let shown = |s: usize| {
            (self.emits_pairs() || self.preserves(s))
                .then(|| (&self.sides[s].schema, self.sides[s].batches.as_slice()))
        };
        joined_rows(
            &self.schema,
            [shown(0), shown(1)],
            Some((side, batch)),
            rows,
        )
    }

    pub fn state_rows(&self) -> u64 {
        self.sides[0].live() + self.sides[1].live()
    }
}

impl Operator for JoinOperator {
    fn apply(&mut self, input: usize, delta: &Delta) -> Result<Delta, SluiceError> {
        if input > 1 {
            return Err(SluiceError::Internal(format!(
                "a join has no input {input}"
            )));
        }
        self.apply_side(input, &delta.insert, &delta.retract)
    }

    /// The left side's live rows, then the right's (the batches held,
    /// not copies, unless rows were taken out of them).
    fn snapshot(&mut self) -> Result<Vec<StatePart>, SluiceError> {
        let state = vec![self.sides[0].live_batches()?, self.sides[1].live_batches()?];
        for side in &mut self.sides {
            side.captured = side.batches.len();
            side.rewritten = false;
        }
        Ok(state)
    }

    /// Each side's new batches (left, then right), while neither side
    /// had rows taken out.
    fn appended_since_capture(&mut self) -> Result<Option<Vec<StatePart>>, SluiceError> {
        let left = self.sides[0].appended_since_capture();
        let right = self.sides[1].appended_since_capture();
        let (Some(left), Some(right)) = (left, right) else {
            // Taken by the full snapshot the caller makes instead.
            return Ok(None);
        };
        Ok(Some(vec![left, right]))
    }

    fn restore(&mut self, part: usize, rows: &[RecordBatch]) -> Result<(), SluiceError> {
        let side = self
            .sides
            .get_mut(part)
            .ok_or_else(|| SluiceError::Internal(format!("a join has no side {part}")))?;
        for batch in rows {
            side.load(batch)?;
        }
        // What a checkpoint holds already is no gain for the next one.
        side.captured = side.batches.len();
        side.rewritten = false;
        Ok(())
    }

    fn take_failed_rows(&mut self) -> Vec<super::operator::FailedRow> {
        std::mem::take(&mut self.failed_rows)
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            kind: "join",
            description: self.description.clone(),
            state_rows: self.state_rows(),
            state_bytes: self
                .sides
                .iter()
                .flat_map(|s| s.batches.iter())
                .map(|b| b.get_array_memory_size() as u64)
                .sum(),
            input_rows: self.rows_in,
            output_rows: self.rows_out,
        }
    }
}
