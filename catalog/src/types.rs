use std::sync::Arc;

use arrow::datatypes::{DataType, Field, IntervalUnit, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

/// Names of the columns every log table exposes by name but not in `SELECT *`.
pub const HIDDEN_COLUMNS: [&str; 3] = ["_partition", "_offset", "_ingested_at"];

/// The SQL types a table column may have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SqlType {
    Boolean,
    SmallInt,
    Int,
    BigInt,
    Real,
    Double,
    /// NUMERIC(precision, scale); stored as a 128-bit decimal. A NUMERIC
    /// declared without them (`unconstrained`) is stored as
    /// [`SqlType::DEFAULT_NUMERIC`]'s and shows no trailing zeros.
    Numeric {
        precision: u8,
        scale: i8,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unconstrained: bool,
    },
    Text,
    Varchar {
        max_len: Option<u32>,
    },
    /// `CHAR(n)` (`character(n)`, PostgreSQL's bpchar): text padded with
    /// spaces to n characters on every write; trailing spaces do not count
    /// in comparisons.
    Char {
        len: u32,
    },
    Bytea,
    Date,
    Timestamp,
    TimestampTz,
    /// JSON text, validated on write.
    Jsonb,
    /// Months, days and microseconds, as PostgreSQL's INTERVAL.
    Interval,
    /// Time of day in microseconds (TIME WITHOUT TIME ZONE).
    Time,
    /// A one-dimensional array of another type (`INT[]`, `TEXT[]`), whose
    /// elements may be NULL; stored as an Arrow list.
    Array(Box<SqlType>),
    /// `TIMESTAMP(p)` or `TIMESTAMPTZ(p)` with p below 6, or an `INTERVAL`
    /// with fields or a precision (`INTERVAL HOUR TO MINUTE`,
    /// `INTERVAL(2)`): the base type's values, rounded or cut on every
    /// write as PostgreSQL's typmod says (`typmod`: p, or an interval's
    /// fields mask above 16 bits and its precision below).
    WithTypmod {
        base: Box<SqlType>,
        typmod: i32,
    },
}

/// PostgreSQL's `INTERVAL_MASK` bits of an interval typmod's fields.
pub mod interval_mask {
    pub const MONTH: i32 = 1 << 1;
    pub const YEAR: i32 = 1 << 2;
    pub const DAY: i32 = 1 << 3;
    pub const HOUR: i32 = 1 << 10;
    pub const MINUTE: i32 = 1 << 11;
    pub const SECOND: i32 = 1 << 12;
    pub const FULL_RANGE: i32 = 0x7FFF;
    pub const FULL_PRECISION: i32 = 0xFFFF;
}

/// PostgreSQL's typmod of `interval <fields>(<precision>)` for a fields
/// mask (`interval_mask`); a precision needs the seconds among the fields.
pub fn interval_typmod(range: i32, precision: Option<u64>) -> Result<i32, String> {
    use interval_mask as m;
    let precision = match precision {
        None => m::FULL_PRECISION,
        Some(p) if range & m::SECOND == 0 => {
            return Err(format!(
                "interval precision {p} specified, but fields do not include seconds"
            ))
        }
        Some(p) => p.min(6) as i32,
    };
    Ok((range << 16) | precision)
}

/// `format_type` of an interval typmod: `interval hour to minute`,
/// `interval(2)`, `interval second(3)`.
pub fn interval_type_name(typmod: i32) -> String {
    use interval_mask as m;
    let (range, precision) = (typmod >> 16, typmod & 0xFFFF);
    let fields = match range {
        m::YEAR => " year",
        m::MONTH => " month",
        m::DAY => " day",
        m::HOUR => " hour",
        m::MINUTE => " minute",
        m::SECOND => " second",
        r if r == m::YEAR | m::MONTH => " year to month",
        r if r == m::DAY | m::HOUR => " day to hour",
        r if r == m::DAY | m::HOUR | m::MINUTE => " day to minute",
        r if r == m::DAY | m::HOUR | m::MINUTE | m::SECOND => " day to second",
        r if r == m::HOUR | m::MINUTE => " hour to minute",
        r if r == m::HOUR | m::MINUTE | m::SECOND => " hour to second",
        r if r == m::MINUTE | m::SECOND => " minute to second",
        _ => "",
    };
    match precision {
        m::FULL_PRECISION => format!("interval{fields}"),
        p => format!("interval{fields}({p})"),
    }
}

