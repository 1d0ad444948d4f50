use std::fmt;

/// Where a bad row is: a COPY input line or a VALUES row (both 1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowPlace {
    Line(u64),
    Row(u64),
}

impl fmt::Display for RowPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowPlace::Line(n) => write!(f, "line {n}"),
            RowPlace::Row(n) => write!(f, "row {n}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    #[error("invalid input syntax for type {ty}: \"{value}\" ({place}, column {column})")]
    InvalidText {
        ty: String,
        value: String,
        place: RowPlace,
        column: String,
    },
    #[error("value out of range for type {ty}: \"{value}\" ({place}, column {column})")]
    OutOfRange {
        ty: String,
        value: String,
        place: RowPlace,
        column: String,
    },
    /// A date or time PostgreSQL's input does not read (22007) or whose
    /// fields are out of range (22008).
    #[error("{error} ({place}, column {column})")]
    DateTime {
        error: crate::types::datetime::DateTimeError,
        place: RowPlace,
        column: String,
    },
    /// A number PostgreSQL's input does not read (22P02), one its type
    /// cannot hold (22003), or a numeric NaN (0A000).
    #[error("{error} ({place}, column {column})")]
    Number {
        error: crate::types::number_text::NumberTextError,
        place: RowPlace,
        column: String,
    },
    #[error("malformed array literal: \"{value}\" ({place}, column {column})")]
    MalformedArray {
        value: String,
        place: RowPlace,
        column: String,
    },
    #[error("null value in column \"{column}\" violates not-null constraint ({place})")]
    NotNull { place: RowPlace, column: String },
    #[error("value too long for type {ty}({max}) ({place}, column {column})")]
    TooLong {
        /// `character varying` or `character`.
        ty: &'static str,
        max: u32,
        place: RowPlace,
        column: String,
    },
    #[error("extra data after last expected column ({place})")]
    ExtraColumns { place: RowPlace },
    #[error("missing data for column \"{column}\" ({place})")]
    MissingColumns { place: RowPlace, column: String },
    #[error("invalid COPY data ({place}): {reason}")]
    BadFormat { place: RowPlace, reason: String },
    #[error("incorrect binary data format in bind parameter {index}: {reason}")]
    BadParameter { index: usize, reason: String },
    #[error("bind message supplies {got} parameters, but prepared statement requires {expected}")]
    ParameterCount { expected: usize, got: usize },
    #[error("column \"{0}\" of relation does not exist")]
    UndefinedColumn(String),
    #[error("column \"{0}\" specified more than once")]
    DuplicateColumn(String),
    #[error("statement too large: it stages more than {limit} bytes; split it into smaller statements or raise --max-statement-bytes")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Internal(String),
}

crate::layer_error!(IngestError);

impl IngestError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            IngestError::InvalidText { .. } | IngestError::MalformedArray { .. } => "22P02",
            IngestError::OutOfRange { .. } => "22003",
            IngestError::DateTime { error, .. } => error.sqlstate(),
            IngestError::Number { error, .. } => error.sqlstate(),
            IngestError::NotNull { .. } => "23502",
            IngestError::TooLong { .. } => "22001",
            IngestError::ExtraColumns { .. }
            | IngestError::MissingColumns { .. }
            | IngestError::BadFormat { .. } => "22P04",
            IngestError::BadParameter { .. } => "22P03",
            IngestError::ParameterCount { .. } => "08P01",
            IngestError::UndefinedColumn(_) => "42703",
            IngestError::DuplicateColumn(_) => "42701",
            IngestError::TooLarge { .. } => "54000",
            IngestError::Internal(_) => "XX000",
        }
    }
}

impl From<arrow::error::ArrowError> for IngestError {
    fn from(e: arrow::error::ArrowError) -> Self {
        IngestError::Internal(e.to_string())
    }
}
