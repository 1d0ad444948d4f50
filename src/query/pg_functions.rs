//! PostgreSQL's functions that drivers and tools call and DataFusion lacks
//! or answers differently: `version()` (SQLAlchemy parses it),
//! `current_setting`, `set_config`, `pg_sleep`, `json_build_object`,
//! `pg_get_serial_sequence`, `pg_collation_is_visible` and `to_regtype`, and the
//! settings that `SHOW` answers.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::async_udf::{AsyncScalarUDF, AsyncScalarUDFImpl};
use datafusion::logical_expr::{
    create_udf, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// What `version()` answers: PostgreSQL's form, which drivers parse for the
/// server's major version.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 16.6 (Sluice {}) on {}-unknown-linux-gnu, compiled by rustc, 64-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    )
}

/// PostgreSQL settings that `SHOW`, `current_setting` and `pg_settings`
/// answer: the names a setting goes by, and its value.
const SETTINGS: &[(&[&str], &str)] = &[
    (&["server_version"], "16.6"),
    (&["server_version_num"], "160006"),
    (&["server_encoding"], "UTF8"),
    (&["client_encoding"], "UTF8"),
    (&["standard_conforming_strings"], "on"),
    (&["DateStyle", "datestyle"], "ISO, MDY"),
    (&["TimeZone", "timezone", "time zone"], "UTC"),
    (
        &[
            "transaction_isolation",
            "transaction isolation level",
            "default_transaction_isolation",
        ],
        "read committed",
    ),
    (
        &["transaction_read_only", "default_transaction_read_only"],
        "off",
    ),
    (&["search_path"], "public"),
    (&["integer_datetimes"], "on"),
    (&["max_identifier_length"], "63"),
    // JDBC's getImportedKeys and getIndexInfo read this one.
    (&["max_index_keys"], "32"),
    (&["application_name"], ""),
    (&["is_superuser"], "on"),
    (&["IntervalStyle", "intervalstyle"], "postgres"),
    (&["lc_collate"], "C.UTF-8"),
    (&["lc_ctype"], "C.UTF-8"),
    (&["statement_timeout"], "0"),
    (&["lock_timeout"], "0"),
    (&["idle_in_transaction_session_timeout"], "0"),
    // asyncpg reads it before it looks up array and composite types.
    (&["jit"], "off"),
];

/// A setting's value by any of its names, in any case.
pub fn setting(name: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        .map(|(_, v)| *v)
}

/// `pg_settings`: one row per setting, by its first name.
pub fn settings_table() -> Result<datafusion::datasource::MemTable> {
    use arrow::datatypes::{Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("setting", DataType::Utf8, true),
        Field::new("unit", DataType::Utf8, true),
        Field::new("category", DataType::Utf8, true),
        Field::new("short_desc", DataType::Utf8, true),
        Field::new("context", DataType::Utf8, true),
        Field::new("vartype", DataType::Utf8, true),
        Field::new("source", DataType::Utf8, true),
        Field::new("reset_val", DataType::Utf8, true),
        Field::new("pending_restart", DataType::Boolean, true),
    ]));
    let names: StringArray = SETTINGS.iter().map(|(n, _)| Some(n[0])).collect();
    let values: StringArray = SETTINGS.iter().map(|(_, v)| Some(*v)).collect();
    let rows = SETTINGS.len();
    let text = |v: Option<&str>| -> ArrayRef { Arc::new(StringArray::from(vec![v; rows])) };
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(names),
            Arc::new(values.clone()),
            text(None),
            text(None),
            text(None),
            text(Some("internal")),
            text(Some("string")),
            text(Some("default")),
            Arc::new(values),
            Arc::new(arrow::array::BooleanArray::from(vec![false; rows])),
        ],
    )?;
    datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]])
}