/// Field metadata key that says what SQL type a column was declared with
/// where its Arrow type does not tell (see `SqlType::declared`).
pub const SQL_TYPE_METADATA_KEY: &str = "sluice.sql_type";

impl SqlType {
    /// Precision and scale used for a NUMERIC declared without them.
    pub const DEFAULT_NUMERIC: SqlType = SqlType::Numeric {
        precision: 38,
        scale: 10,
        unconstrained: true,
    };

    pub fn to_arrow(&self) -> DataType {
        match self {
            SqlType::Boolean => DataType::Boolean,
            SqlType::SmallInt => DataType::Int16,
            SqlType::Int => DataType::Int32,
            SqlType::BigInt => DataType::Int64,
            SqlType::Real => DataType::Float32,
            SqlType::Double => DataType::Float64,
            SqlType::Numeric {
                precision, scale, ..
            } => DataType::Decimal128(*precision, *scale),
            SqlType::Text | SqlType::Varchar { .. } | SqlType::Char { .. } | SqlType::Jsonb => {
                DataType::Utf8
            }
            SqlType::Bytea => DataType::Binary,
            SqlType::Date => DataType::Date32,
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::TimestampTz => {
                DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("+00:00")))
            }
            SqlType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            SqlType::Time => DataType::Time64(TimeUnit::Microsecond),
            SqlType::Array(element) => DataType::List(Arc::new(element.element_field())),
            SqlType::WithTypmod { base, .. } => base.to_arrow(),
        }
    }

    /// The type whose values a column of this type stores: the base type of
    /// one with a typmod (whose values are then rounded to it).
    pub fn storage(&self) -> &SqlType {
        match self {
            SqlType::WithTypmod { base, .. } => base,
            other => other,
        }
    }

    /// The field of an array's elements: its Arrow list's item. It
    /// carries no metadata (Arrow's casts, which build lists, keep none),
    /// so an array of jsonb or varchar(5) reads as text[] on the wire;
    /// its elements are still checked as the element type's values are.
    pub fn element_field(&self) -> Field {
        Field::new("item", self.to_arrow(), true)
    }

    /// The PostgreSQL name of the type, as `\d` and error messages show it.
    pub fn pg_name(&self) -> String {
        match self {
            SqlType::Boolean => "boolean".into(),
            SqlType::SmallInt => "smallint".into(),
            SqlType::Int => "integer".into(),
            SqlType::BigInt => "bigint".into(),
            SqlType::Real => "real".into(),
            SqlType::Double => "double precision".into(),
            SqlType::Numeric {
                unconstrained: true,
                ..
            } => "numeric".into(),
            SqlType::Numeric {
                precision, scale, ..
            } => format!("numeric({precision},{scale})"),
            SqlType::Text => "text".into(),
            SqlType::Varchar { max_len: Some(n) } => format!("character varying({n})"),
            SqlType::Varchar { max_len: None } => "character varying".into(),
            SqlType::Char { len } => format!("character({len})"),
            SqlType::Bytea => "bytea".into(),
            SqlType::Date => "date".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::TimestampTz => "timestamp with time zone".into(),
            SqlType::Jsonb => "jsonb".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Time => "time without time zone".into(),
            SqlType::Array(element) => format!("{}[]", element.pg_name()),
            SqlType::WithTypmod { base, typmod } => match base.as_ref() {
                SqlType::Timestamp => format!("timestamp({typmod}) without time zone"),
                SqlType::TimestampTz => format!("timestamp({typmod}) with time zone"),
                SqlType::Interval => interval_type_name(*typmod),
                other => other.pg_name(),
            },
        }
    }

    /// What a column's Arrow field says of the type beyond its Arrow type
    /// (its `sluice.sql_type` metadata): `jsonb`, `varchar(5)`, `varchar`,
    /// `numeric(12,3)`. None for types Arrow tells apart by itself.
    pub fn declared(&self) -> Option<String> {
        match self {
            SqlType::Jsonb => Some("jsonb".into()),
            SqlType::Varchar { max_len: Some(n) } => Some(format!("varchar({n})")),
            SqlType::Varchar { max_len: None } => Some("varchar".into()),
            SqlType::Char { len } => Some(format!("bpchar({len})")),
            SqlType::Numeric {
                unconstrained: true,
                ..
            } => Some("numeric".into()),
            SqlType::Numeric {
                precision, scale, ..
            } => Some(format!("numeric({precision},{scale})")),
            SqlType::WithTypmod { base, typmod } => match base.as_ref() {
                SqlType::Timestamp => Some(format!("timestamp({typmod})")),
                SqlType::TimestampTz => Some(format!("timestamptz({typmod})")),
                SqlType::Interval => Some(format!("interval({typmod})")),
                other => other.declared(),
            },
            _ => None,
        }
    }

    pub fn is_timestamp(&self) -> bool {
        matches!(self.storage(), SqlType::Timestamp | SqlType::TimestampTz)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: SqlType,
    pub nullable: bool,
}

