//! One partition of a table: its segment files, the index of committed frames
//! that readers see, and the writer state that only the table's writer
//! thread touches.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use parking_lot::RwLock;
use tracing::warn;

use super::error::LogError;
use super::frame::{self, FrameHeader, HEADER_LEN};
use super::remote::RemoteSegment;

/// A segment file, open for positioned reads.
#[derive(Debug)]
pub struct SegmentFile {
    pub path: PathBuf,
    pub base_offset: u64,
    file: File,
}

/// Where a committed frame lives.
#[derive(Debug, Clone)]
pub enum FrameLocation {
    /// In a local segment file, its header at byte `pos`.
    Local { segment: Arc<SegmentFile>, pos: u64 },
    /// In a segment that moved to the object store.
    Remote(Arc<RemoteSegment>),
}

/// Where a committed frame lives and what it holds.
#[derive(Debug, Clone)]
pub struct FrameMeta {
    pub location: FrameLocation,
    pub header: FrameHeader,
}

impl FrameMeta {
    pub fn end_offset(&self) -> u64 {
        self.header.base_offset + self.header.rows as u64
    }
}

#[derive(Debug, Default)]
struct Visible {
    /// Segments in the object store, oldest first; all before `segments`.
    remote: Vec<Arc<RemoteSegment>>,
    /// Local segment files; the last is the active one.
    segments: Vec<Arc<SegmentFile>>,
    frames: Vec<FrameMeta>,
    end_offset: u64,
    bytes: u64,
    /// Largest event time committed to this partition.
    max_event_us: Option<i64>,
    /// When rows were last committed (or the partition opened).
    last_append: Option<Instant>,
}

/// What the watermark of a partition is computed from.
#[derive(Debug, Clone, Copy)]
pub struct EventTimeProgress {
    pub max_event_us: Option<i64>,
    pub since_last_append: Duration,
}

/// Counters and sizes shown in `sluice_catalog.partitions`.
#[derive(Debug, Clone, Default)]
pub struct PartitionStats {
    pub start_offset: u64,
    pub end_offset: u64,
    pub bytes: u64,
    pub segments: u64,
    pub torn_frames_dropped: u64,
    pub frames_read: u64,
    pub remote_segments: u64,
    pub remote_bytes: u64,
    /// Reads that asked for offsets retention had already deleted.
    pub reads_below_start: u64,
    pub deleted_segments: u64,
    /// Times retention kept a segment because a cut needs it.
    pub pinned_segments: u64,
    pub unreadable_segments: u64,
}

#[derive(Debug)]
pub struct PartitionLog {
    pub index: u32,
    visible: RwLock<Visible>,
    torn_frames: AtomicU64,
    frames_read: AtomicU64,
    reads_below_start: AtomicU64,
    deleted_segments: AtomicU64,
    /// Times retention kept a segment because a cut needs it.
    pinned_segments: AtomicU64,
    /// Objects of this partition found unreadable at start-up.
    unreadable: parking_lot::Mutex<Vec<String>>,
    /// What compaction did and found (keyed tables).
    pub compaction: parking_lot::Mutex<CompactionStats>,
    /// Offsets of rows an erasure removed from an append-only table. Their
    /// stored rows are holes (every column NULL) once the segments are
    /// rewritten, which nothing else tells apart from a row of NULLs, so
    /// readers leave out these offsets (see [`PartitionLog::erased_mask`]).
    /// Loaded from the erasure ledger at start-up.
    erased: RwLock<std::collections::BTreeSet<u64>>,
}

