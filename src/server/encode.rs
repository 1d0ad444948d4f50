//! Arrow batches to result rows: arrow-pg's encoder, except that
//! timestamps sent as text read as PostgreSQL prints them
//! (`2026-01-01 10:00:00`, `10:00:00.5`, `+00` for timestamptz in the
//! server's UTC), where pgwire always prints six fractional digits; and a
//! batch of only integers, booleans, strings and (binary) timestamps (what
//! a FETCH of most tables is, once text timestamps are text) is written
//! straight into each row's bytes, with no formatting machinery per value.

use std::iter;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Field, Int16Type, Int32Type, Int64Type, Schema, TimeUnit, TimestampMicrosecondType,
};
use arrow::record_batch::RecordBatch;
use arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use bytes::{BufMut, BytesMut};
use futures::{stream, Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;

use crate::error::SluiceError;
use crate::ingest::{postgres_timestamp, write_postgres_timestamp};

type Rows = Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync>;

/// A query's rows, streamed as they are computed. `on_error` runs
/// when computing them fails after the response has begun (a division by
/// zero in some row): the statement failed, though it returned.
pub fn computed(
    schema: Schema,
    batches: impl Stream<Item = Result<RecordBatch, SluiceError>> + Send + 'static,
    format: &Format,
    options: Arc<FormatOptions>,
    on_error: impl Fn() + Send + Sync + 'static,
) -> PgWireResult<QueryResponse> {
    let batches = batches.inspect(move |b| {
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
            let rows: Rows = match batch.map_err(|e| e.into().into_pg()) {
                Ok(b) => match TextRows::new(&b, &for_rows) {
                    Some(fast) => Box::new(fast),
                    None => match postgres_text(b, &for_rows) {
                        Ok(b) => match TextRows::new(&b, &for_rows) {
                            Some(fast) => Box::new(fast),
                            None => encode_recordbatch(for_rows.clone(), b),
                        },
                        Err(e) => Box::new(iter::once(Err(e))),
                    },
                },
                Err(e) => Box::new(iter::once(Err(e))),
            };
            stream::iter(rows)
        })
        .flatten();
    Ok(QueryResponse::new(fields, rows))
}

/// The batch with each timestamp or float column that goes out as text
/// replaced by PostgreSQL's text of it (the field keeps its type).
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo]) -> PgWireResult<RecordBatch> {
    let text_timestamp = |i: usize| {
        matches!(
            batch.column(i).data_type(),
            DataType::Timestamp(_, _) | DataType::Float32 | DataType::Float64
        ) && fields.get(i).map(|f| f.format()) == Some(FieldFormat::Text)
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
        columns[i] = match columns[i].data_type() {
            DataType::Float32 | DataType::Float64 => float_text(&columns[i]),
            _ => timestamp_text(&columns[i]),
        }
        .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
        schema_fields[i] = schema_fields[i].clone().with_data_type(DataType::Utf8);
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns)
        .map_err(|e| PgWireError::ApiError(Box::new(e)))
}

/// Floats as PostgreSQL prints them: the shortest text that reads back
/// the same value, in exponent form (`1e+20`, `1.5e-07`) when the decimal
/// exponent is below -4 or at least 15 (6 for `real`); `Infinity`,
/// `-Infinity`, `NaN`.
fn float_text(array: &ArrayRef) -> Result<ArrayRef, arrow::error::ArrowError> {
    let mut out = StringBuilder::with_capacity(array.len(), array.len() * 8);
    let mut text = String::new();
    let mut push = |valid: bool, write: &dyn Fn(&mut String)| {
        if valid {
            text.clear();
            write(&mut text);
            out.append_value(&text);
        } else {
            out.append_null();
        }
    };
    match array.data_type() {
        DataType::Float32 => {
            let a = array.as_primitive::<arrow::datatypes::Float32Type>();
            for i in 0..a.len() {
                push(a.is_valid(i), &|t| write_postgres_float(a.value(i), 6, t));
            }
        }
        _ => {
            let a = array.as_primitive::<arrow::datatypes::Float64Type>();
            for i in 0..a.len() {
                push(a.is_valid(i), &|t| write_postgres_float(a.value(i), 15, t));
            }
        }
    }
    Ok(Arc::new(out.finish()))
}