impl ColumnDef {
    pub fn to_field(&self) -> Field {
        let field = Field::new(&self.name, self.ty.to_arrow(), self.nullable);
        match self.ty.declared() {
            Some(declared) => field.with_metadata(
                [(SQL_TYPE_METADATA_KEY.to_string(), declared)]
                    .into_iter()
                    .collect(),
            ),
            None => field,
        }
    }
}

/// `WATERMARK FOR column AS column - INTERVAL 'delay'`: the event-time
/// column and how far behind the largest event time seen the watermark is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkDef {
    pub column: String,
    pub delay_us: i64,
}

/// Default `watermark_idle_timeout`: a partition with no new rows for this
/// long stops holding back the table's watermark.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;

fn default_idle_timeout_ms() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}

/// Options given in `WITH (...)` of `CREATE TABLE`, and the watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableOptions {
    pub partitions: u32,
    pub partition_key: Option<String>,
    /// Retention in seconds; `None` keeps records forever.
    pub retention_secs: Option<u64>,
    /// Size bound per partition in bytes; `None` has no bound.
    #[serde(default)]
    pub retention_bytes: Option<u64>,
    #[serde(default)]
    pub watermark: Option<WatermarkDef>,
    #[serde(default = "default_idle_timeout_ms")]
    pub watermark_idle_timeout_ms: u64,
    /// Columns of the primary key: non-empty makes the table keyed (a
    /// compacted log where a record upserts its key).
    #[serde(default)]
    pub primary_key: Vec<String>,
    /// A table without a primary key whose rows UPDATE and DELETE may
    /// change (not `APPEND ONLY`): each row is keyed by where it was
    /// written, its partition and offset ([`ROW_COLUMN`]). Tables from
    /// before there was a choice were append-only, hence the default.
    #[serde(default)]
    pub keyed_by_row: bool,
    /// How long compaction keeps a tombstone after it was written, in
    /// seconds (keyed tables).
    #[serde(default)]
    pub delete_retention_secs: Option<u64>,
    /// Where the rows come from when not from statements: a Kafka topic.
    #[serde(default)]
    pub source: Option<KafkaSource>,
    /// For a source's dead-letter table: the name of the table it serves.
    #[serde(default)]
    pub dead_letters_of: Option<String>,
}

/// A table fed by a Kafka topic: partition k of the topic feeds partition k
/// of the table, and each row keeps its Kafka offset, key and timestamp in
/// the hidden [`KAFKA_COLUMNS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSource {
    pub topic: String,
    pub bootstrap_servers: String,
    pub format: SourceFormat,
    pub start: SourceStart,
    /// `kafka.<name>` options, passed to the client as `<name>`.
    #[serde(default)]
    pub properties: Vec<(String, String)>,
    /// The topic's partitions this server reads (`kafka_partitions`); all
    /// of them when `None`.
    #[serde(default)]
    pub owned_partitions: Option<Vec<u32>>,
}

/// How a Kafka record's value becomes a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceFormat {
    /// One JSON object per record, its fields named as the columns.
    Json,
    /// One CSV line per record, its fields in column order.
    Csv,
    /// The whole value in the table's one column.
    Raw,
}

/// Where a source starts reading a partition it has no offset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceStart {
    Earliest,
    Latest,
    /// The first record at or after this time (milliseconds since 1970).
    TimestampMs(i64),
}

/// The hidden columns of a Kafka-fed table, after its own columns:
/// selectable by name, not in `SELECT *`.
pub const KAFKA_COLUMNS: [&str; 3] = ["_kafka_offset", "_kafka_key", "_kafka_timestamp"];

