//! Closed segments in the object store, as Parquet.
//!
//! A segment file holds the table's columns plus `_offset` and
//! `_ingested_at`, so any Parquet reader can replay it. Row groups end on
//! frame boundaries; the frames' headers (offsets, ingest time, event-time
//! bounds) are kept in the file's key-value metadata, and each frame is
//! mapped to its row group by the `_offset` column statistics, so a read
//! fetches the footer once and then only the row group it needs.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use futures::TryStreamExt;
use parking_lot::Mutex;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
// `ParquetObjectReader` is deprecated in favour of hand-written readers; it
// is still the shipped reader over `object_store`, which is all we need.
#[allow(deprecated)]
use parquet::arrow::async_reader::ParquetObjectReader;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;
use serde::{Deserialize, Serialize};

use super::error::LogError;
use super::frame::FrameHeader;
use crate::store::DurableStore;

/// Rows per row group, at least (a group ends at the next frame boundary).
const ROW_GROUP_ROWS: usize = 64 * 1024;
const FRAMES_KEY: &str = "sluice.frames";

/// A frame's header as kept in the Parquet metadata.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct StoredFrame {
    base_offset: u64,
    rows: u32,
    ingested_at_us: i64,
    min_event_us: i64,
    max_event_us: i64,
}

/// Key of a partition's segment in the object store.
pub fn segment_key(table_id: u64, partition: u32, base_offset: u64) -> String {
    format!("tables/{table_id}/p{partition}/{base_offset:020}.parquet")
}

/// Prefix of a partition's segments.
pub fn partition_prefix(table_id: u64, partition: u32) -> String {
    format!("tables/{table_id}/p{partition}")
}

/// Encodes a closed segment's frames (data columns only, as stored in the
/// local frames) into one Parquet file.
pub fn encode_segment(frames: &[(FrameHeader, RecordBatch)]) -> Result<Bytes, LogError> {
    let Some((_, first)) = frames.first() else {
        return Ok(Bytes::new());
    };
    // One schema for every frame: a column is nullable in the file when it
    // is in any frame. An erasure's holes (every column NULL) make a
    // rewritten frame's columns nullable even where the table's are NOT
    // NULL, and the frames without holes keep the table's schema.
    let mut fields: Vec<Field> = first
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let nullable = frames
                .iter()
                .any(|(_, b)| b.schema().fields().get(i).is_some_and(|g| g.is_nullable()));
            f.as_ref().clone().with_nullable(nullable)
        })
        .collect();
    fields.push(Field::new("_offset", DataType::Int64, false));
    fields.push(Field::new(
        "_ingested_at",
        DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        false,
    ));
    // Parquet has no interval of months, days and nanoseconds: such a
    // column is stored as the checkpoints store it, and read back so.
    let schema: SchemaRef = crate::checkpoint::format::stored_schema(&Arc::new(
        Schema::new_with_metadata(fields, first.schema().metadata().clone()),
    ));
    let stored: Vec<StoredFrame> = frames
        .iter()
        .map(|(h, _)| StoredFrame {
            base_offset: h.base_offset,
            rows: h.rows,
            ingested_at_us: h.ingested_at_us,
            min_event_us: h.min_event_us,
            max_event_us: h.max_event_us,
        })
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(None)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            FRAMES_KEY.to_string(),
            serde_json::to_string(&stored).unwrap_or_default(),
        )]))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, schema.clone(), Some(props))?;
    let mut in_group = 0usize;
    for (h, batch) in frames {
        let n = batch.num_rows();
        let base = h.base_offset as i64;
        let mut columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(crate::checkpoint::format::stored_column)
            .collect();
        columns.push(Arc::new(Int64Array::from_iter_values(
            base..base + n as i64,
        )));
        columns.push(Arc::new(
            TimestampMicrosecondArray::from(vec![h.ingested_at_us; n]).with_timezone("+00:00"),
        ));
        writer.write(&RecordBatch::try_new(schema.clone(), columns)?)?;
        in_group += n;
        if in_group >= ROW_GROUP_ROWS {
            writer.flush()?;
            in_group = 0;
        }
    }
    writer.close()?;
    Ok(Bytes::from(out))
}

/// A segment in the object store, its footer read once.
pub struct RemoteSegment {
    pub key: String,
    pub base_offset: u64,
    pub end_offset: u64,
    pub bytes: u64,
    /// Newest ingest time in the segment (for retention).
    pub max_ingested_us: i64,
    store: Arc<DurableStore>,
    metadata: ArrowReaderMetadata,
    /// Data columns (the leading ones) to read back.
    data_columns: usize,
    /// First offset of each row group, from the `_offset` statistics.
    row_group_starts: Vec<u64>,
    /// The last row group decoded: frames are usually read in order.
    cache: Mutex<Option<(usize, RecordBatch)>>,
}

