//! Casts with PostgreSQL's results. An analyzer rule, run after type
//! coercion (so that the casts coercion adds are covered too), replaces
//! each cast whose result in DataFusion differs from PostgreSQL's by a
//! call of [`PgCast`]:
//!
//! - text to a date, timestamp, time or interval reads every form
//!   PostgreSQL reads (`epoch`, `24:00:00`, `BC`, `1 month 2 days
//!   03:04:05`), with its errors (22007, 22008);
//! - text to `bytea` reads `\x0102` as two bytes, not six characters;
//! - text to `boolean` reads `t`, `yes`, `on`, `1` and their prefixes;
//! - anything to text writes PostgreSQL's text (`2026-01-01 10:00:00`,
//!   `\x0102`, `true`, `1e+20`), not Arrow's;
//! - a float or numeric to an integer rounds (floats half to even,
//!   numerics half away from zero) instead of truncating, and a value out
//!   of range fails with 22003 (`integer out of range`);
//! - to `varchar(n)` cuts the text to n characters, as an explicit cast
//!   does in PostgreSQL;
//! - text to an array reads PostgreSQL's array literal (`'{1,2}'::int[]`,
//!   `'{a,"b c",NULL}'::text[]`), one dimension, 22P02 when malformed.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, BooleanArray, StringArray};
use arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef, Float64Type, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use super::temporal::{is_temporal_target, text_to_temporal};
use super::udf::pg_error;
use crate::types::text::{array_text, parse_bytea, TextFor};
use crate::types::PgType;

#[derive(Debug, Default)]
pub struct PgCasts;

impl AnalyzerRule for PgCasts {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            if node.inputs().is_empty() && !matches!(node, LogicalPlan::Values(_)) {
                return Ok(Transformed::no(node));
            }
            let schema = merge_schema(&node.inputs());
            let preserver = NamePreserver::new(&node);
            let t = node.map_expressions(|e| {
                let saved = preserver.save(&e);
                let t = e.transform_up(|e| rewrite(e, &schema))?;
                Ok(if t.transformed {
                    Transformed::yes(saved.restore(t.data))
                } else {
                    t
                })
            })?;
            if t.transformed {
                t.map_data(|p| p.recompute_schema())
            } else {
                Ok(t)
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "postgres_casts"
    }
}

