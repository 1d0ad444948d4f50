//! `COPY (query) TO 'path' | 's3://bucket/key' WITH (FORMAT parquet)`:
//! a query's rows as one Parquet file, written by the server.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::execution::SendableRecordBatchStream;
use futures::{StreamExt, TryStreamExt};

use crate::error::SluiceError;
use crate::store::DurableStore;

/// Writes the query's rows as one Parquet file to a server path or an
/// `s3://bucket/key` URL (the `AWS_*` variables configure S3); returns
/// the rows and the file's SHA-256.
pub async fn to_location(
    rows: SendableRecordBatchStream,
    columns: SchemaRef,
    location: &str,
) -> Result<(u64, String), SluiceError> {
    // The file's columns are named as the query's result shows them.
    let mut batches = rows
        .map(|b| named_as(b?, &columns))
        .try_collect::<Vec<_>>()
        .await?;
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(columns));
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let data = tokio::task::spawn_blocking(move || crate::checkpoint::encode_parquet(&batches))
        .await
        .map_err(|e| SluiceError::Internal(e.to_string()))?
        .map_err(|e| SluiceError::Internal(format!("encoding Parquet: {e}")))?;
    let sha256 = crate::log::erasure::sha256_hex(&data);
    put(location, data).await?;
    Ok((rows as u64, sha256))
}

/// Writes `data` to a server path or an `s3://bucket/key` URL.
pub async fn put(location: &str, data: bytes::Bytes) -> Result<(), SluiceError> {
    let (store, key) = store_of(location)?;
    store.put(&key, data).await?;
    Ok(())
}

/// Writes the local file `file` to an `s3://bucket/key` URL (or a server
/// path), read in parts: a file of any size in bounded memory.
pub async fn put_file(location: &str, file: &std::path::Path) -> Result<(), SluiceError> {
    let (store, key) = store_of(location)?;
    store.put_file(&key, file).await?;
    Ok(())
}

/// Reads back what [`put`] wrote at `location`.
pub async fn get(location: &str) -> Result<bytes::Bytes, SluiceError> {
    let (store, key) = store_of(location)?;
    Ok(store.get(&key).await?)
}

/// The store and key of a server path or an `s3://bucket/key` URL.
fn store_of(location: &str) -> Result<(DurableStore, String), SluiceError> {
    Ok(match location.strip_prefix("s3://") {
        Some(rest) => {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if key.is_empty() {
                return Err(SluiceError::Unsupported(format!(
                    "COPY TO needs an object key after the bucket: {location}"
                )));
            }
            (
                DurableStore::s3(&format!("s3://{bucket}"))?,
                key.to_string(),
            )
        }
        None => {
            let path = std::path::Path::new(location);
            let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(SluiceError::Unsupported(format!(
                    "COPY TO needs a file path: {location}"
                )));
            };
            let dir = if dir.as_os_str().is_empty() {
                std::path::Path::new(".")
            } else {
                dir
            };
            (
                DurableStore::local(dir)?,
                name.to_string_lossy().into_owned(),
            )
        }
    })
}

/// `batch` with its columns named as `columns` names them.
pub(super) fn named_as(batch: RecordBatch, columns: &Schema) -> Result<RecordBatch, SluiceError> {
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(columns.fields())
        .map(|(f, shown)| f.as_ref().clone().with_name(shown.name()))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        batch.columns().to_vec(),
    )?)
}
