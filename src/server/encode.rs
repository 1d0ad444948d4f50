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

/// PostgreSQL's ISO text of a timestamp (microseconds since the epoch):
/// fractional seconds only when there are some, without trailing zeros.
/// Written by hand: this runs for every timestamp a FETCH or a query
/// sends, and a formatter that reads a format string costs a quarter of a
/// FETCH's time.
pub fn postgres_timestamp(us: i64, with_zone: bool) -> String {
    let days = us.div_euclid(86_400_000_000);
    let in_day = us.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        // Years PostgreSQL writes with "BC" or more digits: the slow path.
        return chrono::DateTime::from_timestamp_micros(us)
            .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.f").to_string())
            .unwrap_or_else(|| us.to_string());
    }
    let secs = in_day / 1_000_000;
    let fraction = in_day % 1_000_000;
    let mut b = [0u8; 29];
    let two = |b: &mut [u8], at: usize, v: i64| {
        b[at] = b'0' + (v / 10) as u8;
        b[at + 1] = b'0' + (v % 10) as u8;
    };
    two(&mut b, 0, y / 100);
    two(&mut b, 2, y % 100);
    b[4] = b'-';
    two(&mut b, 5, m);
    b[7] = b'-';
    two(&mut b, 8, d);
    b[10] = b' ';
    two(&mut b, 11, secs / 3600);
    b[13] = b':';
    two(&mut b, 14, secs / 60 % 60);
    b[16] = b':';
    two(&mut b, 17, secs % 60);
    let mut len = 19;
    if fraction != 0 {
        b[19] = b'.';
        let mut f = fraction;
        for i in (20..26).rev() {
            b[i] = b'0' + (f % 10) as u8;
            f /= 10;
        }
        len = 26;
        while b[len - 1] == b'0' {
            len -= 1;
        }
    }
    if with_zone {
        b[len..len + 3].copy_from_slice(b"+00");
        len += 3;
    }
    String::from_utf8_lossy(&b[..len]).into_owned()
}

/// Year, month, day of a day number (days since 1970-01-01), proleptic
/// Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_as_postgresql_prints_them() {
        let at = |s: &str| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .unwrap()
                .and_utc()
                .timestamp_micros()
        };
        assert_eq!(
            postgres_timestamp(at("2026-01-01 10:00:00.000"), false),
            "2026-01-01 10:00:00"
        );
        assert_eq!(
            postgres_timestamp(at("2026-01-01 10:00:00.500"), false),
            "2026-01-01 10:00:00.5"
        );
        assert_eq!(
            postgres_timestamp(at("2026-01-01 10:00:00.000120"), true),
            "2026-01-01 10:00:00.00012+00"
        );
        assert_eq!(
            postgres_timestamp(at("1969-12-31 23:59:59.999999"), false),
            "1969-12-31 23:59:59.999999"
        );
        // Every day of four centuries, against chrono.
        let mut us = at("1900-01-01 00:00:00");
        while us < at("2300-01-01 00:00:00") {
            let want = chrono::DateTime::from_timestamp_micros(us)
                .unwrap()
                .naive_utc()
                .format("%Y-%m-%d %H:%M:%S")
                .to_string();
            assert_eq!(postgres_timestamp(us, false), want);
            us += 86_400_000_000 + 3_600_000_000 + 61_000_000;
        }
    }
}
