//! A table's writer thread and what it is asked: appends grouped so that
//! many statements share one fsync (group commit), a transaction's part
//! prepared and held until its outcome, and a statement too large for
//! memory streamed in pieces. Each commit writes frames to the
//! partitions, then one commit record with the new ends; only then are
//! the ends published to readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use arrow::array::{Array, TimestampMicrosecondArray};
use arrow::compute;
use arrow::record_batch::RecordBatch;
use tokio::sync::oneshot;
use tracing::{error, info_span, warn};

use super::commit::CommitLog;
use super::error::LogError;
use super::keyed::{with_row_positions, LatestLocations, RowTombstones};
use super::partition::{PartitionLog, PartitionWriter};
use super::table::{coalesce, now_us, CarriedFrames, Prepared, WriteCounters};

pub(super) enum WriterRequest {
    Append(AppendRequest),
    Prepare(PrepareRequest),
    /// A statement too large for memory: its rows arrive in pieces and
    /// commit together (see `TableLog::append_spilled`).
    AppendStream(StreamRequest),
}

/// Pieces of one statement's rows, by partition; the statement commits
/// when the sender is dropped after its last piece, and fails (nothing
/// committed) at the first error.
pub(super) struct StreamRequest {
    pub(super) pieces: std::sync::mpsc::Receiver<Result<Vec<(usize, RecordBatch)>, LogError>>,
    pub(super) reply: oneshot::Sender<Result<(), LogError>>,
}

/// How many Arrow bytes of a streamed statement one piece holds.
pub(super) const STREAM_PIECE_BYTES: u64 = 8 << 20;

pub(super) struct AppendRequest {
    pub(super) parts: Vec<(usize, RecordBatch)>,
    /// A source's next offset per partition once these rows are in
    /// (partition, offset): committed in the same record as the rows.
    pub(super) positions: Vec<(usize, i64)>,
    pub(super) upkeep: Upkeep,
    pub(super) reply: oneshot::Sender<Result<(), LogError>>,
}

/// What a request asks of the writer besides appending its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Upkeep {
    None,
    /// Make every partition durable and rotate the commit log, so that it
    /// carries no frames any more (after compaction removed records).
    DropCarried,
    /// Close every partition's active segment (when it holds frames), so
    /// that tiering and compaction reach every record committed so far.
    CloseSegments,
}

/// A transaction's records for this table: written and fsynced, then held
/// (the writer takes nothing else) until the transaction's outcome is
/// known.
pub(super) struct PrepareRequest {
    pub(super) parts: Vec<(usize, RecordBatch)>,
    /// Whether the transaction log may carry the frames (see
    /// `super::transaction`): then they are not fsynced here.
    pub(super) carry: bool,
    /// Every partition's end offset once the frames are written, and the
    /// frames (partition, bytes) when they were not fsynced.
    pub(super) prepared: oneshot::Sender<Result<Prepared, LogError>>,
    /// A message publishes the frames; the sender dropped takes them back.
    pub(super) decision: mpsc::Receiver<()>,
    pub(super) published: oneshot::Sender<()>,
}

/// At most this many statements share one fsync.
const MAX_GROUP: usize = 256;

pub(super) struct TableWriter {
    pub(super) name: String,
    pub(super) partitions: Vec<Arc<PartitionLog>>,
    pub(super) writers: Vec<PartitionWriter>,
    pub(super) commit_log: CommitLog,
    pub(super) receiver: mpsc::Receiver<WriterRequest>,
    pub(super) poisoned: Arc<AtomicBool>,
    pub(super) event_time_index: Option<usize>,
    pub(super) counters: Arc<WriteCounters>,
    pub(super) committed: tokio::sync::watch::Sender<Vec<u64>>,
    /// A keyed table's key locations, noted as each commit is published.
    pub(super) locations: Option<Arc<LatestLocations>>,
    /// A table keyed by row: its stored position column, which the writer
    /// fills in for new rows as it learns their offsets.
    pub(super) row_positions: Option<usize>,
    /// A table keyed by row: the rows its tombstones delete, noted as
    /// each commit is published.
    pub(super) row_tombstones: Option<Arc<RowTombstones>>,
    /// The table's column count (the stored columns follow).
    pub(super) columns: usize,
}

