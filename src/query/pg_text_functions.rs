//! PostgreSQL's text functions where DataFusion's differ or are missing:
//! `upper`, `lower` and `initcap` map each character alone (`ß` has no
//! one-character capital and stays, as in PostgreSQL's `C.UTF-8`),
//! `quote_literal`, `quote_nullable`, and `format` with `%s`, `%I`, `%L`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, Field};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::udf::{field_udf, pg_error, texts};
use crate::types::text::{array_text, TextFor};

fn map_chars(a: &[ArrayRef], f: fn(char) -> char) -> Result<ArrayRef> {
    let t = texts(&a[0])?;
    Ok(Arc::new(
        t.iter()
            .map(|v| v.map(|v| v.chars().map(f).collect::<String>()))
            .collect::<StringArray>(),
    ))
}

/// A character's capital, where it is one character.
fn upper(c: char) -> char {
    let mut u = c.to_uppercase();
    match (u.next(), u.next()) {
        (Some(one), None) => one,
        _ => c,
    }
}

fn lower(c: char) -> char {
    let mut l = c.to_lowercase();
    match (l.next(), l.next()) {
        (Some(one), None) => one,
        _ => c,
    }
}

fn initcap(a: &[ArrayRef]) -> Result<ArrayRef> {
    let t = texts(&a[0])?;
    Ok(Arc::new(
        t.iter()
            .map(|v| {
                v.map(|v| {
                    let mut out = String::with_capacity(v.len());
                    let mut word_start = true;
                    for c in v.chars() {
                        out.push(if word_start { upper(c) } else { lower(c) });
                        word_start = !c.is_alphanumeric();
                    }
                    out
                })
            })
            .collect::<StringArray>(),
    ))
}

/// `quote_literal`'s text: `'it''s'`, or `E'a\\b'` with a backslash.
pub fn quote_literal(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    if v.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in v.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// `quote_ident`'s text: quoted unless a plain lower-case identifier.
pub fn quote_ident(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        return v.to_string();
    }
    format!("\"{}\"", v.replace('"', "\"\""))
}

