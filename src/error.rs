//! The server's error type and its SQLSTATE codes, below every layer:
//! each layer's own error (the log's, the object store's, a sink's) says
//! its SQLSTATE through [`LayerError`] and converts into [`SluiceError`]
//! where it is defined, so this module names none of them. Turning an
//! error into a protocol message is the wire's business (`server/`).

use datafusion::error::DataFusionError;
use sluice_catalog::CatalogError;
use sluice_sql::SqlError;

/// An error of one layer (the log, the object store, ingest, logins,
/// subscriptions, sources, sinks), which knows its SQLSTATE.
pub trait LayerError: std::error::Error + Send + Sync + 'static {
    fn sqlstate(&self) -> &'static str;
}

/// `impl From<$error> for SluiceError` through [`LayerError`], for a layer's
/// error type that has a `sqlstate` method.
#[macro_export]
macro_rules! layer_error {
    ($error:ty) => {
        impl $crate::error::LayerError for $error {
            fn sqlstate(&self) -> &'static str {
                <$error>::sqlstate(self)
            }
        }

        impl From<$error> for $crate::error::SluiceError {
            fn from(e: $error) -> Self {
                $crate::error::SluiceError::Layer(Box::new(e))
            }
        }
    };
}

/// A layer's error inside DataFusion (a table provider's read, a sink's
/// write), boxed as a [`SluiceError`] so that its SQLSTATE is found again.
pub fn into_datafusion<E: Into<SluiceError>>(e: E) -> DataFusionError {
    DataFusionError::External(Box::new(e.into()))
}

/// Why a statement was stopped; each has PostgreSQL's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// A cancel request (57014 `canceling statement due to user request`).
    User,
    /// `statement_timeout` passed (57014 `... due to statement timeout`).
    Timeout,
}

