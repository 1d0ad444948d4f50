//! Compaction of keyed tables: segments in the object store are rewritten
//! so that only the latest record of each key remains, and tombstones
//! older than `delete_retention` go too.
//!
//! A removed record leaves a hole: its row stays (every column NULL, the
//! `_deleted` flag too), so offsets, frame boundaries and the `_offset`
//! statistics of the Parquet row groups do not move, and readers skip
//! holes. NULL columns cost next to nothing in Parquet, so the space goes.
//! A rewrite is a new object (`<base>-c<generation>.parquet`) that the
//! partition's index switches to before the old object is deleted; after a
//! crash in between, start-up keeps the newest generation of each segment
//! and deletes the rest. Either copy holds every record that must remain.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{Field, Schema};
use tracing::{info, info_span, warn, Instrument};

use super::error::LogError;
use super::frame::FrameHeader;
use super::keyed::{latest_records, KeyCodec};
use super::partition::{FrameLocation, PartitionLog};
use super::remote::{encode_segment, RemoteSegment};
use super::store::LogStore;
use super::table::{now_us, TableLog};
use super::transaction::TransactionCoordinator;
use crate::store::DurableStore;
use sluice_catalog::DEFAULT_DELETE_RETENTION_SECS;

/// What one pass over a table did.
#[derive(Debug, Default, Clone, Copy)]
pub struct CompactionReport {
    pub segments_rewritten: u64,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// The key of generation `generation` of the segment at `base_offset`.
pub fn compacted_key(table_id: u64, partition: u32, base_offset: u64, generation: u64) -> String {
    format!("tables/{table_id}/p{partition}/{base_offset:020}-c{generation}.parquet")
}

/// Base offset and generation (0: as tiered) of a segment object's key.
pub fn segment_generation(key: &str) -> Option<(u64, u64)> {
    let name = key.rsplit('/').next()?.strip_suffix(".parquet")?;
    match name.split_once("-c") {
        Some((base, generation)) => Some((base.parse().ok()?, generation.parse().ok()?)),
        None => Some((name.parse().ok()?, 0)),
    }
}

/// Where compaction may work, per partition: only below these offsets, so
/// that a view restoring from a checkpoint at or above them still finds
/// the version of each key it had applied (views' checkpointed offsets).
pub type Horizon = Arc<dyn Fn(&TableLog) -> Vec<u64> + Send + Sync>;

/// `horizon`, lowered to where open REPEATABLE READ snapshots read, so
/// that each still finds the versions it saw.
pub fn below_snapshots(horizon: Horizon, transactions: Arc<TransactionCoordinator>) -> Horizon {
    Arc::new(move |table: &TableLog| {
        horizon(table)
            .into_iter()
            .zip(transactions.snapshot_floor(table))
            .map(|(h, s)| h.min(s))
            .collect()
    })
}

/// `horizon`, lowered to the ends of the cuts over a table, so that a read
/// at each cut still finds the versions of keys it saw. (`VACUUM`, an
/// erasure, does not stop at cuts: erasure wins over a cut.)
pub fn below_cuts(horizon: Horizon, store: Arc<LogStore>) -> Horizon {
    Arc::new(move |table: &TableLog| {
        horizon(table)
            .into_iter()
            .zip(store.cut_floor(table))
            .map(|(h, c)| h.min(c))
            .collect()
    })
}

/// Compacts every partition of a keyed table, one at a time, below
/// `horizon` (per partition).
pub async fn compact_table(
    table: &TableLog,
    objects: &Arc<DurableStore>,
    horizon: &[u64],
) -> Result<CompactionReport, LogError> {
    let _pass = table.compaction_lock().lock().await;
    let mut report = CompactionReport::default();
    for (k, part) in table.partitions().iter().enumerate() {
        let below = horizon.get(k).copied().unwrap_or(u64::MAX);
        let r = compact_partition(table, k as u32, part, objects, below).await;
        part.compaction.lock().in_progress = None;
        let r = r?;
        report.segments_rewritten += r.segments_rewritten;
        report.records_removed += r.records_removed;
        report.bytes_before += r.bytes_before;
        report.bytes_after += r.bytes_after;
    }
    // The commit log may still carry copies of the removed records.
    table.drop_carried_frames().await?;
    Ok(report)
}

async fn compact_partition(
    table: &TableLog,
    k: u32,
    part: &PartitionLog,
    objects: &Arc<DurableStore>,
    horizon: u64,
) -> Result<CompactionReport, LogError> {
    let def = &table.def();
    let codec = KeyCodec::new(def)?;
    let end = part.end_offset().min(horizon);
    let latest = latest_records(def, &codec, part, end).await?;
    let retention_us = def
        .options
        .delete_retention_secs
        .unwrap_or(DEFAULT_DELETE_RETENTION_SECS) as i64
        * 1_000_000;
    let cutoff = now_us().saturating_sub(retention_us);
    // The records that stay: each key's latest live record, and its latest
    // tombstone while younger than delete_retention.
    let mut keep: HashSet<(usize, usize)> = latest.live.iter().copied().collect();
    keep.extend(
        latest
            .tombstones_at
            .iter()
            .filter(|(f, _)| latest.frames[*f].0.header.ingested_at_us >= cutoff),
    );
    let records: u64 = latest.frames.iter().map(|(_, b)| b.num_rows() as u64).sum();
    let holes = latest.holes;
    let dirty = records.saturating_sub(holes + keep.len() as u64);
    let remote = part.remote_segments();
    {
        let mut stats = part.compaction.lock();
        stats.dirty_ratio = Some(if records > holes {
            dirty as f64 / (records - holes) as f64
        } else {
            0.0
        });
        stats.in_progress = Some((0, remote.len() as u64));
    }
    let mut report = CompactionReport::default();
    for (done, segment) in remote.iter().enumerate() {
        // Segments reaching past the horizon wait for a later pass.
        if segment.end_offset > end {
            continue;
        }
        let mut rows: Vec<(FrameHeader, RecordBatch)> = Vec::new();
        let mut removed = 0u64;
        // Tombstones whose values go (tables keyed by row).
        let mut emptied = 0u64;
        for (f, (meta, batch)) in latest.frames.iter().enumerate() {
            if !matches!(&meta.location, FrameLocation::Remote(r) if Arc::ptr_eq(r, segment)) {
                continue;
            }
            let hole: BooleanArray = (0..batch.num_rows())
                .map(|i| Some(!keep.contains(&(f, i))))
                .collect();
            let deleted = batch.column(def.columns.len());
            removed += (0..batch.num_rows())
                .filter(|&i| hole.value(i) && deleted.is_valid(i))
                .count() as u64;
            let mut batch = punch_holes(batch, &hole)?;
            if def.options.keyed_by_row {
                // A kept tombstone of a table keyed by row keeps only the
                // position of the row it deleted: the row's values go with
                // the row (views have taken it back: compaction runs below
                // what they have read).
                let (stripped, n) = strip_tombstone_values(&batch, def.columns.len())?;
                emptied += n;
                batch = stripped;
            }
            rows.push((meta.header, batch));
        }
        if removed + emptied == 0 || rows.is_empty() {
            continue;
        }
        if let Some((key, size, _)) =
            rewrite_segment(def.id, k, part, segment, rows, objects).await?
        {
            info!(table = %def.name, partition = k, key = %key, removed, before = segment.bytes, after = size,
                  "compacted a segment");
            report.segments_rewritten += 1;
            report.records_removed += removed;
            report.bytes_before += segment.bytes;
            report.bytes_after += size;
        }
        part.compaction.lock().in_progress = Some((done as u64 + 1, remote.len() as u64));
    }
    let mut stats = part.compaction.lock();
    stats.runs += 1;
    stats.records_removed += report.records_removed;
    stats.bytes_before += report.bytes_before;
    stats.bytes_after += report.bytes_after;
    Ok(report)
}

/// Rewrites every segment of an append-only table in the object store
/// that holds rows erased from it (see [`PartitionLog::erase`]), each
/// erased row a hole, as compaction does for keyed tables: offsets and
/// frames stay. The caller has closed the active segments and moved them
/// to the object store. Returns each file rewritten with its content
/// hashes before and after. Running it again rewrites nothing.
pub async fn erase_segments(
    table: &TableLog,
    objects: &Arc<DurableStore>,
) -> Result<Vec<super::erasure::RewrittenFile>, LogError> {
    use super::erasure::{sha256_hex, RewrittenFile};
    let _pass = table.compaction_lock().lock().await;
    let def = table.def();
    let mut rewritten = Vec::new();
    for (k, part) in table.partitions().iter().enumerate() {
        for segment in part.remote_segments() {
            if !part.has_erased(segment.base_offset, segment.end_offset) {
                continue;
            }
            let mut rows: Vec<(FrameHeader, RecordBatch)> = Vec::new();
            let mut holes = 0usize;
            for meta in part.frames_in_range(segment.base_offset, segment.end_offset) {
                if !matches!(&meta.location, FrameLocation::Remote(r) if Arc::ptr_eq(r, &segment)) {
                    continue;
                }
                let batch = part.read_frame(&meta).await?;
                let batch = match part.erased_mask(meta.header.base_offset, batch.num_rows()) {
                    Some(keep) => {
                        let hole = arrow::compute::not(&keep)?;
                        // A row already a hole (every column NULL) needs
                        // no rewrite.
                        holes += (0..batch.num_rows())
                            .filter(|&i| {
                                hole.value(i) && batch.columns().iter().any(|c| c.is_valid(i))
                            })
                            .count();
                        punch_holes(&batch, &hole)?
                    }
                    None => batch,
                };
                rows.push((meta.header, batch));
            }
            if holes == 0 || rows.is_empty() {
                continue;
            }
            let old = objects.get(&segment.key).await?;
            let replaced = rewrite_segment(def.id, k as u32, part, &segment, rows, objects).await?;
            if let Some((key, _, new_sha256)) = replaced {
                info!(table = %def.name, partition = k, key = %key, holes, "erased rows from a segment");
                rewritten.push(RewrittenFile {
                    location: format!("{}/{key}", objects.url().trim_end_matches('/')),
                    old_sha256: sha256_hex(&old),
                    new_sha256,
                });
            }
        }
    }
    // The commit log may still carry copies of the erased rows.
    table.drop_carried_frames().await?;
    Ok(rewritten)
}

/// Writes `rows` as the next generation of `segment` and switches the
/// partition's index to it before deleting the old object. Returns the
/// new key, its size and SHA-256; None when retention deleted the segment
/// meanwhile (the new object goes too).
async fn rewrite_segment(
    table_id: u64,
    k: u32,
    part: &PartitionLog,
    segment: &Arc<RemoteSegment>,
    rows: Vec<(FrameHeader, RecordBatch)>,
    objects: &Arc<DurableStore>,
) -> Result<Option<(String, u64, String)>, LogError> {
    let (base, generation) = segment_generation(&segment.key).unwrap_or((segment.base_offset, 0));
    let data = tokio::task::spawn_blocking(move || encode_segment(&rows))
        .await
        .map_err(|e| LogError::Remote {
            key: segment.key.clone(),
            reason: e.to_string(),
        })??;
    let key = compacted_key(table_id, k, base, generation + 1);
    let size = data.len() as u64;
    let sha256 = super::erasure::sha256_hex(&data);
    objects.put(&key, data).await?;
    let (replacement, _) = RemoteSegment::open(objects.clone(), &key, size).await?;
    if part.replace_remote(segment, replacement) {
        objects.delete(&segment.key).await?;
        Ok(Some((key, size, sha256)))
    } else {
        objects.delete(&key).await?;
        Ok(None)
    }
}

/// The batch with every column NULL where `hole` is set.
fn punch_holes(batch: &RecordBatch, hole: &BooleanArray) -> Result<RecordBatch, LogError> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| arrow::compute::nullif(c, hole))
        .collect::<Result<_, _>>()?;
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(
            fields,
            batch.schema().metadata().clone(),
        )),
        columns,
    )?)
}

