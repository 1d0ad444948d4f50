//! Values as PostgreSQL's output functions write them: what a client
//! reads in text format, and what `CAST(x AS TEXT)` gives (the same but
//! for booleans, which cast to `true`/`false` and print as `t`/`f`).

use std::fmt::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, IntervalMonthDayNanoType, IntervalUnit, Time64MicrosecondType, TimeUnit,
    TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::error::ArrowError;

use super::datetime::{write_clock, write_date, write_timestamp};
use super::interval::{write_interval, Interval};
use super::pg_type::{oid, PgType};

/// Whether the text is what the wire sends or what a cast to text gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFor {
    Output,
    Cast,
}

/// Each value of `array` as PostgreSQL's text; NULL stays NULL.
pub fn array_text(
    array: &ArrayRef,
    field: &Field,
    purpose: TextFor,
) -> Result<ArrayRef, ArrowError> {
    if array.data_type().is_null() {
        return Ok(arrow::array::new_null_array(&DataType::Utf8, array.len()));
    }
    let mut out = StringBuilder::with_capacity(array.len(), array.len() * 8);
    let mut text = String::new();
    let writer = ValueWriter::new(array, field, purpose)?;
    for i in 0..array.len() {
        if array.is_null(i) {
            out.append_null();
        } else {
            text.clear();
            writer.write(i, &mut text);
            out.append_value(&text);
        }
    }
    Ok(Arc::new(out.finish()))
}

/// Whether [`array_text`] writes this type differently from Arrow's own
/// cast to a string (the wire and casts must then go through it).
pub fn needs_postgres_text(data_type: &DataType) -> bool {
    !matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Null
    )
}

/// Writes one value of an array at a time.
pub struct ValueWriter<'a> {
    array: &'a ArrayRef,
    purpose: TextFor,
    /// The element writer of a list.
    element: Option<Box<ValueWriter<'a>>>,
    /// The field writers of a struct.
    fields: Vec<ValueWriter<'a>>,
    /// An unconstrained `numeric`: its trailing fractional zeros are not
    /// shown (see `types::pg_type`).
    trim_zeros: bool,
    /// A `regtype`: an oid shown as the type's name.
    regtype: bool,
    /// An `int2vector` or `oidvector`: elements apart by spaces, no braces.
    vector: bool,
}

impl<'a> ValueWriter<'a> {
    pub fn new(array: &'a ArrayRef, field: &Field, purpose: TextFor) -> Result<Self, ArrowError> {
        let element = match array.data_type() {
            // Elements print in their output form, whatever the purpose.
            DataType::List(f) => Some(Box::new(ValueWriter::new(
                array.as_list::<i32>().values(),
                f,
                TextFor::Output,
            )?)),
            DataType::LargeList(f) => Some(Box::new(ValueWriter::new(
                array.as_list::<i64>().values(),
                f,
                TextFor::Output,
            )?)),
            _ => None,
        };
        let fields = match array.data_type() {
            DataType::Struct(fs) => {
                let s = array.as_struct();
                s.columns()
                    .iter()
                    .zip(fs.iter())
                    .map(|(c, f)| ValueWriter::new(c, f, purpose))
                    .collect::<Result<Vec<_>, _>>()?
            }
            _ => Vec::new(),
        };
        let trim_zeros = matches!(array.data_type(), DataType::Decimal128(..))
            && PgType::of_field(field) == PgType::plain(oid::NUMERIC)
            && field
                .metadata()
                .get(super::pg_type::SQL_TYPE_METADATA_KEY)
                .is_some_and(|d| d == "numeric");
        let regtype = array.data_type().is_integer() && PgType::of_field(field).oid == oid::REGTYPE;
        let vector = matches!(
            PgType::of_field(field).oid,
            oid::INT2VECTOR | oid::OIDVECTOR
        );
        Ok(ValueWriter {
            vector,
            array,
            purpose,
            element,
            fields,
            trim_zeros,
            regtype,
        })
    }

