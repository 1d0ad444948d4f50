//! A sink's producer: reads its consumer group's next rows and writes them
//! to the topic in Kafka transactions, exactly once.
//!
//! One thread per sink. It reads only what is durable in Sluice (a
//! table's committed rows, or a view's changes once a checkpoint epoch
//! holds them), so a transaction never carries a change that recovery
//! could take back. Each transaction holds up to [`MAX_TRANSACTION_RECORDS`]
//! records and, committed with them by `send_offsets_to_transaction`, the
//! group's new position (the next offset per partition of the source, in
//! the offset metadata of partition 0 of the topic, under a consumer group
//! named after the transactional id). On start-up `init_transactions`
//! fences any producer still running under the id and aborts its open
//! transaction; the position is then read back from Kafka (read_committed,
//! so a transaction in flight is waited for) and the sink resumes right
//! after the last committed transaction.
//!
//! The group's own offsets file is committed after each transaction too:
//! it feeds `sluice_catalog.lag`, and it is where the sink resumes when
//! the broker keeps no transactional offsets for it (the first start, or
//! librdkafka's mock cluster, which keeps neither offsets committed in a
//! transaction nor transaction markers). A crash between Kafka's commit
//! and that write then sends the last transaction again: harmless to an
//! upsert topic, a duplicate in an append topic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sluice_catalog::KafkaSink;
use sluice_sql::{FetchCount, StartAt};
use tracing::{info, info_span, warn};

use super::encode::RecordEncoder;
use super::{SinkError, SinkStatus};
use crate::subscribe::{Subscription, SubscriptionManager};

/// Most records in one transaction.
const MAX_TRANSACTION_RECORDS: u64 = 20_000;
/// How long a read waits for new rows before looking at `stop` again.
const READ_WAIT: Duration = Duration::from_millis(500);
/// How long a broker request (init, commit, offsets) may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a transaction's records may take to reach the broker before
/// the transaction is given up.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before a failed sink starts again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the sink commits with each transaction, in the offset metadata.
#[derive(Debug, Serialize, Deserialize)]
struct CommittedPosition {
    sluice_next_offsets: Vec<u64>,
}

/// Errors of the client as a whole (all brokers down, for one) go to the
/// sink's status as they happen.
pub struct SinkContext {
    status: Arc<SinkStatus>,
}

impl ClientContext for SinkContext {
    fn error(&self, error: KafkaError, reason: &str) {
        warn!(%error, reason, "Kafka client error");
        self.status.note_error(format!("{error}: {reason}"));
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();
    // A record that fails fails its transaction's commit, which is where
    // the sink learns of it.
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

pub struct KafkaSinkTask {
    pub group: Arc<Subscription>,
    pub subs: Arc<SubscriptionManager>,
    pub sink: KafkaSink,
    /// The source's columns a record's value holds.
    pub columns: Vec<String>,
    pub status: Arc<SinkStatus>,
    pub stop: Arc<AtomicBool>,
    pub runtime: tokio::runtime::Handle,
}

fn client_config(sink: &KafkaSink) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &sink.bootstrap_servers);
    for (k, v) in &sink.properties {
        config.set(k, v);
    }
    config
}

