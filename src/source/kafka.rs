//! A Kafka topic feeding a table, exactly once across crashes.
//!
//! One thread per source table owns a librdkafka consumer. It assigns the
//! partitions it owns with explicit start offsets (never a consumer group's
//! committed offsets, never `seek` after `assign`), reads what the broker
//! has in polls of up to [`MAX_POLL_RECORDS`] records, and appends each
//! poll to the table in one commit whose record also holds every
//! partition's next Kafka offset (last offset read + 1: transaction
//! markers leave gaps, so offsets are never counted). On start-up the
//! consumer resumes from those offsets: no row is lost or read twice.
//!
//! A partition with no committed offset yet starts where the `start`
//! option says, resolved to a concrete offset that is committed before
//! anything is read, so a restart before the first record does not move
//! the start.
//!
//! Records that do not parse go to the dead-letter table first, then the
//! good rows and the positions to the table. A crash between the two
//! leaves dead letters whose records will be read again; each partition's
//! last dead letter is looked up at start-up and records up to it are not
//! written twice.
//!
//! Errors from the broker (down, topic gone, offsets reset after Kafka's
//! retention) are logged, counted and kept as the source's last error in
//! `sluice_catalog.sources`; librdkafka reconnects by itself and the
//! source carries on. Consumer-group offsets are never committed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, Int64Array};
use arrow::record_batch::RecordBatch;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::{Message, Offset, TopicPartitionList};
use sluice_catalog::{KafkaSource, SourceStart};
use tracing::{info, info_span, warn};

use super::decode::{dead_letter_rows, KafkaRecord, RecordDecoder};
use super::{SourceError, SourceStatus, RETRY_AFTER};
use crate::log::{LogError, TableLog};

/// Most records appended in one commit.
const MAX_POLL_RECORDS: usize = 16_384;
/// How long a poll gathers records after its first one.
const POLL_GATHER: Duration = Duration::from_millis(20);
/// How long a broker request (metadata, watermarks) may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// The client settings every source consumer uses, then the table's own
/// `kafka.*` options.
fn consumer_config(source: &KafkaSource, group: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &source.bootstrap_servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("statistics.interval.ms", "1000");
    for (k, v) in &source.properties {
        config.set(k, v);
    }
    config
}

/// What librdkafka reports besides records: each partition's end (from
/// its statistics, every second) and errors of the client as a whole
/// (all brokers down, for one).
pub struct SourceContext {
    status: Option<Arc<SourceStatus>>,
    topic: String,
}

impl ClientContext for SourceContext {
    fn stats(&self, statistics: Statistics) {
        let (Some(status), Some(topic)) = (&self.status, statistics.topics.get(&self.topic)) else {
            return;
        };
        for (k, p) in &topic.partitions {
            if let Some(s) = usize::try_from(*k)
                .ok()
                .and_then(|k| status.partitions.get(k))
            {
                if p.hi_offset >= 0 {
                    s.high_watermark.store(p.hi_offset, Ordering::Relaxed);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        warn!(%error, reason, "Kafka client error");
        if let Some(status) = &self.status {
            status.note_error(format!("{error}: {reason}"));
        }
    }
}

impl ConsumerContext for SourceContext {}

type SourceConsumer = BaseConsumer<SourceContext>;

fn consumer(
    source: &KafkaSource,
    group: &str,
    status: Option<Arc<SourceStatus>>,
) -> Result<SourceConsumer, SourceError> {
    let context = SourceContext {
        status,
        topic: source.topic.clone(),
    };
    consumer_config(source, group)
        .create_with_context(context)
        .map_err(|e| SourceError::Config(e.to_string()))
}

/// The number of partitions of a topic, asked of the broker.
pub fn topic_partitions(
    servers: &str,
    topic: &str,
    properties: &[(String, String)],
) -> Result<u32, SourceError> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", servers);
    for (k, v) in properties {
        config.set(k, v);
    }
    let consumer: BaseConsumer = config
        .set("group.id", "sluice-metadata")
        .create()
        .map_err(|e| SourceError::Config(e.to_string()))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), BROKER_TIMEOUT)
        .map_err(|e| SourceError::Unreachable {
            servers: servers.to_string(),
            reason: e.to_string(),
        })?;
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .ok_or_else(|| SourceError::UnknownTopic(topic.to_string()))?;
    Ok(found.partitions().len() as u32)
}