    /// The text of the value at `i` (not NULL).
    pub fn write(&self, i: usize, out: &mut String) {
        let a = self.array;
        if self.regtype {
            let v = arrow::compute::cast(&a.slice(i, 1), &DataType::UInt32)
                .ok()
                .and_then(|v| {
                    let v = v.as_primitive::<UInt32Type>();
                    v.is_valid(0).then(|| v.value(0))
                });
            if let Some(oid) = v {
                out.push_str(&PgType::plain(oid).format());
                return;
            }
        }
        match a.data_type() {
            DataType::Boolean => out.push_str(match (a.as_boolean().value(i), self.purpose) {
                (true, TextFor::Output) => "t",
                (false, TextFor::Output) => "f",
                (true, TextFor::Cast) => "true",
                (false, TextFor::Cast) => "false",
            }),
            DataType::Int8 => push_display(out, a.as_primitive::<Int8Type>().value(i)),
            DataType::Int16 => push_display(out, a.as_primitive::<Int16Type>().value(i)),
            DataType::Int32 => push_display(out, a.as_primitive::<Int32Type>().value(i)),
            DataType::Int64 => push_display(out, a.as_primitive::<Int64Type>().value(i)),
            DataType::UInt8 => push_display(out, a.as_primitive::<UInt8Type>().value(i)),
            DataType::UInt16 => push_display(out, a.as_primitive::<UInt16Type>().value(i)),
            DataType::UInt32 => push_display(out, a.as_primitive::<UInt32Type>().value(i)),
            DataType::UInt64 => push_display(out, a.as_primitive::<UInt64Type>().value(i)),
            DataType::Float32 => write_float(a.as_primitive::<Float32Type>().value(i), 6, out),
            DataType::Float64 => write_float(a.as_primitive::<Float64Type>().value(i), 15, out),
            DataType::Decimal128(_, scale) => {
                let v = a.as_primitive::<Decimal128Type>().value(i);
                write_decimal(v, *scale, out);
                if self.trim_zeros && out.contains('.') {
                    while out.ends_with('0') {
                        out.pop();
                    }
                    if out.ends_with('.') {
                        out.pop();
                    }
                }
            }
            DataType::Utf8 => out.push_str(a.as_string::<i32>().value(i)),
            DataType::LargeUtf8 => out.push_str(a.as_string::<i64>().value(i)),
            DataType::Utf8View => out.push_str(a.as_string_view().value(i)),
            DataType::Binary => write_bytea(a.as_binary::<i32>().value(i), out),
            DataType::LargeBinary => write_bytea(a.as_binary::<i64>().value(i), out),
            DataType::BinaryView => write_bytea(a.as_binary_view().value(i), out),
            DataType::Date32 => write_date(a.as_primitive::<Date32Type>().value(i), out),
            DataType::Timestamp(unit, tz) => {
                let v = match unit {
                    TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(i),
                    TimeUnit::Second => a
                        .as_primitive::<arrow::datatypes::TimestampSecondType>()
                        .value(i)
                        .saturating_mul(1_000_000),
                    TimeUnit::Millisecond => a
                        .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                        .value(i)
                        .saturating_mul(1000),
                    TimeUnit::Nanosecond => a
                        .as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                        .value(i)
                        .div_euclid(1000),
                };
                write_timestamp(v, tz.is_some(), out)
            }
            DataType::Time64(TimeUnit::Microsecond) => {
                write_clock(a.as_primitive::<Time64MicrosecondType>().value(i), out)
            }
            DataType::Time64(TimeUnit::Nanosecond) => write_clock(
                a.as_primitive::<arrow::datatypes::Time64NanosecondType>()
                    .value(i)
                    / 1000,
                out,
            ),
            DataType::Interval(IntervalUnit::MonthDayNano) => write_interval(
                Interval::from_arrow(a.as_primitive::<IntervalMonthDayNanoType>().value(i)),
                out,
            ),
            DataType::Duration(TimeUnit::Microsecond) => write_interval(
                Interval {
                    months: 0,
                    days: 0,
                    micros: a
                        .as_primitive::<arrow::datatypes::DurationMicrosecondType>()
                        .value(i),
                }
                .justify_hours(),
                out,
            ),
            DataType::List(_) | DataType::LargeList(_) => self.write_list(i, out),
            DataType::Struct(_) => self.write_record(i, out),
            _ => {
                // Types Sluice's values do not have: Arrow's display.
                let options = arrow::util::display::FormatOptions::default();
                if let Ok(f) = arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &options) {
                    let _ = write!(out, "{}", f.value(i));
                }
            }
        }
    }

    /// `{1,2,NULL}`, `{"a b",c}`: PostgreSQL's array text.
    fn write_list(&self, i: usize, out: &mut String) {
        let Some(element) = &self.element else {
            return;
        };
        let (start, end) = match self.array.data_type() {
            DataType::List(_) => {
                let o = self.array.as_list::<i32>().value_offsets();
                (o[i] as usize, o[i + 1] as usize)
            }
            _ => {
                let o = self.array.as_list::<i64>().value_offsets();
                (o[i] as usize, o[i + 1] as usize)
            }
        };
        if self.vector {
            for j in start..end {
                if j > start {
                    out.push(' ');
                }
                element.write(j, out);
            }
            return;
        }
        out.push('{');
        let mut value = String::new();
        for j in start..end {
            if j > start {
                out.push(',');
            }
            if element.array.is_null(j) {
                out.push_str("NULL");
                continue;
            }
            value.clear();
            element.write(j, &mut value);
            // A nested array's text is not quoted.
            if element.element.is_some() {
                out.push_str(&value);
            } else {
                push_quoted_element(&value, out);
            }
        }
        out.push('}');
    }

    /// `(1,x)`: a record's text.
    fn write_record(&self, i: usize, out: &mut String) {
        out.push('(');
        let mut value = String::new();
        for (k, f) in self.fields.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            if f.array.is_null(i) {
                continue;
            }
            value.clear();
            f.write(i, &mut value);
            let quote = value.is_empty()
                || value
                    .chars()
                    .any(|c| matches!(c, '"' | '\\' | '(' | ')' | ',') || c.is_whitespace());
            if quote {
                out.push('"');
                for c in value.chars() {
                    if c == '"' || c == '\\' {
                        out.push(c);
                    }
                    out.push(c);
                }
                out.push('"');
            } else {
                out.push_str(&value);
            }
        }
        out.push(')');
    }
}