/// Compaction of one partition of a keyed table, for
/// `sluice_catalog.partitions`.
#[derive(Debug, Default, Clone)]
pub struct CompactionStats {
    /// Completed passes.
    pub runs: u64,
    /// Records compaction replaced by holes (superseded versions, expired
    /// tombstones).
    pub records_removed: u64,
    /// Share of the partition's records that are not the latest live
    /// version of their key (what compaction can remove), at the last pass.
    pub dirty_ratio: Option<f64>,
    /// Segments rewritten and to rewrite in the pass under way.
    pub in_progress: Option<(u64, u64)>,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// The append side of a partition, owned by the table's writer thread.
pub struct PartitionWriter {
    dir: PathBuf,
    active: File,
    active_segment: Arc<SegmentFile>,
    active_len: u64,
    /// Length of the active file when the current group began, to undo a
    /// failed group.
    group_start_len: u64,
    group_start_offset: u64,
    next_offset: u64,
    pending: Vec<FrameMeta>,
    new_segments: Vec<Arc<SegmentFile>>,
    needs_sync: Vec<File>,
    segment_max_bytes: u64,
    segment_max_age: Duration,
    /// When the active segment got its first frame.
    active_since: Option<Instant>,
}

fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(format!("{base:020}.seg"))
}

fn open_segment(path: &Path, base_offset: u64) -> Result<Arc<SegmentFile>, LogError> {
    let file = File::open(path).map_err(LogError::io(path))?;
    Ok(Arc::new(SegmentFile {
        path: path.to_path_buf(),
        base_offset,
        file,
    }))
}

impl PartitionLog {
    /// Recovers a partition from its directory. Frames are kept up to the
    /// first torn or corrupt frame and never past `committed_end`; whatever
    /// follows is cut off and counted. Returns the log, its writer, and the
    /// recovered end offset (which may be below `committed_end` when the
    /// disk lost data).
    pub fn recover(
        dir: &Path,
        index: u32,
        committed_end: u64,
        segment_max_bytes: u64,
        segment_max_age: Duration,
    ) -> Result<(PartitionLog, PartitionWriter), LogError> {
        fs::create_dir_all(dir).map_err(LogError::io(dir))?;
        let mut bases: Vec<u64> = fs::read_dir(dir)
            .map_err(LogError::io(dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".seg")?.parse::<u64>().ok()
            })
            .collect();
        bases.sort_unstable();