impl std::fmt::Debug for RemoteSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RemoteSegment({}, {}..{})",
            self.key, self.base_offset, self.end_offset
        )
    }
}

fn remote_err(key: &str, reason: impl ToString) -> LogError {
    LogError::Remote {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

impl RemoteSegment {
    /// Reads a segment's footer: its frames and row groups.
    #[allow(deprecated)]
    pub async fn open(
        store: Arc<DurableStore>,
        key: &str,
        bytes: u64,
    ) -> Result<(Arc<RemoteSegment>, Vec<FrameHeader>), LogError> {
        let reader = ParquetObjectReader::new(store.object_store(), store.object_path(key))
            .with_file_size(bytes);
        let builder = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .map_err(|e| remote_err(key, e))?;
        let metadata = ArrowReaderMetadata::try_new(builder.metadata().clone(), Default::default())
            .map_err(|e| remote_err(key, e))?;
        let file = metadata.metadata().file_metadata();
        let stored: Vec<StoredFrame> = file
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|k| k.key == FRAMES_KEY))
            .and_then(|k| k.value.as_deref())
            .and_then(|v| serde_json::from_str(v).ok())
            .ok_or_else(|| remote_err(key, "no frame index in the metadata"))?;
        let schema = metadata.schema().clone();
        let offset_col = schema
            .index_of("_offset")
            .map_err(|_| remote_err(key, "no _offset column"))?;
        let mut row_group_starts = Vec::new();
        for rg in metadata.metadata().row_groups() {
            let start = match rg.column(offset_col).statistics() {
                Some(Statistics::Int64(s)) => s.min_opt().copied(),
                _ => None,
            };
            row_group_starts.push(
                start.ok_or_else(|| remote_err(key, "row group without _offset statistics"))?
                    as u64,
            );
        }
        let headers: Vec<FrameHeader> = stored
            .iter()
            .map(|s| FrameHeader {
                payload_len: 0,
                rows: s.rows,
                base_offset: s.base_offset,
                ingested_at_us: s.ingested_at_us,
                min_event_us: s.min_event_us,
                max_event_us: s.max_event_us,
            })
            .collect();
        let base_offset = headers.first().map(|h| h.base_offset).unwrap_or(0);
        let end_offset = headers
            .last()
            .map(|h| h.base_offset + h.rows as u64)
            .unwrap_or(base_offset);
        let segment = RemoteSegment {
            key: key.to_string(),
            base_offset,
            end_offset,
            bytes,
            max_ingested_us: headers.iter().map(|h| h.ingested_at_us).max().unwrap_or(0),
            store,
            data_columns: schema.fields().len().saturating_sub(2),
            metadata,
            row_group_starts,
            cache: Mutex::new(None),
        };
        Ok((Arc::new(segment), headers))
    }

    /// The rows of one frame (data columns only).
    pub async fn read_frame(&self, header: &FrameHeader) -> Result<RecordBatch, LogError> {
        let rg = self
            .row_group_starts
            .partition_point(|start| *start <= header.base_offset)
            .saturating_sub(1);
        let start = self.row_group_starts.get(rg).copied().unwrap_or(0);
        let cached = self
            .cache
            .lock()
            .as_ref()
            .filter(|(g, _)| *g == rg)
            .map(|(_, b)| b.clone());
        let group = match cached {
            Some(b) => b,
            None => {
                let b = self.read_row_group(rg).await?;
                *self.cache.lock() = Some((rg, b.clone()));
                b
            }
        };
        let from = (header.base_offset - start) as usize;
        let rows = header.rows as usize;
        if from + rows > group.num_rows() {
            return Err(remote_err(&self.key, "frame outside its row group"));
        }
        Ok(group.slice(from, rows))
    }

    #[allow(deprecated)]
    async fn read_row_group(&self, rg: usize) -> Result<RecordBatch, LogError> {
        let reader =
            ParquetObjectReader::new(self.store.object_store(), self.store.object_path(&self.key))
                .with_file_size(self.bytes);
        let mask = ProjectionMask::roots(
            self.metadata.metadata().file_metadata().schema_descr(),
            0..self.data_columns,
        );
        let stream =
            ParquetRecordBatchStreamBuilder::new_with_metadata(reader, self.metadata.clone())
                .with_row_groups(vec![rg])
                .with_projection(mask)
                .with_batch_size(self.metadata.metadata().row_group(rg).num_rows().max(1) as usize)
                .build()
                .map_err(|e| remote_err(&self.key, e))?;
        let batches: Vec<RecordBatch> = stream
            .try_collect()
            .await
            .map_err(|e| remote_err(&self.key, e))?;
        let schema = match batches.first() {
            Some(b) => b.schema(),
            None => return Err(remote_err(&self.key, "empty row group")),
        };
        let batch = arrow::compute::concat_batches(&schema, &batches)?;
        crate::checkpoint::format::restored_batch(batch).map_err(|e| remote_err(&self.key, e))
    }
}
