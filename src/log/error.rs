use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt frame in {path} at byte {pos}: {reason}")]
    CorruptFrame {
        path: PathBuf,
        pos: u64,
        reason: String,
    },
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("table \"{0}\" is unavailable after a failed write; restart the server to recover it")]
    Poisoned(String),
    #[error("the log writer of table \"{0}\" has stopped")]
    WriterStopped(String),
    #[error(transparent)]
    Catalog(#[from] sluice_catalog::CatalogError),
    #[error("segment {key} in the object store: {reason}")]
    Remote { key: String, reason: String },
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("transaction holds more than {limit} bytes of uncommitted rows; COMMIT in smaller transactions or raise --max-statement-bytes")]
    TransactionTooLarge { limit: u64 },
    #[error("could not serialize access due to concurrent update of table \"{table}\": another transaction committed a row with a key this REPEATABLE READ transaction writes after its snapshot; retry the transaction")]
    SerializationFailure { table: String },
    #[error("could not serialize access due to concurrent update of table \"{table}\": a row this statement updates or deletes was updated or deleted by another statement after it was read; retry the statement")]
    RowChangedConcurrently { table: String },
    #[error("UPDATE and DELETE of a row this transaction inserted into \"{table}\" (a table without a primary key) are not supported: its position is given at COMMIT; COMMIT the insert first, or give the table a PRIMARY KEY")]
    UncommittedRowChange { table: String },
    #[error("reading a row of table \"{table}\" by its key: {reason}")]
    KeyLookup { table: String, reason: &'static str },
    #[error("cannot write to table \"{table}\": its rows come from {by}")]
    WrittenBySource { table: String, by: String },
    #[error("column \"{column}\" of relation \"{table}\" does not exist")]
    UndefinedColumn { table: String, column: String },
}

crate::layer_error!(LogError);

impl LogError {
    pub fn sqlstate(&self) -> &'static str {
        if self.is_disk_full() {
            return "53100";
        }
        match self {
            LogError::CorruptFrame { .. } => "XX001",
            LogError::Catalog(c) => crate::error::catalog_sqlstate(c),
            LogError::Io { .. } | LogError::Remote { .. } => "58030",
            LogError::Store(s) => s.sqlstate(),
            LogError::TransactionTooLarge { .. } => "54000",
            LogError::SerializationFailure { .. } | LogError::RowChangedConcurrently { .. } => {
                "40001"
            }
            LogError::WrittenBySource { .. } => "42809",
            LogError::UncommittedRowChange { .. } => "0A000",
            LogError::UndefinedColumn { .. } => "42703",
            _ => "XX000",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { path, source }
    }

    /// True when the error is the disk running out of space.
    pub fn is_disk_full(&self) -> bool {
        // A group commit's error reaches each waiter as a copy that keeps
        // the kind but not the OS code.
        let full = |e: &std::io::Error| {
            e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull
        };
        match self {
            LogError::Io { source, .. } => full(source),
            LogError::Catalog(sluice_catalog::CatalogError::Io { source, .. }) => full(source),
            _ => false,
        }
    }
}
