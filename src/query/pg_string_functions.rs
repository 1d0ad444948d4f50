//! More of PostgreSQL's string functions, where DataFusion's answer
//! otherwise or are missing:
//! - `concat` and `concat_ws` write each value as PostgreSQL outputs it
//!   (`true` is `t`), skipping NULLs;
//! - `quote_ident` quotes a name that needs it (`"XyZ"`);
//! - `encode` and `decode` of `base64` (padded, lines of 76 characters),
//!   `hex` and `escape`;
//! - `regexp_match` gives NULL for a group that took part in no match,
//!   and `regexp_substr` (PostgreSQL 15) exists; both read PostgreSQL's
//!   flags (`i`, `n`, `s`, `x`, `c`), and `.` matches a newline unless `n`;
//! - `width_bucket(operand, low, high, count)` over numbers;
//! - `regexp_split_to_array`, which skips empty matches at either end and
//!   right after another match, as PostgreSQL does;
//! - `get_byte`, `set_byte` and `bit_count` of bytea.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int32Array, ListBuilder, StringArray, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Float64Type};
use base64::Engine;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use super::udf::{field_udf, pg_error, texts};
use crate::types::text::{array_text, parse_bytea, TextFor};

/// `concat(a, b, ...)` and `concat_ws(sep, a, b, ...)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Concat {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Concat {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<Vec<_>>>()?;
        let texts = arrays
            .iter()
            .zip(args.arg_fields.iter())
            .map(|(a, f)| array_text(a, f, TextFor::Output))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let texts: Vec<&StringArray> = texts.iter().map(|t| t.as_string::<i32>()).collect();
        let with_separator = self.name == "concat_ws";
        let mut out = StringBuilder::with_capacity(rows, 0);
        for row in 0..rows {
            let value = |t: &StringArray| t.is_valid(row).then(|| t.value(row).to_string());
            let (separator, values) = match with_separator {
                true => match texts.first().and_then(|t| value(t)) {
                    Some(sep) => (sep, &texts[1..]),
                    None => {
                        out.append_null();
                        continue;
                    }
                },
                false => (String::new(), &texts[..]),
            };
            let joined: Vec<String> = values.iter().filter_map(|t| value(t)).collect();
            out.append_value(joined.join(&separator));
        }
        let out: ArrayRef = Arc::new(out.finish());
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(out),
        })
    }
}

fn quote_ident(a: &[ArrayRef]) -> Result<ArrayRef> {
    let t = texts(&a[0])?;
    Ok(Arc::new(
        t.iter()
            .map(|v| v.map(super::pg_text_functions::quote_ident))
            .collect::<StringArray>(),
    ))
}

/// The format name of `encode` and `decode`, checked.
fn format_name(name: &str) -> Result<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "base64" => Ok("base64"),
        "hex" => Ok("hex"),
        "escape" => Ok("escape"),
        _ => Err(pg_error(
            "22023",
            format!("unrecognized encoding: \"{name}\""),
        )),
    }
}

/// PostgreSQL's base64 text: padded, a newline after every 76 characters.
fn base64_text(bytes: &[u8]) -> String {
    let plain = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(plain.len() + plain.len() / 76);
    for (i, c) in plain.chars().enumerate() {
        if i > 0 && i % 76 == 0 {
            out.push('\n');
        }
        out.push(c);
    }
    out
}

fn escape_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0 | 0x80..=0xff => out.push_str(&format!("\\{b:03o}")),
            _ => out.push(b as char),
        }
    }
    out
}

fn encode(a: &[ArrayRef]) -> Result<ArrayRef> {
    let bytes = arrow::compute::cast(&a[0], &DataType::Binary)?;
    let bytes = bytes.as_binary::<i32>();
    let formats = texts(&a[1])?;
    let mut out = StringBuilder::new();
    for row in 0..bytes.len() {
        if bytes.is_null(row) || formats.is_null(row) {
            out.append_null();
            continue;
        }
        let b = bytes.value(row);
        out.append_value(match format_name(formats.value(row))? {
            "base64" => base64_text(b),
            "hex" => b.iter().map(|x| format!("{x:02x}")).collect(),
            _ => escape_text(b),
        });
    }
    Ok(Arc::new(out.finish()))
}

