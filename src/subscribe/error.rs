use std::path::PathBuf;

/// Errors of subscriptions and their cursors.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error("cursor \"{0}\" does not exist")]
    UndefinedCursor(String),
    #[error("cursor \"{0}\" already exists")]
    DuplicateCursor(String),
    #[error("relation \"{0}\" does not exist")]
    UndefinedSource(String),
    #[error("subscription \"{0}\" does not exist")]
    UndefinedSubscription(String),
    #[error("\"{0}\" is a sink, not a subscription: DROP SINK {0}")]
    IsSink(String),
    #[error("sink \"{0}\" does not exist")]
    UndefinedSink(String),
    #[error("sink \"{0}\" already exists")]
    DuplicateSink(String),
    #[error("{0}")]
    InvalidPosition(String),
    #[error("invalid input syntax for type timestamp: \"{0}\"")]
    BadTimestamp(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("subscription \"{subscription}\" was reset after cursor \"{cursor}\" was declared; its position was not committed, declare the cursor again")]
    ResetSinceDeclare {
        subscription: String,
        cursor: String,
    },
    #[error("the committed offsets of subscription \"{name}\" in {path} cannot be read ({reason}); ALTER SUBSCRIPTION {name} RESET TO ... sets them again")]
    Damaged {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("could not write the committed offsets of subscription \"{name}\": {source}")]
    Write {
        name: String,
        source: crate::log::LogError,
    },
}

crate::layer_error!(SubscriptionError);

impl SubscriptionError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SubscriptionError::UndefinedCursor(_) => "34000",
            SubscriptionError::DuplicateCursor(_) => "42P03",
            SubscriptionError::UndefinedSource(_) => "42P01",
            SubscriptionError::UndefinedSubscription(_) => "42704",
            SubscriptionError::IsSink(_) => "42809",
            SubscriptionError::UndefinedSink(_) => "42704",
            SubscriptionError::DuplicateSink(_) => "42710",
            SubscriptionError::InvalidPosition(_) => "22023",
            SubscriptionError::BadTimestamp(_) => "22007",
            SubscriptionError::Unsupported(_) => "0A000",
            SubscriptionError::ResetSinceDeclare { .. } => "55000",
            SubscriptionError::Damaged { .. } => "XX001",
            SubscriptionError::Write { source, .. } if source.is_disk_full() => "53100",
            SubscriptionError::Write { .. } => "58030",
        }
    }
}