/// What a cast does here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum CastKind {
    TextToTemporal,
    TextToBytea,
    TextToBool,
    TextToArray,
    ToText,
    ToInteger,
    /// An integer to a narrower integer, range-checked. DataFusion's own
    /// cast is checked too, but its optimizer takes a cast pair like
    /// `CAST(CAST(b AS smallint) AS int)` or a cast compared with a
    /// literal apart, and the check with it: rows PostgreSQL refuses
    /// with 22003 would pass.
    NarrowInteger,
    /// Text to `real`, `double precision` or `numeric`, as PostgreSQL
    /// reads numbers (`crate::types::number_text`).
    TextToNumber,
    /// `double precision` to `real`: 22003 where the value does not fit.
    NarrowFloat,
    /// A float to `numeric`: its value to 15 significant digits (6 for
    /// `real`), as PostgreSQL's `float8_numeric` prints it, not the binary
    /// fraction's every digit.
    FloatToNumeric,
    Varchar(u32),
    /// `char(n)`: cut or padded with spaces to n characters.
    Bpchar(u32),
    /// `timestamp(p)`, `timestamptz(p)`: rounded to p digits of a second
    /// (half away from zero, as `AdjustTimestampForTypmod`).
    TimestampPrecision(u8),
    /// `interval <fields>(p)`: the fields below the last one dropped, the
    /// seconds rounded to p digits (`AdjustIntervalForTypmod`).
    IntervalTypmod(i32),
    /// Text checked as JSON; `jsonb` in its canonical text.
    Json {
        canonical: bool,
    },
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn kind(from: &DataType, to: &Field) -> Option<CastKind> {
    let to_type = to.data_type();
    if is_text(to_type) {
        let declared = PgType::of_field(to).oid;
        if declared == crate::types::oid::JSONB || declared == crate::types::oid::JSON {
            // A value already of the type keeps its text.
            return (from.is_null() || is_text(from)).then_some(CastKind::Json {
                canonical: declared == crate::types::oid::JSONB,
            });
        }
        // `"char"`: the text's first character.
        if declared == crate::types::oid::CHAR {
            return Some(CastKind::Varchar(1));
        }
        if let Some(n) = PgType::of_field(to).max_length() {
            return Some(match declared {
                crate::types::oid::BPCHAR => CastKind::Bpchar(n as u32),
                _ => CastKind::Varchar(n as u32),
            });
        }
        if is_text(from) || from.is_null() || from.is_integer() {
            return None;
        }
        return Some(CastKind::ToText);
    }
    if is_text(from) {
        // Any timestamp unit: comparing a timestamp with text coerces
        // both to nanoseconds.
        if is_temporal_target(to_type) || matches!(to_type, DataType::Timestamp(..)) {
            return Some(CastKind::TextToTemporal);
        }
        return match to_type {
            DataType::Binary => Some(CastKind::TextToBytea),
            DataType::Boolean => Some(CastKind::TextToBool),
            DataType::List(_) => Some(CastKind::TextToArray),
            DataType::Float32 | DataType::Float64 | DataType::Decimal128(..) => {
                Some(CastKind::TextToNumber)
            }
            _ => None,
        };
    }
    if *from == DataType::Float64 && *to_type == DataType::Float32 {
        return Some(CastKind::NarrowFloat);
    }
    if matches!(from, DataType::Float32 | DataType::Float64)
        && matches!(to_type, DataType::Decimal128(..))
    {
        return Some(CastKind::FloatToNumeric);
    }
    let width = |t: &DataType| match t {
        DataType::Int8 => 1,
        DataType::Int16 => 2,
        DataType::Int32 => 4,
        _ => 8,
    };
    if to_type.is_signed_integer() && from.is_signed_integer() && width(to_type) < width(from) {
        return Some(CastKind::NarrowInteger);
    }
    if to_type.is_integer()
        && (matches!(
            from,
            DataType::Float32 | DataType::Float64 | DataType::Float16
        ) || matches!(from, DataType::Decimal128(..)))
    {
        return Some(CastKind::ToInteger);
    }
    None
}

/// The rounding a temporal target's typmod asks for, if any.
fn temporal_typmod(to: &Field) -> Option<CastKind> {
    let t = PgType::of_field(to);
    match (t.oid, to.data_type()) {
        (
            crate::types::oid::TIMESTAMP | crate::types::oid::TIMESTAMPTZ,
            DataType::Timestamp(..),
        ) if (0..6).contains(&t.typmod) => Some(CastKind::TimestampPrecision(t.typmod as u8)),
        (crate::types::oid::INTERVAL, DataType::Interval(_)) if t.typmod >= 0 => {
            Some(CastKind::IntervalTypmod(t.typmod))
        }
        _ => None,
    }
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let t = rewrite_kind(e, schema)?;
    let (to, is_typmod_cast) = match &t.data {
        Expr::Cast(Cast { field, .. }) | Expr::TryCast(TryCast { field, .. }) => {
            (Some(field.clone()), false)
        }
        Expr::ScalarFunction(f) => match f.func.inner().downcast_ref::<PgCast>() {
            Some(c) => (
                Some(c.to.clone()),
                matches!(
                    c.kind,
                    CastKind::TimestampPrecision(_) | CastKind::IntervalTypmod(_)
                ),
            ),
            None => (None, false),
        },
        _ => (None, false),
    };
    let Some(to) = to.filter(|_| !is_typmod_cast) else {
        return Ok(t);
    };
    let Some(kind) = temporal_typmod(&to) else {
        return Ok(t);
    };
    let udf = ScalarUDF::new_from_impl(PgCast {
        kind,
        to,
        signature: Signature::any(1, Volatility::Immutable),
    });
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::new(udf), vec![t.data]),
    )))
}