impl TableWriter {
    /// Publishes the commit's ends, first noting its frames (partition,
    /// base offset, records) in the key locations of a keyed table.
    fn publish_ends(&self, ends: Vec<u64>, frames: &[(usize, u64, &RecordBatch)]) {
        if let Some(t) = &self.row_tombstones {
            t.note(self.columns, frames);
        }
        match &self.locations {
            Some(l) => l.note_then(frames, || self.committed.send_replace(ends)),
            None => self.committed.send_replace(ends),
        };
    }

    pub(super) fn run(mut self) {
        let span = info_span!("log_writer", table = %self.name);
        let _enter = span.enter();
        let mut next = None;
        loop {
            let first = match next.take() {
                Some(r) => r,
                None => match self.receiver.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                },
            };
            let first = match first {
                WriterRequest::Append(r) => r,
                WriterRequest::Prepare(p) => {
                    self.prepare(p);
                    continue;
                }
                WriterRequest::AppendStream(s) => {
                    let result = self.write_stream(&s.pieces);
                    if let Err(e) = &result {
                        error!(error = %e, "streamed append failed");
                        self.undo_group();
                    }
                    let _ = s.reply.send(result);
                    continue;
                }
            };
            // A transaction's records are never grouped with statements:
            // their fate is its own.
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match self.receiver.try_recv() {
                    Ok(WriterRequest::Append(r)) => group.push(r),
                    Ok(prepare) => {
                        next = Some(prepare);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let previous_positions = self.stage_positions(&group);
            let result = self.write_group(&group);
            if let Err(e) = &result {
                error!(error = %e, "append group failed");
                self.undo_group();
                if let Some(previous) = previous_positions {
                    self.commit_log.set_positions(previous);
                }
            }
            for req in group {
                let _ = req.reply.send(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(copy_error(e)),
                });
            }
        }
    }

