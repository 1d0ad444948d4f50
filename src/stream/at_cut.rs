//! A materialized view at a position of its tables' log (`v AS OF CUT c`,
//! `AS OF OFFSETS`, `AS OF TIMESTAMP`), and the view checkpoints cuts keep
//! so that such a read costs the log between one of them and the cut, not
//! the view's whole history.
//!
//! State: none of its own. `CREATE CUT` keeps, for each view over tables
//! the cut covers, the view's checkpoint at the cut (asked for and waited
//! on briefly) or else its last one below; the cut's catalog record names
//! them (`CutDef::view_checkpoints`) and `Checkpoints` holds them from
//! garbage collection until the cut is dropped. An erasure's checkpoint
//! deletes them with every other epoch (their files hold the erased rows):
//! reads at the cut then replay the log from where the view started.
//!
//! A read runs the view's query again in a task of its own that nobody
//! else sees and that never checkpoints, restored from the newest kept
//! checkpoint at or below the position and fed the log up to exactly it.
//! Watermarks: the task's clock starts from the checkpoint's and moves
//! commit by commit as the view's did, so it makes the same decisions
//! (late rows, closed windows) as the view made there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use sluice_catalog::{CheckpointManifest, CutDef, CutViewCheckpoint, ViewDef};
use tracing::{info, warn};

use super::compile::pipeline::{compile, EmitOptions};
use super::runner::{parse_query, ViewManager};
use super::view::{View, ViewSource};
use crate::error::SluiceError;
use crate::log::TableLog;

/// Ids of the views computed at a cut, counted down from the top so that
/// they meet no catalog id.
static AT_CUT_IDS: AtomicU64 = AtomicU64::new(0);

/// How long `CREATE CUT` waits for a view to reach the cut and commit a
/// checkpoint there; past it (a view still catching up), the cut keeps the
/// view's last checkpoint below the cut.
const CUT_CHECKPOINT_WAIT: Duration = Duration::from_secs(10);

/// A view's offsets (in the order of its inputs' partitions) at a
/// position its tables' `ends` give; None when it reads a view or a table
/// `ends` does not know.
fn view_offsets_at(view: &View, ends: impl Fn(&TableLog) -> Option<Vec<u64>>) -> Option<Vec<u64>> {
    let mut offsets = Vec::new();
    for input in view.source.inputs() {
        let ViewSource::Table(t) = &input else {
            return None;
        };
        offsets.extend(ends(t)?);
    }
    (offsets.len() == view.source.offsets()).then_some(offsets)
}

/// True when a checkpoint at `offsets` lies at or below `position`.
fn at_or_below(offsets: &[u64], position: &[u64]) -> bool {
    offsets.len() == position.len() && offsets.iter().zip(position).all(|(o, p)| o <= p)
}

impl ViewManager {
    /// Keeps every view's last committed checkpoint. Called before a cut
    /// is taken, so none covers an offset past it; see
    /// [`ViewManager::keep_checkpoints_at`].
    pub fn keep_latest_checkpoints(&self) -> Vec<CheckpointManifest> {
        self.views()
            .iter()
            .filter_map(|v| self.checkpoints.pin_latest(v.def.id))
            .collect()
    }

    /// The checkpoints `cut` keeps: for each view over tables it covers
    /// only, the view's checkpoint at the cut when the view reaches it and
    /// commits one there within [`CUT_CHECKPOINT_WAIT`], else the one kept
    /// before the cut was taken (`early`). The rest of `early` is let go.
    pub async fn keep_checkpoints_at(
        &self,
        cut: &CutDef,
        early: Vec<CheckpointManifest>,
    ) -> Vec<CutViewCheckpoint> {
        let ends = |t: &TableLog| {
            cut.tables
                .iter()
                .find(|c| c.table_id == t.def().id)
                .map(|c| c.ends.clone())
        };
        let waits = self.views().into_iter().filter_map(|view| {
            let at_cut = view_offsets_at(&view, ends)?;
            Some(async move {
                let reached = async {
                    view.wait_for(&at_cut).await?;
                    // A view already past the cut has no state at it to
                    // write.
                    if view.progress().0 == at_cut && view.checkpointed_offsets() != at_cut {
                        view.wait_checkpointed(&at_cut).await?;
                    }
                    Ok::<_, SluiceError>(())
                };
                if tokio::time::timeout(CUT_CHECKPOINT_WAIT, reached)
                    .await
                    .is_err()
                {
                    info!(view = %view.def.name, cut = %cut.name, "the view has not reached the cut yet; the cut keeps its last checkpoint below");
                }
                (view.def.id, at_cut)
            })
        });
        let mut kept = Vec::new();
        let mut early = early;
        for (id, at_cut) in futures::future::join_all(waits).await {
            let before = early
                .iter()
                .position(|m| m.view_id == id && at_or_below(&m.source_offsets, &at_cut))
                .map(|i| early.swap_remove(i));
            let latest = self.checkpoints.pin_latest(id);
            let chosen = match (latest, before) {
                (Some(latest), before)
                    if at_or_below(&latest.source_offsets, &at_cut)
                        && before.as_ref().is_none_or(|b| latest.epoch >= b.epoch) =>
                {
                    if let Some(b) = before {
                        self.checkpoints.unpin(id, b.epoch);
                    }
                    Some(latest)
                }
                (latest, before) => {
                    if let Some(l) = latest {
                        self.checkpoints.unpin(id, l.epoch);
                    }
                    before
                }
            };
            if let Some(m) = chosen {
                kept.push(CutViewCheckpoint {
                    view_id: id,
                    epoch: m.epoch,
                });
            }
        }
        for m in early {
            self.checkpoints.unpin(m.view_id, m.epoch);
        }
        kept
    }