pub struct KafkaSourceTask {
    pub table: Arc<TableLog>,
    pub dead: Arc<TableLog>,
    pub source: KafkaSource,
    pub status: Arc<SourceStatus>,
    pub stop: Arc<AtomicBool>,
    pub runtime: tokio::runtime::Handle,
    /// Set when the consumer reports that a position was past Kafka's
    /// retention.
    pub offsets_reset: AtomicBool,
}

impl KafkaSourceTask {
    pub fn run(self) {
        let span =
            info_span!("kafka_source", table = %self.table.def().name, topic = %self.source.topic);
        let _enter = span.enter();
        // Until the consumer is up and every partition has a position.
        let (consumer, positions) = loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            match self.start() {
                Ok(started) => break started,
                Err(e) => {
                    warn!(error = %e, "source could not start; retrying");
                    self.status.note_error(e.to_string());
                    std::thread::sleep(RETRY_AFTER);
                }
            }
        };
        self.follow(consumer, positions);
    }

    /// The owned partitions, in order.
    fn owned(&self) -> Vec<usize> {
        (0..self.table.partitions().len())
            .filter(|k| {
                self.source
                    .owned_partitions
                    .as_ref()
                    .is_none_or(|o| o.contains(&(*k as u32)))
            })
            .collect()
    }

    /// Creates the consumer and finds every owned partition's position:
    /// the committed one, or where `start` says (committed at once).
    fn start(&self) -> Result<(SourceConsumer, Vec<i64>), SourceError> {
        let consumer = consumer(
            &self.source,
            &format!("sluice-{}", self.table.def().name),
            Some(self.status.clone()),
        )?;
        let n = self.table.partitions().len();
        let mut positions: Vec<i64> = self.table.source_positions().to_vec();
        positions.resize(n, -1);
        let unreachable = |e: KafkaError| SourceError::Unreachable {
            servers: self.source.bootstrap_servers.clone(),
            reason: e.to_string(),
        };
        let mut resolved = Vec::new();
        for k in self.owned() {
            if positions[k] >= 0 {
                // Records Kafka's retention deleted before they were read
                // are skipped, counted and announced.
                let (low, _) = consumer
                    .fetch_watermarks(&self.source.topic, k as i32, BROKER_TIMEOUT)
                    .map_err(unreachable)?;
                if low > positions[k] {
                    let skipped = low - positions[k];
                    let notice = format!(
                        "partition {k} of topic \"{}\": offsets {} to {} were deleted by Kafka's retention before the source read them; {skipped} records skipped, resuming at {low}",
                        self.source.topic,
                        positions[k],
                        low - 1
                    );
                    warn!(%notice, "source skipped records");
                    self.status.partitions[k]
                        .skipped
                        .fetch_add(skipped as u64, Ordering::Relaxed);
                    self.status.note_error(notice);
                    positions[k] = low;
                    resolved.push((k, low));
                }
                continue;
            }
            let offset = match self.source.start {
                SourceStart::Earliest | SourceStart::Latest => {
                    let (low, high) = consumer
                        .fetch_watermarks(&self.source.topic, k as i32, BROKER_TIMEOUT)
                        .map_err(unreachable)?;
                    match self.source.start {
                        SourceStart::Earliest => low,
                        _ => high,
                    }
                }
                SourceStart::TimestampMs(ms) => {
                    let mut tpl = TopicPartitionList::new();
                    tpl.add_partition_offset(&self.source.topic, k as i32, Offset::Offset(ms))
                        .map_err(unreachable)?;
                    let found = consumer
                        .offsets_for_times(tpl, BROKER_TIMEOUT)
                        .map_err(unreachable)?;
                    let offset = found
                        .find_partition(&self.source.topic, k as i32)
                        .map(|p| p.offset());
                    match offset {
                        Some(Offset::Offset(o)) => o,
                        // No record at or after the time: the end.
                        _ => {
                            consumer
                                .fetch_watermarks(&self.source.topic, k as i32, BROKER_TIMEOUT)
                                .map_err(unreachable)?
                                .1
                        }
                    }
                }
            };
            positions[k] = offset;
            resolved.push((k, offset));
        }
        if !resolved.is_empty() {
            self.runtime
                .block_on(self.table.append_from_source(Vec::new(), resolved.clone()))?;
            info!(
                ?resolved,
                "source positions set from the start option or past retention"
            );
        }
        self.assign(&consumer, &positions)?;
        for k in self.owned() {
            self.status.partitions[k]
                .next_offset
                .store(positions[k], Ordering::Relaxed);
        }
        info!(?positions, "source started");
        Ok((consumer, positions))
    }

    fn assign(&self, consumer: &SourceConsumer, positions: &[i64]) -> Result<(), SourceError> {
        let mut tpl = TopicPartitionList::new();
        for k in self.owned() {
            tpl.add_partition_offset(&self.source.topic, k as i32, Offset::Offset(positions[k]))
                .map_err(|e| SourceError::Config(e.to_string()))?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| SourceError::Config(e.to_string()))
    }

    /// The offset of each partition's last dead letter (-1: none).
    fn last_dead_letters(&self) -> Result<Vec<i64>, LogError> {
        let ends = self.dead.commits().borrow().clone();
        let mut last = vec![-1; self.dead.partitions().len()];
        for (k, part) in self.dead.partitions().iter().enumerate() {
            let end = ends.get(k).copied().unwrap_or(0);
            if end == 0 {
                continue;
            }
            for meta in part.frames_in_range(end - 1, end) {
                let batch = self.runtime.block_on(part.read_frame(&meta))?;
                if let Some(offsets) = batch.column(1).as_any().downcast_ref::<Int64Array>() {
                    if !offsets.is_empty() {
                        last[k] = last[k].max(offsets.value(offsets.len() - 1));
                    }
                }
            }
        }
        Ok(last)
    }

    /// Reads and appends until stopped.
    fn follow(&self, mut consumer: SourceConsumer, mut positions: Vec<i64>) {
        let decoder = RecordDecoder::new(&self.table.def(), self.source.format);
        let mut dead_until = loop {
            match self.last_dead_letters() {
                Ok(d) => break d,
                Err(e) => {
                    self.status.note_error(e.to_string());
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(RETRY_AFTER);
                }
            }
        };
        while !self.stop.load(Ordering::Acquire) {
            let records = self.poll(&consumer, &positions);
            let appended = match records.is_empty() {
                true => Ok(()),
                false => self.append(&decoder, records, &mut positions, &mut dead_until),
            };
            match appended {
                // Kafka's retention passed a position while the source ran:
                // start again from the committed positions, which counts
                // and announces what was skipped.
                Ok(()) if self.offsets_reset.swap(false, Ordering::AcqRel) => match self.start() {
                    Ok((c, p)) => {
                        consumer = c;
                        positions = p;
                    }
                    Err(e) => self.status.note_error(e.to_string()),
                },
                Ok(()) => {}
                Err(e) => {
                    // Nothing of the poll is committed: read it again from
                    // the committed positions.
                    warn!(error = %e, "source could not append; reading again");
                    self.status.note_error(e.to_string());
                    std::thread::sleep(RETRY_AFTER);
                    match self.start() {
                        Ok((c, p)) => {
                            consumer = c;
                            positions = p;
                        }
                        Err(e) => self.status.note_error(e.to_string()),
                    }
                }
            }
        }
    }

    /// One poll's records, by partition, in offset order: what the broker
    /// has now, gathered for up to [`POLL_GATHER`] after the first.
    fn poll(
        &self,
        consumer: &SourceConsumer,
        positions: &[i64],
    ) -> BTreeMap<usize, Vec<KafkaRecord>> {
        let mut out: BTreeMap<usize, Vec<KafkaRecord>> = BTreeMap::new();
        let mut count = 0;
        let mut gather_until: Option<Instant> = None;
        while count < MAX_POLL_RECORDS {
            let wait = match gather_until {
                None => Duration::from_millis(100),
                Some(until) => match until.checked_duration_since(Instant::now()) {
                    Some(left) => left.min(Duration::from_millis(5)),
                    None => break,
                },
            };
            let message = match consumer.poll(wait) {
                None if gather_until.is_some() => break,
                None => return out,
                Some(Err(e)) => {
                    warn!(error = %e, "Kafka consumer error");
                    self.status.note_error(e.to_string());
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) {
                        self.offsets_reset.store(true, Ordering::Release);
                    }
                    if gather_until.is_some() {
                        break;
                    }
                    return out;
                }
                Some(Ok(m)) => m,
            };
            gather_until.get_or_insert_with(|| Instant::now() + POLL_GATHER);
            let k = message.partition() as usize;
            // A record before the position was read already (after an
            // assignment was made again).
            if message.topic() != self.source.topic
                || positions.get(k).is_none_or(|p| message.offset() < *p)
            {
                continue;
            }
            out.entry(k).or_default().push(KafkaRecord {
                partition: message.partition(),
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                timestamp_ms: message.timestamp().to_millis(),
                payload: message.payload().map(<[u8]>::to_vec),
            });
            count += 1;
        }
        out
    }

    /// Decodes one poll and appends it: dead letters first, then the rows
    /// with every read partition's next offset.
    fn append(
        &self,
        decoder: &RecordDecoder,
        records: BTreeMap<usize, Vec<KafkaRecord>>,
        positions: &mut [i64],
        dead_until: &mut [i64],
    ) -> Result<(), LogError> {
        let mut rows: Vec<(usize, RecordBatch)> = Vec::new();
        let mut dead: Vec<(usize, RecordBatch)> = Vec::new();
        let mut next: Vec<(usize, i64)> = Vec::new();
        let mut counts: Vec<(usize, u64, u64)> = Vec::new();
        for (k, records) in records {
            let Some(last) = records.last().map(|r| r.offset) else {
                continue;
            };
            let decoded = decoder.decode(records);
            let letters: Vec<_> = decoded
                .dead
                .into_iter()
                .filter(|(r, _)| r.offset > dead_until[k])
                .collect();
            if !letters.is_empty() {
                dead.push((k, dead_letter_rows(&self.dead.def(), &letters)?));
            }
            let n = decoded.rows.as_ref().map_or(0, |b| b.num_rows() as u64);
            if let Some(b) = decoded.rows {
                rows.push((k, b));
            }
            counts.push((k, n, letters.len() as u64));
            next.push((k, last + 1));
        }
        if !dead.is_empty() {
            let marks: Vec<(usize, i64)> = dead
                .iter()
                .filter_map(|(k, b)| {
                    let offsets = b.column(1).as_any().downcast_ref::<Int64Array>()?;
                    Some((*k, offsets.value(offsets.len().checked_sub(1)?)))
                })
                .collect();
            self.runtime
                .block_on(self.dead.append_from_source(dead, Vec::new()))?;
            for (k, o) in marks {
                dead_until[k] = o;
            }
        }
        self.runtime
            .block_on(self.table.append_from_source(rows, next.clone()))?;
        for (k, o) in next {
            positions[k] = o;
            self.status.partitions[k]
                .next_offset
                .store(o, Ordering::Relaxed);
        }
        for (k, n, d) in counts {
            let p = &self.status.partitions[k];
            p.rows.fetch_add(n, Ordering::Relaxed);
            p.dead_letters.fetch_add(d, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TLS and SASL settings passed through `kafka.*` need librdkafka built
    /// with OpenSSL: without it, creating the client fails.
    #[test]
    fn tls_and_sasl_settings_are_accepted() {
        let source = KafkaSource {
            topic: "t".into(),
            bootstrap_servers: "127.0.0.1:1".into(),
            format: sluice_catalog::SourceFormat::Json,
            start: SourceStart::Earliest,
            properties: vec![
                ("security.protocol".into(), "SASL_SSL".into()),
                ("sasl.mechanism".into(), "SCRAM-SHA-256".into()),
                ("sasl.username".into(), "u".into()),
                ("sasl.password".into(), "p".into()),
                (
                    "ssl.endpoint.identification.algorithm".into(),
                    "https".into(),
                ),
            ],
            owned_partitions: None,
        };
        if let Err(e) = consumer(&source, "g", None) {
            panic!("{e}");
        }
    }
}
