//! Arrow batches to result rows: arrow-pg's encoder, except that
//! timestamps sent as text read as PostgreSQL prints them
//! (`2026-01-01 10:00:00`, `10:00:00.5`, `+00` for timestamptz in the
//! server's UTC), where pgwire always prints six fractional digits.

use std::iter;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, TimeUnit, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion::prelude::DataFrame;
use futures::{stream, Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;

use crate::error::SluiceError;
use crate::ingest::postgres_timestamp;

type Rows = Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync>;

/// A DataFrame's rows, streamed as they are computed. `on_error` runs
/// when computing them fails after the response has begun (a division by
/// zero in some row): the statement failed, though it returned.
pub async fn dataframe(
    df: DataFrame,
    format: &Format,
    options: Arc<FormatOptions>,
    on_error: impl Fn() + Send + Sync + 'static,
) -> PgWireResult<QueryResponse> {
    let schema = df.schema().as_arrow().clone();
    let batches = df
        .execute_stream()
        .await
        .map_err(|e| PgWireError::ApiError(Box::new(e)))?
        .inspect(move |b| {
            if b.is_err() {
                on_error();
            }
        });
    stream_of(&schema, batches, format, options)
}

/// Rows already computed.
pub fn batches(
    schema: &Schema,
    batches: Vec<RecordBatch>,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<QueryResponse> {
    let batches = stream::iter(batches.into_iter().map(Ok::<_, SluiceError>));
    stream_of(schema, batches, format, options)
}

fn stream_of<E>(
    schema: &Schema,
    batches: impl Stream<Item = Result<RecordBatch, E>> + Send + 'static,
    format: &Format,
    options: Arc<FormatOptions>,
) -> PgWireResult<QueryResponse>
where
    E: Into<SluiceError>,
{
    let fields = Arc::new(arrow_schema_to_pg_fields(schema, format, Some(options))?);
    let for_rows = fields.clone();
    let rows = batches
        .map(move |batch| {
            // A failure found while computing rows keeps its SQLSTATE.
            let rows: Rows = match batch
                .map_err(|e| e.into().into_pg())
                .and_then(|b| postgres_text(b, &for_rows))
            {
                Ok(b) => encode_recordbatch(for_rows.clone(), b),
                Err(e) => Box::new(iter::once(Err(e))),
            };
            stream::iter(rows)
        })
        .flatten();
    Ok(QueryResponse::new(fields, rows))
}

/// The batch with each timestamp column that goes out as text replaced by
/// PostgreSQL's text of it (the field keeps its timestamp type).
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo]) -> PgWireResult<RecordBatch> {
    let text_timestamp = |i: usize| {
        matches!(batch.column(i).data_type(), DataType::Timestamp(_, _))
            && fields.get(i).map(|f| f.format()) == Some(FieldFormat::Text)
    };
    if !(0..batch.num_columns()).any(text_timestamp) {
        return Ok(batch);
    }
    let mut columns = batch.columns().to_vec();
    let mut schema_fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for i in (0..batch.num_columns()).filter(|&i| text_timestamp(i)) {
        columns[i] = timestamp_text(&columns[i]).map_err(|e| PgWireError::ApiError(Box::new(e)))?;
        schema_fields[i] = schema_fields[i].clone().with_data_type(DataType::Utf8);
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)
        .map_err(|e| PgWireError::ApiError(Box::new(e)))
}

fn timestamp_text(array: &ArrayRef) -> Result<ArrayRef, arrow::error::ArrowError> {
    let DataType::Timestamp(_, tz) = array.data_type() else {
        return Ok(array.clone());
    };
    let with_zone = tz.is_some();
    let micros = cast(array, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
    let micros = micros.as_primitive::<TimestampMicrosecondType>();
    let mut out = StringBuilder::with_capacity(micros.len(), micros.len() * 26);
    for i in 0..micros.len() {
        if micros.is_null(i) {
            out.append_null();
            continue;
        }
        out.append_value(postgres_timestamp(micros.value(i), with_zone));
    }
    Ok(Arc::new(out.finish()))
}