        let mut visible = Visible::default();
        let mut dropped = 0u64;
        let mut expected = bases.first().copied().unwrap_or(0);
        let mut stop = false;
        for base in bases {
            let path = segment_path(dir, base);
            // A segment starting at the committed end is kept (emptied of
            // uncommitted frames): it is the active one a roll or VACUUM
            // opened. Dropping it would leave a closed segment, perhaps
            // already in the object store, as the active one.
            if stop || base != expected || base > committed_end {
                if base < expected || !stop && base > expected {
                    warn!(path = %path.display(), "segment does not continue the log");
                }
                dropped += count_frames(&path);
                fs::remove_file(&path).map_err(LogError::io(&path))?;
                stop = true;
                continue;
            }
            let segment = open_segment(&path, base)?;
            let (frames, good_len, file_len) = scan_segment(&segment, expected, committed_end)?;
            if good_len < file_len {
                let cut_frames = count_frames_from(&segment, good_len, file_len).max(1);
                warn!(path = %path.display(), kept_bytes = good_len, cut_bytes = file_len - good_len,
                      frames = cut_frames, "cut torn or uncommitted tail of segment");
                dropped += cut_frames;
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| {
                        f.set_len(good_len)?;
                        f.sync_all()
                    })
                    .map_err(LogError::io(&path))?;
                stop = true;
            }
            if let Some(last) = frames.last() {
                expected = last.end_offset();
            }
            visible.bytes += good_len;
            visible.frames.extend(frames);
            visible.segments.push(segment);
        }
        visible.end_offset = expected;
        visible.max_event_us = visible.frames.iter().filter_map(frame_max_event).max();
        visible.last_append = Some(Instant::now());

        // The active segment: the last one, or a new one.
        let (active_segment, active_len) = match visible.segments.last() {
            Some(s) => {
                let len = fs::metadata(&s.path).map_err(LogError::io(&s.path))?.len();
                (s.clone(), len)
            }
            None => {
                let path = segment_path(dir, expected);
                File::create(&path).map_err(LogError::io(&path))?;
                super::commit::sync_dir(dir)?;
                let seg = open_segment(&path, expected)?;
                visible.segments.push(seg.clone());
                (seg, 0)
            }
        };
        let active = OpenOptions::new()
            .append(true)
            .open(&active_segment.path)
            .map_err(LogError::io(&active_segment.path))?;
        let writer = PartitionWriter {
            dir: dir.to_path_buf(),
            active,
            active_segment,
            active_len,
            group_start_len: active_len,
            group_start_offset: expected,
            next_offset: expected,
            pending: vec![],
            new_segments: vec![],
            needs_sync: vec![],
            segment_max_bytes,
            segment_max_age,
            active_since: (active_len > 0).then(Instant::now),
        };
        let log = PartitionLog {
            index,
            visible: RwLock::new(visible),
            torn_frames: AtomicU64::new(dropped),
            frames_read: AtomicU64::new(0),
            reads_below_start: AtomicU64::new(0),
            deleted_segments: AtomicU64::new(0),
            pinned_segments: AtomicU64::new(0),
            compaction: parking_lot::Mutex::new(CompactionStats::default()),
            unreadable: parking_lot::Mutex::new(Vec::new()),
            erased: RwLock::new(Default::default()),
        };
        Ok((log, writer))
    }

    pub fn end_offset(&self) -> u64 {
        self.visible.read().end_offset
    }

    pub fn stats(&self) -> PartitionStats {
        let v = self.visible.read();
        PartitionStats {
            start_offset: v
                .frames
                .first()
                .map(|f| f.header.base_offset)
                .unwrap_or(v.end_offset),
            end_offset: v.end_offset,
            bytes: v.bytes,
            segments: (v.segments.len() + v.remote.len()) as u64,
            torn_frames_dropped: self.torn_frames.load(Ordering::Relaxed),
            frames_read: self.frames_read.load(Ordering::Relaxed),
            remote_segments: v.remote.len() as u64,
            remote_bytes: v.remote.iter().map(|r| r.bytes).sum(),
            reads_below_start: self.reads_below_start.load(Ordering::Relaxed),
            deleted_segments: self.deleted_segments.load(Ordering::Relaxed),
            pinned_segments: self.pinned_segments.load(Ordering::Relaxed),
            unreadable_segments: self.unreadable.lock().len() as u64,
        }
    }

    /// The first offset still in the log (retention deletes older ones).
    pub fn start_offset(&self) -> u64 {
        let v = self.visible.read();
        v.frames
            .first()
            .map(|f| f.header.base_offset)
            .unwrap_or(v.end_offset)
    }

    /// Marks rows as erased: readers leave them out from now on.
    pub fn erase(&self, offsets: impl IntoIterator<Item = u64>) {
        self.erased.write().extend(offsets);
    }

    /// Whether any row in `[lo, hi)` was erased.
    pub fn has_erased(&self, lo: u64, hi: u64) -> bool {
        self.erased.read().range(lo..hi).next().is_some()
    }

    /// Which of the `n` rows from `base` are kept (not erased), or `None`
    /// when all are (the common case, at no cost).
    pub fn erased_mask(&self, base: u64, n: usize) -> Option<arrow::array::BooleanArray> {
        let erased = self.erased.read();
        let mut gone = erased.range(base..base + n as u64).peekable();
        gone.peek()?;
        let mut keep = vec![true; n];
        for o in gone {
            keep[(o - base) as usize] = false;
        }
        Some(arrow::array::BooleanArray::from(keep))
    }

    /// The runs `(start, len)` of kept rows among the `n` from `base`, so a
    /// reader that counts offsets by position can take each run with its
    /// own first offset.
    pub fn kept_runs(&self, base: u64, n: usize) -> Vec<(usize, usize)> {
        let erased = self.erased.read();
        let mut runs = Vec::new();
        let mut at = 0usize;
        for o in erased.range(base..base + n as u64) {
            let i = (o - base) as usize;
            if i > at {
                runs.push((at, i - at));
            }
            at = i + 1;
        }
        if at < n {
            runs.push((at, n - at));
        }
        runs
    }

    /// How many rows were erased from this partition.
    pub fn erased_rows(&self) -> u64 {
        self.erased.read().len() as u64
    }

    pub fn note_unreadable_segment(&self, key: &str) {
        self.unreadable.lock().push(key.to_string());
    }

    /// Keys of this partition's segments that could not be read.
    pub fn unreadable_segments(&self) -> Vec<String> {
        self.unreadable.lock().clone()
    }

    /// When the record at `offset` was ingested (None past the end or below
    /// the start).
    pub fn ingested_at(&self, offset: u64) -> Option<i64> {
        let v = self.visible.read();
        let i = v.frames.partition_point(|f| f.end_offset() <= offset);
        v.frames
            .get(i)
            .filter(|f| f.header.base_offset <= offset)
            .map(|f| f.header.ingested_at_us)
    }

    /// The first offset ingested at or after `ts_us` (the end offset when
    /// nothing is that recent).
    pub fn offset_at_time(&self, ts_us: i64) -> u64 {
        let v = self.visible.read();
        let i = v
            .frames
            .partition_point(|f| f.header.ingested_at_us < ts_us);
        v.frames
            .get(i)
            .map(|f| f.header.base_offset)
            .unwrap_or(v.end_offset)
    }

    /// The offsets of the frame (one commit's rows of this partition) that
    /// holds `offset`, unless `offset` starts a frame or is the end.
    pub fn frame_around(&self, offset: u64) -> Option<(u64, u64)> {
        let v = self.visible.read();
        let i = v.frames.partition_point(|f| f.end_offset() <= offset);
        v.frames
            .get(i)
            .filter(|f| f.header.base_offset < offset)
            .map(|f| (f.header.base_offset, f.end_offset()))
    }

    /// When the first retained record was committed.
    pub fn first_ingested_us(&self) -> Option<i64> {
        self.visible
            .read()
            .frames
            .first()
            .map(|f| f.header.ingested_at_us)
    }

    /// Counts a read that asked for offsets below the start; returns the
    /// start it begins at instead.
    pub fn note_read_below_start(&self) -> u64 {
        self.reads_below_start.fetch_add(1, Ordering::Relaxed);
        self.start_offset()
    }

    /// The committed frames that hold any offset in `[lo, hi)`.
    pub fn frames_in_range(&self, lo: u64, hi: u64) -> Vec<FrameMeta> {
        let v = self.visible.read();
        let start = v.frames.partition_point(|f| f.end_offset() <= lo);
        v.frames[start..]
            .iter()
            .take_while(|f| f.header.base_offset < hi)
            .cloned()
            .collect()
    }

    /// Reads and checks one frame, from its local segment or the object
    /// store.
    pub async fn read_frame(&self, meta: &FrameMeta) -> Result<RecordBatch, LogError> {
        self.frames_read.fetch_add(1, Ordering::Relaxed);
        self.fetch_frame(meta).await
    }

    /// Reads a frame without counting it as a client's read (segment moves).
    pub(super) async fn fetch_frame(&self, meta: &FrameMeta) -> Result<RecordBatch, LogError> {
        let (seg, pos) = match &meta.location {
            FrameLocation::Local { segment, pos } => (segment, *pos),
            FrameLocation::Remote(remote) => return remote.read_frame(&meta.header).await,
        };
        let mut buf = vec![0u8; HEADER_LEN + meta.header.payload_len as usize];
        seg.file
            .read_exact_at(&mut buf, pos)
            .map_err(LogError::io(&seg.path))?;
        let header: [u8; HEADER_LEN] = buf[..HEADER_LEN]
            .try_into()
            .map_err(|_| corrupt(meta, "short header"))?;
        let (_, crc) = frame::parse_header(&header).ok_or_else(|| corrupt(meta, "bad magic"))?;
        if !frame::crc_matches(&header, &buf[HEADER_LEN..], crc) {
            return Err(corrupt(meta, "checksum mismatch"));
        }
        Ok(frame::decode_payload(&buf[HEADER_LEN..])?)
    }

    /// Closed local segments (every one but the active, last one) with their
    /// frames: what may move to the object store.
    pub fn closed_local_segments(&self) -> Vec<(Arc<SegmentFile>, Vec<FrameMeta>)> {
        let v = self.visible.read();
        let closed = v.segments.len().saturating_sub(1);
        v.segments[..closed]
            .iter()
            .map(|s| {
                let frames = v.frames.iter().filter(|f| is_in(f, s)).cloned().collect();
                (s.clone(), frames)
            })
            .collect()
    }

    /// Points a local segment's frames at the same frames in the object
    /// store. False (and nothing changed) when the two do not match.
    pub fn swap_to_remote(
        &self,
        local: &Arc<SegmentFile>,
        remote: Arc<RemoteSegment>,
        headers: &[FrameHeader],
    ) -> bool {
        let mut v = self.visible.write();
        let Some(i) = v.segments.iter().position(|s| Arc::ptr_eq(s, local)) else {
            return false;
        };
        let idx: Vec<usize> = (0..v.frames.len())
            .filter(|&j| is_in(&v.frames[j], local))
            .collect();
        let same = idx.len() == headers.len()
            && idx.iter().zip(headers).all(|(&j, h)| {
                v.frames[j].header.base_offset == h.base_offset && v.frames[j].header.rows == h.rows
            });
        if !same {
            return false;
        }
        let mut freed = 0u64;
        for &j in &idx {
            freed += HEADER_LEN as u64 + v.frames[j].header.payload_len as u64;
            v.frames[j].location = FrameLocation::Remote(remote.clone());
        }
        v.bytes = v.bytes.saturating_sub(freed);
        v.segments.remove(i);
        v.remote.push(remote);
        v.remote.sort_by_key(|r| r.base_offset);
        true
    }

    /// The partition's segments in the object store, oldest first.
    pub fn remote_segments(&self) -> Vec<Arc<RemoteSegment>> {
        self.visible.read().remote.clone()
    }

    /// Points the frames of a segment in the object store at its rewritten
    /// copy. False when the segment is gone (retention deleted it).
    pub fn replace_remote(&self, old: &Arc<RemoteSegment>, new: Arc<RemoteSegment>) -> bool {
        let mut v = self.visible.write();
        let Some(i) = v.remote.iter().position(|r| Arc::ptr_eq(r, old)) else {
            return false;
        };
        for f in v.frames.iter_mut() {
            if matches!(&f.location, FrameLocation::Remote(r) if Arc::ptr_eq(r, old)) {
                f.location = FrameLocation::Remote(new.clone());
            }
        }
        v.remote[i] = new;
        true
    }

    /// Adds the segments found in the object store at start-up. Local
    /// segments they already cover (a crash came between upload and local
    /// delete) leave the index; their paths are returned for deletion.
    pub fn attach_remote(
        &self,
        found: Vec<(Arc<RemoteSegment>, Vec<FrameHeader>)>,
    ) -> Vec<PathBuf> {
        let mut v = self.visible.write();
        let remote_end = found.iter().map(|(r, _)| r.end_offset).max().unwrap_or(0);
        let mut duplicates = Vec::new();
        let last = v.segments.len().saturating_sub(1);
        let mut keep_segments = Vec::new();
        for (i, s) in std::mem::take(&mut v.segments).into_iter().enumerate() {
            let covered = i < last
                && v.frames
                    .iter()
                    .filter(|f| is_in(f, &s))
                    .all(|f| f.end_offset() <= remote_end);
            if covered {
                duplicates.push(s.path.clone());
            } else {
                keep_segments.push(s);
            }
        }
        v.segments = keep_segments;
        let mut frames: Vec<FrameMeta> = Vec::new();
        for (remote, headers) in &found {
            for h in headers {
                frames.push(FrameMeta {
                    location: FrameLocation::Remote(remote.clone()),
                    header: *h,
                });
            }
        }
        let mut dropped_bytes = 0u64;
        for f in std::mem::take(&mut v.frames) {
            if f.header.base_offset >= remote_end {
                frames.push(f);
            } else {
                dropped_bytes += HEADER_LEN as u64 + f.header.payload_len as u64;
            }
        }
        frames.sort_by_key(|f| f.header.base_offset);
        v.bytes = v.bytes.saturating_sub(dropped_bytes);
        v.max_event_us = v
            .max_event_us
            .max(frames.iter().filter_map(frame_max_event).max());
        v.end_offset = v.end_offset.max(remote_end);
        v.frames = frames;
        v.remote = found.into_iter().map(|(r, _)| r).collect();
        v.remote.sort_by_key(|r| r.base_offset);
        duplicates
    }

    /// Removes the oldest segments in the object store that retention no
    /// longer keeps: those whose newest row was ingested before
    /// `min_ingested_us`, and then the oldest while the partition holds
    /// more than `max_bytes`, except from the first that starts below
    /// `pinned_below` (a cut needs it) on. Returns them for deletion from
    /// the store.
    pub fn expire(
        &self,
        min_ingested_us: Option<i64>,
        max_bytes: Option<u64>,
        pinned_below: u64,
    ) -> Vec<Arc<RemoteSegment>> {
        let mut v = self.visible.write();
        let mut total: u64 = v.bytes + v.remote.iter().map(|r| r.bytes).sum::<u64>();
        let mut expired = 0;
        for r in &v.remote {
            let too_old = min_ingested_us.is_some_and(|m| r.max_ingested_us < m);
            let too_big = max_bytes.is_some_and(|m| total > m);
            if !(too_old || too_big) {
                break;
            }
            if r.base_offset < pinned_below {
                self.pinned_segments.fetch_add(1, Ordering::Relaxed);
                break;
            }
            total = total.saturating_sub(r.bytes);
            expired += 1;
        }
        if expired == 0 {
            return Vec::new();
        }
        let gone: Vec<Arc<RemoteSegment>> = v.remote.drain(..expired).collect();
        let start = gone.last().map(|r| r.end_offset).unwrap_or(0);
        v.frames.retain(|f| f.header.base_offset >= start);
        self.deleted_segments
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone
    }

    /// Bytes of the partition's segments (in the object store and local)
    /// holding offsets below `end`.
    pub fn bytes_below(&self, end: u64) -> u64 {
        let v = self.visible.read();
        let remote: u64 = v
            .remote
            .iter()
            .filter(|r| r.base_offset < end)
            .map(|r| r.bytes)
            .sum();
        let local: u64 = v
            .frames
            .iter()
            .filter(|f| {
                f.header.base_offset < end && matches!(f.location, FrameLocation::Local { .. })
            })
            .map(|f| HEADER_LEN as u64 + f.header.payload_len as u64)
            .sum();
        remote + local
    }

    /// Makes a committed group of frames visible to readers.
    pub(super) fn publish(&self, writer: &mut PartitionWriter) {
        let mut v = self.visible.write();
        v.segments.append(&mut writer.new_segments);
        let mut appended = false;
        for f in writer.pending.drain(..) {
            v.bytes += HEADER_LEN as u64 + f.header.payload_len as u64;
            v.end_offset = f.end_offset();
            v.max_event_us = v.max_event_us.max(frame_max_event(&f));
            v.frames.push(f);
            appended = true;
        }
        if appended {
            v.last_append = Some(Instant::now());
        }
    }

    /// Largest event time seen and how long the partition has been quiet.
    pub fn event_time_progress(&self) -> EventTimeProgress {
        let v = self.visible.read();
        EventTimeProgress {
            max_event_us: v.max_event_us,
            since_last_append: v.last_append.map(|t| t.elapsed()).unwrap_or_default(),
        }
    }
}

