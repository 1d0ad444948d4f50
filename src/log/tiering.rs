//! Moving closed segments to the object store, and retention.
//!
//! A background task finds each partition's closed local segments, writes
//! each as one Parquet object, points the partition's index at it, and only
//! then deletes the local file. A crash between upload and delete leaves a
//! local copy that start-up recognises (the object covers its offsets) and
//! removes. Retention then deletes whole segments from the object store.

use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use tracing::{error, info, info_span, warn, Instrument};

use super::error::LogError;
use super::frame::FrameHeader;
use super::remote::{encode_segment, partition_prefix, segment_key, RemoteSegment};
use super::store::LogStore;
use super::table::{now_us, TableLog};
use crate::store::DurableStore;

/// Adds every partition's segments in the object store to its index, and
/// deletes objects of tables that no longer exist.
pub async fn attach_remote_segments(
    log: &LogStore,
    objects: &Arc<DurableStore>,
) -> Result<(), LogError> {
    let tables = log.tables();
    for table in &tables {
        for (k, part) in table.partitions().iter().enumerate() {
            let listed = objects
                .list(&partition_prefix(table.def().id, k as u32))
                .await?;
            // A compaction cut short leaves two generations of a segment:
            // the newest stays, the others go.
            let mut newest: std::collections::HashMap<u64, (u64, String)> = Default::default();
            let mut stale = Vec::new();
            for o in listed.iter().filter(|o| o.key.ends_with(".parquet")) {
                let Some((base, generation)) = super::compaction::segment_generation(&o.key) else {
                    continue;
                };
                match newest.get(&base) {
                    Some((g, _)) if *g >= generation => stale.push(o.key.clone()),
                    _ => {
                        if let Some((_, old)) = newest.insert(base, (generation, o.key.clone())) {
                            stale.push(old);
                        }
                    }
                }
            }
            for key in &stale {
                warn!(key = %key, "removing a segment object a compaction replaced");
                objects.delete(key).await?;
            }
            let mut found = Vec::new();
            for o in listed
                .iter()
                .filter(|o| o.key.ends_with(".parquet") && !stale.contains(&o.key))
            {
                match RemoteSegment::open(objects.clone(), &o.key, o.size).await {
                    Ok(segment) => found.push(segment),
                    // Serving the rest beats refusing to start; reads of
                    // the partition say what is missing. A local copy, if
                    // an interrupted move left one, stays and is moved again.
                    Err(e) => {
                        error!(table = %table.def().name, partition = k, key = %o.key, error = %e,
                               "segment in the object store is unreadable; its rows are missing");
                        part.note_unreadable_segment(&o.key);
                    }
                }
            }
            if found.is_empty() {
                continue;
            }
            info!(table = %table.def().name, partition = k, segments = found.len(), "attached segments in the object store");
            for path in part.attach_remote(found) {
                warn!(path = %path.display(), "removing a local segment already in the object store");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let known: Vec<u64> = tables.iter().map(|t| t.def().id).collect();
    for o in objects.list("tables").await? {
        let id = o.key.split('/').nth(1).and_then(|s| s.parse::<u64>().ok());
        if id.is_some_and(|id| !known.contains(&id)) {
            objects.delete(&o.key).await?;
        }
    }
    Ok(())
}

/// Starts the background task that uploads closed segments and applies
/// retention every `interval`.
pub fn spawn_tiering(log: Arc<LogStore>, objects: Arc<DurableStore>, interval: Duration) {
    tokio::spawn(
        async move {
            loop {
                tokio::time::sleep(interval).await;
                for table in log.tables() {
                    let pins = log.cut_pins(&table);
                    if let Err(e) = tier_table(&table, &objects, &pins).await {
                        warn!(table = %table.def().name, error = %e, "moving segments to the object store failed; will retry");
                    }
                }
            }
        }
        .instrument(info_span!("segment_tiering")),
    );
}

/// Moves a table's closed local segments to the object store and applies
/// retention, which keeps every segment starting below `pins` (per
/// partition: what cuts need, see [`LogStore::cut_pins`]).
pub async fn tier_table(
    table: &TableLog,
    objects: &Arc<DurableStore>,
    pins: &[u64],
) -> Result<(), LogError> {
    let _moving = table.tiering_lock().lock().await;
    for (k, part) in table.partitions().iter().enumerate() {
        for (segment, frames) in part.closed_local_segments() {
            if frames.is_empty() {
                continue;
            }
            let mut rows: Vec<(FrameHeader, RecordBatch)> = Vec::with_capacity(frames.len());
            for f in &frames {
                rows.push((f.header, part.fetch_frame(f).await?));
            }
            let data = tokio::task::spawn_blocking(move || encode_segment(&rows))
                .await
                .map_err(|e| LogError::Remote {
                    key: segment.path.display().to_string(),
                    reason: e.to_string(),
                })??;
            // Named by its first frame, not the file's base offset: a
            // file that stayed active after recovery dropped its frames
            // already in the object store, and must not overwrite them.
            let key = segment_key(table.def().id, k as u32, frames[0].header.base_offset);
            let size = data.len() as u64;
            objects.put(&key, data).await?;
            let (remote, headers) = RemoteSegment::open(objects.clone(), &key, size).await?;
            if part.swap_to_remote(&segment, remote, &headers) {
                info!(table = %table.def().name, partition = k, key = %key, frames = headers.len(), "segment moved to the object store");
                // Readers holding the old index keep the file open.
                std::fs::remove_file(&segment.path).map_err(LogError::io(&segment.path))?;
            } else {
                warn!(key = %key, "uploaded segment does not match the local one; keeping the local copy");
                objects.delete(&key).await?;
            }
        }
        let options = &table.def().options;
        let min_ingested = options
            .retention_secs
            .map(|s| now_us().saturating_sub((s as i64).saturating_mul(1_000_000)));
        let pinned = pins.get(k).copied().unwrap_or(0);
        for gone in part.expire(min_ingested, options.retention_bytes, pinned) {
            info!(table = %table.def().name, partition = k, key = %gone.key,
                  offsets = ?(gone.base_offset..gone.end_offset), "retention deleted a segment");
            objects.delete(&gone.key).await?;
        }
    }
    Ok(())
}