/// The column definitions of [`KAFKA_COLUMNS`].
pub fn kafka_column_defs() -> Vec<ColumnDef> {
    vec![
        ColumnDef {
            name: KAFKA_COLUMNS[0].into(),
            ty: SqlType::BigInt,
            nullable: false,
        },
        ColumnDef {
            name: KAFKA_COLUMNS[1].into(),
            ty: SqlType::Bytea,
            nullable: true,
        },
        ColumnDef {
            name: KAFKA_COLUMNS[2].into(),
            ty: SqlType::TimestampTz,
            nullable: true,
        },
    ]
}

/// The columns of a source's dead-letter table, `<table>_dead_letters`.
pub fn dead_letter_column_defs() -> Vec<ColumnDef> {
    let col = |name: &str, ty: SqlType, nullable: bool| ColumnDef {
        name: name.into(),
        ty,
        nullable,
    };
    vec![
        col("kafka_partition", SqlType::Int, false),
        col("kafka_offset", SqlType::BigInt, false),
        col("kafka_key", SqlType::Bytea, true),
        col("kafka_timestamp", SqlType::TimestampTz, true),
        col("payload", SqlType::Bytea, true),
        col("error", SqlType::Text, false),
    ]
}

/// Default `delete_retention`: one day.
pub const DEFAULT_DELETE_RETENTION_SECS: u64 = 86_400;

/// The stored column of a keyed table that marks a tombstone (a key with
/// no value). Not visible to queries; `changelog(t)` shows it as `_op`.
pub const DELETED_COLUMN: &str = "_deleted";

/// The stored column of a table keyed by row: the row's position,
/// `partition << 48 | offset`. An inserted row's is where it was written
/// (filled in as it is written); a tombstone's is the row it deletes.
pub const ROW_COLUMN: &str = "_row";

/// The position a table keyed by row gives the record at `offset` of
/// `partition` (see [`ROW_COLUMN`]).
pub fn row_position(partition: u32, offset: u64) -> i64 {
    ((partition as i64) << 48) | (offset as i64 & ((1 << 48) - 1))
}

/// The partition a position of [`row_position`] names.
pub fn row_partition(position: i64) -> usize {
    (position >> 48) as usize
}

/// `changelog(t)`'s column saying what a record does: 'upsert' or 'delete'.
pub const OP_COLUMN: &str = "_op";

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            partitions: 1,
            partition_key: None,
            retention_secs: None,
            retention_bytes: None,
            watermark: None,
            watermark_idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            primary_key: Vec::new(),
            keyed_by_row: false,
            delete_retention_secs: None,
            source: None,
            dead_letters_of: None,
        }
    }
}

/// A table: an append-only, partitioned log with a fixed set of columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Stable identifier; names the table's directory, so a dropped and
    /// re-created table never sees the old table's files.
    pub id: u64,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    pub options: TableOptions,
}

