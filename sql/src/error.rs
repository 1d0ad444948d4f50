/// Errors found while reading SQL, before anything is executed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlError {
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    InvalidOption(String),
    #[error("column \"{0}\" specified more than once")]
    DuplicateColumn(String),
    #[error("column \"{0}\" does not exist")]
    UndefinedColumn(String),
    #[error("{0}")]
    DatatypeMismatch(String),
    #[error("stack depth limit exceeded: {0}")]
    TooDeep(String),
    #[error("statement too large: {0}")]
    TooLarge(String),
    /// A privilege the object does not have (USAGE on a table).
    #[error("{0}")]
    InvalidGrant(String),
    #[error("{0}")]
    UndefinedObject(String),
    /// A value past its type's range (a bigint frame offset).
    #[error("{0}")]
    OutOfRange(String),
    /// A TABLESAMPLE argument out of range.
    #[error("{0}")]
    InvalidTablesample(String),
}

impl SqlError {
    /// The PostgreSQL SQLSTATE for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SqlError::Syntax(_) => "42601",
            SqlError::Unsupported(_) => "0A000",
            SqlError::InvalidOption(_) => "22023",
            SqlError::DuplicateColumn(_) => "42701",
            SqlError::UndefinedColumn(_) => "42703",
            SqlError::DatatypeMismatch(_) => "42804",
            SqlError::TooDeep(_) => "54001",
            SqlError::TooLarge(_) => "54000",
            SqlError::InvalidGrant(_) => "0LP01",
            SqlError::UndefinedObject(_) => "42704",
            SqlError::InvalidTablesample(_) => "2202H",
            SqlError::OutOfRange(_) => "22003",
        }
    }
}
