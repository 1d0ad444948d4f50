//! A table's commit log: each record names the end offset of every partition
//! after a group of statements was made durable. Frames past the last
//! record's offsets were never acknowledged and are cut off on recovery, so a
//! statement that spans partitions is either wholly present or wholly absent.
//!
//! Record: `crc32c u32 | len u32 | seq u64 | ends u64 * partitions`.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use tracing::warn;

use super::error::LogError;

const FILE_NAME: &str = "commits.log";
/// Past this size the log is rewritten with only its newest record.
const ROTATE_BYTES: u64 = 1 << 20;

pub struct CommitLog {
    path: PathBuf,
    file: File,
    len: u64,
    seq: u64,
}

impl CommitLog {
    /// Opens the log in `dir`, returning it and the newest committed end
    /// offsets (all zero for a new table).
    pub fn open(dir: &Path, partitions: usize) -> Result<(CommitLog, Vec<u64>), LogError> {
        let path = dir.join(FILE_NAME);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(LogError::io(&path)(e)),
        };
        let mut pos = 0usize;
        let mut last: Option<(u64, Vec<u64>)> = None;
        while pos + 8 <= bytes.len() {
            let crc = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap_or_default());
            let len =
                u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap_or_default()) as usize;
            let end = pos + 8 + len;
            if len != 8 + 8 * partitions || end > bytes.len() {
                break;
            }
            let body = &bytes[pos + 8..end];
            if crc32c::crc32c(body) != crc {
                break;
            }
            let seq = u64::from_le_bytes(body[0..8].try_into().unwrap_or_default());
            let ends = body[8..]
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            last = Some((seq, ends));
            pos = end;
        }
        if pos < bytes.len() {
            warn!(path = %path.display(), kept = pos, dropped = bytes.len() - pos,
                  "cut torn tail of commit log");
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(LogError::io(&path))?;
        file.set_len(pos as u64).map_err(LogError::io(&path))?;
        let (seq, ends) = last.unwrap_or((0, vec![0; partitions]));
        let mut log = CommitLog {
            path,
            file,
            len: pos as u64,
            seq,
        };
        if pos == 0 {
            // A new table: make the empty state durable so recovery always
            // finds a record.
            log.commit(&ends)?;
            sync_dir(dir)?;
        }
        Ok((log, ends))
    }

    /// Appends a record and fsyncs it.
    pub fn commit(&mut self, ends: &[u64]) -> Result<(), LogError> {
        if self.len >= ROTATE_BYTES {
            return self.rotate(ends);
        }
        self.seq += 1;
        let record = encode(self.seq, ends);
        self.file
            .write_all(&record)
            .and_then(|_| self.file.sync_data())
            .map_err(LogError::io(&self.path))?;
        self.len += record.len() as u64;
        Ok(())
    }

    fn rotate(&mut self, ends: &[u64]) -> Result<(), LogError> {
        self.seq += 1;
        let record = encode(self.seq, ends);
        sluice_catalog::write_atomically(&self.path, &record)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(LogError::io(&self.path))?;
        self.len = record.len() as u64;
        Ok(())
    }
}

fn encode(seq: u64, ends: &[u64]) -> Vec<u8> {
    let mut body = Vec::with_capacity(8 + 8 * ends.len());
    body.extend_from_slice(&seq.to_le_bytes());
    for e in ends {
        body.extend_from_slice(&e.to_le_bytes());
    }
    let mut record = Vec::with_capacity(8 + body.len());
    record.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(&body);
    record
}

pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(LogError::io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_record_wins_and_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, ends) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![0, 0]);
        log.commit(&[3, 4]).unwrap();
        log.commit(&[5, 9]).unwrap();
        drop(log);
        let path = dir.path().join(FILE_NAME);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[1, 2, 3]).unwrap();
        let (_, ends) = CommitLog::open(dir.path(), 2).unwrap();
        assert_eq!(ends, vec![5, 9]);
    }
}