/// True when a frame lives in the given local segment.
fn is_in(f: &FrameMeta, s: &Arc<SegmentFile>) -> bool {
    matches!(&f.location, FrameLocation::Local { segment, .. } if Arc::ptr_eq(segment, s))
}

/// A frame's largest event time, if its rows had any.
fn frame_max_event(f: &FrameMeta) -> Option<i64> {
    (f.header.max_event_us != i64::MIN).then_some(f.header.max_event_us)
}

fn corrupt(meta: &FrameMeta, reason: &str) -> LogError {
    let (path, pos) = match &meta.location {
        FrameLocation::Local { segment, pos } => (segment.path.clone(), *pos),
        FrameLocation::Remote(r) => (PathBuf::from(&r.key), 0),
    };
    LogError::CorruptFrame {
        path,
        pos,
        reason: reason.into(),
    }
}

/// Scans a segment's frames from the start. Returns the good frames (those
/// that are whole, pass their CRC, continue the offsets and lie below
/// `committed_end`), the length they cover, and the file length.
fn scan_segment(
    seg: &Arc<SegmentFile>,
    mut expected: u64,
    committed_end: u64,
) -> Result<(Vec<FrameMeta>, u64, u64), LogError> {
    let file_len = seg.file.metadata().map_err(LogError::io(&seg.path))?.len();
    let mut frames = vec![];
    let mut pos = 0u64;
    let mut payload = vec![];
    while pos + HEADER_LEN as u64 <= file_len {
        let mut header = [0u8; HEADER_LEN];
        if seg.file.read_exact_at(&mut header, pos).is_err() {
            break;
        }
        let Some((h, crc)) = frame::parse_header(&header) else {
            break;
        };
        let end = pos + HEADER_LEN as u64 + h.payload_len as u64;
        if end > file_len
            || h.base_offset != expected
            || h.base_offset + h.rows as u64 > committed_end
        {
            break;
        }
        payload.resize(h.payload_len as usize, 0);
        if seg
            .file
            .read_exact_at(&mut payload, pos + HEADER_LEN as u64)
            .is_err()
            || !frame::crc_matches(&header, &payload, crc)
        {
            break;
        }
        frames.push(FrameMeta {
            location: FrameLocation::Local {
                segment: seg.clone(),
                pos,
            },
            header: h,
        });
        expected = h.base_offset + h.rows as u64;
        pos = end;
    }
    Ok((frames, pos, file_len))
}

