use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Array, Date32Builder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, StringArray,
    StringBuilder, TimestampMicrosecondArray, TimestampMicrosecondBuilder,
};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use sluice_catalog::{ColumnDef, SqlType, TableDef};

use super::error::{IngestError, RowPlace};
use crate::types::datetime::{days_from_civil, days_in_month, parse_date, parse_timestamp};
use crate::types::text::parse_bytea;

/// Rows are converted to a batch every this many rows, bounding the text
/// held in memory.
const STAGE_ROWS: usize = 64 * 1024;

/// Collects rows of text values for some of a table's columns and converts
/// them, column at a time, into validated batches of the table's data schema.
/// Binary COPY rows go straight into typed builders where the binary form
/// is the value (integers, floats, booleans, dates, timestamps), and into
/// text for the rest.
pub struct RowStager {
    columns: Vec<ColumnDef>,
    schema: SchemaRef,
    /// Table column index of each input field.
    targets: Vec<usize>,
    builders: Vec<StagedColumn>,
    places: Vec<u64>,
    lines: bool,
    batches: Vec<RecordBatch>,
    rows: u64,
    staged_bytes: u64,
    max_bytes: u64,
}

impl RowStager {
    /// `columns` names the input fields in order (empty: all columns).
    /// `lines` says whether places are COPY lines or VALUES rows.
    pub fn new(
        table: &TableDef,
        columns: &[String],
        lines: bool,
    ) -> Result<RowStager, IngestError> {
        let targets = resolve_columns(table, columns)?;
        Ok(RowStager {
            columns: table.columns.clone(),
            schema: table.data_schema(),
            builders: targets
                .iter()
                .map(|_| StagedColumn::Text(StringBuilder::new()))
                .collect(),
            targets,
            places: Vec::new(),
            lines,
            batches: Vec::new(),
            rows: 0,
            staged_bytes: 0,
            max_bytes: u64::MAX,
        })
    }

    /// A stager for binary COPY: fields of types whose binary form is the
    /// value itself are decoded into builders of that type.
    pub fn for_binary(mut self) -> RowStager {
        for (b, &t) in self.builders.iter_mut().zip(&self.targets) {
            *b = StagedColumn::for_binary(&self.columns[t].ty);
        }
        self
    }