fn decode(a: &[ArrayRef]) -> Result<ArrayRef> {
    let text = texts(&a[0])?;
    let formats = texts(&a[1])?;
    let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(text.len());
    for row in 0..text.len() {
        if text.is_null(row) || formats.is_null(row) {
            out.push(None);
            continue;
        }
        let t = text.value(row);
        out.push(Some(match format_name(formats.value(row))? {
            "base64" => {
                let compact: String = t.chars().filter(|c| !c.is_whitespace()).collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|e| pg_error("22023", format!("invalid base64 input: {e}")))?
            }
            // bytea's own input reads both: `\x` then hex digits, or
            // escapes (a text starting `\x` is no escape form).
            "hex" => parse_bytea(&format!("\\x{t}"))
                .ok_or_else(|| pg_error("22023", "invalid hexadecimal data"))?,
            _ => parse_bytea(t)
                .filter(|_| !t.starts_with("\\x"))
                .ok_or_else(|| pg_error("22P02", "invalid input syntax for type bytea"))?,
        }));
    }
    Ok(Arc::new(BinaryArray::from_iter(out)))
}

/// A pattern with PostgreSQL's regular expression flags, as Rust's regex
/// reads it. PostgreSQL's `.` and `[^...]` match a newline unless `n`.
fn regex_of(pattern: &str, flags: Option<&str>, function: &str) -> Result<regex::Regex> {
    let mut builder = regex::RegexBuilder::new(pattern);
    builder.dot_matches_new_line(true);
    for f in flags.unwrap_or("").chars() {
        match f {
            'i' => {
                builder.case_insensitive(true);
            }
            'c' => {
                builder.case_insensitive(false);
            }
            'n' | 'm' => {
                builder.dot_matches_new_line(false).multi_line(true);
            }
            's' => {
                builder.dot_matches_new_line(true).multi_line(false);
            }
            'x' => {
                builder.ignore_whitespace(true);
            }
            'g' => {
                return Err(pg_error(
                    "22023",
                    format!("{function}() does not support the \"global\" option"),
                ))
            }
            other => {
                return Err(pg_error(
                    "22023",
                    format!("invalid regular expression option: \"{other}\""),
                ))
            }
        }
    }
    builder
        .build()
        .map_err(|e| pg_error("2201B", format!("invalid regular expression: {e}")))
}

/// Patterns compiled once per call where they are constant.
struct Patterns<'a> {
    patterns: &'a StringArray,
    flags: Option<&'a StringArray>,
    last: Option<(String, Option<String>, regex::Regex)>,
    function: &'static str,
}

impl Patterns<'_> {
    fn at(&mut self, row: usize) -> Result<Option<&regex::Regex>> {
        if self.patterns.is_null(row) || self.flags.is_some_and(|f| f.is_null(row)) {
            return Ok(None);
        }
        let p = self.patterns.value(row);
        let f = self.flags.map(|f| f.value(row));
        let same = self
            .last
            .as_ref()
            .is_some_and(|(lp, lf, _)| lp == p && lf.as_deref() == f);
        if !same {
            self.last = Some((
                p.to_string(),
                f.map(str::to_string),
                regex_of(p, f, self.function)?,
            ));
        }
        Ok(self.last.as_ref().map(|(_, _, r)| r))
    }
}

/// A text array per row of `(text, pattern [, flags])` arguments: `each`
/// fills a row's list from its text and compiled pattern, and says whether
/// there is one (false, having added nothing: NULL). A NULL argument gives
/// NULL.
fn regexp_lists(
    a: &[ArrayRef],
    function: &'static str,
    mut each: impl FnMut(&str, &regex::Regex, &mut StringBuilder) -> bool,
) -> Result<ArrayRef> {
    let text = texts(&a[0])?;
    let patterns = texts(&a[1])?;
    let flags = a.get(2).map(texts).transpose()?;
    let mut compiled = Patterns {
        patterns: &patterns,
        flags: flags.as_ref(),
        last: None,
        function,
    };
    let mut out = ListBuilder::new(StringBuilder::new());
    for row in 0..text.len() {
        let regex = match text.is_valid(row) {
            true => compiled.at(row)?,
            false => None,
        };
        let listed = match regex {
            Some(r) => each(text.value(row), r, out.values()),
            None => false,
        };
        out.append(listed);
    }
    Ok(Arc::new(out.finish()))
}