/// `quote_literal(x)` and `quote_nullable(x)`: the text of any value.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Quote {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Quote {
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
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let text = array_text(&a, &args.arg_fields[0], TextFor::Cast)?;
        let nullable = self.name == "quote_nullable";
        let out: ArrayRef = Arc::new(
            text.as_string::<i32>()
                .iter()
                .map(|v| match v {
                    Some(v) => Some(quote_literal(v)),
                    None if nullable => Some("NULL".to_string()),
                    None => None,
                })
                .collect::<StringArray>(),
        );
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// `format(text, args...)`: `%s`, `%I`, `%L`, `%%`, and `%n$s`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
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
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts: Vec<ArrayRef> = arrays
            .iter()
            .zip(args.arg_fields.iter())
            .map(|(a, f)| array_text(a, f, TextFor::Cast))
            .collect::<std::result::Result<_, _>>()?;
        let texts: Vec<&StringArray> = texts.iter().map(|t| t.as_string::<i32>()).collect();
        let n = if scalar { 1 } else { args.number_rows };
        let mut out = Vec::with_capacity(n);
        for row in 0..n {
            let value = |k: usize| {
                texts
                    .get(k)
                    .and_then(|t| t.is_valid(row).then(|| t.value(row).to_string()))
            };
            let Some(fmt) = value(0) else {
                out.push(None);
                continue;
            };
            let mut s = String::new();
            let mut next = 1;
            let mut chars = fmt.chars().peekable();
            while let Some(c) = chars.next() {
                if c != '%' {
                    s.push(c);
                    continue;
                }
                // %[position$][-][width]type; width may be * or *n$.
                let digits = |chars: &mut std::iter::Peekable<std::str::Chars>| {
                    let mut d = String::new();
                    while let Some(c) = chars.next_if(char::is_ascii_digit) {
                        d.push(c);
                    }
                    d
                };
                let bad_position = || pg_error("22023", "invalid argument position in format()");
                let mut ahead = chars.clone();
                let lead = digits(&mut ahead);
                let explicit = !lead.is_empty() && ahead.peek() == Some(&'$');
                let mut position: Option<usize> = None;
                if explicit {
                    ahead.next();
                    chars = ahead;
                    position = Some(lead.parse::<usize>().map_err(|_| bad_position())?);
                }
                let mut left = chars.next_if_eq(&'-').is_some();
                let mut width: Option<usize> = None;
                if chars.next_if_eq(&'*').is_some() {
                    let mut ahead = chars.clone();
                    let n = digits(&mut ahead);
                    let at = if !n.is_empty() && ahead.peek() == Some(&'$') {
                        ahead.next();
                        chars = ahead;
                        let at = n.parse::<usize>().map_err(|_| bad_position())?;
                        next = at + 1;
                        at
                    } else {
                        next += 1;
                        next - 1
                    };
                    if at >= texts.len() {
                        return Err(pg_error("22023", "too few arguments for format()"));
                    }
                    if let Some(w) = value(at) {
                        let w: i64 = w.trim().parse().map_err(|_| {
                            pg_error(
                                "22023",
                                format!("invalid input syntax for type integer: \"{w}\""),
                            )
                        })?;
                        left |= w < 0;
                        width = Some(w.unsigned_abs() as usize);
                    }
                } else {
                    let w = digits(&mut chars);
                    if !w.is_empty() {
                        width = Some(
                            w.parse::<usize>()
                                .map_err(|_| pg_error("22023", "number is out of range"))?,
                        );
                    }
                }
                let kind = chars
                    .next()
                    .ok_or_else(|| pg_error("22023", "unterminated format() type specifier"))?;
                if kind == '%' && position.is_none() && width.is_none() && !left {
                    s.push('%');
                    continue;
                }
                let position = match position {
                    Some(p) => {
                        next = p + 1;
                        p
                    }
                    None => {
                        next += 1;
                        next - 1
                    }
                };
                if position == 0 {
                    return Err(bad_position());
                }
                if position >= texts.len() {
                    return Err(pg_error("22023", "too few arguments for format()"));
                }
                let arg = value(position);
                let piece = match kind {
                    's' => arg.unwrap_or_default(),
                    'I' => match arg {
                        Some(a) => quote_ident(&a),
                        None => {
                            return Err(pg_error(
                                "22004",
                                "null values cannot be formatted as an SQL identifier",
                            ))
                        }
                    },
                    'L' => match arg {
                        Some(a) => quote_literal(&a),
                        None => "NULL".to_string(),
                    },
                    other => {
                        return Err(pg_error(
                            "22023",
                            format!("unrecognized format() type specifier \"{other}\""),
                        ))
                    }
                };
                let pad = width.unwrap_or(0).saturating_sub(piece.chars().count());
                if !left {
                    s.extend(std::iter::repeat_n(' ', pad));
                }
                s.push_str(&piece);
                if left {
                    s.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push(Some(s));
        }
        let out: ArrayRef = Arc::new(StringArray::from(out));
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// `pg_typeof(x)`: the name of x's type (a `regtype`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TypeOf {
    signature: Signature,
}

impl ScalarUDFImpl for TypeOf {
    fn name(&self) -> &str {
        "pg_typeof"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(
        &self,
        _args: datafusion::logical_expr::ReturnFieldArgs,
    ) -> Result<arrow::datatypes::FieldRef> {
        Ok(Arc::new(
            Field::new("pg_typeof", DataType::Utf8, false)
                .with_metadata(crate::types::oid_alias_value("regtype")),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let f = &args.arg_fields[0];
        let name = match f.data_type() {
            DataType::Null => "unknown".to_string(),
            // The type alone, as regtype shows an oid: `numeric`, not
            // `numeric(12,3)`.
            _ => crate::types::PgType::plain(crate::types::PgType::of_field(f).oid).format(),
        };
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

/// `oid::regtype` of a value that is not a name (`atttypid::regtype`):
/// the type's name, described as a regtype. The SQL rewrite of such casts
/// (`sluice_sql::rewrite_regproc_zero`) calls it.
fn regtype_names(a: &[ArrayRef]) -> Result<ArrayRef> {
    let oids = arrow::compute::cast(&a[0], &DataType::Int64)?;
    let names: StringArray = oids
        .as_primitive::<arrow::datatypes::Int64Type>()
        .iter()
        .map(|v| v.map(|oid| crate::types::PgType::plain(oid as u32).format()))
        .collect();
    Ok(Arc::new(names))
}

/// `oids::regtype[]` (`proargtypes::regtype[]`): each type's name, an
/// array described as `regtype[]`.
fn regtype_name_lists(a: &[ArrayRef]) -> Result<ArrayRef> {
    use arrow::array::{ListArray, ListBuilder, StringBuilder};
    let Some(lists) = a[0].as_any().downcast_ref::<ListArray>() else {
        return Err(datafusion::error::DataFusionError::Plan(format!(
            "cannot cast type {} to regtype[]",
            crate::types::PgType::of_data_type(a[0].data_type()).format()
        )));
    };
    let element = Field::new_list_field(DataType::Utf8, true)
        .with_metadata(crate::types::oid_alias_value("regtype"));
    let mut out = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(element));
    for i in 0..lists.len() {
        if lists.is_null(i) {
            out.append_null();
            continue;
        }
        let names = regtype_names(&[lists.value(i)])?;
        let names = names.as_string::<i32>();
        for name in names.iter() {
            out.values().append_option(name);
        }
        out.append(true);
    }
    Ok(Arc::new(out.finish()))
}

/// `to_hex(integer)` of a 32-bit integer's own bits (`ffffffff` for -1).
fn to_hex(a: &[ArrayRef]) -> Result<ArrayRef> {
    let out: StringArray = match a[0].data_type() {
        DataType::Int32 | DataType::Int16 => {
            let v = arrow::compute::cast(&a[0], &DataType::Int32)?;
            v.as_primitive::<arrow::datatypes::Int32Type>()
                .iter()
                .map(|v| v.map(|v| format!("{:x}", v as u32)))
                .collect()
        }
        _ => {
            let v = arrow::compute::cast(&a[0], &DataType::Int64)?;
            v.as_primitive::<arrow::datatypes::Int64Type>()
                .iter()
                .map(|v| v.map(|v| format!("{:x}", v as u64)))
                .collect()
        }
    };
    Ok(Arc::new(out))
}

/// `length(text)` in characters; `length(bytea)` in bytes.
fn length(a: &[ArrayRef]) -> Result<ArrayRef> {
    measure(a, |v| v.chars().count())
}

/// `octet_length` of text or bytea: its bytes (UTF-8 for text).
fn octet_length(a: &[ArrayRef]) -> Result<ArrayRef> {
    measure(a, str::len)
}

/// Bytes of a bytea, else `of_text` of the text.
fn measure(a: &[ArrayRef], of_text: fn(&str) -> usize) -> Result<ArrayRef> {
    let out: arrow::array::Int32Array = match a[0].data_type() {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let b = arrow::compute::cast(&a[0], &DataType::Binary)?;
            b.as_binary::<i32>()
                .iter()
                .map(|v| v.map(|v| v.len() as i32))
                .collect()
        }
        _ => texts(&a[0])?
            .iter()
            .map(|v| v.map(|v| of_text(v) as i32))
            .collect(),
    };
    Ok(Arc::new(out))
}

/// The functions to register, replacing DataFusion's of the same names.
pub(crate) fn functions() -> Vec<ScalarUDF> {
    let one = || Signature::any(1, Volatility::Immutable);
    let string = || Signature::string(1, Volatility::Immutable);
    // text or bytea, text first: an unknown argument is text.
    let string_or_bytes = || {
        Signature::one_of(
            vec![
                TypeSignature::String(1),
                TypeSignature::Exact(vec![DataType::Binary]),
                TypeSignature::Exact(vec![DataType::LargeBinary]),
                TypeSignature::Exact(vec![DataType::BinaryView]),
            ],
            Volatility::Immutable,
        )
    };
    let text = || Field::new("", DataType::Utf8, true);
    vec![
        field_udf("upper", string(), text(), |a| map_chars(a, upper)),
        field_udf("lower", string(), text(), |a| map_chars(a, lower)),
        field_udf("initcap", string(), text(), initcap),
        ScalarUDF::new_from_impl(Quote {
            name: "quote_literal",
            signature: one(),
        }),
        ScalarUDF::new_from_impl(Quote {
            name: "quote_nullable",
            signature: one(),
        }),
        ScalarUDF::new_from_impl(Format {
            signature: Signature::variadic_any(Volatility::Stable),
        }),
        ScalarUDF::new_from_impl(TypeOf { signature: one() }),
        field_udf(
            sluice_sql::REGTYPE_NAME_FUNCTION,
            one(),
            Field::new("regtype", DataType::Utf8, true)
                .with_metadata(crate::types::oid_alias_value("regtype")),
            regtype_names,
        ),
        field_udf(
            sluice_sql::REGTYPE_NAMES_FUNCTION,
            one(),
            Field::new(
                "regtype",
                DataType::List(Arc::new(
                    Field::new_list_field(DataType::Utf8, true)
                        .with_metadata(crate::types::oid_alias_value("regtype")),
                )),
                true,
            ),
            regtype_name_lists,
        ),
        field_udf("to_hex", one(), text(), to_hex),
        field_udf(
            "length",
            string_or_bytes(),
            Field::new("", DataType::Int32, true),
            length,
        )
        .with_aliases(["char_length", "character_length"]),
        field_udf(
            "octet_length",
            string_or_bytes(),
            Field::new("", DataType::Int32, true),
            octet_length,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_case_as_postgresql() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "E'a\\\\b'");
        assert_eq!(quote_ident("a b"), "\"a b\"");
        assert_eq!(quote_ident("abc"), "abc");
        assert_eq!(quote_ident("A"), "\"A\"");
        assert_eq!("straße".chars().map(upper).collect::<String>(), "STRAßE");
    }
}
