//! PostgreSQL's JSON operators and functions over `json` and `jsonb`
//! values (text, marked by their fields' metadata; see `types::json`):
//! `->`, `->>`, `#>`, `#>>`, `@>`, `<@`, `?`, `?|`, `?&`, `||`, `-`,
//! `#-`, and `jsonb_typeof`, `jsonb_array_length`, `jsonb_build_object`,
//! `jsonb_build_array`, `json_build_object`, `json_build_array`,
//! `to_jsonb`, `to_json`, `jsonb_set`, `jsonb_strip_nulls`,
//! `jsonb_pretty`, `jsonb_extract_path(_text)`, and the lists behind the
//! set-returning `jsonb_array_elements(_text)`, `jsonb_object_keys` and
//! `jsonb_each(_text)` (which the SQL front end wraps in `unnest`), with
//! their `json_` twins.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int32Array, ListArray, StringArray, StringBuilder,
};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, TimestampMicrosecondType, UInt64Type,
};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::udf::{cached_udf, field_udf, pg_error, texts};
use crate::types::json::{parse, write_string, Json};
use crate::types::text::{write_decimal, write_float};
use crate::types::{declared_field, is_json};

/// A field holding `jsonb` text.
pub(crate) fn jsonb_field(name: &str) -> Field {
    declared_field(name, DataType::Utf8, "jsonb")
}

fn json_field(name: &str) -> Field {
    declared_field(name, DataType::Utf8, "json")
}

fn json_error(e: crate::types::json::JsonError) -> DataFusionError {
    pg_error(
        "22P02",
        format!("invalid input syntax for type json: {}", e.detail),
    )
}

/// Each value of a json or jsonb column, parsed.
fn documents(a: &ArrayRef) -> Result<Vec<Option<Json>>> {
    let t = texts(a)?;
    t.iter()
        .map(|v| v.map(parse).transpose().map_err(json_error))
        .collect()
}

/// Keys or a path: a PostgreSQL array literal (`'{a,c}'`) or a list.
fn paths(a: &ArrayRef, i: usize) -> Result<Option<Vec<String>>> {
    if a.is_null(i) {
        return Ok(None);
    }
    match a.data_type() {
        DataType::List(_) => {
            let list = a.as_list::<i32>().value(i);
            let t = texts(&list)?;
            Ok(Some(
                t.iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect(),
            ))
        }
        _ => {
            let t = texts(a)?;
            Ok(Some(array_literal(t.value(i))?))
        }
    }
}

/// The elements of a one-dimensional PostgreSQL array literal of text.
pub(crate) fn array_literal(text: &str) -> Result<Vec<String>> {
    Ok(array_items(text)?
        .into_iter()
        .map(|i| i.unwrap_or_else(|| "NULL".into()))
        .collect())
}

/// The elements of a one-dimensional PostgreSQL array literal (see
/// [`crate::types::text::array_items`]), 22P02 when malformed.
pub(crate) fn array_items(text: &str) -> Result<Vec<Option<String>>> {
    crate::types::text::array_items(text)
        .ok_or_else(|| pg_error("22P02", format!("malformed array literal: \"{text}\"")))
}

fn jsonb_out(values: impl Iterator<Item = Option<Json>>) -> ArrayRef {
    let out: StringArray = values.map(|v| v.map(|j| j.to_string())).collect();
    Arc::new(out)
}

fn text_out(values: impl Iterator<Item = Option<String>>) -> ArrayRef {
    let out: StringArray = values.collect();
    Arc::new(out)
}