/// Applies a one-argument text function to a scalar or an array.
fn map_text(
    args: &[ColumnarValue],
    f: impl Fn(&str) -> Result<Option<String>>,
) -> Result<ColumnarValue> {
    match args.first() {
        Some(ColumnarValue::Scalar(v)) => {
            let text = match v {
                ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => {
                    s.clone()
                }
                other => (!other.is_null()).then(|| other.to_string()),
            };
            let out = match text {
                Some(t) => f(&t)?,
                None => None,
            };
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(out)))
        }
        Some(ColumnarValue::Array(a)) => {
            let a = arrow::compute::cast(a, &DataType::Utf8)?;
            let strings = a.as_string::<i32>();
            let out = (0..strings.len())
                .map(|i| {
                    if strings.is_null(i) {
                        Ok(None)
                    } else {
                        f(strings.value(i))
                    }
                })
                .collect::<Result<StringArray>>()?;
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }
        None => Err(DataFusionError::Plan("missing argument".into())),
    }
}

fn current_setting(name: &str) -> Result<Option<String>> {
    match setting(name) {
        Some(v) => Ok(Some(v.to_string())),
        None => Err(DataFusionError::Plan(format!(
            "unrecognized configuration parameter \"{name}\""
        ))),
    }
}

/// `json_build_object(key, value, ...)`: a JSON object as text (SQLAlchemy's
/// column reflection builds identity options with it).
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return Err(DataFusionError::Plan(
                "json_build_object takes pairs of keys and values".into(),
            ));
        }
        let n = args.number_rows;
        let columns = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let objects = (0..n)
            .map(|row| {
                let mut object = serde_json::Map::new();
                for pair in columns.chunks(2) {
                    let key = ScalarValue::try_from_array(&pair[0], row)?;
                    let value = ScalarValue::try_from_array(&pair[1], row)?;
                    object.insert(
                        if key.is_null() {
                            String::new()
                        } else {
                            key.to_string()
                        },
                        json_value(&value),
                    );
                }
                Ok(Some(serde_json::Value::Object(object).to_string()))
            })
            .collect::<Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(objects)))
    }
}

fn json_value(v: &ScalarValue) -> serde_json::Value {
    use serde_json::Value;
    if v.is_null() {
        return Value::Null;
    }
    match v {
        ScalarValue::Boolean(Some(b)) => Value::Bool(*b),
        ScalarValue::Int8(Some(x)) => Value::from(*x),
        ScalarValue::Int16(Some(x)) => Value::from(*x),
        ScalarValue::Int32(Some(x)) => Value::from(*x),
        ScalarValue::Int64(Some(x)) => Value::from(*x),
        ScalarValue::UInt32(Some(x)) => Value::from(*x),
        ScalarValue::UInt64(Some(x)) => Value::from(*x),
        ScalarValue::Float64(Some(x)) => Value::from(*x),
        ScalarValue::Float32(Some(x)) => Value::from(*x as f64),
        other => Value::String(other.to_string()),
    }
}

/// Registers the functions, replacing DataFusion's of the same name.
/// The oid of a built-in type by any of its names.
fn builtin_type_oid(name: &str) -> Option<i32> {
    Some(match name.trim().to_lowercase().as_str() {
        "bool" | "boolean" => 16,
        "bytea" => 17,
        "char" => 18,
        "name" => 19,
        "int8" | "bigint" => 20,
        "int2" | "smallint" => 21,
        "int4" | "integer" | "int" => 23,
        "text" => 25,
        "oid" => 26,
        "json" => 114,
        "float4" | "real" => 700,
        "float8" | "double precision" => 701,
        "bpchar" | "character" => 1042,
        "varchar" | "character varying" => 1043,
        "date" => 1082,
        "timestamp" | "timestamp without time zone" => 1114,
        "timestamptz" | "timestamp with time zone" => 1184,
        "numeric" | "decimal" => 1700,
        "uuid" => 2950,
        "jsonb" => 3802,
        _ => return None,
    })
}

/// Splits a qualified name as PostgreSQL's `parse_ident` does: parts
/// separated by dots with optional spaces around them (ADBC writes
/// `"public" . "t"`), quoted parts kept as written with `""` for a quote,
/// unquoted parts in lower case.
pub fn parse_ident(text: &str) -> Result<Vec<String>> {
    let invalid = || DataFusionError::Plan(format!("string is not a valid identifier: \"{text}\""));
    let mut parts = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut part = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    Some('"') if chars.next_if_eq(&'"').is_some() => part.push('"'),
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err(invalid()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '.' && *c != '"') {
                part.extend(c.to_lowercase());
            }
        }
        if part.is_empty() {
            return Err(invalid());
        }
        parts.push(part);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Ok(parts),
            Some('.') => continue,
            Some(_) => return Err(invalid()),
        }
    }
}