    /// Starts a group of frames (what a failure takes back); refused on a
    /// table that takes no more writes. Returns the time the frames are
    /// ingested at.
    fn begin_frames(&mut self) -> Result<i64, LogError> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned(self.name.clone()));
        }
        for w in &mut self.writers {
            w.begin_group();
        }
        Ok(now_us())
    }

    /// Writes partition `p`'s rows as a frame at its next offset, filling
    /// in the row positions of a table keyed by row: the rows as written,
    /// their base offset, and the frame's bytes.
    fn write_rows(
        &mut self,
        p: usize,
        batch: &RecordBatch,
        now: i64,
    ) -> Result<(RecordBatch, u64, Vec<u8>), LogError> {
        let range = event_range(batch, self.event_time_index);
        let base = self.writers[p].next_offset();
        let batch = with_row_positions(self.row_positions, p, base, batch)?;
        let bytes = self.writers[p].write_frame(&batch, now, range)?;
        Ok((batch, base, bytes))
    }

    /// Writes a streamed statement's pieces as frames as they arrive, then
    /// makes them durable and commits them with one record: until then
    /// they are past the committed ends, so a crash cuts them off.
    fn write_stream(
        &mut self,
        pieces: &std::sync::mpsc::Receiver<Result<Vec<(usize, RecordBatch)>, LogError>>,
    ) -> Result<(), LogError> {
        let now = self.begin_frames()?;
        let mut frame_bytes = 0;
        // The sender dropped after the last piece: the statement is whole.
        for piece in pieces.iter() {
            for (p, batch) in coalesce(piece?, self.writers.len())? {
                frame_bytes += self.write_rows(p, &batch, now)?.2.len();
            }
        }
        for w in &mut self.writers {
            w.sync()?;
        }
        let ends: Vec<u64> = self.writers.iter().map(|w| w.next_offset()).collect();
        self.commit_log.commit(&ends)?;
        for (log, w) in self.partitions.iter().zip(self.writers.iter_mut()) {
            log.publish(w);
        }
        // The rows are new, none a tombstone: only the key locations a
        // point read built would miss them, so they are built again.
        match &self.locations {
            Some(l) => l.forget_then(|| self.committed.send_replace(ends)),
            None => self.committed.send_replace(ends),
        };
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters.statements.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(frame_bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sets the source positions the group's commit record carries;
    /// returns the previous ones when the group moves any.
    fn stage_positions(&mut self, group: &[AppendRequest]) -> Option<Vec<i64>> {
        if group.iter().all(|r| r.positions.is_empty()) {
            return None;
        }
        let mut positions = self.commit_log.positions().to_vec();
        positions.resize(self.writers.len(), -1);
        for (p, next) in group.iter().flat_map(|r| r.positions.iter()) {
            if let Some(slot) = positions.get_mut(*p) {
                *slot = *next;
            }
        }
        Some(self.commit_log.set_positions(positions))
    }

    /// Takes back the frames of a group that was not committed; a table
    /// whose files cannot be put back takes no more writes.
    fn undo_group(&mut self) {
        let undone = self.writers.iter_mut().all(|w| w.abort_group().is_ok());
        if !undone {
            self.poisoned.store(true, Ordering::Release);
        }
    }

    /// A transaction's part: write and fsync its frames, report the new
    /// ends, then wait for the outcome.
    fn prepare(&mut self, req: PrepareRequest) {
        let (ends, frame_bytes, carried, bases, written) =
            match self.write_prepared(&req.parts, req.carry) {
                Ok(written) => written,
                Err(e) => {
                    error!(error = %e, "writing a transaction's records failed");
                    self.undo_group();
                    let _ = req.prepared.send(Err(copy_error(&e)));
                    return;
                }
            };
        if req.prepared.send(Ok((ends.clone(), carried))).is_err() || req.decision.recv().is_err() {
            self.undo_group();
            return;
        }
        for (log, w) in self.partitions.iter().zip(self.writers.iter_mut()) {
            log.publish(w);
        }
        let frames: Vec<(usize, u64, &RecordBatch)> = req
            .parts
            .iter()
            .zip(&bases)
            .zip(&written)
            .map(|(((p, _), base), batch)| (*p, *base, batch))
            .collect();
        self.publish_ends(ends, &frames);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters.statements.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(frame_bytes as u64, Ordering::Relaxed);
        // No commit record of the table's own: the transaction log holds
        // these ends until the next start, and the table's next group
        // commit records ends past them.
        let _ = req.published.send(());
    }

    /// Writes a transaction's frames: fsynced, or with `carry` and when
    /// small, returned for the transaction record to carry.
    fn write_prepared(
        &mut self,
        parts: &[(usize, RecordBatch)],
        carry: bool,
    ) -> Result<PreparedFrames, LogError> {
        let now = self.begin_frames()?;
        let mut frame_bytes = 0;
        let mut frames = Vec::new();
        let mut bases = Vec::with_capacity(parts.len());
        let mut written = Vec::with_capacity(parts.len());
        for (p, batch) in parts {
            let (batch, base, bytes) = self.write_rows(*p, batch, now)?;
            bases.push(base);
            written.push(batch);
            frame_bytes += bytes.len();
            frames.push((*p, bytes));
        }
        if !carry || frame_bytes > CARRY_MAX_BYTES {
            for w in &mut self.writers {
                w.sync()?;
            }
            frames.clear();
        }
        let ends = self.writers.iter().map(|w| w.next_offset()).collect();
        Ok((ends, frame_bytes, frames, bases, written))
    }

    fn write_group(&mut self, group: &[AppendRequest]) -> Result<(), LogError> {
        let now = self.begin_frames()?;
        let mut frames = Vec::new();
        let mut frame_bytes = 0;
        // The statements of a group share frames: one per partition (for
        // small statements), not one per statement, so many clients' single
        // rows cost one encoding and one write per partition.
        let parts = group
            .iter()
            .flat_map(|r| r.parts.iter().cloned())
            .collect::<Vec<_>>();
        let mut coalesced = coalesce(parts, self.writers.len())?;
        let mut bases = Vec::with_capacity(coalesced.len());
        for (p, batch) in &mut coalesced {
            let (as_written, base, bytes) = self.write_rows(*p, batch, now)?;
            *batch = as_written;
            bases.push(base);
            frame_bytes += bytes.len();
            frames.push((*p, bytes));
        }
        let written: Vec<(usize, u64, &RecordBatch)> = coalesced
            .iter()
            .zip(bases)
            .map(|((p, batch), base)| (*p, base, batch))
            .collect();
        let close = group.iter().any(|r| r.upkeep == Upkeep::CloseSegments);
        if close {
            for w in &mut self.writers {
                w.close_active()?;
            }
        }
        let ends: Vec<u64> = self.writers.iter().map(|w| w.next_offset()).collect();
        let drop_carried = group.iter().any(|r| r.upkeep == Upkeep::DropCarried);
        if !drop_carried && !close && frame_bytes <= CARRY_MAX_BYTES && !self.commit_log.is_full() {
            // One fsync: the commit record carries the frames.
            self.commit_log.commit_with_frames(&ends, &frames)?;
        } else {
            // A large group is not written twice; a full commit log is
            // rotated, dropping the frames it carries, so every partition
            // is made durable first.
            for w in &mut self.writers {
                w.sync()?;
            }
            match drop_carried {
                true => self.commit_log.rotate(&ends)?,
                false => self.commit_log.commit(&ends)?,
            }
        }
        for (log, w) in self.partitions.iter().zip(self.writers.iter_mut()) {
            log.publish(w);
        }
        self.publish_ends(ends, &written);
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(frame_bytes as u64, Ordering::Relaxed);
        let statements = group.iter().filter(|r| !r.parts.is_empty()).count();
        self.counters
            .statements
            .fetch_add(statements as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// What a transaction's frames were written as: the partitions' ends, the
/// frames' bytes, the frames carried, and each frame's base offset and
/// records (as written: a table keyed by row has their positions).
type PreparedFrames = (Vec<u64>, usize, CarriedFrames, Vec<u64>, Vec<RecordBatch>);

/// Groups whose frames take more bytes than this are made durable in their
/// partitions rather than carried by the commit record (bulk COPY is not
/// written twice).
const CARRY_MAX_BYTES: usize = 256 * 1024;

/// Writes back into each partition the carried frames it lost (a machine
/// crash can drop writes that were never fsynced), so it again reaches the
/// committed end. Frames a partition holds already are skipped.
pub(super) fn restore_carried_frames(
    table: &str,
    partitions: &[Arc<PartitionLog>],
    writers: &mut [PartitionWriter],
    committed: &[u64],
    journal: Vec<super::commit::JournalFrame>,
) -> Result<(), LogError> {
    let mut restored = vec![0u64; writers.len()];
    // The commit log's and the transaction log's frames, in offset order
    // per partition.
    let mut journal: Vec<(usize, u64, super::commit::JournalFrame)> = journal
        .into_iter()
        .filter_map(|f| {
            let header: &[u8; super::frame::HEADER_LEN] =
                f.bytes.get(..super::frame::HEADER_LEN)?.try_into().ok()?;
            let base = super::frame::parse_header(header)?.0.base_offset;
            Some((f.partition, base, f))
        })
        .collect();
    journal.sort_by_key(|(p, base, _)| (*p, *base));
    for (_, _, frame) in journal {
        if frame.partition >= writers.len() {
            continue;
        }
        let w = &mut writers[frame.partition];
        let Some((header, _)) = frame
            .bytes
            .get(..super::frame::HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .and_then(super::frame::parse_header)
        else {
            continue;
        };
        if header.base_offset != w.next_offset() || w.next_offset() >= committed[frame.partition] {
            continue;
        }
        w.write_encoded(&frame.bytes)?;
        restored[frame.partition] += 1;
    }
    for ((log, w), n) in partitions.iter().zip(writers.iter_mut()).zip(&restored) {
        if *n > 0 {
            w.sync()?;
            log.publish(w);
            warn!(
                table,
                partition = log.index,
                frames = n,
                "wrote back frames the partition lost from the commit log"
            );
        }
    }
    Ok(())
}

/// Each waiter of a failed group gets its own copy of the error.
pub(super) fn copy_error(e: &LogError) -> LogError {
    match e {
        LogError::Io { path, source } => LogError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        LogError::Poisoned(t) => LogError::Poisoned(t.clone()),
        LogError::SerializationFailure { table } => LogError::SerializationFailure {
            table: table.clone(),
        },
        LogError::TransactionTooLarge { limit } => LogError::TransactionTooLarge { limit: *limit },
        other => LogError::WriterStopped(other.to_string()),
    }
}

/// Min and max event time of a batch; `(i64::MAX, i64::MIN)` when unknown.
fn event_range(batch: &RecordBatch, index: Option<usize>) -> (i64, i64) {
    let none = (i64::MAX, i64::MIN);
    let Some(col) = index.map(|i| batch.column(i)) else {
        return none;
    };
    let Some(ts) = col.as_any().downcast_ref::<TimestampMicrosecondArray>() else {
        return none;
    };
    match (compute::min(ts), compute::max(ts)) {
        (Some(lo), Some(hi)) => (lo, hi),
        _ => none,
    }
}