fn regexp_match(a: &[ArrayRef]) -> Result<ArrayRef> {
    regexp_lists(a, "regexp_match", |text, regex, out| {
        let Some(captures) = regex.captures(text) else {
            return false;
        };
        if captures.len() == 1 {
            out.append_option(captures.get(0).map(|m| m.as_str()));
        } else {
            for g in 1..captures.len() {
                out.append_option(captures.get(g).map(|m| m.as_str()));
            }
        }
        true
    })
}

/// `regexp_substr(string, pattern [, start [, n [, flags [, subexpr]]]])`.
fn regexp_substr(a: &[ArrayRef]) -> Result<ArrayRef> {
    let text = texts(&a[0])?;
    let patterns = texts(&a[1])?;
    let ints = |i: usize| -> Result<Option<Int32Array>> {
        a.get(i)
            .map(|c| {
                Ok(arrow::compute::cast(c, &DataType::Int32)?
                    .as_primitive()
                    .clone())
            })
            .transpose()
    };
    let (start, nth, subexpr) = (ints(2)?, ints(3)?, ints(5)?);
    let flags = a.get(4).map(texts).transpose()?;
    let mut compiled = Patterns {
        patterns: &patterns,
        flags: flags.as_ref(),
        last: None,
        function: "regexp_substr",
    };
    let int_at = |c: &Option<Int32Array>, row: usize, default: i32| -> Option<i32> {
        match c {
            None => Some(default),
            Some(c) => c.is_valid(row).then(|| c.value(row)),
        }
    };
    let mut out = StringBuilder::new();
    for row in 0..text.len() {
        let (Some(start), Some(n), Some(g)) = (
            int_at(&start, row, 1),
            int_at(&nth, row, 1),
            int_at(&subexpr, row, 0),
        ) else {
            out.append_null();
            continue;
        };
        if start <= 0 {
            return Err(pg_error(
                "22023",
                format!("invalid value for parameter \"start\": {start}"),
            ));
        }
        if n <= 0 {
            return Err(pg_error(
                "22023",
                format!("invalid value for parameter \"n\": {n}"),
            ));
        }
        if g < 0 {
            return Err(pg_error(
                "22023",
                format!("invalid value for parameter \"subexpr\": {g}"),
            ));
        }
        let regex = match text.is_valid(row) {
            true => compiled.at(row)?,
            false => None,
        };
        let Some(regex) = regex else {
            out.append_null();
            continue;
        };
        let s = text.value(row);
        let from = s
            .char_indices()
            .nth(start as usize - 1)
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        let found = regex
            .captures_iter(&s[from..])
            .nth(n as usize - 1)
            .and_then(|c| c.get(g as usize).map(|m| m.as_str().to_string()));
        out.append_option(found);
    }
    Ok(Arc::new(out.finish()))
}

/// `width_bucket(operand, low, high, count)` as PostgreSQL's
/// `width_bucket_float8`.
fn width_bucket(a: &[ArrayRef]) -> Result<ArrayRef> {
    let f = |i: usize| -> Result<ArrayRef> { Ok(arrow::compute::cast(&a[i], &DataType::Float64)?) };
    let (op, low, high) = (f(0)?, f(1)?, f(2)?);
    let (op, low, high) = (
        op.as_primitive::<Float64Type>(),
        low.as_primitive::<Float64Type>(),
        high.as_primitive::<Float64Type>(),
    );
    let count = arrow::compute::cast(&a[3], &DataType::Int32)?;
    let count = count.as_primitive::<arrow::datatypes::Int32Type>();
    let mut out = Vec::with_capacity(op.len());
    for row in 0..op.len() {
        if op.is_null(row) || low.is_null(row) || high.is_null(row) || count.is_null(row) {
            out.push(None);
            continue;
        }
        let (x, lo, hi, n) = (
            op.value(row),
            low.value(row),
            high.value(row),
            count.value(row),
        );
        if n <= 0 {
            return Err(pg_error("2201G", "count must be greater than zero"));
        }
        if x.is_nan() || lo.is_nan() || hi.is_nan() {
            return Err(pg_error(
                "2201G",
                "operand, lower bound, and upper bound cannot be NaN",
            ));
        }
        if !lo.is_finite() || !hi.is_finite() {
            return Err(pg_error("2201G", "lower and upper bounds must be finite"));
        }
        let bucket = if lo < hi {
            if x < lo {
                0
            } else if x >= hi {
                i64::from(n) + 1
            } else {
                ((x - lo) / (hi - lo) * f64::from(n)).floor() as i64 + 1
            }
        } else if lo > hi {
            if x > lo {
                0
            } else if x <= hi {
                i64::from(n) + 1
            } else {
                ((lo - x) / (lo - hi) * f64::from(n)).floor() as i64 + 1
            }
        } else {
            return Err(pg_error("2201G", "lower bound cannot equal upper bound"));
        };
        out.push(Some(
            i32::try_from(bucket).map_err(|_| pg_error("22003", "integer out of range"))?,
        ));
    }
    Ok(Arc::new(Int32Array::from(out)))
}