impl KafkaSinkTask {
    pub fn run(self) {
        let span = info_span!("kafka_sink", sink = %self.group.def.name, topic = %self.sink.topic);
        let _enter = span.enter();
        while !self.stop.load(Ordering::Acquire) {
            match self.produce() {
                Ok(()) => return,
                Err(e) => {
                    warn!(error = %e, "sink failed; starting again from its committed position");
                    self.status.note_error(e.to_string());
                    let until = Instant::now() + RETRY_AFTER;
                    while Instant::now() < until && !self.stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }

    /// Runs one producer until `stop` or an error.
    fn produce(&self) -> Result<(), SinkError> {
        let mut config = client_config(&self.sink);
        config
            .set("transactional.id", &self.sink.transactional_id)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        let producer: BaseProducer<SinkContext> = config
            .create_with_context(SinkContext {
                status: self.status.clone(),
            })
            .map_err(|e| SinkError::Kafka(e.to_string()))?;
        producer.init_transactions(BROKER_TIMEOUT)?;
        let topic_partitions = crate::source::kafka::topic_partitions(
            &self.sink.bootstrap_servers,
            &self.sink.topic,
            &self.sink.properties,
        )?
        .max(1) as i32;
        let consumer: BaseConsumer<DefaultConsumerContext> = client_config(&self.sink)
            .set("group.id", &self.sink.transactional_id)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .map_err(|e| SinkError::Kafka(e.to_string()))?;
        let metadata = consumer
            .group_metadata()
            .ok_or_else(|| SinkError::Kafka("no consumer group metadata".into()))?;
        let start = self.committed_position(&consumer)?;
        let since = StartAt::Offsets(
            start
                .iter()
                .enumerate()
                .map(|(k, &o)| (k as u32, o))
                .collect(),
        );
        let mut cursor = self
            .subs
            .declare("sink", &self.group.def.name, Some(&since), false)
            .map_err(|e| SinkError::Kafka(e.to_string()))?;
        let encoder = RecordEncoder::new(
            &cursor.schema,
            &self.group.def.source,
            &self.columns,
            &self.sink.key,
        )?;
        *self.status.position.lock() = start.clone();
        info!(position = ?start, "sink producing");
        while !self.stop.load(Ordering::Acquire) {
            // Serves the client's callbacks: a broker that went away is
            // reported even while there is nothing to send.
            producer.poll(Duration::ZERO);
            let mut notices = Vec::new();
            let batches = self
                .runtime
                .block_on(self.subs.fetch(
                    &mut cursor,
                    FetchCount::Rows(MAX_TRANSACTION_RECORDS),
                    Some(READ_WAIT),
                    &mut notices,
                ))
                .map_err(|e| SinkError::Kafka(e.to_string()))?;
            for n in notices {
                warn!(notice = %n, "sink skipped records");
                self.status.note_error(n);
            }
            if cursor.position() == self.status.position.lock().as_slice() {
                continue;
            }
            let records = encoder.encode(&batches)?;
            if !records.is_empty() {
                producer.begin_transaction()?;
                for r in &records {
                    let partition = r.partition.map(|p| p.rem_euclid(topic_partitions));
                    self.send(&producer, partition, r.key.as_deref(), r.value.as_deref())?;
                }
                let offsets = position_offsets(&self.sink.topic, cursor.position())?;
                let committed = self
                    .deliver(&producer)
                    .and_then(|()| {
                        producer.send_offsets_to_transaction(&offsets, &metadata, BROKER_TIMEOUT)
                    })
                    .and_then(|()| producer.commit_transaction(BROKER_TIMEOUT));
                if let Err(e) = committed {
                    let _ = producer.abort_transaction(BROKER_TIMEOUT);
                    return Err(e.into());
                }
            }
            self.runtime
                .block_on(self.subs.commit(&mut cursor))
                .map_err(|e| SinkError::Kafka(e.to_string()))?;
            self.status
                .note_sent(records.len() as u64, cursor.position());
        }
        Ok(())
    }

    /// Waits until the broker has every queued record, in short flushes
    /// that serve the client's callbacks (so errors are reported as they
    /// come), for at most [`DELIVERY_TIMEOUT`] or until the sink stops.
    fn deliver(&self, producer: &BaseProducer<SinkContext>) -> Result<(), KafkaError> {
        let until = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            match producer.flush(Duration::from_secs(1)) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                    if Instant::now() < until && !self.stop.load(Ordering::Acquire) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Queues one record, waiting while the producer's queue is full.
    fn send(
        &self,
        producer: &BaseProducer<SinkContext>,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<(), SinkError> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.sink.topic);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }

    /// Where the sink resumes: per partition of the source, the later of
    /// the position Kafka committed with the last transaction and the
    /// group's own committed offsets.
    fn committed_position(&self, consumer: &BaseConsumer) -> Result<Vec<u64>, SinkError> {
        let mut local = self
            .group
            .committed()
            .map(|(offsets, _, _)| offsets)
            .ok_or_else(|| {
                SinkError::Kafka(format!(
                    "the committed offsets of sink \"{}\" cannot be read",
                    self.group.def.name
                ))
            })?;
        let mut asked = TopicPartitionList::new();
        asked.add_partition(&self.sink.topic, 0);
        let answer = consumer.committed_offsets(asked, BROKER_TIMEOUT)?;
        let in_kafka = answer
            .find_partition(&self.sink.topic, 0)
            .map(|e| e.metadata().to_string())
            .filter(|m| !m.is_empty())
            .and_then(|m| serde_json::from_str::<CommittedPosition>(&m).ok());
        if let Some(p) = in_kafka {
            for (mine, theirs) in local.iter_mut().zip(p.sluice_next_offsets) {
                *mine = (*mine).max(theirs);
            }
        }
        Ok(local)
    }
}

/// The position as the offset of partition 0 of the topic: the total
/// read (so it only grows) with every partition's next offset in the
/// metadata.
fn position_offsets(topic: &str, position: &[u64]) -> Result<TopicPartitionList, SinkError> {
    let total: u64 = position.iter().sum();
    let metadata = serde_json::to_string(&CommittedPosition {
        sluice_next_offsets: position.to_vec(),
    })
    .map_err(|e| SinkError::Encode(e.to_string()))?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Offset(total as i64))?;
    if let Some(mut e) = list.find_partition(topic, 0) {
        e.set_metadata(metadata);
    }
    Ok(list)
}