/// Counts the frame headers that can still be recognised in `[from, to)`:
/// the frames a cut drops. A torn frame counts once.
fn count_frames_from(seg: &SegmentFile, mut pos: u64, to: u64) -> u64 {
    let mut n = 0;
    while pos < to {
        n += 1;
        let mut header = [0u8; HEADER_LEN];
        if pos + HEADER_LEN as u64 > to || seg.file.read_exact_at(&mut header, pos).is_err() {
            break;
        }
        match frame::parse_header(&header) {
            Some((h, _)) => pos += HEADER_LEN as u64 + h.payload_len as u64,
            None => break,
        }
    }
    n
}

fn count_frames(path: &Path) -> u64 {
    match open_segment(path, 0) {
        Ok(seg) => {
            let len = seg.file.metadata().map(|m| m.len()).unwrap_or(0);
            count_frames_from(&seg, 0, len)
        }
        Err(_) => 1,
    }
}

impl PartitionWriter {
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Writes one frame to the active segment (not yet durable or visible)
    /// and returns its bytes, for the commit log to carry.
    pub fn write_frame(
        &mut self,
        batch: &RecordBatch,
        ingested_at_us: i64,
        event_range: (i64, i64),
    ) -> Result<Vec<u8>, LogError> {
        let bytes = frame::encode(batch, self.next_offset, ingested_at_us, event_range)?;
        self.write_encoded(&bytes)?;
        Ok(bytes)
    }