    /// Lets go of the checkpoints a dropped cut kept.
    pub fn release_checkpoints(&self, cut: &CutDef) {
        for k in &cut.view_checkpoints {
            self.checkpoints.unpin(k.view_id, k.epoch);
        }
    }

    /// Keeps again, at start-up and before any view's checkpoints are
    /// collected, the checkpoints the cuts name.
    pub(super) async fn keep_cut_checkpoints(&self) {
        let views: Vec<u64> = self.store.view_defs().iter().map(|d| d.id).collect();
        for cut in self.store.cut_defs() {
            for k in cut
                .view_checkpoints
                .iter()
                .filter(|k| views.contains(&k.view_id))
            {
                self.checkpoints.pin_epoch(k.view_id, k.epoch).await;
            }
        }
    }

    /// The rows of view `name` as of `ends_of` each table it reads (per
    /// partition): the view computed again up to exactly those offsets
    /// (see the module header). Fails where the log no longer holds rows
    /// the replay needs, or the view started after the position.
    pub async fn rows_at(
        &self,
        name: &str,
        at: &str,
        ends_of: impl Fn(&TableLog) -> Result<Vec<u64>, SluiceError>,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        let view = self
            .view(name)
            .ok_or_else(|| SluiceError::UndefinedTable(name.to_string()))?;
        if matches!(view.source, ViewSource::Constant) {
            // Computed once, from no table: the same at every cut.
            return Ok(view.snapshot());
        }
        let starts = view
            .def
            .start_offsets
            .clone()
            .filter(|o| o.len() == view.source.offsets())
            .unwrap_or_else(|| vec![0; view.source.offsets()]);
        let mut until = Vec::with_capacity(starts.len());
        // Per offset of the view: its table, and the partition's number.
        let mut positions = Vec::with_capacity(starts.len());
        for input in view.source.inputs() {
            let ViewSource::Table(table) = &input else {
                return Err(SluiceError::Unsupported(format!(
                    "materialized view \"{name}\" reads materialized view \"{}\"; a view over a view cannot be read {at} yet",
                    input.name()
                )));
            };
            let ends = ends_of(table)?;
            for (k, (part, end)) in table.partitions().iter().zip(&ends).enumerate() {
                // The view moved one commit at a time; its clock knows no
                // place inside one.
                if let Some((from, to)) = part.frame_around(*end) {
                    return Err(SluiceError::Evaluation {
                        sqlstate: "22023",
                        message: format!(
                            "offset {end} of partition {k} of \"{}\" is inside a commit (offsets {from} to {to}); materialized view \"{name}\" is computed at the end of a commit: use {from} or {to}",
                            table.name()
                        ),
                    });
                }
                let start = starts[until.len() + k];
                if start > *end {
                    return Err(SluiceError::ObjectNotReady(format!(
                        "materialized view \"{name}\" was rebuilt from offset {start} of partition {k} of \"{}\", after {at}: it has no state there",
                        table.name()
                    )));
                }
                positions.push((table.clone(), k));
            }
            until.extend(ends);
        }
        let query = parse_query(&view.def.query)?;
        let emit = EmitOptions {
            emit_on_window_close: view.def.emit_on_window_close,
            allowed_lateness_us: view.def.allowed_lateness_us,
        };
        let compiled = compile(&query, &self.store, self, self.config.clone(), emit).await?;
        if compiled.source.offsets() != until.len() {
            return Err(SluiceError::Internal(format!(
                "materialized view \"{name}\" reads other tables than it did"
            )));
        }
        // The newest kept checkpoint at or below the position, if it reads
        // back whole; else the replay starts where the view started.
        let kept = self
            .checkpoints
            .pinned(view.def.id)
            .into_iter()
            .filter(|m| {
                at_or_below(&m.source_offsets, &until) && at_or_below(&starts, &m.source_offsets)
            })
            .max_by_key(|m| m.epoch);
        let restored = match kept {
            Some(m) => match self.checkpoints.load(&m).await {
                Ok(r) => Some(r),
                Err(e) => {
                    warn!(view = name, epoch = m.epoch, error = %e, "a kept checkpoint does not read back; replaying the log from the view's start");
                    None
                }
            },
            None => None,
        };
        let from = restored
            .as_ref()
            .map_or_else(|| starts.clone(), |r| r.manifest.source_offsets.clone());
        for ((table, k), (&from, &end)) in positions.iter().zip(from.iter().zip(&until)) {
            let part = &table.partitions()[*k];
            if end > from && part.start_offset() > from {
                return Err(SluiceError::ObjectNotReady(format!(
                    "materialized view \"{name}\" holds rows of partition {k} of \"{}\" from offset {from} on, and retention has deleted those below {}: it cannot be computed {at}",
                    table.name(),
                    part.start_offset()
                )));
            }
        }
        let replayed: u64 = until
            .iter()
            .zip(&from)
            .map(|(u, f)| u.saturating_sub(*f))
            .sum();
        crate::metrics::METRICS.view_replayed_at_position(replayed);
        info!(
            view = name,
            at,
            epoch = restored.as_ref().map(|r| r.manifest.epoch),
            replayed,
            "computing a view at a position"
        );
        let def = ViewDef {
            id: u64::MAX - AT_CUT_IDS.fetch_add(1, Ordering::Relaxed),
            start_offsets: Some(starts),
            ..view.def.clone()
        };
        let replay = self.start_view(def, compiled, restored, "at a cut", Some(until.clone()))?;
        replay.wait_for(&until).await?;
        Ok(replay.snapshot())
    }
}