/// `_pg_expandarray(a)`: PostgreSQL's set of `(x, n)` rows, one per
/// element (the element and its 1-based position), here as a list of
/// structs; the SQL front end wraps the call in `unnest` (JDBC's key
/// metadata queries use it).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExpandArray {
    signature: Signature,
}

impl ExpandArray {
    fn fields(element: &DataType) -> arrow::datatypes::Fields {
        use arrow::datatypes::Field;
        vec![
            Field::new("x", element.clone(), true),
            Field::new("n", DataType::Int32, false),
        ]
        .into()
    }
}

impl ScalarUDFImpl for ExpandArray {
    fn name(&self) -> &str {
        "_pg_expandarray"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [DataType::List(f)] => Ok(DataType::List(Arc::new(
                arrow::datatypes::Field::new_list_field(
                    DataType::Struct(Self::fields(f.data_type())),
                    true,
                ),
            ))),
            other => Err(DataFusionError::Plan(format!(
                "_pg_expandarray takes an array, not {other:?}"
            ))),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = matches!(args.args.first(), Some(ColumnarValue::Scalar(_)));
        let input = args.args[0].to_array(args.number_rows)?;
        let lists = input
            .as_list_opt::<i32>()
            .ok_or_else(|| DataFusionError::Plan("_pg_expandarray takes an array".into()))?;
        let offsets = lists.offsets();
        let start = offsets.first().copied().unwrap_or(0);
        let end = offsets.last().copied().unwrap_or(0);
        let values = lists.values().slice(start as usize, (end - start) as usize);
        let mut positions = Vec::with_capacity(values.len());
        for w in offsets.windows(2) {
            positions.extend(1..=(w[1] - w[0]));
        }
        let fields = Self::fields(values.data_type());
        let structs = arrow::array::StructArray::try_new(
            fields.clone(),
            vec![values, Arc::new(arrow::array::Int32Array::from(positions))],
            None,
        )?;
        let rebased = arrow::buffer::OffsetBuffer::new(
            offsets.iter().map(|o| o - start).collect::<Vec<_>>().into(),
        );
        let out = arrow::array::ListArray::try_new(
            Arc::new(arrow::datatypes::Field::new_list_field(
                DataType::Struct(fields),
                true,
            )),
            rebased,
            Arc::new(structs),
            lists.nulls().cloned(),
        )?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(Arc::new(out))
        })
    }
}

/// `format_type(oid, typmod)` that names an interval's fields and
/// precision (`interval hour to minute`, `interval(2)`), over
/// datafusion-pg-catalog's for every other type.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FormatType {
    inner: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for FormatType {
    fn name(&self) -> &str {
        "format_type"
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let as_i64 = |a: &ColumnarValue| -> Result<ArrayRef> {
            Ok(arrow::compute::cast(&a.to_array(rows)?, &DataType::Int64)?)
        };
        let oids = args.args.first().map(as_i64).transpose()?;
        let typmods = args.args.get(1).map(as_i64).transpose()?;
        let named = self.inner.invoke_with_args(args)?.to_array(rows)?;
        let (Some(oids), Some(typmods)) = (oids, typmods) else {
            return Ok(ColumnarValue::Array(named));
        };
        let named = arrow::compute::cast(&named, &DataType::Utf8)?;
        let (oids, typmods, named) = (
            oids.as_primitive::<arrow::datatypes::Int64Type>(),
            typmods.as_primitive::<arrow::datatypes::Int64Type>(),
            named.as_string::<i32>(),
        );
        let out: StringArray = (0..named.len())
            .map(|i| {
                let interval = oids.is_valid(i)
                    && oids.value(i) == i64::from(crate::types::oid::INTERVAL)
                    && typmods.is_valid(i)
                    && typmods.value(i) >= 0;
                match interval {
                    true => Some(sluice_catalog::interval_type_name(typmods.value(i) as i32)),
                    false => named.is_valid(i).then(|| named.value(i).to_string()),
                }
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(out),
        })
    }
}