pub(crate) fn functions() -> Vec<ScalarUDF> {
    let text = || Field::new("", DataType::Utf8, true);
    let any = |n: usize| Signature::any(n, Volatility::Immutable);
    let strings = |n: usize| Signature::string(n, Volatility::Immutable);
    // (text, pattern [, flags])
    let pattern_args = || {
        Signature::one_of(
            vec![
                datafusion::logical_expr::TypeSignature::String(2),
                datafusion::logical_expr::TypeSignature::String(3),
            ],
            Volatility::Immutable,
        )
    };
    let text_list = Field::new(
        "",
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        true,
    );
    vec![
        ScalarUDF::new_from_impl(Concat {
            name: "concat",
            signature: Signature::variadic_any(Volatility::Stable),
        }),
        ScalarUDF::new_from_impl(Concat {
            name: "concat_ws",
            signature: Signature::variadic_any(Volatility::Stable),
        }),
        field_udf("quote_ident", strings(1), text(), quote_ident),
        field_udf("encode", any(2), text(), encode),
        field_udf(
            "decode",
            strings(2),
            Field::new("", DataType::Binary, true),
            decode,
        ),
        field_udf(
            "regexp_match",
            pattern_args(),
            text_list.clone(),
            regexp_match,
        ),
        field_udf(
            "regexp_substr",
            Signature::variadic_any(Volatility::Immutable),
            text(),
            regexp_substr,
        ),
        field_udf(
            "width_bucket",
            any(4),
            Field::new("", DataType::Int32, true),
            width_bucket,
        ),
        field_udf(
            "regexp_split_to_array",
            pattern_args(),
            text_list.clone(),
            regexp_split_to_array,
        ),
        field_udf(
            "get_byte",
            any(2),
            Field::new("", DataType::Int32, true),
            get_byte,
        ),
        field_udf(
            "set_byte",
            any(3),
            Field::new("", DataType::Binary, true),
            set_byte,
        ),
        field_udf(
            "bit_count",
            any(1),
            Field::new("", DataType::Int64, true),
            bit_count,
        ),
    ]
}

/// `regexp_split_to_array(text, pattern [, flags])`: the pieces between
/// matches. An empty match at the start or end of the text, or right
/// after the previous match, splits nothing.
fn regexp_split_to_array(a: &[ArrayRef]) -> Result<ArrayRef> {
    regexp_lists(a, "regexp_split_to_array", |value, regex, out| {
        let (mut start, mut last_end) = (0, None);
        for m in regex.find_iter(value) {
            let empty = m.start() == m.end();
            if empty && (m.start() == 0 || m.start() == value.len() || last_end == Some(m.start()))
            {
                continue;
            }
            out.append_value(&value[start..m.start()]);
            start = m.end();
            last_end = Some(m.end());
        }
        out.append_value(&value[start..]);
        true
    })
}

fn bytes_of(a: &ArrayRef) -> Result<BinaryArray> {
    Ok(arrow::compute::cast(a, &DataType::Binary)?
        .as_binary::<i32>()
        .clone())
}

fn byte_index(bytes: &[u8], n: i64) -> Result<usize> {
    usize::try_from(n)
        .ok()
        .filter(|&i| i < bytes.len())
        .ok_or_else(|| {
            pg_error(
                "2202E",
                format!(
                    "index {n} out of valid range, 0..{}",
                    bytes.len() as i64 - 1
                ),
            )
        })
}

/// `get_byte(bytea, n)`: the byte at offset n (from 0).
fn get_byte(a: &[ArrayRef]) -> Result<ArrayRef> {
    let bytes = bytes_of(&a[0])?;
    let at = arrow::compute::cast(&a[1], &DataType::Int64)?;
    let at = at.as_primitive::<arrow::datatypes::Int64Type>();
    let mut out = Vec::with_capacity(bytes.len());
    for row in 0..bytes.len() {
        out.push(match bytes.is_valid(row) && at.is_valid(row) {
            true => {
                let b = bytes.value(row);
                Some(i32::from(b[byte_index(b, at.value(row))?]))
            }
            false => None,
        });
    }
    Ok(Arc::new(Int32Array::from(out)))
}

