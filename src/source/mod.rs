//! Sources: tables whose rows come from outside the server rather than from
//! statements. Today that is a Kafka topic ([`kafka`]): partition k of the
//! topic feeds partition k of the table, and the next Kafka offset of each
//! partition is committed in the table's commit record with the rows read
//! before it, so after any crash a source resumes exactly after the last
//! committed row.
//!
//! Records that do not parse go to the table's dead-letter table,
//! `<table>_dead_letters`, and never stop the source.
//! `sluice_catalog.sources` shows each partition's progress and the last
//! error.

pub mod decode;
mod error;
pub mod kafka;

pub use error::SourceError;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_catalog::{dead_letter_column_defs, CatalogError, KafkaSource, TableDef, TableOptions};
use tracing::{info, warn};

use crate::log::{LogError, LogStore, TableLog};

/// The name of a source table's dead-letter table.
pub fn dead_letter_table_name(table: &str) -> String {
    format!("{table}_dead_letters")
}

/// What a running source has done, per partition of its table.
pub struct SourceStatus {
    pub table: String,
    pub topic: String,
    pub partitions: Vec<PartitionStatus>,
    /// The last error (broker down, topic gone, offsets reset), with when
    /// it happened (microseconds since 1970).
    last_error: Mutex<Option<(i64, String)>>,
    pub errors: AtomicU64,
}

#[derive(Default)]
pub struct PartitionStatus {
    /// Whether this server reads the partition (`kafka_partitions`).
    pub owned: AtomicBool,
    /// The partition's end in Kafka, as last seen (-1: not yet known).
    pub high_watermark: AtomicI64,
    /// The next Kafka offset to read, as committed (-1: not yet known).
    pub next_offset: AtomicI64,
    /// Rows appended and records sent to the dead letters since start-up.
    pub rows: AtomicU64,
    pub dead_letters: AtomicU64,
    /// Records Kafka's retention deleted before the source read them.
    pub skipped: AtomicU64,
}

impl SourceStatus {
    fn new(table: &TableDef, source: &KafkaSource) -> SourceStatus {
        let partitions = (0..table.options.partitions)
            .map(|k| {
                let p = PartitionStatus::default();
                p.owned.store(
                    source
                        .owned_partitions
                        .as_ref()
                        .is_none_or(|owned| owned.contains(&k)),
                    Ordering::Relaxed,
                );
                p.high_watermark.store(-1, Ordering::Relaxed);
                p.next_offset.store(-1, Ordering::Relaxed);
                p
            })
            .collect();
        SourceStatus {
            table: table.name.clone(),
            topic: source.topic.clone(),
            partitions,
            last_error: Mutex::new(None),
            errors: AtomicU64::new(0),
        }
    }

    pub fn last_error(&self) -> Option<(i64, String)> {
        self.last_error.lock().clone()
    }

    fn note_error(&self, error: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some((crate::checkpoint::now_us(), error));
    }
}

struct RunningSource {
    stop: Arc<AtomicBool>,
    status: Arc<SourceStatus>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Starts, stops and reports every source of the server.
pub struct SourceManager {
    store: Arc<LogStore>,
    running: Mutex<HashMap<String, RunningSource>>,
}

impl SourceManager {
    /// Starts a source for every table the catalog says a topic feeds.
    pub fn start(store: Arc<LogStore>) -> Arc<SourceManager> {
        let manager = Arc::new(SourceManager {
            store: store.clone(),
            running: Mutex::new(HashMap::new()),
        });
        for table in store.tables() {
            if table.def().options.source.is_some() {
                if let Err(e) = manager.run(&table) {
                    warn!(table = %table.def().name, error = %e, "could not start the source");
                }
            }
        }
        manager
    }

