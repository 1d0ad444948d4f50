//! Durable metadata for Sluice: the tables, their columns and options.
//!
//! The catalog is one JSON document, written atomically (temp file, fsync,
//! rename, fsync of the directory) and guarded by a CRC32C so that a torn or
//! corrupted write is detected instead of half-read.

mod manifest;
mod roles;
mod store;
mod types;

pub use manifest::{
    CheckpointFile, CheckpointManifest, FailedRowEntry, FileKind, StatePartId, ViewClockState,
};
pub use roles::{Acl, AclKind, RoleCatalog, RoleDef, ScramSecret};
pub use store::{
    checked_body, with_checksum, write_atomically, write_atomically_with_mode, Catalog,
    CatalogError,
};
pub use types::{
    dead_letter_column_defs, interval_mask, interval_type_name, interval_typmod, kafka_column_defs,
    row_partition, row_position, ColumnDef, CutDef, CutTable, CutViewCheckpoint, DatasetDef,
    DatasetSplit, DatasetVersion, IndexDef, KafkaSink, KafkaSource, QueryViewDef, SourceFormat,
    SourceStart, SqlType, SubscriptionDef, SubscriptionStart, TableDef, TableOptions, ViewDef,
    WatermarkDef, DEFAULT_DELETE_RETENTION_SECS, DEFAULT_IDLE_TIMEOUT_MS, DELETED_COLUMN,
    HIDDEN_COLUMNS, KAFKA_COLUMNS, OP_COLUMN, ROW_COLUMN, SQL_TYPE_METADATA_KEY,
};
