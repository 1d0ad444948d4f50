//! `COPY (query) TO STDOUT` as text, CSV or binary.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow_pg::encoder::encode_value;
use bytes::Bytes;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use pgwire::api::portal::Format;
use pgwire::api::results::{
    CopyCsvOptions, CopyEncoder, CopyResponse, CopyTextOptions, FieldInfo, Response,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;
use sluice_sql::{CopyTo, ExportFormat};

use crate::error::SluiceError;

/// Streams the query's rows to the client as COPY data.
/// `columns`: the result's columns as the header names them.
pub async fn to_stdout(
    mut batches: SendableRecordBatchStream,
    copy: &CopyTo,
    columns: SchemaRef,
) -> Result<CopyOut, SluiceError> {
    let schema = columns;
    let binary = copy.format == ExportFormat::Binary;
    let wire_format = if binary {
        Format::UnifiedBinary
    } else {
        Format::UnifiedText
    };
    let fields = Arc::new(
        super::encode::pg_fields(&schema, &wire_format, None)
            .map_err(|e| SluiceError::Protocol(e.to_string()))?,
    );
    let columns = fields.len();
    // In text and CSV, an array's value is its literal (`{1,2}`), written
    // as any text is; typed as an array, pgwire's encoder would quote it.
    // A timestamp is PostgreSQL's text of it (`2026-01-01 10:00:00`, no
    // zeros after the point), where the encoder writes six digits.
    let fields = match binary {
        true => fields,
        false => Arc::new(
            fields
                .iter()
                .zip(schema.fields())
                .map(|(f, column)| match column.data_type() {
                    arrow::datatypes::DataType::List(_)
                    | arrow::datatypes::DataType::LargeList(_)
                    | arrow::datatypes::DataType::Timestamp(..) => FieldInfo::new(
                        f.name().to_string(),
                        None,
                        None,
                        pgwire::api::Type::TEXT,
                        f.format(),
                    ),
                    _ => f.clone(),
                })
                .collect::<Vec<_>>(),
        ),
    };
    let delimiter = copy.delimiter.to_string();
    let encoder = match copy.format {
        ExportFormat::Binary => CopyEncoder::new_binary(fields.clone()),
        ExportFormat::Csv => CopyEncoder::new_csv(
            fields.clone(),
            CopyCsvOptions {
                delimiter: delimiter.clone().into(),
                null_string: copy.null.clone().into(),
                ..Default::default()
            },
        ),
        _ => CopyEncoder::new_text(
            fields.clone(),
            CopyTextOptions {
                delimiter: delimiter.clone().into(),
                null_string: copy.null.clone().into(),
            },
        ),
    };
    let header = copy.header.then(|| {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        CopyData::new(Bytes::from(format!("{}\n", names.join(&delimiter))))
    });
    // The binary encoder writes the file header with its first row; a
    // result without rows is answered by the caller (see [`CopyOut`]).
    let mut first = None;
    while let Some(b) = batches.next().await {
        let b = b?;
        if b.num_rows() > 0 {
            first = Some(b);
            break;
        }
    }
    if binary && first.is_none() {
        return Ok(CopyOut::EmptyBinary { columns });
    }
    let batches = futures::stream::iter(first.map(Ok)).chain(batches);
    let rows = batches
        .scan(encoder, move |encoder, batch| {
            // Binary columns too: JSONB goes out with its version byte.
            let batch = match binary {
                true => batch,
                false => batch.and_then(|b| {
                    timestamps_as_text(b)
                        .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
                }),
            };
            let out: Vec<PgWireResult<CopyData>> = match batch {
                Ok(b) => match super::encode::postgres_text(b, &fields) {
                    Ok(b) => encode_rows(encoder, &b, &fields),
                    Err(e) => vec![Err(e)],
                },
                Err(e) => vec![Err(PgWireError::ApiError(Box::new(e)))],
            };
            futures::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten();
    let stream = futures::stream::iter(header.map(Ok)).chain(rows);
    Ok(CopyOut::Stream(Response::CopyOut(CopyResponse::new(
        i8::from(binary),
        columns,
        stream,
    ))))
}

/// The batch with each timestamp column as PostgreSQL's text of it.
fn timestamps_as_text(batch: RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Timestamp(..)))
    {
        return Ok(batch);
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Timestamp(..) => {
                columns.push(crate::types::text::array_text(
                    column,
                    field,
                    crate::types::text::TextFor::Output,
                )?);
                fields.push(Field::new(field.name(), DataType::Utf8, true));
            }
            _ => {
                columns.push(column.clone());
                fields.push(field.as_ref().clone());
            }
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// What `COPY ... TO STDOUT` answers with.
pub enum CopyOut {
    /// The rows, streamed by pgwire.
    Stream(Response),
    /// A binary COPY without rows. PostgreSQL sends the file header and
    /// its trailer in one CopyData, which strict readers (tokio-postgres)
    /// expect; pgwire adds its own trailer message, so the caller sends
    /// this one itself ([`empty_binary_copy`]).
    EmptyBinary { columns: usize },
}

/// The whole binary copy stream of no rows: header, then trailer.
pub fn empty_binary_copy() -> CopyData {
    let mut b = binary_header().to_vec();
    b.extend_from_slice(&(-1i16).to_be_bytes());
    CopyData::new(Bytes::from(b))
}

/// The binary copy format's signature, flags and empty header extension.
fn binary_header() -> Bytes {
    let mut b = b"PGCOPY\n\xff\r\n\0".to_vec();
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    Bytes::from(b)
}

fn encode_rows(
    encoder: &mut CopyEncoder,
    batch: &RecordBatch,
    fields: &[FieldInfo],
) -> Vec<PgWireResult<CopyData>> {
    let schema = batch.schema();
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for (col, field) in fields.iter().enumerate() {
            if let Err(e) = encode_value(encoder, batch.column(col), row, schema.field(col), field)
            {
                out.push(Err(e));
                return out;
            }
        }
        out.push(Ok(encoder.take_copy()));
    }
    out
}
