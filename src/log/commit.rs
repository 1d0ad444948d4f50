//! A table's commit log: each record names the end offset of every partition
//! after a group of statements was made durable. Frames past the last
//! record's offsets were never acknowledged and are cut off on recovery, so a
//! statement that spans partitions is either wholly present or wholly absent.
//!
//! A record may also carry the group's frames, exactly as they were written
//! to the partitions. Then the record's one fsync is what makes the group
//! durable, and the partition files are fsynced only before the log is
//! rotated (which drops the frames it holds) or when a group is too large
//! to write twice. Recovery writes any carried frame the partition lost
//! back into it (a crash of the machine, not of the process, can lose
//! writes that were not fsynced).
//!
//! A table fed by a source (a Kafka topic) also keeps, in every record, the
//! next source offset of each partition: the rows and the position they
//! were read up to become durable in the same fsync, so a source resumes
//! exactly after the last committed row. They are written as an entry
//! tagged with partition `u32::MAX` (`next offset i64 * partitions`, -1
//! where a partition has none yet).
//!
//! Record: `crc32c u32 | len u32 | seq u64 | ends u64 * partitions |
//! (partition u32 | frame_len u32 | frame)*`; CRC32C over everything after
//! `len`.
//!
//! The records live in a [`RecordFile`]: zero-filled ahead so that each
//! commit costs one fdatasync, cut at the first record that is not whole.

use std::fs::File;
use std::path::Path;

use super::error::LogError;
use super::record_file::RecordFile;

const FILE_NAME: &str = "commits.log";
/// Past this size the log is rewritten with only its newest record.
const ROTATE_BYTES: u64 = 4 << 20;
/// How far past the last record the file is zero-filled at a time.
const PREALLOCATE_BYTES: u64 = 1 << 20;

pub struct CommitLog {
    file: RecordFile,
    seq: u64,
    /// The next source offset per partition, written in every record;
    /// empty for a table no source feeds.
    positions: Vec<i64>,
}

/// The tag of the entry that holds a record's source positions.
const POSITIONS_TAG: u32 = u32::MAX;

/// A frame carried by a commit record, to be written back into its
/// partition on recovery if the partition lost it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalFrame {
    pub partition: usize,
    pub bytes: Vec<u8>,
}

/// The frames of a record's body after its end offsets, and its source
/// positions; `None` when the body does not divide into whole frames of
/// known partitions.
fn parse_frames(
    mut body: &[u8],
    partitions: usize,
) -> Option<(Vec<JournalFrame>, Option<Vec<i64>>)> {
    let mut frames = Vec::new();
    let mut positions = None;
    while !body.is_empty() {
        let tag = u32::from_le_bytes(body.get(0..4)?.try_into().ok()?);
        let len = u32::from_le_bytes(body.get(4..8)?.try_into().ok()?) as usize;
        let bytes = body.get(8..8 + len)?;
        if tag == POSITIONS_TAG && len == 8 * partitions {
            positions = Some(
                bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or_default()))
                    .collect(),
            );
        } else if (tag as usize) < partitions {
            frames.push(JournalFrame {
                partition: tag as usize,
                bytes: bytes.to_vec(),
            });
        } else {
            return None;
        }
        body = &body[8 + len..];
    }
    Some((frames, positions))
}

impl CommitLog {
    /// Opens the log in `dir`, returning it, the newest committed end
    /// offsets (all zero for a new table) and the frames its records carry,
    /// oldest first.
    pub fn open(
        dir: &Path,
        partitions: usize,
    ) -> Result<(CommitLog, Vec<u64>, Vec<JournalFrame>), LogError> {
        let ends_len = 8 + 8 * partitions;
        let (file, records) = RecordFile::open(&dir.join(FILE_NAME), PREALLOCATE_BYTES, |body| {
            body.len() >= ends_len && parse_frames(&body[ends_len..], partitions).is_some()
        })?;
        let mut last: Option<(u64, Vec<u64>)> = None;
        let mut journal = Vec::new();
        let mut positions = Vec::new();
        for body in &records {
            let seq = u64::from_le_bytes(body[0..8].try_into().unwrap_or_default());
            let ends = body[8..ends_len]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            last = Some((seq, ends));
            let (frames, record_positions) =
                parse_frames(&body[ends_len..], partitions).unwrap_or_default();
            journal.extend(frames);
            positions = record_positions.unwrap_or_default();
        }
        let (seq, ends) = last.unwrap_or((0, vec![0; partitions]));
        let fresh = file.is_empty();
        let mut log = CommitLog {
            file,
            seq,
            positions,
        };
        if fresh {
            // A new table: make the empty state durable so recovery always
            // finds a record.
            log.commit(&ends)?;
            sync_dir(dir)?;
        }
        Ok((log, ends, journal))
    }

    /// The next source offset of each partition as the newest record has
    /// them (-1: none yet); empty for a table no source feeds.
    pub fn positions(&self) -> &[i64] {
        &self.positions
    }

    /// Sets the source positions the next records carry; returns the
    /// previous ones, to put back if that record is not written.
    pub fn set_positions(&mut self, positions: Vec<i64>) -> Vec<i64> {
        std::mem::replace(&mut self.positions, positions)
    }

    /// True once the log should be rotated: the next record must then be
    /// written by [`CommitLog::commit`] after every partition is fsynced,
    /// since rotation drops the frames the log carries.
    pub fn is_full(&self) -> bool {
        self.file.len() >= ROTATE_BYTES
    }

