//! The erasure ledger: every erasure request, durable from the moment it
//! is accepted until long after it completed (`<data-dir>/erasures.log`).
//!
//! Each record is one erasure's whole state as JSON (the newest record of
//! an id wins), appended and fsynced at each step: accepted, rows found
//! (the positions erased, per table and partition), files rewritten,
//! completed. At start-up the positions go back into the partitions (see
//! [`super::PartitionLog::erase`]) before anything reads them, and an
//! erasure not completed is taken up again. The ledger keeps the
//! predicate as written: it is the record of the request (and what keeps
//! suppressing rows that match it), so it is the one file that names the
//! erased values. Past [`ROTATE_BYTES`] the file is replaced by one record
//! holding every erasure.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::LogError;
use super::record_file::RecordFile;

/// The ledger's file name in the data directory.
pub const LEDGER_FILE: &str = "erasures.log";

const ROTATE_BYTES: u64 = 4 << 20;

/// Rows one erasure removed from one partition of one table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErasedRows {
    pub table_id: u64,
    pub partition: u32,
    pub offsets: Vec<u64>,
}

/// A file an erasure rewrote: where, and its content hash (SHA-256, hex)
/// before and after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RewrittenFile {
    pub location: String,
    pub old_sha256: String,
    pub new_sha256: String,
}

/// One erasure request and how far it has come.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErasureRecord {
    pub id: u64,
    /// The tables it names (one, or every table with the predicate's
    /// columns for `ALL TABLES`).
    pub tables: Vec<String>,
    pub all_tables: bool,
    /// The WHERE clause as written (None: every row).
    pub predicate: Option<String>,
    pub requester: String,
    pub requested_at_us: i64,
    /// Set once no segment, view, checkpoint or registered file holds a
    /// matching row.
    pub completed_at_us: Option<i64>,
    /// Where the work stands ("finding rows", "rewriting segments",
    /// "rebuilding views", "done") and the last error, if a step failed.
    pub step: String,
    pub error: Option<String>,
    pub rows_removed: u64,
    #[serde(default)]
    pub erased: Vec<ErasedRows>,
    #[serde(default)]
    pub files_rewritten: Vec<RewrittenFile>,
    /// Copies Sluice cannot reach (client-side files, other buckets).
    #[serde(default)]
    pub not_reached: Vec<String>,
    /// Matching rows arriving later are dropped at ingest until then
    /// (`i64::MAX`: forever); None: not suppressed.
    #[serde(default)]
    pub suppress_until_us: Option<i64>,
    /// The suppression as written (`'forever'`, `'30 days'`).
    #[serde(default)]
    pub suppress: Option<String>,
}

impl ErasureRecord {
    pub fn is_complete(&self) -> bool {
        self.completed_at_us.is_some()
    }
}

/// A file that copies Sluice wrote outside its data (`COPY ... TO` a
/// server path or `s3://`, `COPY DATASET ... TO`): what an erasure
/// rewrites, and `VERIFY ERASURE` reads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RegisteredExport {
    pub id: u64,
    pub location: String,
    /// The dataset and version it holds (None: a query's rows).
    pub dataset: Option<String>,
    pub version: Option<u32>,
    pub rows: u64,
    pub sha256: String,
    pub written_at_us: i64,
    pub written_by: String,
}

/// What a [`Records`] file holds: JSON records known by an id.
pub trait Record: Serialize + serde::de::DeserializeOwned + Clone {
    fn id(&self) -> u64;
}

impl Record for ErasureRecord {
    fn id(&self) -> u64 {
        self.id
    }
}

impl Record for RegisteredExport {
    fn id(&self) -> u64 {
        self.id
    }
}

/// A file of JSON records by id, the newest of each winning: the erasure
/// ledger and the registry of exports.
pub struct Records<T: Record> {
    file: RecordFile,
    records: BTreeMap<u64, T>,
}

/// The erasure ledger.
pub type ErasureLedger = Records<ErasureRecord>;
/// The registry of exported files (`<data-dir>/exports.log`).
pub type ExportRegistry = Records<RegisteredExport>;