pub fn register(ctx: &SessionContext) {
    ctx.register_udf(super::pg_array_remove::array_remove());
    if let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, "format_type") {
        ctx.register_udf(ScalarUDF::new_from_impl(FormatType { inner }));
    }
    // Typed as PostgreSQL's; sized_functions then wraps this one.
    if let Ok(datafusion) = datafusion::execution::FunctionRegistry::udf(ctx, "generate_series") {
        ctx.register_udf(super::pg_generate_series::generate_series(
            datafusion.as_ref().clone(),
        ));
    }
    // Replaces datafusion-pg-catalog's, which keeps the spaces around a
    // dot as parts; `'name'::regclass` looks names up through it.
    ctx.register_udf(create_udf(
        "parse_ident",
        vec![DataType::Utf8],
        DataType::List(Arc::new(arrow::datatypes::Field::new_list_field(
            DataType::Utf8,
            true,
        ))),
        Volatility::Immutable,
        Arc::new(|args| {
            let text = arrow::compute::cast(&args[0].to_array(1)?, &DataType::Utf8)?;
            let text = text.as_string::<i32>();
            let mut out = arrow::array::ListBuilder::new(arrow::array::StringBuilder::new());
            for t in text.iter() {
                match t {
                    Some(t) => {
                        for part in parse_ident(t)? {
                            out.values().append_value(part);
                        }
                        out.append(true);
                    }
                    None => out.append(false),
                }
            }
            let out: ArrayRef = Arc::new(out.finish());
            Ok(match &args[0] {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(out),
            })
        }),
    ));
    ctx.register_udf(ScalarUDF::new_from_impl(ExpandArray {
        signature: Signature::any(1, Volatility::Immutable),
    }));
    ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject {
        signature: Signature::variadic_any(Volatility::Immutable),
    }));
    ctx.register_udf(create_udf(
        "version",
        vec![],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| {
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
                version_string(),
            ))))
        }),
    ));
    ctx.register_udf(create_udf(
        "current_setting",
        vec![DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|args| map_text(args, current_setting)),
    ));
    // SET is accepted and has no effect; set_config answers the value, as
    // PostgreSQL does.
    ctx.register_udf(create_udf(
        "set_config",
        vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
        DataType::Utf8,
        Volatility::Volatile,
        Arc::new(|args| map_text(&args[1..], |v| Ok(Some(v.to_string())))),
    ));
    // No table has a serial column: SQLAlchemy's reflection asks.
    ctx.register_udf(create_udf(
        "pg_get_serial_sequence",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Stable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None)))),
    ));
    // Every collation is visible: there is one search path.
    ctx.register_udf(create_udf(
        "pg_collation_is_visible",
        vec![DataType::Int64],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(|_| Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))),
    ));
    // No object has a comment (there is no COMMENT ON): psql's `\d+` and
    // dbt's docs ask.
    for name in ["col_description", "obj_description", "shobj_description"] {
        ctx.register_udf(constant_function(name, 2, ScalarValue::Utf8(None)));
    }
    // One search path, and every function on it: `\df` asks.
    ctx.register_udf(constant_function(
        "pg_function_is_visible",
        1,
        ScalarValue::Boolean(Some(true)),
    ));
    // Sluice is never a standby: DuckDB's ATTACH asks before it exports a
    // snapshot for its parallel scan.
    ctx.register_udf(constant_function(
        "pg_is_in_recovery",
        0,
        ScalarValue::Boolean(Some(false)),
    ));
    // There are no temporary schemas: dbt's `docs generate` asks.
    ctx.register_udf(constant_function(
        "pg_is_other_temp_schema",
        1,
        ScalarValue::Boolean(Some(false)),
    ));
    // psycopg looks types up by name (SQLAlchemy asks for hstore on
    // connect): the oid of a built-in type, NULL for any other name.
    ctx.register_udf(create_udf(
        "to_regtype",
        vec![DataType::Utf8],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(|args| {
            let text = arrow::compute::cast(&args[0].to_array(1)?, &DataType::Utf8)?;
            let text = text.as_string::<i32>();
            let oids: arrow::array::Int32Array = text
                .iter()
                .map(|name| name.and_then(builtin_type_oid))
                .collect();
            Ok(match &args[0] {
                ColumnarValue::Scalar(_) => {
                    ColumnarValue::Scalar(ScalarValue::try_from_array(&oids, 0)?)
                }
                ColumnarValue::Array(_) => ColumnarValue::Array(Arc::new(oids)),
            })
        }),
    ));
    ctx.register_udf(AsyncScalarUDF::new(Arc::new(PgSleep::default())).into_scalar_udf());
}