fn rewrite_kind(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let (inner, to) = match &e {
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
            (expr.as_ref(), field.clone())
        }
        _ => return Ok(Transformed::no(e)),
    };
    let Ok(from) = inner.get_type(schema) else {
        return Ok(Transformed::no(e));
    };
    let Some(kind) = kind(&from, &to) else {
        return Ok(Transformed::no(e));
    };
    // Text to varchar(n) after a cast to text of another type: cut the
    // text the inner cast gives.
    let arg = match kind {
        CastKind::Varchar(_) | CastKind::Bpchar(_) if !is_text(&from) && !from.is_null() => {
            let text = Expr::Cast(Cast::new(Box::new(inner.clone()), DataType::Utf8));
            rewrite(text, schema)?.data
        }
        _ => inner.clone(),
    };
    // An array's elements as plain values: a list scalar does not keep
    // its element field's metadata.
    let to = match (kind, to.data_type()) {
        (CastKind::TextToArray, DataType::List(element)) => {
            Arc::new(to.as_ref().clone().with_data_type(DataType::List(Arc::new(
                Field::new_list_field(element.data_type().clone(), true),
            ))))
        }
        _ => to,
    };
    let udf = ScalarUDF::new_from_impl(PgCast {
        kind,
        to,
        signature: Signature::any(1, Volatility::Immutable),
    });
    Ok(Transformed::yes(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::new(udf), vec![arg]),
    )))
}

/// Array literals (`'{1,2}'`) read as arrays of type `to`: the elements'
/// text, then cast to the element type.
fn text_to_array(input: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    use arrow::array::{ArrayBuilder, ListArray, StringBuilder};
    use arrow::buffer::{NullBuffer, OffsetBuffer};
    let text = arrow::compute::cast(input, &DataType::Utf8)?;
    let mut offsets = Vec::with_capacity(text.len() + 1);
    offsets.push(0i32);
    let mut values = StringBuilder::new();
    let mut valid = Vec::with_capacity(text.len());
    for v in text.as_string::<i32>().iter() {
        if let Some(v) = v {
            for item in super::pg_json::array_items(v)? {
                values.append_option(item);
            }
        }
        valid.push(v.is_some());
        offsets.push(
            i32::try_from(values.len())
                .map_err(|_| pg_error("54000", "array literals too large".to_string()))?,
        );
    }
    let DataType::List(element) = to else {
        return Ok(arrow::compute::cast(input, to)?);
    };
    let strict = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let values: ArrayRef = Arc::new(values.finish());
    let values =
        arrow::compute::cast_with_options(&values, element.data_type(), &strict).map_err(|e| {
            pg_error(
                "22P02",
                format!(
                    "invalid input syntax for type {}: {e}",
                    PgType::of_data_type(element.data_type()).format()
                ),
            )
        })?;
    // The element field of the cast's type, metadata and all.
    Ok(Arc::new(ListArray::try_new(
        element.clone(),
        OffsetBuffer::new(offsets.into()),
        values,
        Some(NullBuffer::from(valid)),
    )?))
}

/// A cast as PostgreSQL casts (see the module header).
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgCast {
    kind: CastKind,
    to: FieldRef,
    signature: Signature,
}

