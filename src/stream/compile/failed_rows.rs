//! Rows of a view's sources on which an expression of the view fails (a
//! division by zero in one row's values, a cast of one row's text): the
//! view reads on without them, and its reads fail with the row's error
//! until every such row is taken back (deleted or replaced in a keyed
//! table) or the view is rebuilt, as Materialize does. The query over the
//! same rows would fail too; the view never answers as if the row were
//! not there.
//!
//! State: a multiset of the failed rows, each known by a 128-bit hash of
//! where it came from (its slot) and its values, with its error: a row
//! that failed when inserted counts +1, the same row failing when taken
//! back -1. Checkpoint: the multiset goes into the view's manifest
//! (hashes, counts and errors; no values), and comes back with it.
//! Watermark: nothing.
//!
//! A plan that fails over a delta is run again over each of the delta's
//! rows alone (the plans between a view's stages filter and project,
//! row by row), so only the failing rows are set aside; that costs a plan
//! run per row of the failing delta only.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use sluice_catalog::FailedRowEntry;
use twox_hash::XxHash64;

use crate::error::SluiceError;
use crate::stream::operators::delta::DeltaSlot;

/// PostgreSQL's data exceptions (class 22): the errors a failed row has,
/// read back from a manifest as themselves.
const DATA_EXCEPTIONS: &[&str] = &[
    "22000", "2202E", "22021", "22008", "22012", "22005", "2200B", "22022", "22015", "2201E",
    "22014", "22016", "2201F", "2201G", "22018", "22007", "22019", "2200D", "22025", "22P06",
    "22010", "22023", "2201B", "2201W", "2201X", "2202H", "2202G", "22009", "2200C", "2200G",
    "22004", "22002", "22003", "2200H", "22026", "22001", "22011", "22027", "22024", "2200F",
    "22P01", "22P02", "22P03", "22P04", "22P05", "2200L", "2200M", "2200N", "2200S", "2200T",
    "22030", "22031", "22032", "22033", "22034", "22035", "22036", "22037", "22038", "22039",
    "2203A", "2203B", "2203C", "2203D", "2203E", "2203F", "2203G",
];

/// The failed rows of a view (see the module header).
#[derive(Debug, Default, Clone)]
pub struct FailedRows {
    rows: BTreeMap<u128, Failed>,
}

#[derive(Debug, Clone)]
struct Failed {
    count: i64,
    sqlstate: String,
    message: String,
}

impl FailedRows {
    /// How many rows fail now (those taken back as often as they came
    /// are gone).
    pub fn failing(&self) -> u64 {
        self.rows.values().map(|f| f.count.max(0) as u64).sum()
    }

    /// The error reads of the view fail with while rows fail: the first
    /// failing row's, saying how many there are.
    pub fn error(&self) -> Option<SluiceError> {
        let first = self.rows.values().find(|f| f.count > 0)?;
        let n = self.failing();
        let sqlstate = DATA_EXCEPTIONS
            .iter()
            .find(|c| **c == first.sqlstate)
            .copied()
            .unwrap_or("22000");
        Some(SluiceError::Evaluation {
            sqlstate,
            message: format!(
                "{} (in {n} row{} the view read; reads answer again once {} taken back or the \
                 view is rebuilt)",
                first.message,
                if n == 1 { "" } else { "s" },
                if n == 1 { "it is" } else { "they are" },
            ),
        })
    }

    /// Counts `row` (of the input numbered `slot`) as failed with `error`:
    /// +1 when inserted, -1 when taken back (`sign`).
    pub fn record_row(
        &mut self,
        slot: usize,
        row: &RecordBatch,
        sign: i64,
        error: &SluiceError,
    ) -> Result<(), SluiceError> {
        self.record(row_key(slot, row)?, sign, error);
        Ok(())
    }

    fn record(&mut self, key: u128, sign: i64, error: &SluiceError) {
        let entry = self.rows.entry(key).or_insert_with(|| Failed {
            count: 0,
            sqlstate: error.sqlstate().to_string(),
            message: error.message(),
        });
        entry.count += sign;
        if entry.count == 0 {
            self.rows.remove(&key);
        }
    }

    /// For the view's checkpoint manifest.
    pub fn saved(&self) -> Vec<FailedRowEntry> {
        self.rows
            .iter()
            .map(|(key, f)| FailedRowEntry {
                key: format!("{key:032x}"),
                count: f.count,
                sqlstate: f.sqlstate.clone(),
                message: f.message.clone(),
            })
            .collect()
    }