impl TableDef {
    /// Schema of the stored rows: the user columns only.
    pub fn data_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| c.to_field())
                .collect::<Vec<_>>(),
        ))
    }

    /// Schema a query sees: the user columns, then the hidden columns.
    pub fn query_schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self.columns.iter().map(|c| c.to_field()).collect();
        fields.push(Field::new(HIDDEN_COLUMNS[0], DataType::Int32, false));
        fields.push(Field::new(HIDDEN_COLUMNS[1], DataType::Int64, false));
        fields.push(Field::new(
            HIDDEN_COLUMNS[2],
            DataType::Timestamp(TimeUnit::Microsecond, Some(Arc::from("+00:00"))),
            false,
        ));
        Arc::new(Schema::new(fields))
    }

    /// Columns a wildcard leaves out: the hidden columns, and a Kafka-fed
    /// table's [`KAFKA_COLUMNS`].
    pub fn hidden_columns(&self) -> Vec<&str> {
        let mut hidden: Vec<&str> = HIDDEN_COLUMNS.to_vec();
        if self.options.source.is_some() {
            hidden.extend(KAFKA_COLUMNS);
        }
        hidden
    }

    /// Whether rows come only from a source (a Kafka topic, or a source's
    /// dead letters), so statements may not write them.
    pub fn written_by_source(&self) -> Option<String> {
        if let Some(s) = &self.options.source {
            return Some(format!("Kafka topic \"{}\"", s.topic));
        }
        self.options
            .dead_letters_of
            .as_ref()
            .map(|t| format!("the dead letters of table \"{t}\""))
    }

    /// A keyed table (PRIMARY KEY, or keyed by row): a compacted log
    /// where a record upserts or deletes its key.
    pub fn is_keyed(&self) -> bool {
        self.has_primary_key() || self.options.keyed_by_row
    }

    /// A table with a PRIMARY KEY (an INSERT of a live key replaces it).
    pub fn has_primary_key(&self) -> bool {
        !self.options.primary_key.is_empty()
    }

    /// Neither keyed nor keyed by row: nothing but erasure removes a row.
    pub fn is_append_only(&self) -> bool {
        !self.is_keyed()
    }

    /// Indices of the primary key's columns.
    pub fn primary_key_indices(&self) -> Vec<usize> {
        self.options
            .primary_key
            .iter()
            .filter_map(|k| self.column_index(k))
            .collect()
    }

    /// Schema of the records in the log: the user columns, and for a keyed
    /// table the tombstone flag (its value columns are nullable, since a
    /// tombstone has only the key), then for a table keyed by row each
    /// record's position ([`ROW_COLUMN`]).
    pub fn stored_schema(&self) -> SchemaRef {
        let keyed = self.is_keyed();
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| {
                let f = c.to_field();
                if keyed && !self.options.primary_key.contains(&c.name) {
                    f.with_nullable(true)
                } else {
                    f
                }
            })
            .collect();
        if keyed {
            fields.push(Field::new(DELETED_COLUMN, DataType::Boolean, false));
        }
        if self.options.keyed_by_row {
            fields.push(Field::new(ROW_COLUMN, DataType::Int64, true));
        }
        Arc::new(Schema::new(fields))
    }

    /// Schema of `changelog(t)`: the user columns, `_op`, then the hidden
    /// columns. Columns other than the key are NULL in a tombstone.
    pub fn changelog_schema(&self) -> SchemaRef {
        let q = self.query_schema();
        let mut fields: Vec<Field> = q.fields()[..self.columns.len()]
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(OP_COLUMN, DataType::Utf8, false));
        fields.extend(
            q.fields()[self.columns.len()..]
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        Arc::new(Schema::new(fields))
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Index of the partition key column, if the table has one.
    pub fn partition_key_index(&self) -> Option<usize> {
        self.options
            .partition_key
            .as_deref()
            .and_then(|k| self.column_index(k))
    }

    /// The column whose min/max each frame records: the watermark column,
    /// else the first timestamp column.
    pub fn event_time_index(&self) -> Option<usize> {
        match &self.options.watermark {
            Some(w) => self.column_index(&w.column),
            None => self.columns.iter().position(|c| c.ty.is_timestamp()),
        }
    }
}

/// A view (`CREATE VIEW`): a named query, planned each time it is read,
/// holding no rows of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryViewDef {
    pub id: u64,
    pub name: String,
    /// The defining query, as the user wrote it.
    pub query: String,
    /// The view's column names, in order (the query's, or the list given
    /// with the view's name).
    pub columns: Vec<String>,
    /// The tables and views the query names: what the view depends on.
    pub reads: Vec<String>,
}

/// An index (`CREATE INDEX`) on a table or a materialized view: reads
/// filtered by its columns look rows up in it instead of scanning. Only
/// the definition is stored; the index itself is built from the log (a
/// table's) or from each published snapshot (a view's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    pub id: u64,
    pub name: String,
    /// The id of the table or materialized view it indexes: a rename of
    /// the relation keeps its indexes.
    pub on: u64,
    /// The indexed columns, in order.
    pub columns: Vec<String>,
    /// Each column's order as `pg_index.indoption` gives it (1: DESC,
    /// 2: NULLS FIRST); the index serves either order.
    #[serde(default)]
    pub options: Vec<i16>,
}

/// A materialized view: its name and the query that defines it. Its rows are
/// derived from the log, so the definition is all that is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewDef {
    pub id: u64,
    pub name: String,
    /// The defining query, as the user wrote it.
    pub query: String,
    /// `EMIT ON WINDOW CLOSE`: a window's row appears once it is final.
    #[serde(default)]
    pub emit_on_window_close: bool,
    /// `WITH (allowed_lateness = '...')`, in microseconds.
    #[serde(default)]
    pub allowed_lateness_us: i64,
    /// Where the view starts reading its source when it has no checkpoint:
    /// offset 0 of every partition unless a rebuild chose a later start.
    #[serde(default)]
    pub start_offsets: Option<Vec<u64>>,
}