    /// Adds one binary COPY tuple (PostgreSQL's binary form of each field,
    /// None for NULL); `place` is its tuple number.
    pub fn push_binary_row(
        &mut self,
        fields: &[Option<&[u8]>],
        place: u64,
        scratch: &mut String,
    ) -> Result<(), IngestError> {
        for ((b, f), &t) in self.builders.iter_mut().zip(fields).zip(&self.targets) {
            let ty = &self.columns[t].ty;
            b.append_binary(*f, ty, scratch)
                .map_err(|reason| IngestError::BadFormat {
                    place: RowPlace::Line(place),
                    reason,
                })?;
        }
        self.places.push(place);
        self.rows += 1;
        if self.places.len() >= STAGE_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Fails the statement once its staged batches exceed `bytes`.
    pub fn with_limit(mut self, bytes: u64) -> RowStager {
        self.max_bytes = bytes;
        self
    }

    pub fn num_fields(&self) -> usize {
        self.targets.len()
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn place(&self, n: u64) -> RowPlace {
        if self.lines {
            RowPlace::Line(n)
        } else {
            RowPlace::Row(n)
        }
    }

    /// Adds one row; `place` is its line or row number.
    pub fn push_row<S: AsRef<str>>(
        &mut self,
        fields: &[Option<S>],
        place: u64,
    ) -> Result<(), IngestError> {
        if fields.len() > self.targets.len() {
            return Err(IngestError::ExtraColumns {
                place: self.place(place),
            });
        }
        if fields.len() < self.targets.len() {
            return Err(IngestError::MissingColumns {
                place: self.place(place),
                column: self.columns[self.targets[fields.len()]].name.clone(),
            });
        }
        for (b, f) in self.builders.iter_mut().zip(fields) {
            let StagedColumn::Text(b) = b else {
                return Err(IngestError::BadFormat {
                    place: self.place(place),
                    reason: "a text row staged for binary fields".into(),
                });
            };
            match f {
                Some(v) => b.append_value(v.as_ref()),
                None => b.append_null(),
            }
        }
        self.places.push(place);
        self.rows += 1;
        if self.places.len() >= STAGE_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Converts the staged rows into a batch.
    pub fn flush(&mut self) -> Result<(), IngestError> {
        let n = self.places.len();
        if n == 0 {
            return Ok(());
        }
        let mut arrays: Vec<Option<ArrayRef>> = vec![None; self.columns.len()];
        for (i, b) in self.builders.iter_mut().enumerate() {
            let col = &self.columns[self.targets[i]];
            arrays[self.targets[i]] = Some(match b {
                StagedColumn::Text(b) => convert_text(&b.finish(), col, &self.places, self.lines)?,
                typed => typed.finish_typed(),
            });
        }
        let mut out = Vec::with_capacity(self.columns.len());
        for (i, a) in arrays.into_iter().enumerate() {
            let col = &self.columns[i];
            let a = a.unwrap_or_else(|| new_null_array(&col.ty.to_arrow(), n));
            check_not_null(&a, col, &self.places, self.lines)?;
            out.push(crate::types::typmod::for_column(&a, &col.ty)?);
        }
        let batch = RecordBatch::try_new(self.schema.clone(), out)?;
        self.staged_bytes += batch.get_array_memory_size() as u64;
        if self.staged_bytes > self.max_bytes {
            return Err(IngestError::TooLarge {
                limit: self.max_bytes,
            });
        }
        self.batches.push(batch);
        self.places.clear();
        Ok(())
    }

    /// The batches converted so far, handed over (the limit still counts them).
    pub fn take_batches(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.batches)
    }

    /// The batches handed over so far left memory (a COPY spilled them to
    /// disk): the limit no longer counts them.
    pub fn forget_staged(&mut self) {
        self.staged_bytes = self
            .batches
            .iter()
            .map(|b| b.get_array_memory_size() as u64)
            .sum();
    }

    pub fn finish(mut self) -> Result<Vec<RecordBatch>, IngestError> {
        self.flush()?;
        Ok(self.batches)
    }
}

/// One input field's staged values: text to convert at flush, or values
/// already of the column's type (decoded from binary COPY).
enum StagedColumn {
    Text(StringBuilder),
    Boolean(BooleanBuilder),
    SmallInt(Int16Builder),
    Int(Int32Builder),
    BigInt(Int64Builder),
    Real(Float32Builder),
    Double(Float64Builder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    TimestampTz(TimestampMicrosecondBuilder),
}

impl StagedColumn {
    fn for_binary(ty: &SqlType) -> StagedColumn {
        match ty.storage() {
            SqlType::Boolean => StagedColumn::Boolean(BooleanBuilder::new()),
            SqlType::SmallInt => StagedColumn::SmallInt(Int16Builder::new()),
            SqlType::Int => StagedColumn::Int(Int32Builder::new()),
            SqlType::BigInt => StagedColumn::BigInt(Int64Builder::new()),
            SqlType::Real => StagedColumn::Real(Float32Builder::new()),
            SqlType::Double => StagedColumn::Double(Float64Builder::new()),
            SqlType::Date => StagedColumn::Date(Date32Builder::new()),
            SqlType::Timestamp => StagedColumn::Timestamp(TimestampMicrosecondBuilder::new()),
            SqlType::TimestampTz => StagedColumn::TimestampTz(TimestampMicrosecondBuilder::new()),
            // Text, jsonb, varchar (checked as text), numeric and bytea
            // (converted from their text form).
            _ => StagedColumn::Text(StringBuilder::new()),
        }
    }

    /// Appends one binary field, or says why it is not a value of `ty`.
    fn append_binary(
        &mut self,
        v: Option<&[u8]>,
        ty: &SqlType,
        scratch: &mut String,
    ) -> Result<(), String> {
        use super::binary_copy as bin;
        let Some(v) = v else {
            match self {
                StagedColumn::Text(b) => b.append_null(),
                StagedColumn::Boolean(b) => b.append_null(),
                StagedColumn::SmallInt(b) => b.append_null(),
                StagedColumn::Int(b) => b.append_null(),
                StagedColumn::BigInt(b) => b.append_null(),
                StagedColumn::Real(b) => b.append_null(),
                StagedColumn::Double(b) => b.append_null(),
                StagedColumn::Date(b) => b.append_null(),
                StagedColumn::Timestamp(b) | StagedColumn::TimestampTz(b) => b.append_null(),
            }
            return Ok(());
        };
        match self {
            StagedColumn::Text(b) => match bin::text_in_place(v, ty) {
                Some(text) => b.append_value(text?),
                None => {
                    scratch.clear();
                    bin::field_text_into(v, ty, scratch)?;
                    b.append_value(scratch.as_str());
                }
            },
            StagedColumn::Boolean(b) => b.append_value(bin::fixed::<1>(v, "boolean")?[0] != 0),
            StagedColumn::SmallInt(b) => {
                b.append_value(i16::from_be_bytes(bin::fixed(v, "smallint")?))
            }
            StagedColumn::Int(b) => b.append_value(i32::from_be_bytes(bin::fixed(v, "integer")?)),
            StagedColumn::BigInt(b) => b.append_value(i64::from_be_bytes(bin::fixed(v, "bigint")?)),
            StagedColumn::Real(b) => b.append_value(f32::from_be_bytes(bin::fixed(v, "real")?)),
            StagedColumn::Double(b) => b.append_value(f64::from_be_bytes(bin::fixed(v, "double")?)),
            StagedColumn::Date(b) => b.append_value(bin::unix_days(v)?),
            StagedColumn::Timestamp(b) | StagedColumn::TimestampTz(b) => {
                b.append_value(bin::unix_micros(v)?)
            }
        }
        Ok(())
    }

    /// The typed values staged so far (not for text).
    fn finish_typed(&mut self) -> ArrayRef {
        match self {
            StagedColumn::Text(b) => Arc::new(b.finish()),
            StagedColumn::Boolean(b) => Arc::new(b.finish()),
            StagedColumn::SmallInt(b) => Arc::new(b.finish()),
            StagedColumn::Int(b) => Arc::new(b.finish()),
            StagedColumn::BigInt(b) => Arc::new(b.finish()),
            StagedColumn::Real(b) => Arc::new(b.finish()),
            StagedColumn::Double(b) => Arc::new(b.finish()),
            StagedColumn::Date(b) => Arc::new(b.finish()),
            StagedColumn::Timestamp(b) => Arc::new(b.finish()),
            StagedColumn::TimestampTz(b) => Arc::new(b.finish().with_timezone("+00:00")),
        }
    }
}

/// Table column indexes for a statement's column list (empty: all).
/// The columns an INSERT without a column list writes: as many of the
/// table's first columns as its rows have values, as PostgreSQL reads
/// `INSERT INTO t VALUES (1)` (the others take their default). Empty (every
/// column) when the rows have a value for each, or more (an error later).
pub fn implicit_insert_columns(table: &TableDef, width: usize) -> Vec<String> {
    match width < table.columns.len() {
        true => table.columns[..width]
            .iter()
            .map(|c| c.name.clone())
            .collect(),
        false => Vec::new(),
    }
}

pub fn resolve_columns(table: &TableDef, columns: &[String]) -> Result<Vec<usize>, IngestError> {
    if columns.is_empty() {
        return Ok((0..table.columns.len()).collect());
    }
    let mut out = Vec::with_capacity(columns.len());
    for c in columns {
        let i = table
            .column_index(c)
            .ok_or_else(|| IngestError::UndefinedColumn(c.clone()))?;
        if out.contains(&i) {
            return Err(IngestError::DuplicateColumn(c.clone()));
        }
        out.push(i);
    }
    Ok(out)
}

fn place(places: &[u64], lines: bool, i: usize) -> RowPlace {
    let n = places.get(i).copied().unwrap_or(i as u64 + 1);
    if lines {
        RowPlace::Line(n)
    } else {
        RowPlace::Row(n)
    }
}

fn check_not_null(
    a: &ArrayRef,
    col: &ColumnDef,
    places: &[u64],
    lines: bool,
) -> Result<(), IngestError> {
    if col.nullable || a.null_count() == 0 {
        return Ok(());
    }
    let i = (0..a.len()).find(|&i| a.is_null(i)).unwrap_or(0);
    Err(IngestError::NotNull {
        place: place(places, lines, i),
        column: col.name.clone(),
    })
}

/// Converts a column of text values to the column's type, naming the first
/// value that does not convert.
fn convert_text(
    text: &StringArray,
    col: &ColumnDef,
    places: &[u64],
    lines: bool,
) -> Result<ArrayRef, IngestError> {
    let invalid = |i: usize| IngestError::InvalidText {
        ty: col.ty.pg_name(),
        value: text.value(i).to_string(),
        place: place(places, lines, i),
        column: col.name.clone(),
    };
    match col.ty.storage() {
        SqlType::Text | SqlType::Varchar { .. } | SqlType::Char { .. } | SqlType::Jsonb => {
            let a: ArrayRef = Arc::new(text.clone());
            check_text(&a, col, places, lines)
        }
        SqlType::Array(element) => {
            // Each value's elements, converted as a column of the element
            // type (each at the place of the value it is in).
            let mut offsets = Vec::with_capacity(text.len() + 1);
            offsets.push(0i32);
            let mut items = arrow::array::StringBuilder::new();
            let mut item_places = Vec::new();
            for i in 0..text.len() {
                if text.is_valid(i) {
                    let parsed =
                        crate::types::text::array_items(text.value(i)).ok_or_else(|| {
                            IngestError::MalformedArray {
                                value: text.value(i).to_string(),
                                place: place(places, lines, i),
                                column: col.name.clone(),
                            }
                        })?;
                    for item in parsed {
                        items.append_option(item);
                        item_places.push(places.get(i).copied().unwrap_or(i as u64 + 1));
                    }
                }
                offsets.push(
                    i32::try_from(arrow::array::ArrayBuilder::len(&items))
                        .map_err(|_| invalid(i))?,
                );
            }
            let element_col = ColumnDef {
                name: col.name.clone(),
                ty: element.as_ref().clone(),
                nullable: true,
            };
            let values = convert_text(&items.finish(), &element_col, &item_places, lines)?;
            let nulls = arrow::buffer::NullBuffer::from(
                (0..text.len())
                    .map(|i| text.is_valid(i))
                    .collect::<Vec<_>>(),
            );
            Ok(Arc::new(arrow::array::ListArray::try_new(
                Arc::new(element.element_field()),
                arrow::buffer::OffsetBuffer::new(offsets.into()),
                values,
                Some(nulls),
            )?))
        }
        SqlType::Bytea => {
            let mut b = BinaryBuilder::with_capacity(text.len(), text.value_data().len());
            for i in 0..text.len() {
                if text.is_null(i) {
                    b.append_null();
                } else {
                    b.append_value(parse_bytea(text.value(i)).ok_or_else(|| invalid(i))?);
                }
            }
            Ok(Arc::new(b.finish()))
        }
        SqlType::Real | SqlType::Double | SqlType::Numeric { .. } => {
            use crate::types::number_text::{parse_float4, parse_float8, parse_numeric};
            let bad = |i: usize, error| IngestError::Number {
                error,
                place: place(places, lines, i),
                column: col.name.clone(),
            };
            let valid = |i: usize| text.is_valid(i).then(|| text.value(i));
            Ok(match &col.ty {
                SqlType::Real => Arc::new(
                    (0..text.len())
                        .map(|i| {
                            valid(i)
                                .map(parse_float4)
                                .transpose()
                                .map_err(|e| bad(i, e))
                        })
                        .collect::<Result<arrow::array::Float32Array, _>>()?,
                ),
                SqlType::Double => Arc::new(
                    (0..text.len())
                        .map(|i| {
                            valid(i)
                                .map(parse_float8)
                                .transpose()
                                .map_err(|e| bad(i, e))
                        })
                        .collect::<Result<arrow::array::Float64Array, _>>()?,
                ),
                ty => {
                    let arrow::datatypes::DataType::Decimal128(precision, scale) = ty.to_arrow()
                    else {
                        return Err(IngestError::Internal(format!("{ty:?} is not a decimal")));
                    };
                    let unconstrained = matches!(
                        ty,
                        SqlType::Numeric {
                            unconstrained: true,
                            ..
                        }
                    );
                    let values = (0..text.len())
                        .map(|i| {
                            valid(i)
                                .map(|v| parse_numeric(v, precision, scale))
                                .transpose()
                                .map_err(|e| match unconstrained {
                                    true => crate::types::number_text::unconstrained_overflow(e),
                                    false => e,
                                })
                                .map_err(|e| bad(i, e))
                        })
                        .collect::<Result<arrow::array::Decimal128Array, _>>()?;
                    Arc::new(values.with_precision_and_scale(precision, scale)?)
                }
            })
        }
        SqlType::Interval => {
            let mut out = Vec::with_capacity(text.len());
            for i in 0..text.len() {
                out.push(match text.is_valid(i) {
                    true => Some(
                        crate::types::interval::parse_interval(text.value(i))
                            .map_err(|_| invalid(i))?
                            .to_arrow(),
                    ),
                    false => None,
                });
            }
            Ok(Arc::new(arrow::array::IntervalMonthDayNanoArray::from(out)))
        }
        SqlType::Time => {
            let mut out = Vec::with_capacity(text.len());
            for i in 0..text.len() {
                out.push(match text.is_valid(i) {
                    true => Some(
                        crate::types::datetime::parse_time(text.value(i))
                            .map_err(|_| invalid(i))?,
                    ),
                    false => None,
                });
            }
            Ok(Arc::new(arrow::array::Time64MicrosecondArray::from(out)))
        }
        SqlType::Date | SqlType::Timestamp | SqlType::TimestampTz => {
            let fast = if col.ty.is_timestamp() {
                fast_timestamps(text)
            } else {
                None
            };
            let bad = |i: usize, error| IngestError::DateTime {
                error,
                place: place(places, lines, i),
                column: col.name.clone(),
            };
            Ok(match col.ty.storage() {
                SqlType::Date => {
                    let mut out = Vec::with_capacity(text.len());
                    for i in 0..text.len() {
                        out.push(match text.is_valid(i) {
                            true => Some(parse_date(text.value(i)).map_err(|e| bad(i, e))?),
                            false => None,
                        });
                    }
                    Arc::new(Date32Array::from(out))
                }
                ty => {
                    let zone = *ty == SqlType::TimestampTz;
                    let values = match fast {
                        Some(values) => values,
                        None => {
                            let mut out = Vec::with_capacity(text.len());
                            for i in 0..text.len() {
                                out.push(match text.is_valid(i) {
                                    true => parse_timestamp(text.value(i), zone)
                                        .map_err(|e| bad(i, e))?,
                                    false => 0,
                                });
                            }
                            out
                        }
                    };
                    let array =
                        TimestampMicrosecondArray::new(values.into(), text.nulls().cloned());
                    match zone {
                        true => Arc::new(array.with_timezone("+00:00")),
                        false => Arc::new(array),
                    }
                }
            })
        }
        ty => {
            let options = CastOptions {
                safe: true,
                ..Default::default()
            };
            let out = cast_with_options(text, &ty.to_arrow(), &options)?;
            if out.null_count() != text.null_count() {
                let i = (0..text.len())
                    .find(|&i| text.is_valid(i) && out.is_null(i))
                    .unwrap_or(0);
                let v = text.value(i).trim();
                let numeric = !v.is_empty()
                    && v.trim_start_matches(['-', '+'])
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '.');
                if numeric
                    && !matches!(
                        ty,
                        SqlType::Date
                            | SqlType::Timestamp
                            | SqlType::TimestampTz
                            | SqlType::Boolean
                    )
                {
                    return Err(IngestError::OutOfRange {
                        ty: ty.pg_name(),
                        value: text.value(i).to_string(),
                        place: place(places, lines, i),
                        column: col.name.clone(),
                    });
                }
                return Err(invalid(i));
            }
            Ok(out)
        }
    }
}

/// Parses a column of `YYYY-MM-DD HH:MM:SS[.ffffff]` (the form PostgreSQL
/// itself prints) into microseconds since the epoch, or `None` when any value
/// has another form, in which case the general parser handles the column.
fn fast_timestamps(text: &StringArray) -> Option<Vec<i64>> {
    let mut out = Vec::with_capacity(text.len());
    for i in 0..text.len() {
        if text.is_null(i) {
            out.push(0);
        } else {
            out.push(parse_timestamp_us(text.value(i).as_bytes())?);
        }
    }
    Some(out)
}

fn parse_timestamp_us(b: &[u8]) -> Option<i64> {
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || (b[10] != b' ' && b[10] != b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + (c - b'0') as i64)
        })
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo)
        || d < 1
        || d > days_in_month(y, mo as u32) as i64
        || h > 23
        || mi > 59
        || s > 59
    {
        return None;
    }
    let mut micros = 0i64;
    if b.len() > 19 {
        if b[19] != b'.' || b.len() == 20 || b.len() > 26 {
            return None;
        }
        let frac = num(20..b.len())?;
        micros = frac * 10i64.pow((26 - b.len()) as u32);
    }
    let days = days_from_civil(y, mo as u32, d as u32);
    Some(((days * 86_400 + h * 3600 + mi * 60 + s) * 1_000_000) + micros)
}