/// `j -> key`, `j -> index` (and `->>` as text).
fn get(a: &[ArrayRef], as_text: bool) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let key = &a[1];
    let found = docs.iter().enumerate().map(|(i, d)| {
        let d = d.as_ref()?;
        if key.is_null(i) {
            return None;
        }
        match key.data_type() {
            t if t.is_integer() => {
                let idx = arrow::compute::cast(key, &DataType::Int64).ok()?;
                d.index(idx.as_primitive::<Int64Type>().value(i)).cloned()
            }
            _ => {
                let k = texts(key).ok()?;
                d.get(k.value(i)).cloned()
            }
        }
    });
    Ok(if as_text {
        text_out(found.map(|v| v.and_then(|j| j.as_text())))
    } else {
        jsonb_out(found)
    })
}

/// `j #> path` (and `#>>` as text).
fn path(a: &[ArrayRef], as_text: bool) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut found = Vec::with_capacity(docs.len());
    for (i, d) in docs.iter().enumerate() {
        let p = paths(&a[1], i)?;
        found.push(match (d, p) {
            (Some(d), Some(p)) => d.path(&p).cloned(),
            _ => None,
        });
    }
    Ok(if as_text {
        text_out(found.into_iter().map(|v| v.and_then(|j| j.as_text())))
    } else {
        jsonb_out(found.into_iter())
    })
}

fn bools(values: impl Iterator<Item = Option<bool>>) -> ArrayRef {
    Arc::new(values.collect::<BooleanArray>())
}

fn contains(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (l, r) = (documents(&a[0])?, documents(&a[1])?);
    Ok(bools(l.iter().zip(&r).map(|(l, r)| match (l, r) {
        (Some(l), Some(r)) => Some(l.contains(r)),
        _ => None,
    })))
}

fn has_key(d: &Json, k: &str) -> bool {
    match d {
        Json::Object(items) => items.iter().any(|(key, _)| key == k),
        Json::Array(items) => items.iter().any(|v| *v == Json::String(k.to_string())),
        Json::String(s) => s == k,
        _ => false,
    }
}

fn exists(a: &[ArrayRef], how: u8) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = Vec::with_capacity(docs.len());
    for (i, d) in docs.iter().enumerate() {
        let keys = if how == 0 {
            (!a[1].is_null(i)).then(|| vec![texts(&a[1]).map(|t| t.value(i).to_string())])
        } else {
            paths(&a[1], i)?.map(|p| p.into_iter().map(Ok).collect())
        };
        out.push(match (d, keys) {
            (Some(d), Some(keys)) => {
                let keys: Vec<String> = keys.into_iter().collect::<Result<_>>()?;
                Some(match how {
                    2 => keys.iter().all(|k| has_key(d, k)),
                    _ => keys.iter().any(|k| has_key(d, k)),
                })
            }
            _ => None,
        });
    }
    Ok(bools(out.into_iter()))
}

fn concat(a: &[ArrayRef]) -> Result<ArrayRef> {
    let (l, r) = (documents(&a[0])?, documents(&a[1])?);
    Ok(jsonb_out(l.into_iter().zip(r).map(|(l, r)| {
        Some(match (l?, r?) {
            (Json::Object(mut a), Json::Object(b)) => {
                for (k, v) in b {
                    a.retain(|(key, _)| *key != k);
                    a.push((k, v));
                }
                Json::Object(a).canonical()
            }
            (Json::Array(mut a), Json::Array(b)) => {
                a.extend(b);
                Json::Array(a)
            }
            (Json::Array(mut a), b) => {
                a.push(b);
                Json::Array(a)
            }
            (a, Json::Array(b)) => {
                let mut items = vec![a];
                items.extend(b);
                Json::Array(items)
            }
            (a, b) => Json::Array(vec![a, b]),
        })
    })))
}

