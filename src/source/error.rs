use crate::log::LogError;

/// What creating or running a source can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("could not reach Kafka at {servers}: {reason}")]
    Unreachable { servers: String, reason: String },
    #[error("Kafka topic \"{0}\" does not exist")]
    UnknownTopic(String),
    #[error("kafka_partitions names partition {partition}, but topic \"{topic}\" has {partitions} partitions")]
    NoSuchPartition {
        topic: String,
        partition: u32,
        partitions: u32,
    },
    #[error("invalid Kafka client setting: {0}")]
    Config(String),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("could not start the source: {0}")]
    Start(String),
}

crate::layer_error!(SourceError);

impl SourceError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SourceError::Unreachable { .. } => "08001",
            SourceError::UnknownTopic(_) => "42704",
            SourceError::NoSuchPartition { .. } | SourceError::Config(_) => "22023",
            SourceError::Log(e) => e.sqlstate(),
            SourceError::Start(_) => "XX000",
        }
    }
}