/// Checks VARCHAR lengths and JSON validity of a text column; JSONB
/// values become their canonical text (`types::json`).
fn check_text(
    a: &ArrayRef,
    col: &ColumnDef,
    places: &[u64],
    lines: bool,
) -> Result<ArrayRef, IngestError> {
    let Some(s) = a.as_any().downcast_ref::<StringArray>() else {
        return Ok(a.clone());
    };
    match &col.ty {
        SqlType::Char { len } => {
            // Padded to the length; a longer value may lose only spaces.
            let n = *len as usize;
            let mut out = StringBuilder::with_capacity(s.len(), s.value_data().len());
            for i in 0..s.len() {
                if s.is_null(i) {
                    out.append_null();
                    continue;
                }
                let v = s.value(i);
                let count = v.chars().count();
                if count > n {
                    let (at, _) = v.char_indices().nth(n).unwrap_or((v.len(), ' '));
                    if v[at..].chars().any(|c| c != ' ') {
                        return Err(IngestError::TooLong {
                            ty: "character",
                            max: *len,
                            place: place(places, lines, i),
                            column: col.name.clone(),
                        });
                    }
                    out.append_value(&v[..at]);
                } else {
                    let mut padded = String::with_capacity(v.len() + n - count);
                    padded.push_str(v);
                    padded.extend(std::iter::repeat_n(' ', n - count));
                    out.append_value(padded);
                }
            }
            Ok(Arc::new(out.finish()))
        }
        SqlType::Varchar { max_len: Some(max) } => {
            for i in 0..s.len() {
                if s.is_valid(i) && s.value(i).chars().count() > *max as usize {
                    return Err(IngestError::TooLong {
                        ty: "character varying",
                        max: *max,
                        place: place(places, lines, i),
                        column: col.name.clone(),
                    });
                }
            }
            Ok(a.clone())
        }
        SqlType::Jsonb => {
            let mut out = StringBuilder::with_capacity(s.len(), s.value_data().len());
            for i in 0..s.len() {
                if s.is_null(i) {
                    out.append_null();
                    continue;
                }
                match crate::types::json::jsonb_text(s.value(i)) {
                    Ok(text) => out.append_value(text),
                    Err(_) => {
                        return Err(IngestError::InvalidText {
                            ty: "json".into(),
                            value: s.value(i).to_string(),
                            place: place(places, lines, i),
                            column: col.name.clone(),
                        })
                    }
                }
            }
            Ok(Arc::new(out.finish()))
        }
        _ => Ok(a.clone()),
    }
}

