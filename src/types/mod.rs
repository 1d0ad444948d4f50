//! PostgreSQL's types over Arrow's: which PostgreSQL type a column has
//! (oid, typmod, name), and each type's text as PostgreSQL reads and
//! writes it (dates, timestamps, intervals, numbers, bytea, arrays). The
//! ingest path, queries and the wire all read and write values here, so
//! that a value reads back as it was written, in every path. Knows
//! nothing of DataFusion's planning or of the protocol.

pub mod datetime;
pub mod format;
pub mod interval;
pub mod json;
pub mod number_format;
pub mod number_text;
mod pg_type;
pub mod text;
pub mod typmod;

pub use pg_type::{
    array_of, declared, declared_field, interval_mask, is_json, known_type_oids, oid,
    oid_alias_value, unconstrained_numeric, PgType, SQL_TYPE_METADATA_KEY, UTC,
};
