//! A statement's rows kept on disk until it commits: a `COPY ... FROM
//! STDIN` past its memory bound moves the rows it has routed so far into
//! one Arrow IPC stream file per partition, under the table's `staging`
//! directory, and its commit streams them from there into the log (see
//! `TableLog::append_spilled`). Nothing in these files is committed: a
//! crash leaves them behind, and the table removes its staging directory
//! when it opens.

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use super::error::LogError;
use super::table::RoutedRows;

/// The directory under a table's directory that spilled statements use.
pub const STAGING_DIR: &str = "staging";

/// Numbers the statements of the process that spill, for their file names.
static NEXT_SPILL: AtomicU64 = AtomicU64::new(0);

/// Rows of one statement on disk, by partition.
pub struct SpilledRows {
    dir: PathBuf,
    schema: SchemaRef,
    writers: Vec<Option<StreamWriter<BufWriter<File>>>>,
    rows: u64,
    bytes: u64,
}

impl SpilledRows {
    /// An empty spill for a table of `partitions` partitions whose rows
    /// have `schema`, in `table_dir`'s staging directory.
    pub fn new(table_dir: &Path, partitions: usize, schema: SchemaRef) -> Result<Self, LogError> {
        let n = NEXT_SPILL.fetch_add(1, Ordering::Relaxed);
        let dir = table_dir
            .join(STAGING_DIR)
            .join(format!("{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(LogError::io(&dir))?;
        Ok(SpilledRows {
            dir,
            schema,
            writers: (0..partitions).map(|_| None).collect(),
            rows: 0,
            bytes: 0,
        })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The Arrow bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Moves `routed`'s rows to disk.
    pub fn add(&mut self, routed: RoutedRows) -> Result<(), LogError> {
        for (p, batch) in routed.into_parts() {
            let path = self.dir.join(format!("p{p}.arrows"));
            let slot = self.writers.get_mut(p).ok_or_else(|| LogError::Io {
                path: path.clone(),
                source: std::io::Error::other("a spilled row names no partition of the table"),
            })?;
            let writer = match slot {
                Some(w) => w,
                None => {
                    let file = File::create(&path).map_err(LogError::io(&path))?;
                    slot.insert(StreamWriter::try_new(BufWriter::new(file), &self.schema)?)
                }
            };
            self.rows += batch.num_rows() as u64;
            self.bytes += batch.get_array_memory_size() as u64;
            writer.write(&batch)?;
        }
        Ok(())
    }

    /// The spilled rows, to be read back partition by partition.
    pub fn finish(mut self) -> Result<SpilledReader, LogError> {
        let mut files = Vec::new();
        for (p, w) in self.writers.iter_mut().enumerate() {
            if let Some(mut w) = w.take() {
                w.finish()?;
                files.push((p, self.dir.join(format!("p{p}.arrows"))));
            }
        }
        Ok(SpilledReader {
            dir: std::mem::take(&mut self.dir),
            files,
        })
    }
}

impl Drop for SpilledRows {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Spilled rows read back: each partition's batches in the order written.
pub struct SpilledReader {
    dir: PathBuf,
    files: Vec<(usize, PathBuf)>,
}

impl SpilledReader {
    /// Calls `each` with each partition and batch, in order.
    pub fn for_each(
        &self,
        mut each: impl FnMut(usize, RecordBatch) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        for (p, path) in &self.files {
            let file = File::open(path).map_err(LogError::io(path))?;
            for batch in StreamReader::try_new(BufReader::new(file), None)? {
                each(*p, batch?)?;
            }
        }
        Ok(())
    }
}

impl Drop for SpilledReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes what statements of an earlier process left in `table_dir`'s
/// staging directory (a crash in the middle of a COPY).
pub fn clear_staging(table_dir: &Path) {
    let dir = table_dir.join(STAGING_DIR);
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn spilled_rows_read_back_by_partition_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let batch = |v: Vec<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(v))]).unwrap()
        };
        let mut spill = SpilledRows::new(dir.path(), 3, schema.clone()).unwrap();
        spill
            .add(RoutedRows::from_parts(vec![
                (2, batch(vec![1, 2])),
                (0, batch(vec![3])),
            ]))
            .unwrap();
        spill
            .add(RoutedRows::from_parts(vec![(2, batch(vec![4]))]))
            .unwrap();
        assert_eq!(spill.rows(), 4);
        let reader = spill.finish().unwrap();
        let mut seen = Vec::new();
        reader
            .for_each(|p, b| {
                let v = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                seen.extend(v.values().iter().map(|x| (p, *x)));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![(0, 3), (2, 1), (2, 2), (2, 4)]);
        drop(reader);
        assert_eq!(
            std::fs::read_dir(dir.path().join(STAGING_DIR))
                .unwrap()
                .count(),
            0
        );
    }
}