/// The batch with the first `values` columns NULL in tombstones, and how
/// many tombstones had a value to lose.
fn strip_tombstone_values(
    batch: &RecordBatch,
    values: usize,
) -> Result<(RecordBatch, u64), LogError> {
    let deleted = batch
        .column(values)
        .as_any()
        .downcast_ref::<BooleanArray>()
        .cloned()
        .unwrap_or_else(|| BooleanArray::from(vec![false; batch.num_rows()]));
    let tombstone: BooleanArray = (0..batch.num_rows())
        .map(|i| Some(deleted.is_valid(i) && deleted.value(i)))
        .collect();
    let n = (0..batch.num_rows())
        .filter(|&i| tombstone.value(i) && batch.columns()[..values].iter().any(|c| c.is_valid(i)))
        .count() as u64;
    if n == 0 {
        return Ok((batch.clone(), 0));
    }
    let mut columns = batch.columns().to_vec();
    for c in columns.iter_mut().take(values) {
        *c = arrow::compute::nullif(c, &tombstone)?;
    }
    Ok((RecordBatch::try_new(batch.schema(), columns)?, n))
}

/// Starts the task that compacts keyed tables every `interval` when they
/// have new records.
pub fn spawn_compaction(
    log: Arc<LogStore>,
    objects: Arc<DurableStore>,
    interval: Duration,
    horizon: Horizon,
) {
    tokio::spawn(
        async move {
            let mut seen: std::collections::HashMap<u64, Vec<u64>> = Default::default();
            loop {
                tokio::time::sleep(interval).await;
                for table in log.tables().into_iter().filter(|t| t.def().is_keyed()) {
                    let below = horizon(&table);
                    let ends: Vec<u64> = table
                        .commits()
                        .borrow()
                        .iter()
                        .zip(&below)
                        .map(|(e, h)| (*e).min(*h))
                        .collect();
                    if seen.get(&table.def().id) == Some(&ends) {
                        continue;
                    }
                    match compact_table(&table, &objects, &below).await {
                        Ok(_) => {
                            seen.insert(table.def().id, ends);
                        }
                        Err(e) => {
                            warn!(table = %table.def().name, error = %e, "compaction failed; will retry")
                        }
                    }
                }
            }
        }
        .instrument(info_span!("compaction")),
    );
}