/// A cut (`CREATE CUT`): one offset per partition of the tables it
/// covers, taken at one commit. Reads `AS OF CUT` see exactly the rows
/// below it; retention keeps what it needs while it exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutDef {
    pub id: u64,
    pub name: String,
    pub created_at_us: i64,
    /// `FOR ALL TABLES` (every table there was when it was taken).
    pub all_tables: bool,
    /// The role that took it (and may drop it).
    #[serde(default)]
    pub owner: String,
    pub tables: Vec<CutTable>,
    /// The checkpoint of each materialized view over its tables that it
    /// keeps: the view's state at the cut, or the last one below it, from
    /// which a read `AS OF CUT` replays only the log up to the cut.
    #[serde(default)]
    pub view_checkpoints: Vec<CutViewCheckpoint>,
}

/// A view checkpoint a cut keeps (see `CutDef::view_checkpoints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutViewCheckpoint {
    pub view_id: u64,
    pub epoch: u64,
}

/// One table of a cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutTable {
    /// The table's id: a table dropped and created again under the same
    /// name is not covered.
    pub table_id: u64,
    /// Per partition, the first offset retention still held when the cut
    /// was taken: what a read at the cut returns starts there.
    pub starts: Vec<u64>,
    /// Per partition, the next offset after the cut.
    pub ends: Vec<u64>,
}

/// A dataset (`CREATE DATASET`): a query's result at a cut of the log, in
/// versions. A version keeps no rows: it keeps its cut (which pins what it
/// needs), its row counts and its content hash, and is computed again
/// from the log whenever it is written out or verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetDef {
    pub id: u64,
    pub name: String,
    /// The query, as it reads (every relation at the version's cut).
    pub query: String,
    pub split: Option<DatasetSplit>,
    pub owner: String,
    pub versions: Vec<DatasetVersion>,
}

/// How a dataset's rows are split: parts and shares (adding up to 100),
/// by `hash64(key, seed)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetSplit {
    pub parts: Vec<(String, f64)>,
    pub key: String,
    pub seed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetVersion {
    pub version: u32,
    /// The cut it reads at (the dataset's own, `name@version`).
    pub cut: String,
    pub created_at_us: i64,
    pub rows: u64,
    /// Rows per split part, in the parts' order.
    pub split_rows: Vec<(String, u64)>,
    /// SHA-256 of the rows in their order (see the server's datasets).
    pub content_hash: String,
}

/// Where a subscription (consumer group) starts reading when it is
/// created or reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SubscriptionStart {
    Earliest,
    Latest,
}

/// A subscription: a named consumer group over a table or a view. Its
/// committed offsets are kept next to the catalog, one file per group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionDef {
    pub id: u64,
    pub name: String,
    /// The table or materialized view it reads.
    pub source: String,
    pub start: SubscriptionStart,
    /// Set when the group is a sink's: the sink reads the source through
    /// it and writes what it reads to Kafka.
    #[serde(default)]
    pub sink: Option<KafkaSink>,
}

/// A sink (`CREATE SINK s FROM relation INTO kafka WITH (...)`): the
/// relation's rows, or a view's changes, written to a Kafka topic in
/// transactions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSink {
    pub topic: String,
    pub bootstrap_servers: String,
    /// Columns whose values make each record's key (a JSON object of
    /// them); none: records have no key.
    pub key: Vec<String>,
    /// `kafka.<name>` options, passed to the producer as `<name>`.
    #[serde(default)]
    pub properties: Vec<(String, String)>,
    /// The producer's transactional id, chosen at CREATE and kept, so
    /// that a restart fences the producer it replaces and two servers'
    /// sinks of one name do not fence each other.
    #[serde(default)]
    pub transactional_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_schema_appends_hidden_columns() {
        let t = TableDef {
            id: 1,
            name: "usage".into(),
            columns: vec![ColumnDef {
                name: "tenant".into(),
                ty: SqlType::Text,
                nullable: false,
            }],
            options: TableOptions::default(),
        };
        let names: Vec<_> = t
            .query_schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["tenant", "_partition", "_offset", "_ingested_at"]);
        assert_eq!(t.data_schema().fields().len(), 1);
    }
}
