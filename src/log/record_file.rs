//! An append-only file of CRC-framed records, for small state that is
//! committed often and read back only on recovery: a table's commit log and
//! a subscription's committed offsets.
//!
//! Record: `crc32c u32 | len u32 | body`, CRC32C over the body.
//!
//! The file is kept zero-filled past its last record (PostgreSQL fills its
//! WAL segments the same way): an append then overwrites blocks the file
//! already has, and its fdatasync writes only the record. An append that
//! grows the file must also write the inode, a second synchronous write on
//! every commit. Recovery reads records until the first that is not whole
//! (zeros, or a torn record), and zero-fills from there. Replacing the
//! whole file (rotation) goes through a temporary file and a rename.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tracing::warn;

use super::error::LogError;

pub struct RecordFile {
    path: PathBuf,
    file: File,
    /// Bytes of records; the file is zero-filled from here to `allocated`.
    len: u64,
    allocated: u64,
    /// How far past the last record the file is zero-filled at a time.
    preallocate: u64,
}

impl RecordFile {
    /// Opens (or creates, empty) the file at `path`, returning it and the
    /// bodies of its whole records, oldest first. Reading stops at the first
    /// record that is torn or that `accept` refuses; what follows is cut.
    pub fn open(
        path: &Path,
        preallocate: u64,
        mut accept: impl FnMut(&[u8]) -> bool,
    ) -> Result<(RecordFile, Vec<Vec<u8>>), LogError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(LogError::io(path)(e)),
        };
        let mut pos = 0usize;
        let mut records = Vec::new();
        while let Some(header) = bytes.get(pos..pos + 8) {
            let crc = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
            let Some(body) = bytes.get(pos + 8..pos + 8 + len) else {
                break;
            };
            if len == 0 || crc32c::crc32c(body) != crc || !accept(body) {
                break;
            }
            records.push(body.to_vec());
            pos += 8 + len;
        }
        if bytes[pos..].iter().any(|b| *b != 0) {
            warn!(path = %path.display(), kept = pos, dropped = bytes.len() - pos,
                  "cut torn tail of record file");
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(LogError::io(path))?;
        // Whatever follows the last whole record (a torn record) goes, so
        // the bytes past the records are zeros only.
        file.set_len(pos as u64).map_err(LogError::io(path))?;
        let records_file = RecordFile {
            path: path.to_path_buf(),
            file,
            len: pos as u64,
            allocated: pos as u64,
            preallocate,
        };
        Ok((records_file, records))
    }

    /// Creates (or replaces) the file at `path` holding one record.
    pub fn create(path: &Path, preallocate: u64, body: &[u8]) -> Result<RecordFile, LogError> {
        let (mut file, _) = RecordFile::open(path, preallocate, |_| false)?;
        file.replace(body)?;
        Ok(file)
    }

    /// Bytes of records in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a record and fdatasyncs it.
    pub fn append(&mut self, body: &[u8]) -> Result<(), LogError> {
        let record = frame(body);
        let end = self.len + record.len() as u64;
        if end > self.allocated {
            self.zero_fill(end + self.preallocate)?;
        }
        self.file
            .write_all_at(&record, self.len)
            .and_then(|_| self.file.sync_data())
            .map_err(LogError::io(&self.path))?;
        self.len = end;
        Ok(())
    }

    /// Zero-fills the file up to `to` and makes its new size durable.
    fn zero_fill(&mut self, to: u64) -> Result<(), LogError> {
        let zeros = vec![0u8; to.saturating_sub(self.allocated) as usize];
        self.file
            .write_all_at(&zeros, self.allocated)
            .and_then(|_| self.file.sync_all())
            .map_err(LogError::io(&self.path))?;
        self.allocated = to;
        Ok(())
    }

    /// Replaces the whole file, atomically, by one record.
    pub fn replace(&mut self, body: &[u8]) -> Result<(), LogError> {
        let mut bytes = frame(body);
        let len = bytes.len() as u64;
        bytes.resize((len + self.preallocate) as usize, 0);
        sluice_catalog::write_atomically(&self.path, &bytes)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(LogError::io(&self.path))?;
        self.len = len;
        self.allocated = bytes.len() as u64;
        Ok(())
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(8 + body.len());
    record.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    record.extend_from_slice(&(body.len() as u32).to_le_bytes());
    record.extend_from_slice(body);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.log");
        let (mut f, records) = RecordFile::open(&path, 64, |_| true).unwrap();
        assert!(records.is_empty());
        f.append(b"one").unwrap();
        f.append(&[7u8; 100]).unwrap();
        f.append(b"three").unwrap();
        drop(f);
        // Zeros follow the records; a torn record after them is cut.
        let mut bytes = fs::read(&path).unwrap();
        assert!(bytes.len() as u64 > 8 * 3 + 108);
        let end = 8 * 3 + 3 + 100 + 5;
        bytes[end..end + 6].copy_from_slice(&[1, 2, 3, 4, 50, 0]);
        fs::write(&path, &bytes).unwrap();
        let (f, records) = RecordFile::open(&path, 64, |_| true).unwrap();
        assert_eq!(
            records,
            vec![b"one".to_vec(), vec![7u8; 100], b"three".to_vec()]
        );
        assert_eq!(f.len(), end as u64);
        assert_eq!(fs::metadata(&path).unwrap().len(), end as u64);
        // A damaged record ends what is read.
        let mut bytes = fs::read(&path).unwrap();
        bytes[8 + 3 + 8 + 5] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let (_, records) = RecordFile::open(&path, 64, |_| true).unwrap();
        assert_eq!(records, vec![b"one".to_vec()]);
    }

    #[test]
    fn replace_keeps_one_record_and_accept_stops_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.log");
        let mut f = RecordFile::create(&path, 16, b"first").unwrap();
        f.append(b"second").unwrap();
        f.replace(b"only").unwrap();
        f.append(b"after").unwrap();
        drop(f);
        let (_, records) = RecordFile::open(&path, 16, |_| true).unwrap();
        assert_eq!(records, vec![b"only".to_vec(), b"after".to_vec()]);
        let (_, records) = RecordFile::open(&path, 16, |b| b != b"after").unwrap();
        assert_eq!(records, vec![b"only".to_vec()]);
    }
}