/// `set_byte(bytea, n, value)`: the bytes with the one at offset n set to
/// the low 8 bits of value.
fn set_byte(a: &[ArrayRef]) -> Result<ArrayRef> {
    let bytes = bytes_of(&a[0])?;
    let at = arrow::compute::cast(&a[1], &DataType::Int64)?;
    let at = at.as_primitive::<arrow::datatypes::Int64Type>();
    let value = arrow::compute::cast(&a[2], &DataType::Int64)?;
    let value = value.as_primitive::<arrow::datatypes::Int64Type>();
    let mut out = Vec::with_capacity(bytes.len());
    for row in 0..bytes.len() {
        out.push(
            match bytes.is_valid(row) && at.is_valid(row) && value.is_valid(row) {
                true => {
                    let mut b = bytes.value(row).to_vec();
                    let i = byte_index(&b, at.value(row))?;
                    b[i] = value.value(row) as u8;
                    Some(b)
                }
                false => None,
            },
        );
    }
    Ok(Arc::new(BinaryArray::from_iter(out)))
}

/// `bit_count(bytea)`: how many bits are set.
fn bit_count(a: &[ArrayRef]) -> Result<ArrayRef> {
    let bytes = bytes_of(&a[0])?;
    Ok(Arc::new(arrow::array::Int64Array::from_iter(
        bytes
            .iter()
            .map(|b| b.map(|b| b.iter().map(|x| i64::from(x.count_ones())).sum::<i64>())),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_skip_the_empty_matches_postgresql_skips() {
        let split = |text: &str, pattern: &str| -> Vec<String> {
            let a: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![text])),
                Arc::new(StringArray::from(vec![pattern])),
            ];
            let out = regexp_split_to_array(&a).unwrap();
            let list = out.as_list::<i32>().value(0);
            let list = list.as_string::<i32>();
            (0..list.len()).map(|i| list.value(i).to_string()).collect()
        };
        assert_eq!(split("hello world", "\\s+"), ["hello", "world"]);
        assert_eq!(split("abc", ""), ["a", "b", "c"]);
        assert_eq!(split("a,b,", ","), ["a", "b", ""]);
        assert_eq!(split("abc", "x*"), ["a", "b", "c"]);
    }

    #[test]
    fn base64_is_padded_and_wrapped_as_postgresql_writes_it() {
        assert_eq!(base64_text(b"se"), "c2U=");
        let long = base64_text(&[0u8; 60]);
        assert_eq!(long.lines().map(str::len).collect::<Vec<_>>(), vec![76, 4]);
        assert_eq!(escape_text(b"a\\\x00\xff"), "a\\\\\\000\\377");
        assert_eq!(parse_bytea("a\\\\\\000\\377").unwrap(), b"a\\\x00\xff");
    }

    #[test]
    fn unmatched_groups_are_null_and_flags_are_postgresqls() {
        let a: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["abc", "ABC"])),
            Arc::new(StringArray::from(vec!["(b)(c)(d)?", "b"])),
            Arc::new(StringArray::from(vec!["", "i"])),
        ];
        let out = regexp_match(&a).unwrap();
        let out = out.as_list::<i32>();
        let first = out.value(0);
        let first = first.as_string::<i32>();
        assert_eq!(first.len(), 3);
        assert!(first.is_null(2));
        assert_eq!(out.value(1).as_string::<i32>().value(0), "B");
        assert!(regex_of("a", Some("g"), "regexp_match").is_err());
    }

    #[test]
    fn buckets_as_postgresql_counts_them() {
        let col = |v: f64| -> ArrayRef { Arc::new(arrow::array::Float64Array::from(vec![v])) };
        let n: ArrayRef = Arc::new(Int32Array::from(vec![5]));
        let bucket = |x: f64, lo: f64, hi: f64| {
            width_bucket(&[col(x), col(lo), col(hi), n.clone()])
                .unwrap()
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(0)
        };
        assert_eq!(bucket(5.35, 0.024, 10.06), 3);
        assert_eq!(bucket(-1.0, 0.0, 10.0), 0);
        assert_eq!(bucket(10.0, 0.0, 10.0), 6);
        assert_eq!(bucket(9.0, 10.0, 0.0), 1);
    }
}