fn delete(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let key = &a[1];
    let mut out = Vec::with_capacity(docs.len());
    for (i, d) in docs.into_iter().enumerate() {
        out.push(match d {
            Some(d) if !key.is_null(i) => Some(match (d, key.data_type()) {
                (Json::Array(mut items), t) if t.is_integer() => {
                    let idx = arrow::compute::cast(key, &DataType::Int64)?;
                    let n = idx.as_primitive::<Int64Type>().value(i);
                    let n = if n < 0 { items.len() as i64 + n } else { n };
                    if (0..items.len() as i64).contains(&n) {
                        items.remove(n as usize);
                    }
                    Json::Array(items)
                }
                (Json::Object(mut items), _) => {
                    let k = texts(key)?;
                    items.retain(|(key, _)| key != k.value(i));
                    Json::Object(items)
                }
                (Json::Array(mut items), _) => {
                    let k = texts(key)?;
                    items.retain(|v| *v != Json::String(k.value(i).to_string()));
                    Json::Array(items)
                }
                (other, _) => {
                    return Err(pg_error(
                        "22023",
                        format!("cannot delete from scalar {other}"),
                    ))
                }
            }),
            _ => None,
        });
    }
    Ok(jsonb_out(out.into_iter()))
}

fn delete_path(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = Vec::with_capacity(docs.len());
    for (i, d) in docs.into_iter().enumerate() {
        let p = paths(&a[1], i)?;
        out.push(match (d, p) {
            (Some(mut d), Some(p)) => {
                remove_at(&mut d, &p);
                Some(d)
            }
            _ => None,
        });
    }
    Ok(jsonb_out(out.into_iter()))
}

fn remove_at(d: &mut Json, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut v = d;
    for p in parents {
        v = match v {
            Json::Object(items) => match items.iter_mut().find(|(k, _)| k == p) {
                Some((_, v)) => v,
                None => return,
            },
            Json::Array(items) => {
                let Ok(n) = p.parse::<i64>() else { return };
                let n = if n < 0 { items.len() as i64 + n } else { n };
                match usize::try_from(n).ok().and_then(|n| items.get_mut(n)) {
                    Some(v) => v,
                    None => return,
                }
            }
            _ => return,
        };
    }
    match v {
        Json::Object(items) => items.retain(|(k, _)| k != last),
        Json::Array(items) => {
            if let Ok(n) = last.parse::<i64>() {
                let n = if n < 0 { items.len() as i64 + n } else { n };
                if (0..items.len() as i64).contains(&n) {
                    items.remove(n as usize);
                }
            }
        }
        _ => {}
    }
}

fn type_of(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    Ok(text_out(
        docs.iter()
            .map(|d| d.as_ref().map(|d| d.type_name().to_string())),
    ))
}

fn array_length(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        out.push(match d {
            Some(Json::Array(items)) => Some(items.len() as i32),
            Some(Json::Object(_)) => {
                return Err(pg_error("22023", "cannot get array length of a non-array"))
            }
            Some(_) => return Err(pg_error("22023", "cannot get array length of a scalar")),
            None => None,
        });
    }
    Ok(Arc::new(Int32Array::from(out)))
}