/// One element of an array literal, quoted and escaped where PostgreSQL's
/// array output quotes it (empty, `NULL`, or with `"`, `\\`, braces, a comma
/// or white space).
pub fn push_quoted_element(value: &str, out: &mut String) {
    let quote = value.is_empty()
        || value.eq_ignore_ascii_case("null")
        || value
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '{' | '}' | ',') || c.is_whitespace());
    if !quote {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn push_display(out: &mut String, v: impl std::fmt::Display) {
    let _ = write!(out, "{v}");
}

/// A decimal of `scale` digits after the point, every one of them shown.
pub fn write_decimal(v: i128, scale: i8, out: &mut String) {
    if scale <= 0 {
        let _ = write!(out, "{v}");
        for _ in 0..(-scale) {
            out.push('0');
        }
        return;
    }
    let digits = v.unsigned_abs().to_string();
    let scale = scale as usize;
    if v < 0 {
        out.push('-');
    }
    if digits.len() <= scale {
        out.push_str("0.");
        for _ in 0..scale - digits.len() {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    }
}

/// `\x0102`: bytea's hex output.
pub fn write_bytea(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(2 + bytes.len() * 2);
    out.push_str("\\x");
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
}

/// Floats as PostgreSQL prints them (`extra_float_digits = 1`, its
/// default): the shortest text that reads back the same value, in
/// exponent form (`1e+20`, `1.5e-07`) when the decimal exponent is below
/// -4 or at least 15 (6 for `real`); `Infinity`, `-Infinity`, `NaN`.
pub fn write_float<F>(v: F, digits_limit: i32, out: &mut String)
where
    F: std::fmt::Display + std::fmt::LowerExp + Into<f64> + Copy,
{
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

/// PostgreSQL's bytea input: `\x` hex, or the escape format with `\\` and
/// `\ooo`.
pub fn parse_bytea(s: &str) -> Option<Vec<u8>> {
    if let Some(hex) = s.strip_prefix("\\x") {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return None;
        }
        return digits
            .chunks(2)
            .map(|p| {
                let h = (p[0] as char).to_digit(16)?;
                let l = (p[1] as char).to_digit(16)?;
                Some((h * 16 + l) as u8)
            })
            .collect();
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let oct = b.get(i + 1..i + 4)?;
            if !oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                return None;
            }
            out.push(
                ((oct[0] - b'0') as u32 * 64 + (oct[1] - b'0') as u32 * 8 + (oct[2] - b'0') as u32)
                    as u8,
            );
            i += 4;
        }
    }
    Some(out)
}