/// The registry's file name in the data directory.
pub const EXPORTS_FILE: &str = "exports.log";

fn ledger_error(e: serde_json::Error) -> LogError {
    LogError::Io {
        path: LEDGER_FILE.into(),
        source: std::io::Error::other(e),
    }
}

/// SHA-256 of `data`, in hex (a rewritten file's content hash).
pub fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write as _;
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn decode<T: Record>(body: &[u8]) -> Option<Vec<T>> {
    if let Ok(all) = serde_json::from_slice::<Vec<T>>(body) {
        return Some(all);
    }
    serde_json::from_slice::<T>(body).ok().map(|r| vec![r])
}

impl<T: Record> Records<T> {
    /// Opens (or creates) `name` in `data_dir`.
    pub fn open_file(data_dir: &Path, name: &str) -> Result<Records<T>, LogError> {
        let (file, bodies) =
            RecordFile::open(&data_dir.join(name), 64 << 10, |b| decode::<T>(b).is_some())?;
        let mut records = BTreeMap::new();
        for r in bodies.iter().filter_map(|b| decode::<T>(b)).flatten() {
            records.insert(r.id(), r);
        }
        Ok(Records { file, records })
    }

    pub fn records(&self) -> Vec<T> {
        self.records.values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<T> {
        self.records.get(&id).cloned()
    }

    pub fn next_id(&self) -> u64 {
        self.records.keys().next_back().map_or(1, |id| id + 1)
    }

    /// Writes `record` durably (a new one, or a new state of one).
    pub fn put(&mut self, record: T) -> Result<(), LogError> {
        self.records.insert(record.id(), record.clone());
        if self.file.len() >= ROTATE_BYTES {
            let all: Vec<&T> = self.records.values().collect();
            return self
                .file
                .replace(&serde_json::to_vec(&all).map_err(ledger_error)?);
        }
        self.file
            .append(&serde_json::to_vec(&record).map_err(ledger_error)?)
    }
}

impl ErasureLedger {
    /// Opens (or creates) the ledger in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<ErasureLedger, LogError> {
        Records::open_file(data_dir, LEDGER_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64, step: &str) -> ErasureRecord {
        ErasureRecord {
            id,
            tables: vec!["requests".into()],
            all_tables: false,
            predicate: Some("user_id = 'u42'".into()),
            requester: "sluice".into(),
            requested_at_us: 1,
            completed_at_us: None,
            step: step.into(),
            error: None,
            rows_removed: 0,
            erased: vec![ErasedRows {
                table_id: 3,
                partition: 1,
                offsets: vec![4, 9],
            }],
            files_rewritten: vec![],
            not_reached: vec![],
            suppress_until_us: None,
            suppress: None,
        }
    }

    #[test]
    fn the_newest_record_of_each_erasure_survives_a_reopen_and_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ErasureLedger::open(dir.path()).unwrap();
        assert_eq!(ledger.next_id(), 1);
        ledger.put(record(1, "finding rows")).unwrap();
        ledger.put(record(2, "finding rows")).unwrap();
        ledger.put(record(1, "done")).unwrap();
        drop(ledger);
        let mut ledger = ErasureLedger::open(dir.path()).unwrap();
        assert_eq!(ledger.get(1).unwrap().step, "done");
        assert_eq!(ledger.get(2).unwrap().step, "finding rows");
        assert_eq!(ledger.next_id(), 3);
        // Enough records to rotate: the replaced file holds them all.
        let mut big = record(3, "x");
        big.erased[0].offsets = (0..400_000).collect();
        for _ in 0..2 {
            ledger.put(big.clone()).unwrap();
        }
        ledger.put(record(4, "y")).unwrap();
        drop(ledger);
        let ledger = ErasureLedger::open(dir.path()).unwrap();
        assert_eq!(ledger.records().len(), 4);
        assert_eq!(ledger.get(3).unwrap().erased[0].offsets.len(), 400_000);
        assert_eq!(ledger.get(4).unwrap().step, "y");
    }
}