    /// Writes an encoded frame that starts at this partition's next offset
    /// (a frame the commit log carried, written back on recovery).
    pub fn write_encoded(&mut self, bytes: &[u8]) -> Result<(), LogError> {
        let header: [u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| {
                LogError::Arrow(arrow::error::ArrowError::IpcError("short frame".into()))
            })?;
        let (h, _) = frame::parse_header(&header).ok_or_else(|| {
            LogError::Arrow(arrow::error::ArrowError::IpcError("bad frame".into()))
        })?;
        if h.base_offset != self.next_offset {
            return Err(LogError::Arrow(arrow::error::ArrowError::IpcError(
                format!(
                    "frame at offset {} written where offset {} is next",
                    h.base_offset, self.next_offset
                ),
            )));
        }
        let old = self
            .active_since
            .is_some_and(|t| t.elapsed() >= self.segment_max_age);
        if self.active_len > 0 && (self.active_len >= self.segment_max_bytes || old) {
            self.roll()?;
        }
        self.active_since.get_or_insert_with(Instant::now);
        self.active
            .write_all(bytes)
            .map_err(LogError::io(&self.active_segment.path))?;
        self.pending.push(FrameMeta {
            location: FrameLocation::Local {
                segment: self.active_segment.clone(),
                pos: self.active_len,
            },
            header: h,
        });
        self.active_len += bytes.len() as u64;
        self.next_offset += u64::from(h.rows);
        Ok(())
    }