/// Shapes a batch planned by DataFusion (an `INSERT ... SELECT` or an
/// `INSERT` with parameters) into the table's data schema and validates it.
/// `first_row` numbers the batch's rows within the statement.
pub fn conform_batch(
    table: &TableDef,
    batch: &RecordBatch,
    first_row: u64,
) -> Result<RecordBatch, IngestError> {
    let n = batch.num_rows();
    let places: Vec<u64> = (0..n as u64).map(|i| first_row + i).collect();
    let mut out = Vec::with_capacity(table.columns.len());
    for col in &table.columns {
        let target = col.ty.to_arrow();
        let a = match batch.schema().index_of(&col.name) {
            Ok(i) => {
                let a = batch.column(i);
                if a.data_type() == &target {
                    a.clone()
                } else {
                    cast_with_options(
                        a,
                        &target,
                        &CastOptions {
                            safe: false,
                            ..Default::default()
                        },
                    )
                    .map_err(|e| IngestError::InvalidText {
                        ty: col.ty.pg_name(),
                        value: e.to_string(),
                        place: RowPlace::Row(first_row),
                        column: col.name.clone(),
                    })?
                }
            }
            Err(_) => new_null_array(&target, n),
        };
        check_not_null(&a, col, &places, false)?;
        let a = match &col.ty {
            SqlType::Array(element) => checked_elements(&a, col, element, &places)?,
            _ => a,
        };
        let a = check_text(&a, col, &places, false)?;
        out.push(crate::types::typmod::for_column(&a, &col.ty)?);
    }
    Ok(RecordBatch::try_new(table.data_schema(), out)?)
}