fn strip_nulls(d: Json) -> Json {
    match d {
        Json::Object(items) => Json::Object(
            items
                .into_iter()
                .filter(|(_, v)| *v != Json::Null)
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

fn pretty(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    Ok(text_out(docs.iter().map(|d| {
        d.as_ref().map(|d| {
            let mut s = String::new();
            d.write_pretty(0, &mut s);
            s
        })
    })))
}

/// `jsonb_set(target, path, new [, create_missing])`.
fn set(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let news = documents(&a[2])?;
    let create = match a.get(3) {
        Some(c) => Some(arrow::compute::cast(c, &DataType::Boolean)?),
        None => None,
    };
    let mut out = Vec::with_capacity(docs.len());
    for (i, (d, new)) in docs.into_iter().zip(news).enumerate() {
        let p = paths(&a[1], i)?;
        let create_missing = create
            .as_ref()
            .map(|c| c.as_boolean().is_valid(i) && c.as_boolean().value(i))
            .unwrap_or(true);
        out.push(match (d, p, new) {
            (Some(mut d), Some(p), Some(new)) => {
                set_at(&mut d, &p, new, create_missing);
                Some(d.canonical())
            }
            _ => None,
        });
    }
    Ok(jsonb_out(out.into_iter()))
}

fn set_at(d: &mut Json, path: &[String], new: Json, create: bool) {
    let Some((first, rest)) = path.split_first() else {
        *d = new;
        return;
    };
    match d {
        Json::Object(items) => match items.iter_mut().find(|(k, _)| k == first) {
            Some((_, v)) => set_at(v, rest, new, create),
            None if create && rest.is_empty() => items.push((first.clone(), new)),
            None => {}
        },
        Json::Array(items) => {
            let Ok(n) = first.parse::<i64>() else { return };
            let len = items.len() as i64;
            let idx = if n < 0 { len + n } else { n };
            if (0..len).contains(&idx) {
                set_at(&mut items[idx as usize], rest, new, create);
            } else if create && rest.is_empty() {
                if idx < 0 {
                    items.insert(0, new);
                } else {
                    items.push(new);
                }
            }
        }
        _ => {}
    }
}

fn list_of(values: Vec<Option<Vec<Option<String>>>>, item: Field) -> ArrayRef {
    let mut b = arrow::array::ListBuilder::new(StringBuilder::new()).with_field(Arc::new(item));
    for v in values {
        match v {
            Some(items) => {
                for item in items {
                    b.values().append_option(item);
                }
                b.append(true);
            }
            None => b.append(false),
        }
    }
    Arc::new(b.finish())
}

fn elements(a: &[ArrayRef], as_text: bool, item: Field) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        out.push(match d {
            Some(Json::Array(items)) => Some(
                items
                    .into_iter()
                    .map(|v| {
                        if as_text {
                            v.as_text()
                        } else {
                            Some(v.to_string())
                        }
                    })
                    .collect(),
            ),
            Some(_) => return Err(pg_error("22023", "cannot extract elements from an object")),
            None => None,
        });
    }
    Ok(list_of(out, item))
}

fn object_parts(a: &[ArrayRef], part: u8, item: Field) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = Vec::with_capacity(docs.len());
    for d in docs {
        out.push(match d {
            Some(Json::Object(items)) => Some(
                items
                    .into_iter()
                    .map(|(k, v)| match part {
                        0 => Some(k),
                        1 => Some(v.to_string()),
                        _ => v.as_text(),
                    })
                    .collect(),
            ),
            Some(_) => {
                return Err(pg_error(
                    "22023",
                    "cannot call jsonb_object_keys on a scalar or array",
                ))
            }
            None => None,
        });
    }
    Ok(list_of(out, item))
}

fn list_field(inner: Field) -> Field {
    Field::new("item", DataType::List(Arc::new(inner)), true)
}

cached_udf!(
    jsonb_sort_key,
    field_udf(
        "jsonb_sort_key",
        Signature::any(1, Volatility::Immutable),
        Field::new("jsonb_sort_key", DataType::Binary, true),
        jsonb_sort_keys,
    )
);
cached_udf!(
    jsonb_get,
    field_udf(
        "jsonb_get",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        |a| get(a, false)
    )
);
cached_udf!(
    jsonb_get_text,
    field_udf(
        "jsonb_get_text",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Utf8, true),
        |a| get(a, true)
    )
);
cached_udf!(
    jsonb_path,
    field_udf(
        "jsonb_path",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        |a| path(a, false)
    )
);
cached_udf!(
    jsonb_path_text,
    field_udf(
        "jsonb_path_text",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Utf8, true),
        |a| path(a, true)
    )
);
cached_udf!(
    jsonb_contains,
    field_udf(
        "jsonb_contains",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Boolean, true),
        contains
    )
);
cached_udf!(
    jsonb_exists,
    field_udf(
        "jsonb_exists",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Boolean, true),
        |a| exists(a, 0)
    )
);
cached_udf!(
    jsonb_exists_any,
    field_udf(
        "jsonb_exists_any",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Boolean, true),
        |a| exists(a, 1)
    )
);
cached_udf!(
    jsonb_exists_all,
    field_udf(
        "jsonb_exists_all",
        Signature::any(2, Volatility::Immutable),
        Field::new("", DataType::Boolean, true),
        |a| exists(a, 2)
    )
);
cached_udf!(
    jsonb_concat,
    field_udf(
        "jsonb_concat",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        concat
    )
);
cached_udf!(
    jsonb_delete,
    field_udf(
        "jsonb_delete",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        delete
    )
);
cached_udf!(
    jsonb_delete_path,
    field_udf(
        "jsonb_delete_path",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        delete_path
    )
);