    /// Creates a Kafka-fed table and its dead-letter table, and starts
    /// reading: the topic's partition count is asked of the broker.
    /// `Ok(false)` when the table exists and `if_not_exists`.
    pub async fn create_table(
        &self,
        mut def: TableDef,
        if_not_exists: bool,
    ) -> Result<bool, SourceError> {
        let Some(source) = def.options.source.clone() else {
            return Err(SourceError::Start(format!(
                "table {} has no source",
                def.name
            )));
        };
        let duplicate = |name: String| LogError::Catalog(CatalogError::DuplicateTable(name));
        if self.store.name_exists(&def.name) {
            if if_not_exists {
                return Ok(false);
            }
            return Err(duplicate(def.name).into());
        }
        let dead_name = dead_letter_table_name(&def.name);
        if self.store.name_exists(&dead_name) {
            return Err(duplicate(dead_name).into());
        }
        let asked = source.clone();
        let partitions = tokio::task::spawn_blocking(move || {
            kafka::topic_partitions(&asked.bootstrap_servers, &asked.topic, &asked.properties)
        })
        .await
        .map_err(|e| SourceError::Start(e.to_string()))??;
        if let Some(owned) = &source.owned_partitions {
            if let Some(p) = owned.iter().find(|p| **p >= partitions) {
                return Err(SourceError::NoSuchPartition {
                    topic: source.topic.clone(),
                    partition: *p,
                    partitions,
                });
            }
        }
        def.options.partitions = partitions;
        let dead = TableDef {
            id: 0,
            name: dead_name.clone(),
            columns: dead_letter_column_defs(),
            options: TableOptions {
                partitions,
                dead_letters_of: Some(def.name.clone()),
                ..TableOptions::default()
            },
        };
        // The dead letters first: a source whose dead-letter table is
        // missing (a crash between the two) creates it when it starts.
        self.store.create_table(dead, false)?;
        let table = match self.store.create_table(def, false) {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(false),
            Err(e) => {
                let _ = self.store.drop_table(&dead_name);
                return Err(e.into());
            }
        };
        self.run(&table)?;
        Ok(true)
    }

    /// Stops the source of `table` (if one runs) and waits for it.
    pub async fn stop(&self, table: &str) {
        let running = self.running.lock().remove(table);
        if let Some(mut r) = running {
            r.stop.store(true, Ordering::Release);
            if let Some(thread) = r.thread.take() {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
            info!(table, "source stopped");
        }
    }

    /// Every running source's status, by table name.
    pub fn statuses(&self) -> Vec<Arc<SourceStatus>> {
        let mut s: Vec<Arc<SourceStatus>> = self
            .running
            .lock()
            .values()
            .map(|r| r.status.clone())
            .collect();
        s.sort_by(|a, b| a.table.cmp(&b.table));
        s
    }

    fn run(&self, table: &Arc<TableLog>) -> Result<(), SourceError> {
        let Some(source) = table.def().options.source.clone() else {
            return Ok(());
        };
        let dead = self.dead_letter_table(&table.def())?;
        let status = Arc::new(SourceStatus::new(&table.def(), &source));
        let stop = Arc::new(AtomicBool::new(false));
        let task = kafka::KafkaSourceTask {
            table: table.clone(),
            dead,
            source,
            status: status.clone(),
            stop: stop.clone(),
            runtime: tokio::runtime::Handle::current(),
            offsets_reset: AtomicBool::new(false),
        };
        let thread = std::thread::Builder::new()
            .name(format!("source-{}", table.def().id))
            .spawn(move || task.run())
            .map_err(|e| SourceError::Start(e.to_string()))?;
        self.running.lock().insert(
            table.def().name.clone(),
            RunningSource {
                stop,
                status,
                thread: Some(thread),
            },
        );
        Ok(())
    }

    /// The dead-letter table of a source table, created when missing.
    fn dead_letter_table(&self, def: &TableDef) -> Result<Arc<TableLog>, SourceError> {
        let name = dead_letter_table_name(&def.name);
        if let Some(t) = self.store.table(&name) {
            return Ok(t);
        }
        let dead = TableDef {
            id: 0,
            name: name.clone(),
            columns: dead_letter_column_defs(),
            options: TableOptions {
                partitions: def.options.partitions,
                dead_letters_of: Some(def.name.clone()),
                ..TableOptions::default()
            },
        };
        self.store.create_table(dead, true)?;
        self.store
            .table(&name)
            .ok_or_else(|| SourceError::Start(format!("dead-letter table {name} is missing")))
    }
}

/// How long a source waits after a failed append before it reads again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
