//! Arrow batches to result rows. Each column is described with
//! PostgreSQL's type oid and typmod (`types::PgType`: `varchar(5)`,
//! `numeric(12,3)`, `jsonb`); a column sent as text is first turned into
//! PostgreSQL's text of each value (`types::text`: timestamps, dates,
//! intervals, floats, decimals, bytea, arrays), and a batch of only
//! integers, booleans, strings and (binary) timestamps (what a FETCH of
//! most tables is, once text values are text) is written straight into
//! each row's bytes, with no formatting machinery per value. Binary
//! columns go through arrow-pg's encoder, with unsigned integers as
//! bigint and JSONB with its version byte.

use super::errors::IntoPgWire;
use std::iter;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, PrimitiveArray};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Field, Int16Type, Int32Type, Int64Type, Schema, TimeUnit, TimestampMicrosecondType,
};
use arrow::record_batch::RecordBatch;
use arrow_pg::datatypes::encode_recordbatch;
use bytes::{BufMut, BytesMut};
use futures::{stream, Stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo, QueryResponse};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;

use crate::error::SluiceError;
use crate::types::datetime::write_timestamp as write_postgres_timestamp;
use crate::types::text::{array_text, TextFor};
use crate::types::{oid, PgType};

/// The columns of a schema as RowDescription describes them: PostgreSQL's
/// type oid and typmod of each, and the format it is sent in.
pub fn pg_fields(
    schema: &Schema,
    format: &Format,
    options: Option<Arc<FormatOptions>>,
) -> PgWireResult<Vec<FieldInfo>> {
    Ok(schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let t = PgType::of_field(f);
            let ty = Type::from_oid(t.oid).unwrap_or(Type::TEXT);
            let info = FieldInfo::new(f.name().clone(), None, None, ty, format.format_for(i))
                .with_type_modifier(t.typmod);
            match &options {
                Some(o) => info.with_format_options(o.clone()),
                None => info,
            }
        })
        .collect())
}

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
    let fields = Arc::new(pg_fields(schema, format, Some(options))?);
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

/// The batch as the wire sends it: each column that goes out as text and
/// that [`TextRows`] does not write itself replaced by PostgreSQL's text
/// of it, and binary columns in a form arrow-pg encodes as their type
/// (the fields keep their types).
pub fn postgres_text(batch: RecordBatch, fields: &[FieldInfo]) -> PgWireResult<RecordBatch> {
    let schema = batch.schema();
    // A regtype shows as the type's name. The wire's field says so: the
    // batch's may have lost the metadata to a cast the optimizer dropped.
    let is_regtype = |i: usize| {
        batch.column(i).data_type().is_integer()
            && fields.get(i).map(|f| f.datatype().oid()) == Some(oid::REGTYPE)
    };
    let change = |i: usize| -> Option<bool> {
        let binary = fields.get(i).map(|f| f.format()) == Some(FieldFormat::Binary);
        let t = batch.column(i).data_type();
        if binary {
            let json = PgType::of_field(schema.field(i)).oid == oid::JSONB;
            return (json
                || matches!(
                    t,
                    DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64
                ))
            .then_some(true);
        }
        (is_regtype(i)
            || !matches!(
                t,
                DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::Boolean
                    | DataType::Utf8
                    | DataType::LargeUtf8
                    | DataType::Utf8View
                    | DataType::Timestamp(TimeUnit::Microsecond, _)
            ))
        .then_some(false)
    };
    if !(0..batch.num_columns()).any(|i| change(i).is_some()) {
        return Ok(batch);
    }
    let err = |e: arrow::error::ArrowError| PgWireError::ApiError(Box::new(e));
    let mut columns = batch.columns().to_vec();
    let mut schema_fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for i in 0..batch.num_columns() {
        let Some(binary) = change(i) else {
            continue;
        };
        let (column, data_type) = if !binary {
            let field = if is_regtype(i) {
                regtype_field(schema.field(i))
            } else {
                schema.field(i).clone()
            };
            (
                array_text(&columns[i], &field, TextFor::Output).map_err(err)?,
                DataType::Utf8,
            )
        } else if columns[i].data_type().is_unsigned_integer() {
            (
                cast(&columns[i], &DataType::Int64).map_err(err)?,
                DataType::Int64,
            )
        } else {
            (jsonb_binary(&columns[i]).map_err(err)?, DataType::Binary)
        };
        columns[i] = column;
        schema_fields[i] = schema_fields[i].clone().with_data_type(data_type);
    }
    RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns).map_err(err)
}

/// `field` marked as a regtype (see `types::pg_type`).
fn regtype_field(field: &Field) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.extend(crate::types::oid_alias_value("regtype"));
    field.clone().with_metadata(metadata)
}

/// JSONB's binary form: a version byte (1), then the JSON text.
fn jsonb_binary(text: &ArrayRef) -> Result<ArrayRef, arrow::error::ArrowError> {
    let text = cast(text, &DataType::Utf8)?;
    let text = text.as_string::<i32>();
    let mut out = BinaryBuilder::with_capacity(text.len(), text.value_data().len() + text.len());
    let mut value = Vec::new();
    for v in text.iter() {
        match v {
            Some(v) => {
                value.clear();
                value.push(1u8);
                value.extend_from_slice(v.as_bytes());
                out.append_value(&value);
            }
            None => out.append_null(),
        }
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
    /// Intervals, written here so that a NULL one is NULL on the wire
    /// (arrow-pg's encoder sends a zero interval for it in binary).
    Interval(PrimitiveArray<arrow::datatypes::IntervalMonthDayNanoType>),
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
                // A regtype's text is a name (see `postgres_text`).
                if !binary && f.datatype().oid() == oid::REGTYPE {
                    return None;
                }
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
                    DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano) => {
                        TextColumn::Interval(c.as_primitive().clone())
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
                TextColumn::Interval(a) => {
                    if a.is_valid(i) {
                        self.scratch.clear();
                        crate::types::interval::write_interval(
                            crate::types::interval::Interval::from_arrow(a.value(i)),
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
        TextColumn::Interval(a) => a.is_valid(i),
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
        TextColumn::Interval(a) => {
            // Microseconds, days, months.
            let v = crate::types::interval::Interval::from_arrow(a.value(i));
            data.put_i32(16);
            data.put_i64(v.micros);
            data.put_i32(v.days);
            data.put_i32(v.months);
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
            let fields = Arc::new(pg_fields(&batch.schema(), &format, None).unwrap());
            let fast: Vec<DataRow> = TextRows::new(&batch, &fields)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let slow: Vec<DataRow> = encode_recordbatch(fields, batch)
                .map(Result::unwrap)
                .collect();
            assert_eq!(fast, slow, "{format:?}");
        }
    }

    #[test]
    fn other_types_take_arrow_pg() {
        let floats = RecordBatch::try_from_iter(vec![(
            "f",
            Arc::new(arrow::array::Float64Array::from(vec![1.5])) as ArrayRef,
        )])
        .unwrap();
        let text = pg_fields(&floats.schema(), &Format::UnifiedText, None).unwrap();
        assert!(TextRows::new(&floats, &text).is_none());
    }
}