    /// Closes the active segment when it holds frames: the next frame
    /// starts a new one.
    pub fn close_active(&mut self) -> Result<(), LogError> {
        match self.active_len {
            0 => Ok(()),
            _ => self.roll(),
        }
    }

    fn roll(&mut self) -> Result<(), LogError> {
        let path = segment_path(&self.dir, self.next_offset);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(LogError::io(&path))?;
        let old = std::mem::replace(&mut self.active, file);
        self.needs_sync.push(old);
        super::commit::sync_dir(&self.dir)?;
        let seg = open_segment(&path, self.next_offset)?;
        self.new_segments.push(seg.clone());
        self.active_segment = seg;
        self.active_len = 0;
        self.group_start_len = 0;
        self.active_since = None;
        Ok(())
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Makes the written frames durable.
    pub fn sync(&mut self) -> Result<(), LogError> {
        for f in self.needs_sync.drain(..) {
            f.sync_data().map_err(LogError::io(&self.dir))?;
        }
        self.active
            .sync_data()
            .map_err(LogError::io(&self.active_segment.path))
    }

    /// Marks the start of a group: what `abort_group` returns to.
    pub fn begin_group(&mut self) {
        self.group_start_len = self.active_len;
        self.group_start_offset = self.next_offset;
    }

    /// Undoes the frames of a failed group in the active segment.
    pub fn abort_group(&mut self) -> Result<(), LogError> {
        if !self.new_segments.is_empty() {
            // The group spans a segment roll; recovery at the next start cuts
            // the uncommitted frames instead.
            return Err(LogError::Poisoned(self.dir.display().to_string()));
        }
        self.pending.clear();
        self.needs_sync.clear();
        self.new_segments.clear();
        self.active
            .set_len(self.group_start_len)
            .map_err(LogError::io(&self.active_segment.path))?;
        self.active_len = self.group_start_len;
        self.next_offset = self.group_start_offset;
        Ok(())
    }
}