/// The elements of a one-dimensional PostgreSQL array literal, None for
/// an unquoted NULL (a quoted `"NULL"` is the text NULL); None when
/// malformed.
pub fn array_items(text: &str) -> Option<Vec<Option<String>>> {
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut item = String::new();
        let quoted = chars.next_if_eq(&'"').is_some();
        if quoted {
            loop {
                match chars.next() {
                    Some('\\') => item.extend(chars.next()),
                    Some('"') => break,
                    Some(c) => item.push(c),
                    None => return None,
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                if c == '{' || c == '"' {
                    // A nested array or a stray quote: one dimension here.
                    return None;
                }
                item.push(c);
            }
            item = item.trim().to_string();
        }
        out.push((quoted || !item.eq_ignore_ascii_case("null")).then_some(item));
        match chars.next() {
            Some(',') | None => {}
            Some(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Decimal128Array, Int32Array, ListArray};

    fn text(a: ArrayRef, purpose: TextFor) -> Vec<Option<String>> {
        let f = Field::new("c", a.data_type().clone(), true);
        let t = array_text(&a, &f, purpose).unwrap();
        t.as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_string))
            .collect()
    }

    #[test]
    fn values_print_as_postgresql_prints_them() {
        let b: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)]));
        assert_eq!(
            text(b.clone(), TextFor::Output),
            vec![Some("t".into()), None, Some("f".into())]
        );
        assert_eq!(text(b, TextFor::Cast)[0].as_deref(), Some("true"));
        let d: ArrayRef = Arc::new(
            Decimal128Array::from(vec![2500, -99999, 5, 0])
                .with_precision_and_scale(12, 3)
                .unwrap(),
        );
        assert_eq!(
            text(d, TextFor::Output),
            vec![
                Some("2.500".into()),
                Some("-99.999".into()),
                Some("0.005".into()),
                Some("0.000".into())
            ]
        );
        let l: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None, Some(3)]),
            Some(vec![]),
        ]));
        assert_eq!(
            text(l, TextFor::Output),
            vec![Some("{1,NULL,3}".into()), Some("{}".into())]
        );
        let i: ArrayRef = Arc::new(Int32Array::from(vec![-5]));
        assert_eq!(text(i, TextFor::Cast)[0].as_deref(), Some("-5"));
        let mut s = String::new();
        write_bytea(&[1, 2, 255], &mut s);
        assert_eq!(s, "\\x0102ff");
        assert_eq!(parse_bytea("\\x0102").unwrap(), vec![1, 2]);
        assert_eq!(parse_bytea("a\\\\b\\001").unwrap(), b"a\\b\x01".to_vec());
    }

    #[test]
    fn floats_print_as_postgresql_does() {
        let text = |v: f64| {
            let mut s = String::new();
            write_float(v, 15, &mut s);
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
        write_float(1e6f32, 6, &mut s);
        assert_eq!(s, "1e+06");
        s.clear();
        write_float(2.5f32, 6, &mut s);
        assert_eq!(s, "2.5");
        s.clear();
        write_float(0.1f32, 6, &mut s);
        assert_eq!(s, "0.1");
    }
}