/// The functions to register, by their PostgreSQL names.
pub(crate) fn functions() -> Vec<ScalarUDF> {
    let any1 = || Signature::any(1, Volatility::Immutable);
    let text = || Field::new("", DataType::Utf8, true);
    let mut out = vec![
        field_udf("jsonb_typeof", any1(), text(), type_of),
        field_udf("json_typeof", any1(), text(), type_of),
        field_udf(
            "jsonb_array_length",
            any1(),
            Field::new("", DataType::Int32, true),
            array_length,
        ),
        field_udf(
            "json_array_length",
            any1(),
            Field::new("", DataType::Int32, true),
            array_length,
        ),
        field_udf("jsonb_strip_nulls", any1(), jsonb_field(""), |a| {
            Ok(jsonb_out(
                documents(&a[0])?.into_iter().map(|d| d.map(strip_nulls)),
            ))
        }),
        field_udf("jsonb_pretty", any1(), text(), pretty),
        field_udf(
            "jsonb_set",
            Signature::variadic_any(Volatility::Immutable),
            jsonb_field(""),
            set,
        ),
        field_udf(
            "jsonb_array_elements_list",
            any1(),
            list_field(jsonb_field("item")),
            |a| elements(a, false, jsonb_field("item")),
        ),
        field_udf(
            "json_array_elements_list",
            any1(),
            list_field(json_field("item")),
            |a| elements(a, false, json_field("item")),
        ),
        field_udf(
            "jsonb_array_elements_text_list",
            any1(),
            list_field(Field::new("item", DataType::Utf8, true)),
            |a| elements(a, true, Field::new("item", DataType::Utf8, true)),
        ),
        field_udf(
            "jsonb_object_keys_list",
            any1(),
            list_field(Field::new("item", DataType::Utf8, true)),
            |a| object_parts(a, 0, Field::new("item", DataType::Utf8, true)),
        ),
        field_udf(
            "jsonb_each_values_list",
            any1(),
            list_field(jsonb_field("item")),
            |a| object_parts(a, 1, jsonb_field("item")),
        ),
        field_udf(
            "jsonb_each_text_values_list",
            any1(),
            list_field(Field::new("item", DataType::Utf8, true)),
            |a| object_parts(a, 2, Field::new("item", DataType::Utf8, true)),
        ),
        field_udf(
            "jsonb_extract_path",
            Signature::variadic_any(Volatility::Immutable),
            jsonb_field(""),
            |a| extract_path(a, false),
        ),
        field_udf(
            "jsonb_extract_path_text",
            Signature::variadic_any(Volatility::Immutable),
            text(),
            |a| extract_path(a, true),
        ),
        field_udf(
            "json_extract_path",
            Signature::variadic_any(Volatility::Immutable),
            json_field(""),
            |a| extract_path(a, false),
        ),
        field_udf(
            "json_extract_path_text",
            Signature::variadic_any(Volatility::Immutable),
            text(),
            |a| extract_path(a, true),
        ),
    ];
    out.push(field_udf("json_agg_of", any1(), json_field(""), |a| {
        list_to_json(&a[0], false, false)
    }));
    out.push(field_udf("jsonb_agg_of", any1(), jsonb_field(""), |a| {
        list_to_json(&a[0], true, false)
    }));
    // Over `array_agg(to_json(x))`: items already JSON text (a jsonb
    // value stays a number, an object).
    out.push(field_udf("json_agg_of_json", any1(), json_field(""), |a| {
        list_to_json(&a[0], false, true)
    }));
    out.push(field_udf(
        "jsonb_agg_of_json",
        any1(),
        jsonb_field(""),
        |a| list_to_json(&a[0], true, true),
    ));
    out.push(field_udf(
        "json_object_agg_of",
        Signature::any(2, Volatility::Immutable),
        json_field(""),
        |a| lists_to_object(a, false),
    ));
    out.push(field_udf(
        "jsonb_object_agg_of",
        Signature::any(2, Volatility::Immutable),
        jsonb_field(""),
        |a| lists_to_object(a, true),
    ));
    for (name, kind) in [
        ("jsonb_build_object", Build::JsonbObject),
        ("json_build_object", Build::JsonObject),
        ("jsonb_build_array", Build::JsonbArray),
        ("json_build_array", Build::JsonArray),
        ("to_jsonb", Build::ToJsonb),
        ("to_json", Build::ToJson),
        ("row_to_json", Build::ToJson),
    ] {
        out.push(ScalarUDF::new_from_impl(BuildJson {
            name,
            kind,
            signature: match kind {
                Build::ToJsonb | Build::ToJson => Signature::any(1, Volatility::Stable),
                _ => Signature::variadic_any(Volatility::Stable),
            },
        }));
    }
    out
}

