use sluice_catalog::{
    kafka_column_defs, ColumnDef, KafkaSource, SourceFormat, SourceStart, SqlType, TableDef,
    TableOptions, WatermarkDef, DELETED_COLUMN, HIDDEN_COLUMNS, OP_COLUMN,
};
use sqlparser::ast::{self, CharacterLength, ColumnOption, DataType, ExactNumberInfo};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::error::SqlError;
use crate::parse::{ident_name, StreamingClauses};

/// Largest partition count a table may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// A parsed `CREATE TABLE`; `table.id` is assigned by the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTable {
    pub table: TableDef,
    pub if_not_exists: bool,
    pub append_only: bool,
}

pub(crate) fn create_table(
    ct: &ast::CreateTable,
    clauses: &StreamingClauses,
) -> Result<CreateTable, SqlError> {
    if ct.query.is_some() || ct.like.is_some() || ct.clone.is_some() {
        return Err(SqlError::Unsupported(
            "CREATE TABLE AS, LIKE and CLONE are not supported".into(),
        ));
    }
    let name = ct
        .name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_name)
        .ok_or_else(|| SqlError::Syntax(format!("invalid table name {}", ct.name)))?;
    if ct.columns.is_empty() {
        return Err(SqlError::Syntax("a table needs at least one column".into()));
    }
    let mut columns: Vec<ColumnDef> = Vec::with_capacity(ct.columns.len());
    let mut primary_key: Vec<String> = Vec::new();
    for c in &ct.constraints {
        match c {
            ast::TableConstraint::PrimaryKey(pk) => {
                if !primary_key.is_empty() {
                    return Err(SqlError::Syntax(
                        "multiple primary keys for a table are not allowed".into(),
                    ));
                }
                primary_key = pk
                    .columns
                    .iter()
                    .map(|c| match &c.column.expr {
                        ast::Expr::Identifier(i) => Ok(ident_name(i)),
                        other => Err(SqlError::Unsupported(format!(
                            "primary key expression {other} is not supported"
                        ))),
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => {
                return Err(SqlError::Unsupported(format!(
                    "table constraint {other} is not supported"
                )))
            }
        }
    }
    for col in &ct.columns {
        let col_name = ident_name(&col.name);
        if HIDDEN_COLUMNS.contains(&col_name.as_str())
            || col_name.starts_with("_kafka_")
            || col_name == DELETED_COLUMN
            || col_name == OP_COLUMN
        {
            return Err(SqlError::InvalidOption(format!(
                "column name \"{col_name}\" is reserved for a system column"
            )));
        }
        if columns.iter().any(|c| c.name == col_name) {
            return Err(SqlError::DuplicateColumn(col_name));
        }
        let mut nullable = true;
        for opt in &col.options {
            match &opt.option {
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Null => nullable = true,
                ColumnOption::PrimaryKey(_) => {
                    if !primary_key.is_empty() {
                        return Err(SqlError::Syntax(
                            "multiple primary keys for a table are not allowed".into(),
                        ));
                    }
                    primary_key.push(col_name.clone());
                }
                other => {
                    return Err(SqlError::Unsupported(format!(
                        "column option {other} is not supported"
                    )))
                }
            }
        }
        columns.push(ColumnDef {
            name: col_name,
            ty: sql_type(&col.data_type)?,
            nullable,
        });
    }
    if !primary_key.is_empty() && clauses.append_only {
        return Err(SqlError::Syntax(
            "an APPEND ONLY table has no primary key: leave out APPEND ONLY for a keyed table"
                .into(),
        ));
    }
    for k in &primary_key {
        // Key columns are NOT NULL, as in PostgreSQL.
        match columns.iter_mut().find(|c| &c.name == k) {
            Some(c) => c.nullable = false,
            None => return Err(SqlError::UndefinedColumn(k.clone())),
        }
    }
    let mut options = table_options(&ct.table_options, &columns)?;
    if primary_key.is_empty() {
        if options.delete_retention_secs.is_some() {
            return Err(SqlError::InvalidOption(
                "delete_retention applies to keyed tables (with a PRIMARY KEY)".into(),
            ));
        }
    } else {
        // Every version of a key must land in the same partition.
        match &options.partition_key {
            Some(k) if !primary_key.contains(k) => {
                return Err(SqlError::InvalidOption(format!(
                    "the partition key of a keyed table must be a primary key column, not \"{k}\""
                )))
            }
            Some(_) => {}
            None => options.partition_key = Some(primary_key[0].clone()),
        }
        options.primary_key = primary_key;
    }
    if let Some((column, expr)) = &clauses.watermark {
        options.watermark = Some(watermark(column, expr, &columns)?);
    }
    // Without a primary key, a table is mutable as in PostgreSQL unless it
    // says APPEND ONLY, or only ever receives rows: a Kafka topic feeds
    // it, or a watermark orders its rows (a row changed behind the
    // watermark would change windows already closed).
    options.keyed_by_row = options.primary_key.is_empty()
        && !clauses.append_only
        && options.watermark.is_none()
        && options.source.is_none();
    if let Some(source) = &options.source {
        check_source_table(source, &columns, &options)?;
        // The topic's partition count is known only once the broker is
        // asked; the engine sets it.
        columns.extend(kafka_column_defs());
    }
    Ok(CreateTable {
        table: TableDef {
            id: 0,
            name,
            columns,
            options,
        },
        if_not_exists: ct.if_not_exists,
        append_only: clauses.append_only,
    })
}

fn table_options(
    opts: &ast::CreateTableOptions,
    columns: &[ColumnDef],
) -> Result<TableOptions, SqlError> {
    let list = match opts {
        ast::CreateTableOptions::None => return Ok(TableOptions::default()),
        ast::CreateTableOptions::With(list) => list,
        other => {
            return Err(SqlError::Unsupported(format!(
                "table options {other} are not supported; use WITH (...)"
            )))
        }
    };
    let mut options = TableOptions::default();
    let mut source = SourceOptions::default();
    for opt in list {
        let ast::SqlOption::KeyValue { key, value } = opt else {
            return Err(SqlError::InvalidOption(format!(
                "unrecognized table option {opt}"
            )));
        };
        let key = key.value.to_lowercase();
        let text = option_text(value);
        if source.take(&key, &text)? {
            continue;
        }
        match key.as_str() {
            "partitions" => {
                let n: u32 = text.parse().map_err(|_| {
                    SqlError::InvalidOption(format!("partitions must be a positive integer, got {text}"))
                })?;
                if n == 0 || n > MAX_PARTITIONS {
                    return Err(SqlError::InvalidOption(format!(
                        "partitions must be between 1 and {MAX_PARTITIONS}, got {n}"
                    )));
                }
                options.partitions = n;
            }
            "partition_key" => {
                let col = text.to_string();
                if !columns.iter().any(|c| c.name == col) {
                    return Err(SqlError::UndefinedColumn(col));
                }
                options.partition_key = Some(col);
            }
            "retention" => options.retention_secs = Some(parse_duration_secs(&text)?),
            "retention_bytes" => options.retention_bytes = Some(parse_bytes(&text)?),
            "delete_retention" => {
                options.delete_retention_secs = Some(parse_duration_secs(&text)?)
            }
            "watermark_idle_timeout" => {
                options.watermark_idle_timeout_ms = (parse_duration_us(&text)? / 1000) as u64
            }
            other => {
                return Err(SqlError::InvalidOption(format!(
                    "unrecognized table option \"{other}\" (known: partitions, partition_key, retention, retention_bytes, delete_retention, watermark_idle_timeout, connector, topic, bootstrap_servers, format, start, kafka_partitions, kafka.<property>)"
                )))
            }
        }
    }
    options.source = source.finish(options.partitions != 1 || options.partition_key.is_some())?;
    Ok(options)
}

/// The options of `WITH (connector = 'kafka', ...)`, gathered before they
/// are checked together.
#[derive(Default)]
struct SourceOptions {
    connector: Option<String>,
    topic: Option<String>,
    bootstrap_servers: Option<String>,
    format: Option<String>,
    start: Option<String>,
    partitions: Option<String>,
    properties: Vec<(String, String)>,
}

impl SourceOptions {
    /// Takes `key` when it is a source option.
    fn take(&mut self, key: &str, text: &str) -> Result<bool, SqlError> {
        let slot = match key {
            "connector" => &mut self.connector,
            "topic" => &mut self.topic,
            "bootstrap_servers" | "properties.bootstrap.server" => &mut self.bootstrap_servers,
            "format" => &mut self.format,
            "start" | "scan.startup.mode" => &mut self.start,
            "kafka_partitions" => &mut self.partitions,
            _ => {
                let Some(property) = key.strip_prefix("kafka.") else {
                    return Ok(false);
                };
                self.properties
                    .push((property.to_string(), text.to_string()));
                return Ok(true);
            }
        };
        *slot = Some(text.to_string());
        Ok(true)
    }

    fn finish(self, partitioning_given: bool) -> Result<Option<KafkaSource>, SqlError> {
        let Some(connector) = self.connector else {
            if self.topic.is_some()
                || self.bootstrap_servers.is_some()
                || !self.properties.is_empty()
            {
                return Err(SqlError::InvalidOption(
                    "topic, bootstrap_servers and kafka.* options need connector = 'kafka'".into(),
                ));
            }
            return Ok(None);
        };
        if !connector.eq_ignore_ascii_case("kafka") {
            return Err(SqlError::Unsupported(format!(
                "connector \"{connector}\" is not supported (only 'kafka')"
            )));
        }
        if partitioning_given {
            return Err(SqlError::InvalidOption(
                "a Kafka-fed table has the topic's partitions: leave out partitions and partition_key"
                    .into(),
            ));
        }
        let required = |v: Option<String>, name: &str| {
            v.filter(|v| !v.is_empty()).ok_or_else(|| {
                SqlError::InvalidOption(format!("connector = 'kafka' needs the option {name}"))
            })
        };
        let topic = required(self.topic, "topic")?;
        let bootstrap_servers = required(self.bootstrap_servers, "bootstrap_servers")?;
        let format = match self.format.as_deref().map(str::to_lowercase).as_deref() {
            None | Some("json") => SourceFormat::Json,
            Some("csv") => SourceFormat::Csv,
            Some("raw") => SourceFormat::Raw,
            Some(other) => {
                return Err(SqlError::InvalidOption(format!(
                    "format must be 'json', 'csv' or 'raw', got '{other}'"
                )))
            }
        };
        let start = match self.start.as_deref().map(str::to_lowercase).as_deref() {
            None | Some("earliest") => SourceStart::Earliest,
            Some("latest") => SourceStart::Latest,
            Some(time) => SourceStart::TimestampMs(parse_start_time(time)?),
        };
        let owned_partitions = self
            .partitions
            .as_deref()
            .map(parse_partition_list)
            .transpose()?;
        Ok(Some(KafkaSource {
            topic,
            bootstrap_servers,
            format,
            start,
            properties: self.properties,
            owned_partitions,
        }))
    }
}

/// `start = '2026-01-01 00:00:00+00'`: milliseconds since 1970 (UTC when
/// no offset is given).
fn parse_start_time(text: &str) -> Result<i64, SqlError> {
    let t = text.trim();
    let with_zone = ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
        .iter()
        .find_map(|f| chrono::DateTime::parse_from_str(t, f).ok())
        .map(|d| d.timestamp_millis());
    let without = || {
        ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
            .iter()
            .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
            .or_else(|| {
                chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
            .map(|d| d.and_utc().timestamp_millis())
    };
    with_zone.or_else(without).ok_or_else(|| {
        SqlError::InvalidOption(format!(
            "start must be 'earliest', 'latest' or a timestamp such as '2026-01-01 00:00:00+00', got '{text}'"
        ))
    })
}

/// `kafka_partitions = '0-3,6'`: the listed partitions, sorted.
fn parse_partition_list(text: &str) -> Result<Vec<u32>, SqlError> {
    let bad = || {
        SqlError::InvalidOption(format!(
            "kafka_partitions must list partitions such as '0-7' or '0,2,4', got '{text}'"
        ))
    };
    let mut out = Vec::new();
    for piece in text.split(',').map(str::trim) {
        match piece.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b || b >= MAX_PARTITIONS {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                let p: u32 = piece.parse().map_err(|_| bad())?;
                if p >= MAX_PARTITIONS {
                    return Err(bad());
                }
                out.push(p);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// What a Kafka-fed table may be: append-only, and for `format = 'raw'`
/// one column that takes the record's bytes.
fn check_source_table(
    source: &KafkaSource,
    columns: &[ColumnDef],
    options: &TableOptions,
) -> Result<(), SqlError> {
    if !options.primary_key.is_empty() {
        return Err(SqlError::Unsupported(
            "a Kafka-fed table is append-only: it cannot have a PRIMARY KEY".into(),
        ));
    }
    if source.format == SourceFormat::Raw
        && (columns.len() != 1
            || !matches!(
                columns[0].ty,
                SqlType::Text
                    | SqlType::Varchar { .. }
                    | SqlType::Char { .. }
                    | SqlType::Bytea
                    | SqlType::Jsonb
            ))
    {
        return Err(SqlError::InvalidOption(
            "format = 'raw' needs one column of type text, varchar, jsonb or bytea".into(),
        ));
    }
    Ok(())
}

/// A size such as `1048576`, `64 MB` or `2GB` (units of 1024).
pub fn parse_bytes(text: &str) -> Result<u64, SqlError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| SqlError::InvalidOption(format!("invalid size \"{text}\"")))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        "tb" | "t" => 1 << 40,
        other => {
            return Err(SqlError::InvalidOption(format!(
                "invalid size unit \"{other}\" (use bytes, kB, MB, GB or TB)"
            )))
        }
    };
    n.checked_mul(mult)
        .filter(|b| *b > 0)
        .ok_or_else(|| SqlError::InvalidOption(format!("invalid size \"{text}\"")))
}

fn option_text(value: &ast::Expr) -> String {
    match value {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        ast::Expr::Identifier(i) => ident_name(i),
        other => other.to_string(),
    }
}

/// Parses a duration such as `'7 days'`, `'36 hours'`, `'30 minutes'`,
/// `'500 ms'`, into whole seconds (rounded down).
pub fn parse_duration_secs(text: &str) -> Result<u64, SqlError> {
    Ok((parse_duration_us(text)? / 1_000_000) as u64)
}

/// Parses a duration into microseconds.
pub fn parse_duration_us(text: &str) -> Result<i64, SqlError> {
    let bad = || {
        SqlError::InvalidOption(format!(
            "invalid duration \"{text}\": expected e.g. '7 days', '12 hours', '30 minutes', '10 seconds', '500 milliseconds'"
        ))
    };
    let t = text.trim().to_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: i64 = num.parse().map_err(|_| bad())?;
    let unit_us: i64 = match unit.trim() {
        "us" | "microsecond" | "microseconds" => 1,
        "ms" | "millisecond" | "milliseconds" => 1_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
        "h" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        "w" | "week" | "weeks" => 604_800_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_us).ok_or_else(bad)
}

/// Reads `col` or `col - INTERVAL '...'` of a WATERMARK clause.
fn watermark(column: &str, expr: &str, columns: &[ColumnDef]) -> Result<WatermarkDef, SqlError> {
    let col = columns
        .iter()
        .find(|c| c.name == column)
        .ok_or_else(|| SqlError::UndefinedColumn(column.to_string()))?;
    if !col.ty.is_timestamp() {
        return Err(SqlError::DatatypeMismatch(format!(
            "watermark column \"{column}\" must be TIMESTAMP or TIMESTAMPTZ, not {}",
            col.ty.pg_name()
        )));
    }
    let unsupported = || {
        SqlError::Unsupported(format!(
            "WATERMARK expression \"{expr}\" is not supported; use {column} - INTERVAL '5 seconds'"
        ))
    };
    let parsed = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(expr)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let names_column =
        |e: &ast::Expr| matches!(e, ast::Expr::Identifier(i) if ident_name(i) == column);
    let delay_us = match &parsed {
        e if names_column(e) => 0,
        ast::Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Minus,
            right,
        } if names_column(left) => match right.as_ref() {
            ast::Expr::Interval(interval) => {
                let text = match interval.value.as_ref() {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    _ => return Err(unsupported()),
                };
                let text = match &interval.leading_field {
                    Some(unit) => format!("{text} {unit}"),
                    None => text,
                };
                parse_duration_us(&text)?
            }
            _ => return Err(unsupported()),
        },
        _ => return Err(unsupported()),
    };
    Ok(WatermarkDef {
        column: column.to_string(),
        delay_us,
    })
}

fn sql_type(dt: &DataType) -> Result<SqlType, SqlError> {
    Ok(match dt {
        DataType::Bool | DataType::Boolean => SqlType::Boolean,
        DataType::SmallInt(_) | DataType::Int2(_) => SqlType::SmallInt,
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => SqlType::Int,
        DataType::BigInt(_) | DataType::Int8(_) => SqlType::BigInt,
        DataType::Real | DataType::Float4 => SqlType::Real,
        DataType::DoublePrecision | DataType::Float8 | DataType::Double(_) => SqlType::Double,
        // PostgreSQL's FLOAT(p): p binary digits, real up to 24, double
        // precision up to 53; FLOAT alone is double precision.
        DataType::Float(ExactNumberInfo::None) => SqlType::Double,
        DataType::Float(ExactNumberInfo::Precision(p)) => match p {
            1..=24 => SqlType::Real,
            25..=53 => SqlType::Double,
            0 => {
                return Err(SqlError::InvalidOption(
                    "precision for type float must be at least 1 bit".into(),
                ))
            }
            _ => {
                return Err(SqlError::InvalidOption(
                    "precision for type float must be less than 54 bits".into(),
                ))
            }
        },
        DataType::Numeric(info) | DataType::Decimal(info) | DataType::Dec(info) => match info {
            ExactNumberInfo::None => SqlType::DEFAULT_NUMERIC,
            ExactNumberInfo::Precision(p) => numeric(*p, 0)?,
            ExactNumberInfo::PrecisionAndScale(p, s) => numeric(*p, *s)?,
        },
        DataType::Text | DataType::String(_) => SqlType::Text,
        DataType::Varchar(len) | DataType::CharacterVarying(len) | DataType::CharVarying(len) => {
            SqlType::Varchar {
                max_len: match len {
                    Some(CharacterLength::IntegerLength { length, .. }) => {
                        Some(u32::try_from(*length).map_err(|_| {
                            SqlError::InvalidOption(format!("length {length} is too large"))
                        })?)
                    }
                    _ => None,
                },
            }
        }
        DataType::Char(len) | DataType::Character(len) => SqlType::Char {
            len: match len {
                Some(CharacterLength::IntegerLength { length, .. }) => u32::try_from(*length)
                    .ok()
                    .filter(|n| (1..=10_485_760).contains(n))
                    .ok_or_else(|| {
                        SqlError::InvalidOption(format!(
                            "length for type char must be between 1 and 10485760, not {length}"
                        ))
                    })?,
                _ => 1,
            },
        },
        DataType::Bytea => SqlType::Bytea,
        DataType::Date => SqlType::Date,
        DataType::Timestamp(p, tz) => {
            let base = match tz {
                ast::TimezoneInfo::WithTimeZone | ast::TimezoneInfo::Tz => SqlType::TimestampTz,
                _ => SqlType::Timestamp,
            };
            // `TIMESTAMP(p)`: below 6 digits the values are rounded;
            // 6 or more keeps every digit there is.
            match p {
                Some(p) if *p < 6 => SqlType::WithTypmod {
                    base: Box::new(base),
                    typmod: *p as i32,
                },
                _ => base,
            }
        }
        DataType::JSONB | DataType::JSON => SqlType::Jsonb,
        DataType::Interval { fields: None, precision: None } => SqlType::Interval,
        DataType::Interval { fields, precision } => SqlType::WithTypmod {
            base: Box::new(SqlType::Interval),
            typmod: sluice_catalog::interval_typmod(interval_range(fields.as_ref()), *precision)
                .map_err(SqlError::InvalidOption)?,
        },
        DataType::Time(None, ast::TimezoneInfo::None | ast::TimezoneInfo::WithoutTimeZone) => {
            SqlType::Time
        }
        DataType::Custom(name, _) if name.to_string().eq_ignore_ascii_case("timestamptz") => {
            SqlType::TimestampTz
        }
        // `INT[]`, `TEXT ARRAY`, `INT[3]` (PostgreSQL ignores the size);
        // one dimension, as PostgreSQL's arrays here.
        DataType::Array(
            ast::ArrayElemTypeDef::SquareBracket(element, _) | ast::ArrayElemTypeDef::AngleBracket(element),
        ) => match sql_type(element)? {
            SqlType::Array(_) => {
                return Err(SqlError::Unsupported(
                    "arrays of arrays are not supported: use a one-dimensional array (INT[])".into(),
                ))
            }
            element => SqlType::Array(Box::new(element)),
        },
        other => {
            return Err(SqlError::Unsupported(format!(
                "type {other} is not supported (supported: BOOLEAN, SMALLINT, INT, BIGINT, REAL, \
                 DOUBLE PRECISION, NUMERIC(p,s), TEXT, VARCHAR, CHAR(n), BYTEA, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, \
                 INTERVAL, JSONB, and arrays of these)"
            )))
        }
    })
}

/// PostgreSQL's fields mask (`sluice_catalog::interval_mask`) of an
/// interval type's fields; all of them when none are named.
pub fn interval_range(fields: Option<&ast::IntervalFields>) -> i32 {
    use ast::IntervalFields as F;
    use sluice_catalog::interval_mask as m;
    match fields {
        None => m::FULL_RANGE,
        Some(F::Year) => m::YEAR,
        Some(F::Month) => m::MONTH,
        Some(F::Day) => m::DAY,
        Some(F::Hour) => m::HOUR,
        Some(F::Minute) => m::MINUTE,
        Some(F::Second) => m::SECOND,
        Some(F::YearToMonth) => m::YEAR | m::MONTH,
        Some(F::DayToHour) => m::DAY | m::HOUR,
        Some(F::DayToMinute) => m::DAY | m::HOUR | m::MINUTE,
        Some(F::DayToSecond) => m::DAY | m::HOUR | m::MINUTE | m::SECOND,
        Some(F::HourToMinute) => m::HOUR | m::MINUTE,
        Some(F::HourToSecond) => m::HOUR | m::MINUTE | m::SECOND,
        Some(F::MinuteToSecond) => m::MINUTE | m::SECOND,
    }
}

fn numeric(p: u64, s: i64) -> Result<SqlType, SqlError> {
    if p == 0 || p > 38 || s < 0 || s as u64 > p {
        return Err(SqlError::InvalidOption(format!(
            "NUMERIC({p},{s}) is out of range: precision must be 1..38 and scale 0..precision"
        )));
    }
    Ok(SqlType::Numeric {
        precision: p as u8,
        scale: s as i8,
        unconstrained: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{parse_sql, Statement};

    fn create(sql: &str) -> Result<CreateTable, SqlError> {
        match parse_sql(sql)? {
            Statement::CreateTable(c) => Ok(*c),
            other => panic!("not a CREATE TABLE: {other:?}"),
        }
    }

    #[test]
    fn every_supported_type_maps() {
        let ct = create(
            "CREATE TABLE t (a BOOLEAN, b SMALLINT, c INT, d BIGINT, e REAL, f DOUBLE PRECISION, \
             g NUMERIC(10,2), h TEXT, i VARCHAR(5), j BYTEA, k DATE, l TIMESTAMP, m TIMESTAMPTZ, n JSONB)",
        )
        .unwrap();
        let types: Vec<_> = ct.table.columns.iter().map(|c| c.ty.clone()).collect();
        assert_eq!(
            types,
            vec![
                SqlType::Boolean,
                SqlType::SmallInt,
                SqlType::Int,
                SqlType::BigInt,
                SqlType::Real,
                SqlType::Double,
                SqlType::Numeric {
                    precision: 10,
                    scale: 2,
                    unconstrained: false,
                },
                SqlType::Text,
                SqlType::Varchar { max_len: Some(5) },
                SqlType::Bytea,
                SqlType::Date,
                SqlType::Timestamp,
                SqlType::TimestampTz,
                SqlType::Jsonb,
            ]
        );
    }

    #[test]
    fn float_with_a_precision_is_real_or_double_precision() {
        // pandas' to_sql declares float64 columns FLOAT(53).
        let ct = create("CREATE TABLE t (a FLOAT(53), b FLOAT(24), c FLOAT(25), d FLOAT)").unwrap();
        let types: Vec<_> = ct.table.columns.iter().map(|c| c.ty.clone()).collect();
        assert_eq!(
            types,
            vec![
                SqlType::Double,
                SqlType::Real,
                SqlType::Double,
                SqlType::Double
            ]
        );
        for bad in ["FLOAT(0)", "FLOAT(54)"] {
            let e = create(&format!("CREATE TABLE t (a {bad})")).unwrap_err();
            assert_eq!(e.sqlstate(), "22023", "{bad}: {e}");
        }
    }

    #[test]
    fn kafka_sources() {
        let t = create(
            "CREATE TABLE ev (id BIGINT, at TIMESTAMP) WITH (connector = 'kafka', topic = 'events', \
             bootstrap_servers = '127.0.0.1:9092', format = 'csv', start = '2026-01-01 00:00:01+01', \
             kafka_partitions = '4-5,0', \"kafka.security.protocol\" = 'SSL')",
        )
        .unwrap();
        let source = t.table.options.source.clone().unwrap();
        assert_eq!(source.topic, "events");
        assert_eq!(source.format, SourceFormat::Csv);
        // 2025-12-31 23:00:01 UTC.
        assert_eq!(source.start, SourceStart::TimestampMs(1_767_222_001_000));
        assert_eq!(source.owned_partitions, Some(vec![0, 4, 5]));
        assert_eq!(
            source.properties,
            vec![("security.protocol".to_string(), "SSL".to_string())]
        );
        let names: Vec<&str> = t.table.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "at",
                "_kafka_offset",
                "_kafka_key",
                "_kafka_timestamp"
            ]
        );
        assert!(t.table.hidden_columns().contains(&"_kafka_key"));
        let default = create(
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1')",
        )
        .unwrap();
        let source = default.table.options.source.unwrap();
        assert_eq!(
            (source.format, source.start),
            (SourceFormat::Json, SourceStart::Earliest)
        );
        for bad in [
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', bootstrap_servers = 'b:1')",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't')",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'pulsar', topic = 't', bootstrap_servers = 'b:1')",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1', partitions = 4)",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1', format = 'avro')",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1', start = 'yesterday')",
            "CREATE TABLE ev (id BIGINT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1', kafka_partitions = '3-1')",
            "CREATE TABLE ev (id BIGINT, v TEXT) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1', format = 'raw')",
            "CREATE TABLE ev (id BIGINT PRIMARY KEY) WITH (connector = 'kafka', topic = 't', bootstrap_servers = 'b:1')",
            "CREATE TABLE ev (id BIGINT) WITH (topic = 't')",
            "CREATE TABLE ev (_kafka_offset BIGINT)",
        ] {
            assert!(create(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn bad_options_are_rejected() {
        assert!(matches!(
            create("CREATE TABLE t (a INT) WITH (partitions = 0)"),
            Err(SqlError::InvalidOption(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (a INT) WITH (partition_key = 'b')"),
            Err(SqlError::UndefinedColumn(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (a INT) WITH (retention = 'soon')"),
            Err(SqlError::InvalidOption(_))
        ));
        let keyed = create("CREATE TABLE t (a INT PRIMARY KEY, b TEXT)").unwrap();
        assert_eq!(keyed.table.options.primary_key, ["a"]);
        assert_eq!(keyed.table.options.partition_key.as_deref(), Some("a"));
        assert!(!keyed.table.columns[0].nullable, "key columns are NOT NULL");
        assert!(matches!(
            create("CREATE TABLE t (a INT PRIMARY KEY) APPEND ONLY"),
            Err(SqlError::Syntax(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (a INT, a INT)"),
            Err(SqlError::DuplicateColumn(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (_offset INT)"),
            Err(SqlError::InvalidOption(_))
        ));
    }

    #[test]
    fn watermarks() {
        let ct = create(
            "CREATE TABLE t (a TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 seconds') \
             APPEND ONLY WITH (watermark_idle_timeout = '2 seconds')",
        )
        .unwrap();
        assert_eq!(
            ct.table.options.watermark,
            Some(WatermarkDef {
                column: "ts".into(),
                delay_us: 5_000_000
            })
        );
        assert_eq!(ct.table.options.watermark_idle_timeout_ms, 2000);
        assert_eq!(ct.table.columns.len(), 2);
        let ct = create(
            "CREATE TABLE t (ts TIMESTAMPTZ, WATERMARK FOR ts AS ts - INTERVAL '90' SECOND)",
        )
        .unwrap();
        assert_eq!(ct.table.options.watermark.unwrap().delay_us, 90_000_000);
        assert!(matches!(
            create("CREATE TABLE t (a INT, WATERMARK FOR a AS a - INTERVAL '1 second')"),
            Err(SqlError::DatatypeMismatch(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR nope AS nope)"),
            Err(SqlError::UndefinedColumn(_))
        ));
        assert!(matches!(
            create("CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS now())"),
            Err(SqlError::Unsupported(_))
        ));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_secs("7 days").unwrap(), 604_800);
        assert_eq!(parse_duration_secs("90s").unwrap(), 90);
        assert_eq!(parse_duration_us("250 ms").unwrap(), 250_000);
        assert!(parse_duration_secs("").is_err());
    }
}