impl ScalarUDFImpl for PgCast {
    fn name(&self) -> &str {
        match self.kind {
            CastKind::ToText => "text",
            CastKind::Varchar(_) => "varchar",
            CastKind::Bpchar(_) => "bpchar",
            CastKind::TimestampPrecision(_) => match self.to.data_type() {
                DataType::Timestamp(_, Some(_)) => "timestamptz",
                _ => "timestamp",
            },
            CastKind::IntervalTypmod(_) => "interval",
            CastKind::Json { canonical: true } => "jsonb",
            CastKind::Json { canonical: false } => "json",
            CastKind::TextToBytea => "bytea",
            CastKind::TextToBool => "bool",
            CastKind::TextToArray => "array",
            CastKind::ToInteger | CastKind::NarrowInteger => match self.to.data_type() {
                DataType::Int16 => "int2",
                DataType::Int32 => "int4",
                _ => "int8",
            },
            CastKind::NarrowFloat => "float4",
            CastKind::FloatToNumeric => "numeric",
            CastKind::TextToNumber => match self.to.data_type() {
                DataType::Float32 => "float4",
                DataType::Float64 => "float8",
                _ => "numeric",
            },
            CastKind::TextToTemporal => match self.to.data_type() {
                DataType::Date32 => "date",
                DataType::Timestamp(_, Some(_)) => "timestamptz",
                DataType::Timestamp(_, None) => "timestamp",
                DataType::Time64(_) => "time",
                _ => "interval",
            },
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.to.data_type().clone())
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(
            Field::new(self.name(), self.to.data_type().clone(), nullable)
                .with_metadata(self.to.metadata().clone()),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let input = args.args[0].to_array(args.number_rows)?;
        let from_field = args.arg_fields[0].clone();
        let out = self.cast(&input, &from_field)?;
        if scalar {
            return Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&out, 0)?,
            ));
        }
        Ok(ColumnarValue::Array(out))
    }
}

impl PgCast {
    /// A numeric overflow as the target says it: past the declared
    /// precision, or past what an unconstrained numeric holds at all.
    fn numeric_overflow(
        &self,
        e: crate::types::number_text::NumberTextError,
    ) -> crate::types::number_text::NumberTextError {
        let unconstrained = self
            .to
            .metadata()
            .get(crate::types::SQL_TYPE_METADATA_KEY)
            .is_none_or(|d| d == "numeric" || d == "numeric(*)");
        match unconstrained {
            true => crate::types::number_text::unconstrained_overflow(e),
            false => e,
        }
    }