/// Each jsonb value's key in PostgreSQL's jsonb order
/// (`Json::sort_key`), for ORDER BY.
fn jsonb_sort_keys(a: &[ArrayRef]) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let mut out = arrow::array::BinaryBuilder::new();
    for d in docs {
        match d {
            Some(d) => {
                let mut key = Vec::new();
                d.sort_key(&mut key);
                out.append_value(key);
            }
            None => out.append_null(),
        }
    }
    Ok(Arc::new(out.finish()))
}

fn extract_path(a: &[ArrayRef], as_text: bool) -> Result<ArrayRef> {
    let docs = documents(&a[0])?;
    let keys: Vec<StringArray> = a[1..].iter().map(texts).collect::<Result<_>>()?;
    let found = docs.iter().enumerate().map(|(i, d)| {
        let path: Option<Vec<String>> = keys
            .iter()
            .map(|k| k.is_valid(i).then(|| k.value(i).to_string()))
            .collect();
        d.as_ref()?.path(&path?).cloned()
    });
    Ok(if as_text {
        text_out(found.map(|v| v.and_then(|j| j.as_text())))
    } else {
        jsonb_out(found)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Build {
    JsonbObject,
    JsonObject,
    JsonbArray,
    JsonArray,
    ToJsonb,
    ToJson,
}

/// The JSON builders, which need their arguments' fields (a jsonb
/// argument is embedded, not quoted).
#[derive(Debug, PartialEq, Eq, Hash)]
struct BuildJson {
    name: &'static str,
    kind: Build,
    signature: Signature,
}

impl ScalarUDFImpl for BuildJson {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> Result<arrow::datatypes::FieldRef> {
        Ok(Arc::new(match self.kind {
            Build::JsonbObject | Build::JsonbArray | Build::ToJsonb => jsonb_field(self.name),
            _ => json_field(self.name),
        }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let fields = &args.arg_fields;
        if matches!(self.kind, Build::JsonbObject | Build::JsonObject) && arrays.len() % 2 != 0 {
            return Err(pg_error(
                "22023",
                "argument list must have even number of elements",
            ));
        }
        let rows = if scalar { 1 } else { n };
        let mut out = StringBuilder::new();
        for i in 0..rows {
            let values: Vec<Json> = arrays
                .iter()
                .zip(fields.iter())
                .map(|(a, f)| to_json(a, f, i))
                .collect::<Result<_>>()?;
            let doc = match self.kind {
                Build::ToJsonb | Build::ToJson => {
                    if arrays[0].is_null(i) {
                        out.append_null();
                        continue;
                    }
                    values.into_iter().next().unwrap_or(Json::Null)
                }
                Build::JsonbArray | Build::JsonArray => Json::Array(values),
                Build::JsonbObject | Build::JsonObject => {
                    let mut items = Vec::new();
                    for (k, pair) in values.chunks(2).enumerate() {
                        let key = match &pair[0] {
                            Json::Null => {
                                return Err(pg_error(
                                    "22004",
                                    format!("argument {} cannot be null", 2 * k + 1),
                                ))
                            }
                            Json::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        items.push((key, pair[1].clone()));
                    }
                    Json::Object(items)
                }
            };
            let text = match self.kind {
                Build::JsonObject => json_object_text(&doc),
                Build::JsonbObject | Build::JsonbArray | Build::ToJsonb => {
                    doc.canonical().to_string()
                }
                Build::ToJson => {
                    let mut s = String::new();
                    doc.write_compact(&mut s);
                    s
                }
                _ => doc.to_string(),
            };
            out.append_value(text);
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// `json_build_object`'s text: `{"k" : 2, "j" : "x"}`.
fn json_object_text(doc: &Json) -> String {
    let Json::Object(items) = doc else {
        return doc.to_string();
    };
    let mut s = String::from("{");
    for (i, (k, v)) in items.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write_string(k, &mut s);
        s.push_str(" : ");
        v.write(&mut s);
    }
    s.push('}');
    s
}

/// A value of an Arrow column as PostgreSQL's `to_json` gives it.
pub(crate) fn to_json(a: &ArrayRef, field: &Field, i: usize) -> Result<Json> {
    if a.data_type().is_null() || a.is_null(i) {
        return Ok(Json::Null);
    }
    let number = |s: String| Json::Number(s);
    Ok(match a.data_type() {
        DataType::Boolean => Json::Bool(a.as_boolean().value(i)),
        DataType::Int16 => number(a.as_primitive::<Int16Type>().value(i).to_string()),
        DataType::Int32 => number(a.as_primitive::<Int32Type>().value(i).to_string()),
        DataType::Int64 => number(a.as_primitive::<Int64Type>().value(i).to_string()),
        DataType::UInt64 => number(a.as_primitive::<UInt64Type>().value(i).to_string()),
        DataType::Float32 | DataType::Float64 => {
            let v = match a.data_type() {
                DataType::Float32 => a.as_primitive::<Float32Type>().value(i) as f64,
                _ => a.as_primitive::<Float64Type>().value(i),
            };
            let mut s = String::new();
            write_float(v, 15, &mut s);
            if v.is_finite() {
                number(s)
            } else {
                Json::String(s)
            }
        }
        DataType::Decimal128(_, scale) => {
            let mut s = String::new();
            write_decimal(a.as_primitive::<Decimal128Type>().value(i), *scale, &mut s);
            number(s)
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let t = texts(a)?;
            if is_json(field) {
                parse(t.value(i)).map_err(json_error)?
            } else {
                Json::String(t.value(i).to_string())
            }
        }
        DataType::Date32 => Json::String(crate::types::datetime::date_text(
            a.as_primitive::<Date32Type>().value(i),
        )),
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let us = a.as_primitive::<TimestampMicrosecondType>().value(i);
            let mut s = crate::types::datetime::timestamp_text(us, false).replacen(' ', "T", 1);
            if tz.is_some() {
                s.push_str("+00:00");
            }
            Json::String(s)
        }
        DataType::List(f) => {
            let list = a.as_list::<i32>().value(i);
            Json::Array(
                (0..list.len())
                    .map(|j| to_json(&list, f, j))
                    .collect::<Result<_>>()?,
            )
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            Json::Object(
                fields
                    .iter()
                    .zip(s.columns())
                    .map(|(f, c)| Ok((f.name().clone(), to_json(c, f, i)?)))
                    .collect::<Result<_>>()?,
            )
        }
        _ => {
            let text = crate::types::text::array_text(
                &a.slice(i, 1),
                field,
                crate::types::text::TextFor::Output,
            )?;
            Json::String(text.as_string::<i32>().value(0).to_string())
        }
    })
}

/// A JSON array of each list's values (`json_agg`, `jsonb_agg` over the
/// list `array_agg` gathered); `jsonb` makes jsonb's text; `items_json`:
/// the items are JSON text already.
fn list_to_json(a: &ArrayRef, jsonb: bool, items_json: bool) -> Result<ArrayRef> {
    let DataType::List(item) = a.data_type() else {
        return Err(DataFusionError::Internal(format!(
            "json_agg over {}",
            a.data_type()
        )));
    };
    let lists: &ListArray = a.as_list::<i32>();
    let mut out = StringBuilder::new();
    for i in 0..lists.len() {
        if lists.is_null(i) {
            out.append_null();
            continue;
        }
        let values = lists.value(i);
        let doc = Json::Array(
            (0..values.len())
                .map(|j| match items_json {
                    true if values.is_null(j) => Ok(Json::Null),
                    true => parse(texts(&values)?.value(j)).map_err(json_error),
                    false => to_json(&values, item, j),
                })
                .collect::<Result<_>>()?,
        );
        out.append_value(match (jsonb, doc) {
            (true, doc) => doc.canonical().to_string(),
            // json_agg: ", " between items, each as to_json writes it.
            (false, Json::Array(ref items)) => {
                let mut s = String::from("[");
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        s.push_str(", ");
                    }
                    item.write_compact(&mut s);
                }
                s.push(']');
                s
            }
            (false, doc) => doc.to_string(),
        });
    }
    Ok(Arc::new(out.finish()))
}

/// `json_object_agg(k, v)` from the lists of keys and of values, in
/// json's text (`{ "x" : 1, "y" : 2 }`) or jsonb's.
fn lists_to_object(a: &[ArrayRef], jsonb: bool) -> Result<ArrayRef> {
    let (DataType::List(kf), DataType::List(vf)) = (a[0].data_type(), a[1].data_type()) else {
        return Err(DataFusionError::Internal(
            "json_object_agg over non-lists".into(),
        ));
    };
    let (keys, values) = (a[0].as_list::<i32>(), a[1].as_list::<i32>());
    let mut out = StringBuilder::new();
    for i in 0..keys.len() {
        if keys.is_null(i) {
            out.append_null();
            continue;
        }
        let (k, v) = (keys.value(i), values.value(i));
        let mut items = Vec::with_capacity(k.len());
        for j in 0..k.len() {
            let key = match to_json(&k, kf, j)? {
                Json::Null => return Err(pg_error("22004", "field name must not be null")),
                Json::String(s) => s,
                other => other.to_string(),
            };
            items.push((key, to_json(&v, vf, j)?));
        }
        out.append_value(if jsonb {
            Json::Object(items).canonical().to_string()
        } else {
            let mut s = String::from("{ ");
            for (n, (k, v)) in items.iter().enumerate() {
                if n > 0 {
                    s.push_str(", ");
                }
                write_string(k, &mut s);
                s.push_str(" : ");
                v.write(&mut s);
            }
            s.push_str(" }");
            s
        });
    }
    Ok(Arc::new(out.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_literals_read_as_postgresql_reads_them() {
        assert_eq!(array_literal("{a,c}").unwrap(), vec!["a", "c"]);
        assert_eq!(array_literal("{\"a b\", c}").unwrap(), vec!["a b", "c"]);
        assert_eq!(array_literal("{}").unwrap(), Vec::<String>::new());
        assert!(array_literal("a,c").is_err());
    }
}
