use crate::source::SourceError;

/// What creating or running a sink can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The broker or the topic (unreachable, no such topic, bad setting).
    #[error(transparent)]
    Connector(#[from] SourceError),
    #[error("column \"{column}\" of option \"key\" does not exist in \"{relation}\"")]
    UndefinedColumn { column: String, relation: String },
    #[error("\"{0}\" changes rows in place: a sink of it needs key = '...' naming the columns that identify a row, so that a change becomes an upsert and a delete a tombstone (a table whose rows never change can be created APPEND ONLY instead)")]
    NeedsKey(String),
    #[error("Kafka: {0}")]
    Kafka(String),
    #[error("could not encode a record: {0}")]
    Encode(String),
}

crate::layer_error!(SinkError);

impl SinkError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SinkError::Connector(e) => e.sqlstate(),
            SinkError::UndefinedColumn { .. } => "42703",
            SinkError::NeedsKey(_) => "0A000",
            SinkError::Kafka(_) => "08006",
            SinkError::Encode(_) => "XX000",
        }
    }
}

impl From<rdkafka::error::KafkaError> for SinkError {
    fn from(e: rdkafka::error::KafkaError) -> SinkError {
        SinkError::Kafka(e.to_string())
    }
}
