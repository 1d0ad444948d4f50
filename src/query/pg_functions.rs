//! PostgreSQL's functions that drivers and tools call and DataFusion lacks
//! or answers differently: `version()` (SQLAlchemy parses it),
//! `current_setting`, `set_config`, `pg_sleep` and
//! `pg_get_serial_sequence`, and the settings that `SHOW` answers.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
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

/// PostgreSQL settings that `SHOW` and `current_setting` answer.
pub fn setting(name: &str) -> Option<&'static str> {
    Some(match name.to_lowercase().as_str() {
        "server_version" => "16.6",
        "server_version_num" => "160006",
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" => "on",
        "datestyle" => "ISO, MDY",
        "timezone" | "time zone" => "UTC",
        "transaction_isolation"
        | "transaction isolation level"
        | "default_transaction_isolation" => "read committed",
        "transaction_read_only" | "default_transaction_read_only" => "off",
        "search_path" => "public",
        "integer_datetimes" => "on",
        "max_identifier_length" => "63",
        "application_name" => "",
        "is_superuser" => "on",
        "intervalstyle" => "postgres",
        "lc_collate" | "lc_ctype" => "C.UTF-8",
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => "0",
        _ => return None,
    })
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

/// Sleeps without holding up the runtime's other tasks.
fn sleep(seconds: f64) {
    if seconds.is_nan() || seconds <= 0.0 || !seconds.is_finite() {
        return;
    }
    let d = Duration::from_secs_f64(seconds.min(86_400.0));
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| std::thread::sleep(d))
        }
        _ => std::thread::sleep(d),
    }
}

/// Registers the functions, replacing DataFusion's of the same name.
pub fn register(ctx: &SessionContext) {
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
    ctx.register_udf(create_udf(
        "pg_sleep",
        vec![DataType::Float64],
        DataType::Utf8,
        Volatility::Volatile,
        Arc::new(|args| {
            let seconds = match args.first() {
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
            sleep(seconds);
            // PostgreSQL's pg_sleep returns void, which prints as an empty
            // string.
            Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                Some(String::new()),
            )))
        }),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(one("SELECT current_setting('no_such_thing')")
            .await
            .is_err());
    }
}