/// One float in PostgreSQL's text (see [`float_text`]); `digits_limit` is
/// the decimal exponent from which the exponent form is used.
fn write_postgres_float<F>(v: F, digits_limit: i32, out: &mut String)
where
    F: std::fmt::Display + std::fmt::LowerExp + Into<f64> + Copy,
{
    use std::fmt::Write;
    let wide: f64 = v.into();
    if wide.is_nan() {
        out.push_str("NaN");
        return;
    }
    if wide.is_infinite() {
        out.push_str(if wide > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    // Rust writes the shortest digits that read back the same value:
    // `1.5e-7`, `1e20`.
    let exp_form = format!("{v:e}");
    let (mantissa, exp) = exp_form.split_once('e').unwrap_or((&exp_form, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if wide != 0.0 && (exp < -4 || exp >= digits_limit) {
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "{mantissa}e{sign}{:02}", exp.abs());
    } else {
        let _ = write!(out, "{v}");
    }
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

/// A column [`TextRows`] writes itself.
enum TextColumn {
    SmallInt(PrimitiveArray<Int16Type>),
    Int(PrimitiveArray<Int32Type>),
    BigInt(PrimitiveArray<Int64Type>),
    Boolean(BooleanArray),
    Utf8(arrow::array::StringArray),
    LargeUtf8(arrow::array::LargeStringArray),
    Utf8View(arrow::array::StringViewArray),
    Timestamp(PrimitiveArray<TimestampMicrosecondType>),
}

/// The rows of a batch whose columns are all integers, booleans, strings
/// or microsecond timestamps, each written straight into its DataRow, in
/// text or binary as each field asks.
struct TextRows {
    columns: Vec<(TextColumn, bool)>,
    row: usize,
    rows: usize,
    /// Bytes the last row took: the next row's first allocation.
    row_bytes: usize,
    /// Where a text timestamp is printed before it is copied in.
    scratch: String,
}

impl TextRows {
    fn new(batch: &RecordBatch, fields: &[FieldInfo]) -> Option<TextRows> {
        if fields.len() != batch.num_columns() {
            return None;
        }
        let columns = batch
            .columns()
            .iter()
            .zip(fields)
            .map(|(c, f)| {
                let binary = f.format() == FieldFormat::Binary;
                let column = match c.data_type() {
                    DataType::Int16 => TextColumn::SmallInt(c.as_primitive().clone()),
                    DataType::Int32 => TextColumn::Int(c.as_primitive().clone()),
                    DataType::Int64 => TextColumn::BigInt(c.as_primitive().clone()),
                    DataType::Boolean => TextColumn::Boolean(c.as_boolean().clone()),
                    DataType::Utf8 => TextColumn::Utf8(c.as_string().clone()),
                    DataType::LargeUtf8 => TextColumn::LargeUtf8(c.as_string().clone()),
                    DataType::Utf8View => TextColumn::Utf8View(c.as_string_view().clone()),
                    DataType::Timestamp(TimeUnit::Microsecond, _) => {
                        TextColumn::Timestamp(c.as_primitive::<TimestampMicrosecondType>().clone())
                    }
                    _ => return None,
                };
                Some((column, binary))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(TextRows {
            row_bytes: 16 * columns.len(),
            columns,
            row: 0,
            rows: batch.num_rows(),
            scratch: String::with_capacity(32),
        })
    }

    fn encode_row(&mut self, i: usize) -> DataRow {
        let mut data = BytesMut::with_capacity(self.row_bytes + 16);
        for (c, binary) in &self.columns {
            if *binary {
                put_binary(&mut data, c, i);
                continue;
            }
            match c {
                TextColumn::SmallInt(a) => {
                    put_int(&mut data, a.is_valid(i).then(|| a.value(i) as i64))
                }
                TextColumn::Int(a) => put_int(&mut data, a.is_valid(i).then(|| a.value(i) as i64)),
                TextColumn::BigInt(a) => put_int(&mut data, a.is_valid(i).then(|| a.value(i))),
                TextColumn::Boolean(a) => put_text(
                    &mut data,
                    a.is_valid(i)
                        .then(|| if a.value(i) { &b"t"[..] } else { &b"f"[..] }),
                ),
                TextColumn::Utf8(a) => {
                    put_text(&mut data, a.is_valid(i).then(|| a.value(i).as_bytes()))
                }
                TextColumn::LargeUtf8(a) => {
                    put_text(&mut data, a.is_valid(i).then(|| a.value(i).as_bytes()))
                }
                TextColumn::Utf8View(a) => {
                    put_text(&mut data, a.is_valid(i).then(|| a.value(i).as_bytes()))
                }
                TextColumn::Timestamp(a) => {
                    if a.is_valid(i) {
                        self.scratch.clear();
                        write_postgres_timestamp(
                            a.value(i),
                            a.timezone().is_some(),
                            &mut self.scratch,
                        );
                        put_text(&mut data, Some(self.scratch.as_bytes()));
                    } else {
                        put_text(&mut data, None);
                    }
                }
            }
        }
        self.row_bytes = data.len();
        DataRow::new(data, self.columns.len() as i16)
    }
}

impl Iterator for TextRows {
    type Item = PgWireResult<DataRow>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.row >= self.rows {
            return None;
        }
        let row = self.encode_row(self.row);
        self.row += 1;
        Some(Ok(row))
    }
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// A field in PostgreSQL's binary form of its type.
fn put_binary(data: &mut BytesMut, c: &TextColumn, i: usize) {
    let valid = match c {
        TextColumn::SmallInt(a) => a.is_valid(i),
        TextColumn::Int(a) => a.is_valid(i),
        TextColumn::BigInt(a) => a.is_valid(i),
        TextColumn::Boolean(a) => a.is_valid(i),
        TextColumn::Utf8(a) => a.is_valid(i),
        TextColumn::LargeUtf8(a) => a.is_valid(i),
        TextColumn::Utf8View(a) => a.is_valid(i),
        TextColumn::Timestamp(a) => a.is_valid(i),
    };
    if !valid {
        data.put_i32(-1);
        return;
    }
    match c {
        TextColumn::SmallInt(a) => {
            data.put_i32(2);
            data.put_i16(a.value(i));
        }
        TextColumn::Int(a) => {
            data.put_i32(4);
            data.put_i32(a.value(i));
        }
        TextColumn::BigInt(a) => {
            data.put_i32(8);
            data.put_i64(a.value(i));
        }
        TextColumn::Boolean(a) => {
            data.put_i32(1);
            data.put_u8(u8::from(a.value(i)));
        }
        TextColumn::Utf8(a) => put_text(data, Some(a.value(i).as_bytes())),
        TextColumn::LargeUtf8(a) => put_text(data, Some(a.value(i).as_bytes())),
        TextColumn::Utf8View(a) => put_text(data, Some(a.value(i).as_bytes())),
        TextColumn::Timestamp(a) => {
            data.put_i32(8);
            data.put_i64(a.value(i).saturating_sub(PG_EPOCH_US));
        }
    }
}

/// A field's length and bytes; NULL is length -1.
fn put_text(data: &mut BytesMut, value: Option<&[u8]>) {
    match value {
        Some(v) => {
            data.put_i32(v.len() as i32);
            data.put_slice(v);
        }
        None => data.put_i32(-1),
    }
}

/// An integer's decimal text as a field.
fn put_int(data: &mut BytesMut, value: Option<i64>) {
    let Some(v) = value else {
        data.put_i32(-1);
        return;
    };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut u = v.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    let len = digits.len() - at + usize::from(v < 0);
    data.put_i32(len as i32);
    if v < 0 {
        data.put_u8(b'-');
    }
    data.put_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Int16Array, Int32Array, Int64Array, StringArray};

    /// The rows written directly are byte for byte what arrow-pg writes.
    #[test]
    fn text_rows_match_arrow_pg() {
        let batch = RecordBatch::try_from_iter(vec![
            (
                "a",
                Arc::new(Int64Array::from(vec![
                    Some(0),
                    Some(-1),
                    Some(i64::MIN),
                    Some(i64::MAX),
                    None,
                    Some(1234567890),
                ])) as ArrayRef,
            ),
            (
                "b",
                Arc::new(Int32Array::from(vec![
                    Some(i32::MIN),
                    None,
                    Some(7),
                    Some(-40),
                    Some(i32::MAX),
                    Some(10),
                ])),
            ),
            (
                "c",
                Arc::new(Int16Array::from(vec![
                    Some(i16::MIN),
                    Some(5),
                    None,
                    Some(-9),
                    Some(i16::MAX),
                    Some(100),
                ])),
            ),
            (
                "d",
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    Some(true),
                    Some(false),
                    None,
                ])),
            ),
            (
                "e",
                Arc::new(StringArray::from(vec![
                    Some("x"),
                    Some(""),
                    None,
                    Some("héllo"),
                    Some("a,b"),
                    Some("z"),
                ])),
            ),
        ])
        .unwrap();
        let with_time = |tz: Option<&str>| {
            let mut columns = batch.columns().to_vec();
            columns.push(Arc::new(
                arrow::array::TimestampMicrosecondArray::from(vec![
                    Some(0),
                    Some(1_767_225_600_123_456),
                    None,
                    Some(-86_400_000_000),
                    Some(946_684_800_000_000),
                    Some(1),
                ])
                .with_timezone_opt(tz),
            ));
            let mut fields = batch.schema().fields().to_vec();
            fields.push(Arc::new(Field::new(
                "t",
                columns[5].data_type().clone(),
                true,
            )));
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
        };
        for (batch, format) in [
            (batch.clone(), Format::UnifiedText),
            (batch.clone(), Format::UnifiedBinary),
            (with_time(None), Format::UnifiedBinary),
            (with_time(Some("+00:00")), Format::UnifiedBinary),
            (with_time(None), Format::Individual(vec![0, 1, 0, 1, 0, 1])),
        ] {
            let fields =
                Arc::new(arrow_schema_to_pg_fields(&batch.schema(), &format, None).unwrap());
            let fast: Vec<DataRow> = TextRows::new(&batch, &fields)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let slow: Vec<DataRow> = encode_recordbatch(fields, batch)
                .map(Result::unwrap)
                .collect();
            assert_eq!(fast, slow, "{format:?}");
        }
        // A text timestamp left as a timestamp prints as `postgres_text`
        // would have printed it.
        for tz in [None, Some("+00:00")] {
            let batch = with_time(tz);
            let fields = Arc::new(
                arrow_schema_to_pg_fields(&batch.schema(), &Format::UnifiedText, None).unwrap(),
            );
            let raw: Vec<DataRow> = TextRows::new(&batch, &fields)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let texted = postgres_text(batch, &fields).unwrap();
            let via_text: Vec<DataRow> = TextRows::new(&texted, &fields)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(raw, via_text);
        }
    }

    #[test]
    fn floats_print_as_postgresql_does() {
        let text = |v: f64| {
            let mut s = String::new();
            write_postgres_float(v, 15, &mut s);
            s
        };
        for (v, want) in [
            (1e20, "1e+20"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (1.5e-7, "1.5e-07"),
            (-0.0, "-0"),
            (100.0, "100"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1e-300, "1e-300"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(text(v), want, "{v}");
        }
        let mut s = String::new();
        write_postgres_float(1e6f32, 6, &mut s);
        assert_eq!(s, "1e+06");
        s.clear();
        write_postgres_float(2.5f32, 6, &mut s);
        assert_eq!(s, "2.5");
        s.clear();
        write_postgres_float(0.1f32, 6, &mut s);
        assert_eq!(s, "0.1");
    }

    #[test]
    fn other_types_take_arrow_pg() {
        let floats = RecordBatch::try_from_iter(vec![(
            "f",
            Arc::new(arrow::array::Float64Array::from(vec![1.5])) as ArrayRef,
        )])
        .unwrap();
        let text = arrow_schema_to_pg_fields(&floats.schema(), &Format::UnifiedText, None).unwrap();
        assert!(TextRows::new(&floats, &text).is_none());
    }
}