/// An array column's lists with the column's element field (a cast keeps
/// no field metadata, which says `jsonb` or `varchar(5)`), their elements
/// checked as values of the element type are.
fn checked_elements(
    a: &ArrayRef,
    col: &ColumnDef,
    element: &SqlType,
    places: &[u64],
) -> Result<ArrayRef, IngestError> {
    let Some(list) = a.as_any().downcast_ref::<arrow::array::ListArray>() else {
        return Ok(a.clone());
    };
    // The place of each element is its row's.
    let offsets = list.value_offsets();
    let mut element_places = Vec::with_capacity(list.values().len());
    for (row, w) in offsets.windows(2).enumerate() {
        let at = places.get(row).copied().unwrap_or(row as u64 + 1);
        element_places.extend(std::iter::repeat_n(at, (w[1] - w[0]).max(0) as usize));
    }
    let element_col = ColumnDef {
        name: col.name.clone(),
        ty: element.clone(),
        nullable: true,
    };
    // Only the elements the lists use (a sliced list keeps the others).
    let first = offsets.first().copied().unwrap_or(0).max(0) as usize;
    let last = offsets.last().copied().unwrap_or(0).max(0) as usize;
    let values = list.values().slice(first, last - first);
    let values = check_text(&values, &element_col, &element_places, false)?;
    let rebased: Vec<i32> = offsets.iter().map(|o| o - first as i32).collect();
    Ok(Arc::new(arrow::array::ListArray::try_new(
        Arc::new(element.element_field()),
        arrow::buffer::OffsetBuffer::new(rebased.into()),
        values,
        list.nulls().cloned(),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_catalog::TableOptions;

    fn table() -> TableDef {
        let col = |name: &str, ty: SqlType, nullable: bool| ColumnDef {
            name: name.into(),
            ty,
            nullable,
        };
        TableDef {
            id: 1,
            name: "t".into(),
            columns: vec![
                col("id", SqlType::BigInt, false),
                col("name", SqlType::Varchar { max_len: Some(3) }, true),
                col("doc", SqlType::Jsonb, true),
                col("at", SqlType::Timestamp, true),
                col("raw", SqlType::Bytea, true),
            ],
            options: TableOptions::default(),
        }
    }

    #[test]
    fn converts_and_validates() {
        let t = table();
        let mut s = RowStager::new(&t, &[], true).unwrap();
        s.push_row(
            &[
                Some("1"),
                Some("abc"),
                Some("{\"a\":1}"),
                Some("2024-01-02 03:04:05"),
                Some("\\x0aff"),
            ],
            1,
        )
        .unwrap();
        s.push_row(&[Some("2"), None, None, None, None::<&str>], 2)
            .unwrap();
        let b = s.finish().unwrap();
        assert_eq!(b[0].num_rows(), 2);

        let bad = |row: [Option<&str>; 5]| {
            let mut s = RowStager::new(&t, &[], true).unwrap();
            s.push_row(&[Some("1"), None, None, None, None], 1).unwrap();
            s.push_row(&row, 7).unwrap();
            s.finish().unwrap_err()
        };
        let e = bad([Some("x"), None, None, None, None]);
        assert_eq!(e.sqlstate(), "22P02");
        assert!(e.to_string().contains("line 7, column id"), "{e}");
        assert_eq!(bad([None, None, None, None, None]).sqlstate(), "23502");
        assert_eq!(
            bad([Some("1"), Some("abcd"), None, None, None]).sqlstate(),
            "22001"
        );
        assert_eq!(
            bad([Some("1"), None, Some("{"), None, None]).sqlstate(),
            "22P02"
        );
        assert_eq!(
            bad([Some("99999999999999999999"), None, None, None, None]).sqlstate(),
            "22003"
        );
    }

    #[test]
    fn fast_timestamp_path_agrees_with_arrow() {
        use arrow::compute::cast;
        use arrow::datatypes::{DataType, TimeUnit};
        let values = [
            "2024-02-29 12:34:56",
            "1969-12-31 23:59:59.5",
            "2000-01-01T00:00:00.000001",
            "1900-03-01 00:00:00.123456",
            "2100-12-31 23:59:59",
        ];
        let text = StringArray::from(values.to_vec());
        let fast = fast_timestamps(&text).unwrap();
        let slow = cast(&text, &DataType::Timestamp(TimeUnit::Microsecond, None)).unwrap();
        let slow = slow
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(fast, slow.values().to_vec());
        for bad in [
            "2024-02-30 00:00:00",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00:00+02",
            "2024-01-01",
        ] {
            assert!(parse_timestamp_us(bad.as_bytes()).is_none(), "{bad}");
        }
    }

    #[test]
    fn statements_past_the_limit_fail() {
        let t = table();
        let mut s = RowStager::new(&t, &["id".into()], true)
            .unwrap()
            .with_limit(1000);
        for i in 0..10_000u64 {
            s.push_row(&[Some(i.to_string())], i + 1).unwrap();
        }
        assert_eq!(s.finish().unwrap_err().sqlstate(), "54000");
    }

    #[test]
    fn column_lists_fill_nulls_and_check_counts() {
        let t = table();
        let mut s = RowStager::new(&t, &["id".into()], false).unwrap();
        assert!(matches!(
            s.push_row(&[Some("1"), Some("2")], 1),
            Err(IngestError::ExtraColumns { .. })
        ));
        s.push_row(&[Some("5")], 1).unwrap();
        let b = s.finish().unwrap();
        assert_eq!(b[0].column(1).null_count(), 1);
        assert!(matches!(
            RowStager::new(&t, &["nope".into()], false),
            Err(IngestError::UndefinedColumn(_))
        ));
        let mut s = RowStager::new(&t, &["name".into()], false).unwrap();
        s.push_row(&[Some("a")], 1).unwrap();
        assert_eq!(s.finish().unwrap_err().sqlstate(), "23502");
    }
}