    /// Appends a record and fsyncs it; rotates the log when it is full.
    /// Every frame the log carries must be durable in its partition.
    pub fn commit(&mut self, ends: &[u64]) -> Result<(), LogError> {
        if self.is_full() {
            return self.rotate(ends);
        }
        self.append(ends, &[])
    }

    /// Appends a record carrying the group's frames and fsyncs it: the
    /// one fsync the group needs.
    pub fn commit_with_frames(
        &mut self,
        ends: &[u64],
        frames: &[(usize, Vec<u8>)],
    ) -> Result<(), LogError> {
        self.append(ends, frames)
    }

    fn append(&mut self, ends: &[u64], frames: &[(usize, Vec<u8>)]) -> Result<(), LogError> {
        self.seq += 1;
        self.file
            .append(&encode(self.seq, ends, frames, &self.positions))
    }

    /// Replaces the log by one record of `ends`, dropping the frames it
    /// carries. Every carried frame must be durable in its partition.
    pub fn rotate(&mut self, ends: &[u64]) -> Result<(), LogError> {
        self.seq += 1;
        self.file
            .replace(&encode(self.seq, ends, &[], &self.positions))
    }
}

/// A record's body: `seq u64 | ends u64 * partitions | (partition u32 |
/// frame_len u32 | frame)*`, then the source positions when there are any.
fn encode(seq: u64, ends: &[u64], frames: &[(usize, Vec<u8>)], positions: &[i64]) -> Vec<u8> {
    let frame_bytes: usize = frames.iter().map(|(_, f)| 8 + f.len()).sum();
    let mut body = Vec::with_capacity(8 + 8 * ends.len() + frame_bytes + 8 + 8 * positions.len());
    body.extend_from_slice(&seq.to_le_bytes());
    for e in ends {
        body.extend_from_slice(&e.to_le_bytes());
    }
    for (partition, frame) in frames {
        body.extend_from_slice(&(*partition as u32).to_le_bytes());
        body.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        body.extend_from_slice(frame);
    }
    if !positions.is_empty() {
        body.extend_from_slice(&POSITIONS_TAG.to_le_bytes());
        body.extend_from_slice(&((8 * positions.len()) as u32).to_le_bytes());
        for p in positions {
            body.extend_from_slice(&p.to_le_bytes());
        }
    }
    body
}

pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::os::unix::fs::FileExt;

    #[test]
    fn source_positions_ride_with_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert!(log.positions().is_empty());
        log.set_positions(vec![10, -1]);
        log.commit_with_frames(&[1, 0], &[(0, vec![1, 2, 3])])
            .unwrap();
        log.set_positions(vec![12, 4]);
        log.commit(&[3, 1]).unwrap();
        drop(log);
        let (mut log, ends, journal) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![3, 1]);
        assert_eq!(log.positions(), &[12, 4]);
        assert_eq!(journal.len(), 1, "the positions entry is not a frame");
        // A rotation keeps them.
        log.rotate(&[3, 1]).unwrap();
        drop(log);
        let (log, _, journal) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(log.positions(), &[12, 4]);
        assert!(journal.is_empty());
    }

    #[test]
    fn newest_record_wins_and_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, ends, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![0, 0]);
        log.commit(&[3, 4]).unwrap();
        log.commit(&[5, 9]).unwrap();
        drop(log);
        let path = dir.path().join(FILE_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &[1, 2, 3]).unwrap();
        let (log, ends, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![5, 9]);
        // Garbage right after the last record is cut too, and the file
        // stays zero-filled past the records.
        let len = log.file.len();
        drop(log);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[7, 7, 7], len)
            .unwrap();
        let (mut log, ends, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![5, 9]);
        log.commit(&[6, 9]).unwrap();
        assert!(fs::metadata(dir.path().join(FILE_NAME)).unwrap().len() > log.file.len());
        drop(log);
        let bytes = fs::read(&path).unwrap();
        assert!(bytes[len as usize + 1..]
            .iter()
            .rev()
            .take(1000)
            .all(|b| *b == 0));
        let (log, ends, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![6, 9]);
        // Rotation keeps the newest record, zero-filled past it.
        let mut log = log;
        log.rotate(&[6, 9]).unwrap();
        log.commit(&[7, 9]).unwrap();
        drop(log);
        let (_, ends, _) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![7, 9]);
    }

    #[test]
    fn carried_frames_come_back_in_order_until_a_torn_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, journal) = CommitLog::open(dir.path(), 2).unwrap();
        assert!(journal.is_empty());
        log.commit_with_frames(&[1, 0], &[(0, b"a".to_vec())])
            .unwrap();
        log.commit_with_frames(&[2, 1], &[(1, b"bb".to_vec()), (0, b"c".to_vec())])
            .unwrap();
        log.commit(&[2, 1]).unwrap();
        log.commit_with_frames(&[3, 1], &[(0, b"dd".to_vec())])
            .unwrap();
        let len = log.file.len();
        drop(log);
        // Tear the last record: its last byte never reached the disk.
        let path = dir.path().join(FILE_NAME);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(&[0], len - 1)
            .unwrap();
        let (_, ends, journal) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![2, 1]);
        let got: Vec<(usize, &[u8])> = journal
            .iter()
            .map(|f| (f.partition, f.bytes.as_slice()))
            .collect();
        assert_eq!(got, vec![(0, &b"a"[..]), (1, &b"bb"[..]), (0, &b"c"[..])]);
    }
}