#[derive(Debug, thiserror::Error)]
pub enum SluiceError {
    #[error(transparent)]
    Sql(#[from] SqlError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The error of a layer below, which says its own SQLSTATE.
    #[error("{0}")]
    Layer(Box<dyn LayerError>),
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    TransactionAborted,
    #[error("{0} can only be used in transaction blocks")]
    NoTransactionBlock(&'static str),
    #[error("{0}")]
    ActiveTransaction(&'static str),
    #[error("cannot execute {0} in a read-only transaction")]
    ReadOnlyTransaction(&'static str),
    #[error("savepoint \"{0}\" does not exist")]
    UndefinedSavepoint(String),
    #[error("prepared statement \"{0}\" does not exist")]
    UndefinedPreparedStatement(String),
    #[error("{0}")]
    DataFusion(#[from] DataFusionError),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("view \"{0}\" does not exist")]
    UndefinedView(String),
    #[error("index \"{0}\" does not exist")]
    UndefinedIndex(String),
    #[error("column \"{0}\" does not exist")]
    UndefinedColumn(String),
    /// A view definition that cannot replace the one there.
    #[error("{0}")]
    InvalidDefinition(String),
    /// A view that would read itself.
    #[error("infinite recursion detected in rules for relation \"{0}\"")]
    InvalidRecursion(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Protocol(String),
    #[error("{0}")]
    Internal(String),
    #[error("the checkpoint of materialized view \"{view}\" is not committed yet: {reason}")]
    CheckpointPending { view: String, reason: String },
    #[error("{0}")]
    ObjectInUse(String),
    /// What the statement needs is not there (55000): a view's rows at a
    /// cut retention took.
    #[error("{0}")]
    ObjectNotReady(String),
    /// A file of the server's own (a dataset being written) could not be
    /// written or read.
    #[error("{0}")]
    Io(String),
    /// A definition calls a function whose value its inputs do not fix.
    #[error("function {function}() is not fixed by its inputs (it gives another value at another time, in another session, or at random); {object} cannot use it, since computing it again from the same log must give the same rows")]
    NotFixed {
        function: String,
        object: &'static str,
    },
    #[error("\"{0}\" is not a {1}")]
    WrongObjectType(String, &'static str),
    /// A function or operator refused its input, as PostgreSQL words it.
    #[error("{message}")]
    Evaluation {
        sqlstate: &'static str,
        message: String,
    },
    #[error("invalid value for parameter \"{name}\": \"{value}\"")]
    InvalidParameter { name: String, value: String },
    /// `SET TRANSACTION SNAPSHOT` of an id no open transaction exported.
    #[error("invalid snapshot identifier: \"{0}\"")]
    InvalidSnapshot(String),
    /// A cancel request or `statement_timeout` stopped the statement.
    #[error("{}", match .0 {
        CancelReason::User => "canceling statement due to user request",
        CancelReason::Timeout => "canceling statement due to statement timeout",
    })]
    Canceled(CancelReason),
    /// `dependent` names the kind and the name ("materialized view v").
    #[error("cannot drop {kind} {name} because {dependent} depends on it")]
    DependentObjects {
        kind: &'static str,
        name: String,
        dependent: String,
    },
}

impl SluiceError {
    pub fn sqlstate(&self) -> &'static str {
        if let Some((code, _)) = self.in_postgres_terms() {
            return code;
        }
        match self {
            SluiceError::Sql(e) => e.sqlstate(),
            SluiceError::Catalog(e) => catalog_sqlstate(e),
            SluiceError::Layer(e) => e.sqlstate(),
            SluiceError::TransactionAborted => "25P02",
            SluiceError::NoTransactionBlock(_) => "25P01",
            SluiceError::ActiveTransaction(_) => "25001",
            SluiceError::ReadOnlyTransaction(_) => "25006",
            SluiceError::UndefinedSavepoint(_) => "3B001",
            SluiceError::UndefinedPreparedStatement(_) => "26000",
            SluiceError::DataFusion(e) => datafusion_sqlstate(e),
            SluiceError::Arrow(_) => "XX000",
            SluiceError::UndefinedTable(_) => "42P01",
            SluiceError::UndefinedView(_) => "42P01",
            SluiceError::UndefinedIndex(_) => "42704",
            SluiceError::UndefinedColumn(_) => "42703",
            SluiceError::InvalidDefinition(_) => "42P16",
            SluiceError::InvalidRecursion(_) => "42P17",
            SluiceError::Unsupported(_) => "0A000",
            SluiceError::Protocol(_) => "08P01",
            SluiceError::Internal(_) => "XX000",
            SluiceError::DependentObjects { .. } => "2BP01",
            SluiceError::WrongObjectType(..) => "42809",
            SluiceError::ObjectInUse(_) => "55006",
            SluiceError::ObjectNotReady(_) => "55000",
            SluiceError::Io(_) => "58030",
            SluiceError::NotFixed { .. } => "42P17",
            SluiceError::CheckpointPending { .. } => "58030",
            SluiceError::Evaluation { sqlstate, .. } => sqlstate,
            SluiceError::Canceled(_) => "57014",
            SluiceError::InvalidParameter { .. } => "22023",
            SluiceError::InvalidSnapshot(_) => "22023",
        }
    }

    /// The message without DataFusion's prefixes ("Error during planning:")
    /// and without its request to report a bug to DataFusion, which is
    /// ours to report, not the user's.
    /// An error of the data (SQLSTATE class 22: a division by zero, an
    /// overflow), not of the statement, the server or a file.
    pub fn is_data_exception(&self) -> bool {
        self.sqlstate().starts_with("22")
    }

    pub fn message(&self) -> String {
        let message = self.message_as_said();
        match message.find("\nThis issue was likely caused by a bug in DataFusion") {
            Some(at) => message[..at].trim_end_matches('.').to_string(),
            None => message,
        }
    }

    fn message_as_said(&self) -> String {
        if let Some((_, message)) = self.in_postgres_terms() {
            return message;
        }
        match self {
            SluiceError::DataFusion(e) => match root(e) {
                DataFusionError::External(inner) => inner.to_string(),
                DataFusionError::ResourcesExhausted(m) => format!("out of memory: {m}"),
                DataFusionError::Plan(m) => match missing_table(m) {
                    Some(name) => format!("relation \"{name}\" does not exist"),
                    None => m.clone(),
                },
                DataFusionError::ArrowError(a, _) => match a.as_ref() {
                    arrow::error::ArrowError::CastError(m) => {
                        invalid_input(m).unwrap_or_else(|| root(e).to_string())
                    }
                    arrow::error::ArrowError::DivideByZero => "division by zero".into(),
                    // Our checked integer operators word it as PostgreSQL.
                    arrow::error::ArrowError::ArithmeticOverflow(m) => m.clone(),
                    _ => root(e).to_string(),
                },
                DataFusionError::Execution(m) | DataFusionError::NotImplemented(m) => {
                    invalid_input(m).unwrap_or_else(|| m.clone())
                }
                DataFusionError::SQL(p, _) => p
                    .to_string()
                    .trim_start_matches("sql parser error: ")
                    .to_string(),
                other => other.to_string(),
            },
            other => other.to_string(),
        }
    }
}

/// The SQLSTATE of an error of the catalog crate.
pub(crate) fn catalog_sqlstate(e: &CatalogError) -> &'static str {
    match e {
        CatalogError::DuplicateTable(_) => "42P07",
        CatalogError::UndefinedTable(_) => "42P01",
        CatalogError::Corrupt { .. } => "XX001",
        CatalogError::Io { .. } => "58030",
        CatalogError::DuplicateSubscription(_) => "42710",
        CatalogError::UndefinedSubscription(_) => "42704",
        CatalogError::DuplicateDataset(_) => "42710",
        CatalogError::UndefinedDataset(_) => "42704",
        CatalogError::DuplicateCut(_) => "42710",
        CatalogError::UndefinedCut(_) => "42704",
        CatalogError::DuplicateRole(_) => "42710",
        CatalogError::UndefinedRole(_) => "42704",
    }
}

/// The table named by DataFusion's "table 'catalog.schema.name' not found".
fn missing_table(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("table '")?;
    let name = rest.strip_suffix("' not found")?;
    Some(name.rsplit('.').next().unwrap_or(name))
}

/// PostgreSQL's words for a text value that does not parse as a type,
/// from Arrow's "Cannot cast string 'x' to value of Int64 type".
fn invalid_input(message: &str) -> Option<String> {
    let rest = message.split("Cannot cast string '").nth(1)?;
    let (value, rest) = rest.split_once("' to value of ")?;
    let arrow_type = rest.split_whitespace().next()?;
    let pg_type = match arrow_type {
        "Int16" => "smallint",
        "Int32" => "integer",
        "Int64" => "bigint",
        "Float32" => "real",
        "Float64" => "double precision",
        "Boolean" => "boolean",
        "Date32" => "date",
        t if t.starts_with("Decimal") => "numeric",
        t if t.starts_with("Timestamp") => "timestamp",
        _ => return None,
    };
    Some(format!(
        "invalid input syntax for type {pg_type}: \"{value}\""
    ))
}

impl SluiceError {
    /// Errors of DataFusion's and Arrow's functions that PostgreSQL raises
    /// too, with its SQLSTATE and wording instead of theirs.
    fn in_postgres_terms(&self) -> Option<(&'static str, String)> {
        let SluiceError::DataFusion(e) = self else {
            return None;
        };
        let text = match root(e) {
            DataFusionError::ArrowError(a, _) => a.to_string(),
            DataFusionError::Execution(m)
            | DataFusionError::Plan(m)
            | DataFusionError::Internal(m) => m.clone(),
            DataFusionError::External(inner) if inner.downcast_ref::<SluiceError>().is_none() => {
                inner.to_string()
            }
            _ => return None,
        };
        postgres_wording(&text)
    }
}

fn postgres_wording(text: &str) -> Option<(&'static str, String)> {
    let quoted = |after: &str| -> Option<String> {
        let rest = text.split(after).nth(1)?;
        Some(rest.split('\'').next()?.to_string())
    };
    // A window ordered by a type DataFusion cannot range over (bytea):
    // refused as unsupported, not reported as a bug of ours.
    if let Some(rest) = text.split("Cannot run range queries on datatype: ").nth(1) {
        let arrow_type = rest.trim_end_matches('.');
        return Some((
            "0A000",
            format!("a window frame ordered by a {arrow_type} column is not supported; order it by another column, or use ROWS BETWEEN"),
        ));
    }
    for (arrow_type, name) in [
        ("Int16", "smallint"),
        ("Int32", "integer"),
        ("Int64", "bigint"),
    ] {
        if text.contains("Can't cast value") && text.contains(&format!("to type {arrow_type}")) {
            return Some(("22003", format!("{name} out of range")));
        }
    }
    if text.contains("is too large to store in a Decimal128 of precision")
        || text.contains("is too small to store in a Decimal128 of precision")
        || text.contains("Decimal128 overflow")
    {
        return Some(("22003", "numeric field overflow".into()));
    }
    // A correlated subquery DataFusion could not turn into a join.
    if text.contains("Accessing outer reference columns is not allowed")
        || text.contains("Physical plan does not support logical expression ScalarSubquery")
        || text.contains("Physical plan does not support logical expression Exists")
        || text.contains("Physical plan does not support logical expression InSubquery")
    {
        return Some((
            "0A000",
            "correlated subquery not supported here: a subquery may refer to the outer \
             query's columns only in equality conditions (WHERE inner.x = outer.y)"
                .into(),
        ));
    }
    // A float beyond NUMERIC's 38 digits.
    if text.contains("Cannot cast to Decimal128(") && text.contains("Overflowing on") {
        return Some(("22003", "value overflows numeric format".into()));
    }
    if text.contains("LIMIT must be >= 0") {
        return Some(("2201W", "LIMIT must not be negative".into()));
    }
    if text.contains("OFFSET must be >= 0") {
        return Some(("2201X", "OFFSET must not be negative".into()));
    }
    if text.contains("field position must not be zero") {
        return Some(("22023", "field position must not be zero".into()));
    }
    if text.contains("invalid Unicode scalar value: -") {
        return Some(("22023", "character number must be positive".into()));
    }
    if text.contains("invalid Unicode scalar value") {
        return Some(("54000", "requested character too large for encoding".into()));
    }
    if let Some(rest) = text.split("regex parse error:").nth(1) {
        let reason = rest
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("error:"))
            .map(|l| l.trim_start_matches("error:").trim().to_string())
            .unwrap_or_else(|| rest.trim().to_string());
        return Some(("2201B", format!("invalid regular expression: {reason}")));
    }
    if text.contains("Scalar subquery returned more than one row") {
        return Some((
            "21000",
            "more than one row returned by a subquery used as an expression".into(),
        ));
    }
    if text.contains("cannot take square root of a negative number") {
        return Some((
            "2201F",
            "cannot take square root of a negative number".into(),
        ));
    }
    if text.contains("Error parsing timestamp from '") {
        let value = quoted("Error parsing timestamp from '")?;
        return Some((
            "22007",
            format!("invalid input syntax for type timestamp: \"{value}\""),
        ));
    }
    if let Some(value) = quoted("Cannot cast value '") {
        if text.contains("to value of Boolean type") {
            return Some((
                "22P02",
                format!("invalid input syntax for type boolean: \"{value}\""),
            ));
        }
    }
    if text.contains("Int64Array overflow") {
        return Some(("22003", "bigint out of range".into()));
    }
    if text.contains("Int32Array overflow") {
        return Some(("22003", "integer out of range".into()));
    }
    if text.contains("Int16Array overflow") {
        return Some(("22003", "smallint out of range".into()));
    }
    if text.contains("Overflow happened on") {
        return Some(("22003", "value out of range: overflow".into()));
    }
    if text.contains("negative count not allowed") || text.contains("negative substring length") {
        return Some(("22011", "negative substring length not allowed".into()));
    }
    None
}

fn root(e: &DataFusionError) -> &DataFusionError {
    match e {
        DataFusionError::Context(_, inner) => root(inner),
        DataFusionError::Shared(inner) => root(inner),
        DataFusionError::Diagnostic(_, inner) => root(inner),
        DataFusionError::Collection(v) if !v.is_empty() => root(&v[0]),
        other => other,
    }
}

fn datafusion_sqlstate(e: &DataFusionError) -> &'static str {
    use datafusion::common::SchemaError;
    match root(e) {
        DataFusionError::SQL(..) => "42601",
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::SchemaError(s, _) => match s.as_ref() {
            SchemaError::FieldNotFound { .. } => "42703",
            SchemaError::AmbiguousReference { .. } => "42702",
            SchemaError::DuplicateQualifiedField { .. }
            | SchemaError::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            arrow::error::ArrowError::DivideByZero => "22012",
            arrow::error::ArrowError::ArithmeticOverflow(_) => "22003",
            arrow::error::ArrowError::CastError(_) | arrow::error::ArrowError::ParseError(_) => {
                "22P02"
            }
            _ => "XX000",
        },
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::External(inner) => {
            // Layers box their errors as SluiceError (see layer_error!).
            if let Some(s) = inner.downcast_ref::<SluiceError>() {
                s.sqlstate()
            } else {
                "XX000"
            }
        }
        DataFusionError::Plan(m) => {
            if m.contains("not found") && m.contains("table") {
                "42P01"
            } else if m.contains("No field named") {
                "42703"
            } else if m.contains("Cannot cast") || m.contains("Cast error") {
                "22P02"
            } else if m.contains("does not exist") || m.contains("Invalid function") {
                "42883"
            } else {
                "42601"
            }
        }
        DataFusionError::Execution(m) => {
            if m.contains("Cast error") || m.contains("Cannot cast") {
                "22P02"
            } else if m.contains("Divide by zero") {
                "22012"
            } else {
                "XX000"
            }
        }
        _ => "XX000",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datafusion_internal_errors_never_ask_the_user_to_file_a_bug() {
        let e = SluiceError::DataFusion(DataFusionError::Internal(
            "Cannot run range queries on datatype: Binary.".into(),
        ));
        assert_eq!(e.sqlstate(), "0A000");
        let other = SluiceError::DataFusion(DataFusionError::Internal("something odd".into()));
        assert_eq!(other.sqlstate(), "XX000");
        assert!(!other.message().contains("bug"), "{}", other.message());
        assert!(other.message().contains("something odd"));
    }

    #[test]
    fn codes() {
        assert_eq!(SluiceError::UndefinedTable("t".into()).sqlstate(), "42P01");
        assert_eq!(
            SluiceError::Catalog(CatalogError::DuplicateTable("t".into())).sqlstate(),
            "42P07"
        );
        let missing = SluiceError::DataFusion(DataFusionError::Plan(
            "table 'sluice.public.x' not found".into(),
        ));
        assert_eq!(missing.sqlstate(), "42P01");
        assert_eq!(missing.message(), "relation \"x\" does not exist");
        assert_eq!(
            SluiceError::Sql(SqlError::Syntax("x".into())).sqlstate(),
            "42601"
        );
        let cast = SluiceError::DataFusion(DataFusionError::ArrowError(
            Box::new(arrow::error::ArrowError::CastError(
                "Cannot cast string 'y' to value of Int64 type".into(),
            )),
            None,
        ));
        assert_eq!(cast.sqlstate(), "22P02");
        assert_eq!(
            cast.message(),
            "invalid input syntax for type bigint: \"y\""
        );
    }
}