    /// From the view's checkpoint manifest.
    pub fn restore(&mut self, saved: &[FailedRowEntry]) {
        self.rows = saved
            .iter()
            .filter_map(|e| {
                let key = u128::from_str_radix(&e.key, 16).ok()?;
                Some((
                    key,
                    Failed {
                        count: e.count,
                        sqlstate: e.sqlstate.clone(),
                        message: e.message.clone(),
                    },
                ))
            })
            .collect();
    }
}

/// Runs `plan` over what the `slots` (listed on a failure) hold. When it fails with an error of the
/// data (class 22), runs it over each row of each slot alone, the other
/// slots empty, and returns what the rows that compute give; the rows
/// that fail go into `failed` with `sign` (+1 inserted, -1 taken back).
/// The slots hold what they held before, either way.
pub async fn collect_rows_apart(
    plan: &Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
    slots: impl FnOnce() -> Vec<DeltaSlot>,
    sign: i64,
    failed: &parking_lot::Mutex<FailedRows>,
) -> Result<Vec<RecordBatch>, SluiceError> {
    let error = match collect(plan.clone(), ctx.clone()).await {
        Ok(out) => return Ok(out),
        Err(e) => SluiceError::from(e),
    };
    if !error.is_data_exception() {
        return Err(error);
    }
    let slots = &slots()[..];
    let held: Vec<Vec<RecordBatch>> = slots
        .iter()
        .map(|s| std::mem::take(&mut *s.lock()))
        .collect();
    if held.iter().all(|b| b.iter().all(|b| b.num_rows() == 0)) {
        restore(slots, held);
        return Err(error);
    }
    let result = rows_apart(plan, ctx, slots, &held, sign, failed).await;
    restore(slots, held);
    result
}

fn restore(slots: &[DeltaSlot], held: Vec<Vec<RecordBatch>>) {
    for (slot, batches) in slots.iter().zip(held) {
        *slot.lock() = batches;
    }
}

async fn rows_apart(
    plan: &Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
    slots: &[DeltaSlot],
    held: &[Vec<RecordBatch>],
    sign: i64,
    failed: &parking_lot::Mutex<FailedRows>,
) -> Result<Vec<RecordBatch>, SluiceError> {
    let mut out = Vec::new();
    for (i, batches) in held.iter().enumerate() {
        for batch in batches {
            for row in 0..batch.num_rows() {
                let one = batch.slice(row, 1);
                *slots[i].lock() = vec![one.clone()];
                let result = collect(plan.clone(), ctx.clone()).await;
                slots[i].lock().clear();
                match result.map_err(SluiceError::from) {
                    Ok(rows) => out.extend(rows.into_iter().filter(|b| b.num_rows() > 0)),
                    Err(e) if e.is_data_exception() => {
                        failed.lock().record(row_key(i, &one)?, sign, &e)
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(out)
}

/// A row's identity: a 128-bit hash of its slot and its values as text.
fn row_key(slot: usize, row: &RecordBatch) -> Result<u128, SluiceError> {
    let options = FormatOptions::default().with_null("\u{0}NULL");
    let mut text = slot.to_string();
    for column in row.columns() {
        let f = ArrayFormatter::try_new(column.as_ref(), &options)?;
        text.push('\u{1f}');
        text.push_str(&f.value(0).to_string());
    }
    let hash = |seed: u64| {
        let mut h = XxHash64::with_seed(seed);
        h.write(text.as_bytes());
        h.finish()
    };
    Ok((u128::from(hash(0)) << 64) | u128::from(hash(0x5eed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_taken_back_as_often_as_it_failed_is_gone() {
        let mut failed = FailedRows::default();
        let error = SluiceError::Evaluation {
            sqlstate: "22012",
            message: "division by zero".into(),
        };
        failed.record(7, 1, &error);
        failed.record(7, 1, &error);
        failed.record(9, 1, &error);
        assert_eq!(failed.failing(), 3);
        assert_eq!(failed.error().map(|e| e.sqlstate()), Some("22012"));
        let mut restored = FailedRows::default();
        restored.restore(&failed.saved());
        assert_eq!(restored.failing(), 3);
        restored.record(7, -1, &error);
        restored.record(7, -1, &error);
        restored.record(9, -1, &error);
        assert_eq!(restored.failing(), 0);
        assert!(restored.error().is_none());
    }
}