/// A catalog function whose answer is the same for every argument (of
/// any type, up to `max_args` of them).
fn constant_function(name: &str, max_args: usize, value: ScalarValue) -> ScalarUDF {
    use datafusion::logical_expr::{Signature, TypeSignature};
    let returns = value.data_type();
    let signature = Signature::new(
        TypeSignature::OneOf(
            (0..=max_args)
                .map(|n| match n {
                    0 => TypeSignature::Nullary,
                    n => TypeSignature::Any(n),
                })
                .collect(),
        ),
        Volatility::Stable,
    );
    ScalarUDF::from(
        datafusion::logical_expr::SimpleScalarUDF::new_with_signature(
            name,
            signature,
            returns,
            Arc::new(move |_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(value.clone()))),
        ),
    )
}

/// `pg_sleep(seconds)`: waits without holding a thread, so that a cancel
/// or `statement_timeout` can stop it (the statement's result stream is
/// dropped while it waits). Returns void, which prints as an empty string.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PgSleep {
    signature: Signature,
}

impl Default for PgSleep {
    fn default() -> Self {
        PgSleep {
            signature: Signature::exact(vec![DataType::Float64], Volatility::Volatile),
        }
    }
}

impl ScalarUDFImpl for PgSleep {
    fn name(&self) -> &str {
        "pg_sleep"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Err(DataFusionError::Internal(
            "pg_sleep runs as an async function".into(),
        ))
    }
}

#[async_trait::async_trait]
impl AsyncScalarUDFImpl for PgSleep {
    async fn invoke_async_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let seconds: f64 = match args.args.first() {
            Some(ColumnarValue::Scalar(ScalarValue::Float64(Some(s)))) => *s,
            Some(ColumnarValue::Array(a)) => {
                let a = arrow::compute::cast(a, &DataType::Float64)?;
                let a = a.as_primitive::<Float64Type>();
                (0..a.len())
                    .filter(|&i| a.is_valid(i))
                    .map(|i| a.value(i))
                    .sum()
            }
            _ => 0.0,
        };
        if seconds.is_finite() && seconds > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(seconds.min(86_400.0))).await;
        }
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
            Some(String::new()),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_postgresql_splits_them() {
        assert_eq!(parse_ident("public.t").unwrap(), ["public", "t"]);
        assert_eq!(
            parse_ident(" \"public\" . \"My\"\"T\" ").unwrap(),
            ["public", "My\"T"]
        );
        assert_eq!(parse_ident("Public.T").unwrap(), ["public", "t"]);
        for bad in ["", "a.", ".a", "a b", "\"a", "a..b"] {
            assert!(parse_ident(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn functions_answer_as_postgresql() {
        let ctx = SessionContext::new();
        register(&ctx);
        let one = |sql: &'static str| {
            let ctx = ctx.clone();
            async move {
                let batches = ctx.sql(sql).await?.collect().await?;
                let a = arrow::compute::cast(batches[0].column(0), &DataType::Utf8)?;
                Ok::<String, DataFusionError>(a.as_string::<i32>().value(0).to_string())
            }
        };
        assert!(one("SELECT version()")
            .await
            .unwrap()
            .starts_with("PostgreSQL 16.6 (Sluice "));
        assert_eq!(
            one("SELECT current_setting('TimeZone')").await.unwrap(),
            "UTC"
        );
        assert_eq!(
            one("SELECT set_config('search_path', 'public', false)")
                .await
                .unwrap(),
            "public"
        );
        let started = std::time::Instant::now();
        assert_eq!(one("SELECT pg_sleep(0.2)").await.unwrap(), "");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(one("SELECT to_regtype('integer')").await.unwrap(), "23");
        assert_eq!(
            one("SELECT to_regtype('hstore') IS NULL").await.unwrap(),
            "true"
        );
        assert!(one("SELECT current_setting('no_such_thing')")
            .await
            .is_err());
    }
}