    fn cast(&self, input: &ArrayRef, from: &Field) -> Result<ArrayRef> {
        let to = self.to.data_type();
        Ok(match self.kind {
            CastKind::TextToTemporal => match to {
                DataType::Timestamp(unit, zone) if *unit != TimeUnit::Microsecond => {
                    let us = DataType::Timestamp(TimeUnit::Microsecond, zone.clone());
                    arrow::compute::cast(&text_to_temporal(input, &us)?, to)?
                }
                _ => text_to_temporal(input, to)?,
            },
            CastKind::ToText => {
                let text = array_text(input, from, TextFor::Cast)?;
                arrow::compute::cast(&text, to)?
            }
            CastKind::TextToArray => text_to_array(input, to)?,
            CastKind::TimestampPrecision(p) => crate::types::typmod::round_timestamps(input, p)?,
            CastKind::IntervalTypmod(typmod) => {
                crate::types::typmod::intervals_for_typmod(input, typmod)
            }
            CastKind::Bpchar(n) => {
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let fitted: StringArray = text
                    .as_string::<i32>()
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            let mut s: String = v.chars().take(n as usize).collect();
                            let len = s.chars().count();
                            s.extend(std::iter::repeat_n(' ', n as usize - len));
                            s
                        })
                    })
                    .collect();
                arrow::compute::cast(&fitted, to)?
            }
            CastKind::Varchar(n) => {
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let cut: StringArray = text
                    .as_string::<i32>()
                    .iter()
                    .map(|v| {
                        v.map(|v| match v.char_indices().nth(n as usize) {
                            Some((at, _)) => &v[..at],
                            None => v,
                        })
                    })
                    .collect();
                arrow::compute::cast(&cut, to)?
            }
            CastKind::Json { canonical } => {
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let mut out = Vec::with_capacity(text.len());
                for v in text.as_string::<i32>().iter() {
                    out.push(match v {
                        Some(v) => {
                            let doc = crate::types::json::parse(v).map_err(|e| {
                                pg_error(
                                    "22P02",
                                    format!("invalid input syntax for type json: {}", e.detail),
                                )
                            })?;
                            Some(if canonical {
                                doc.canonical().to_string()
                            } else {
                                v.to_string()
                            })
                        }
                        None => None,
                    });
                }
                arrow::compute::cast(&StringArray::from(out), to)?
            }
            CastKind::TextToBytea => {
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let mut out = Vec::with_capacity(text.len());
                for v in text.as_string::<i32>().iter() {
                    out.push(match v {
                        Some(v) => Some(parse_bytea(v).ok_or_else(|| {
                            pg_error("22P02", "invalid input syntax for type bytea")
                        })?),
                        None => None,
                    });
                }
                Arc::new(BinaryArray::from_iter(out))
            }
            CastKind::TextToBool => {
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let mut out = Vec::with_capacity(text.len());
                for v in text.as_string::<i32>().iter() {
                    out.push(match v {
                        Some(v) => Some(parse_bool(v).ok_or_else(|| {
                            pg_error(
                                "22P02",
                                format!("invalid input syntax for type boolean: \"{v}\""),
                            )
                        })?),
                        None => None,
                    });
                }
                Arc::new(BooleanArray::from(out))
            }
            CastKind::TextToNumber => {
                use crate::types::number_text::{parse_float4, parse_float8, parse_numeric};
                let text = arrow::compute::cast(input, &DataType::Utf8)?;
                let text = text.as_string::<i32>();
                let number_error = |e: crate::types::number_text::NumberTextError| {
                    pg_error(e.sqlstate(), e.to_string())
                };
                match to {
                    DataType::Float32 => Arc::new(
                        text.iter()
                            .map(|v| v.map(parse_float4).transpose().map_err(number_error))
                            .collect::<Result<arrow::array::Float32Array>>()?,
                    ),
                    DataType::Float64 => Arc::new(
                        text.iter()
                            .map(|v| v.map(parse_float8).transpose().map_err(number_error))
                            .collect::<Result<arrow::array::Float64Array>>()?,
                    ),
                    DataType::Decimal128(p, s) => Arc::new(
                        text.iter()
                            .map(|v| {
                                v.map(|v| parse_numeric(v, *p, *s))
                                    .transpose()
                                    .map_err(|e| number_error(self.numeric_overflow(e)))
                            })
                            .collect::<Result<arrow::array::Decimal128Array>>()?
                            .with_precision_and_scale(*p, *s)?,
                    ),
                    other => arrow::compute::cast(input, other)?,
                }
            }
            CastKind::FloatToNumeric => {
                let DataType::Decimal128(p, s) = to else {
                    return Err(pg_error("XX000", format!("a float to {to:?}")));
                };
                let digits = match input.data_type() {
                    DataType::Float32 => 6,
                    _ => 15,
                };
                let doubles = arrow::compute::cast(input, &DataType::Float64)?;
                let mut out = Vec::with_capacity(doubles.len());
                for v in doubles.as_primitive::<Float64Type>().iter() {
                    out.push(match v {
                        Some(v) if v.is_finite() => Some(
                            crate::types::number_text::parse_numeric(
                                &format!("{:.*e}", digits - 1, v),
                                *p,
                                *s,
                            )
                            .map_err(|e| {
                                let e = self.numeric_overflow(e);
                                pg_error(e.sqlstate(), e.to_string())
                            })?,
                        ),
                        Some(v) => {
                            let word = match v {
                                _ if v.is_nan() => "NaN",
                                _ if v > 0.0 => "Infinity",
                                _ => "-Infinity",
                            };
                            let e = crate::types::number_text::NumberTextError::NumericSpecial(
                                word.to_string(),
                            );
                            return Err(pg_error(e.sqlstate(), e.to_string()));
                        }
                        None => None,
                    });
                }
                Arc::new(arrow::array::Decimal128Array::from(out).with_precision_and_scale(*p, *s)?)
            }
            CastKind::NarrowFloat => {
                let doubles = input.as_primitive::<Float64Type>();
                Arc::new(
                    crate::types::number_text::narrow_to_real(doubles)
                        .map_err(|e| pg_error(e.sqlstate(), e.to_string()))?,
                )
            }
            CastKind::NarrowInteger => {
                let (min, max, name) = match to {
                    DataType::Int8 => (i8::MIN as i64, i8::MAX as i64, "\"char\""),
                    DataType::Int16 => (i16::MIN as i64, i16::MAX as i64, "smallint"),
                    _ => (i32::MIN as i64, i32::MAX as i64, "integer"),
                };
                let wide = arrow::compute::cast(input, &DataType::Int64)?;
                let wide = wide.as_primitive::<arrow::datatypes::Int64Type>();
                if wide.iter().flatten().any(|v| v < min || v > max) {
                    return Err(pg_error("22003", format!("{name} out of range")));
                }
                arrow::compute::cast(input, to)?
            }
            CastKind::ToInteger => {
                let (min, max, name) = match to {
                    DataType::Int16 => (i16::MIN as f64, i16::MAX as f64, "smallint"),
                    DataType::Int32 => (i32::MIN as f64, i32::MAX as f64, "integer"),
                    _ => (i64::MIN as f64, i64::MAX as f64, "bigint"),
                };
                let rounded: Vec<Option<f64>> = match input.data_type() {
                    DataType::Decimal128(_, scale) => {
                        let d = input.as_primitive::<Decimal128Type>();
                        let unit = 10i128.pow((*scale).max(0) as u32);
                        d.iter()
                            .map(|v| {
                                v.map(|v| {
                                    // Half away from zero, as numeric rounds.
                                    let q = v / unit;
                                    let r = (v % unit).abs();
                                    let q = if r * 2 >= unit { q + v.signum() } else { q };
                                    q as f64
                                })
                            })
                            .collect()
                    }
                    _ => {
                        let f = arrow::compute::cast(input, &DataType::Float64)?;
                        f.as_primitive::<Float64Type>()
                            .iter()
                            .map(|v| v.map(f64::round_ties_even))
                            .collect()
                    }
                };
                let mut out = Vec::with_capacity(rounded.len());
                for v in rounded {
                    match v {
                        Some(v) if v.is_nan() || v < min || v >= max + 1.0 => {
                            return Err(pg_error("22003", format!("{name} out of range")))
                        }
                        Some(v) => out.push(Some(v as i64)),
                        None => out.push(None),
                    }
                }
                let wide: ArrayRef = Arc::new(arrow::array::Int64Array::from(out));
                arrow::compute::cast(&wide, to)?
            }
        })
    }
}

/// PostgreSQL's boolean input: `t`, `true`, `yes`, `on`, `1` and their
/// false forms, any prefix of the words, in any case, trimmed.
pub fn parse_bool(text: &str) -> Option<bool> {
    let t = text.trim().to_ascii_lowercase();
    if t.is_empty() {
        return None;
    }
    match t.as_str() {
        "1" => return Some(true),
        "0" => return Some(false),
        "on" => return Some(true),
        "of" | "off" => return Some(false),
        "o" => return None,
        _ => {}
    }
    for (word, v) in [
        ("true", true),
        ("yes", true),
        ("false", false),
        ("no", false),
    ] {
        if word.starts_with(&t) {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_postgresql_reads_them() {
        for (t, v) in [
            ("t", Some(true)),
            ("TRUE", Some(true)),
            ("ye", Some(true)),
            ("on", Some(true)),
            (" 1 ", Some(true)),
            ("f", Some(false)),
            ("n", Some(false)),
            ("off", Some(false)),
            ("0", Some(false)),
            ("o", None),
            ("maybe", None),
            ("", None),
        ] {
            assert_eq!(parse_bool(t), v, "{t}");
        }
    }
}
