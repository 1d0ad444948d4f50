//! Sinks: a table's rows, or a materialized view's changes, written to a
//! Kafka topic exactly once (`CREATE SINK s FROM relation INTO kafka WITH
//! (...)`).
//!
//! A sink is a consumer group of the server's own (a subscription whose
//! definition carries the sink's settings, listed in `sluice_catalog.lag`
//! with kind `sink`) and a thread that reads the group's next rows and
//! produces them in Kafka transactions ([`kafka`]). Over a view that
//! changes rows in place the group reads the view's change log (one
//! `delete` and one `insert` per updated row, per checkpoint epoch), which
//! becomes upserts and tombstones keyed by the sink's `key` columns
//! ([`encode`]).

pub mod encode;
mod error;
pub mod kafka;

pub use error::SinkError;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_sql::{CreateSink, CreateSubscription};
use tracing::{info, warn};

use crate::error::SluiceError;
use crate::log::LogStore;
use crate::stream::ViewManager;
use crate::subscribe::{Subscription, SubscriptionError, SubscriptionManager};

/// What a running sink has done since the server started.
pub struct SinkStatus {
    pub name: String,
    pub source: String,
    pub topic: String,
    /// The key columns, comma-separated (empty: records have no key).
    pub key: String,
    pub records_sent: AtomicU64,
    pub transactions: AtomicU64,
    pub errors: AtomicU64,
    /// The next offset per partition of the source, as last committed.
    pub position: Mutex<Vec<u64>>,
    last_error: Mutex<Option<(i64, String)>>,
}

impl SinkStatus {
    pub fn last_error(&self) -> Option<(i64, String)> {
        self.last_error.lock().clone()
    }

    fn note_error(&self, error: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock() = Some((crate::checkpoint::now_us(), error));
    }

    fn note_sent(&self, records: u64, position: &[u64]) {
        if records > 0 {
            self.transactions.fetch_add(1, Ordering::Relaxed);
            self.records_sent.fetch_add(records, Ordering::Relaxed);
        }
        *self.position.lock() = position.to_vec();
    }
}

struct RunningSink {
    stop: Arc<AtomicBool>,
    status: Arc<SinkStatus>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Creates, starts, stops and reports every sink of the server.
pub struct SinkManager {
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    subs: Arc<SubscriptionManager>,
    running: Mutex<HashMap<String, RunningSink>>,
}

impl SinkManager {
    /// Starts every sink in the catalog.
    pub fn start(
        store: Arc<LogStore>,
        views: Arc<ViewManager>,
        subs: Arc<SubscriptionManager>,
    ) -> Arc<SinkManager> {
        let manager = Arc::new(SinkManager {
            store,
            views,
            subs,
            running: Mutex::new(HashMap::new()),
        });
        for group in manager.subs.subscriptions() {
            if group.def.sink.is_some() {
                if let Err(e) = manager.run(&group) {
                    warn!(sink = %group.def.name, error = %e, "could not start the sink");
                }
            }
        }
        manager
    }

    /// `CREATE SINK`: checks the source, the key and the topic, creates the
    /// sink's consumer group and starts producing. `Ok(false)` when the
    /// sink exists and `if_not_exists`.
    pub async fn create(&self, c: &CreateSink) -> Result<bool, SluiceError> {
        if let Some(g) = self.subs.get(&c.name) {
            return match (g.def.sink.is_some(), c.if_not_exists) {
                (true, true) => Ok(false),
                (true, false) => Err(SubscriptionError::DuplicateSink(c.name.clone()).into()),
                // Sinks and subscriptions share one namespace: a sink is a
                // consumer group.
                (false, _) => {
                    Err(sluice_catalog::CatalogError::DuplicateSubscription(c.name.clone()).into())
                }
            };
        }
        let mut sink = c.sink.clone();
        let (_, primary_key, changes_in_place) = self.source_columns(&c.source)?;
        if sink.key.is_empty() {
            sink.key = primary_key;
        }
        if sink.key.is_empty() && changes_in_place {
            return Err(SinkError::NeedsKey(c.source.clone()).into());
        }
        self.check_key(&c.source, &sink.key)?;
        let asked = sink.clone();
        tokio::task::spawn_blocking(move || {
            crate::source::kafka::topic_partitions(
                &asked.bootstrap_servers,
                &asked.topic,
                &asked.properties,
            )
        })
        .await
        .map_err(|e| SluiceError::Internal(e.to_string()))?
        .map_err(SinkError::from)?;
        // Random, so that sinks of one name on two servers do not fence
        // each other; kept in the catalog, so that a restart fences the
        // producer it replaces.
        let nonce = std::hash::BuildHasher::hash_one(
            &std::collections::hash_map::RandomState::new(),
            crate::checkpoint::now_us(),
        );
        sink.transactional_id = format!("sluice-sink-{}-{nonce:016x}", c.name);
        self.subs
            .create_group(
                &CreateSubscription {
                    name: c.name.clone(),
                    source: c.source.clone(),
                    start: c.start.clone(),
                },
                Some(sink),
            )
            .await?;
        let group = self
            .subs
            .get(&c.name)
            .ok_or_else(|| SubscriptionError::UndefinedSink(c.name.clone()))?;
        self.run(&group)?;
        info!(sink = %c.name, source = %c.source, topic = %c.sink.topic, "created sink");
        Ok(true)
    }

    /// `DROP SINK`: stops each sink, then drops its consumer group.
    pub async fn drop_sinks(&self, names: &[String], if_exists: bool) -> Result<(), SluiceError> {
        for name in names {
            match self.subs.get(name) {
                Some(g) if g.def.sink.is_none() => {
                    return Err(SluiceError::WrongObjectType(name.clone(), "sink"))
                }
                None if !if_exists => {
                    return Err(SubscriptionError::UndefinedSink(name.clone()).into())
                }
                _ => {}
            }
        }
        for name in names {
            self.stop(name).await;
        }
        self.subs.drop_subscriptions(names, if_exists, true)
    }

    /// Stops a sink (if it runs) and waits for its thread.
    pub async fn stop(&self, name: &str) {
        let running = self.running.lock().remove(name);
        if let Some(mut r) = running {
            r.stop.store(true, Ordering::Release);
            if let Some(thread) = r.thread.take() {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
            info!(sink = name, "sink stopped");
        }
    }

    /// Every running sink's status, by name.
    pub fn statuses(&self) -> Vec<Arc<SinkStatus>> {
        let mut s: Vec<Arc<SinkStatus>> = self
            .running
            .lock()
            .values()
            .map(|r| r.status.clone())
            .collect();
        s.sort_by(|a, b| a.name.cmp(&b.name));
        s
    }

    /// The columns a record of `relation` carries, its primary key (a
    /// keyed table's), and whether its rows change in place.
    fn source_columns(
        &self,
        relation: &str,
    ) -> Result<(Vec<String>, Vec<String>, bool), SluiceError> {
        if let Some(t) = self.store.table(relation) {
            let def = t.def();
            let hidden = def.hidden_columns();
            let columns = def
                .columns
                .iter()
                .map(|c| c.name.clone())
                .filter(|c| !hidden.contains(&c.as_str()))
                .collect();
            return Ok((
                columns,
                t.def().options.primary_key.clone(),
                t.def().is_keyed(),
            ));
        }
        match self.views.view(relation) {
            Some(v) => Ok((
                v.schema.fields().iter().map(|f| f.name().clone()).collect(),
                Vec::new(),
                !v.append_only,
            )),
            None => Err(SubscriptionError::UndefinedSource(relation.to_string()).into()),
        }
    }

    fn check_key(&self, relation: &str, key: &[String]) -> Result<(), SluiceError> {
        let (columns, _, _) = self.source_columns(relation)?;
        if let Some(missing) = key.iter().find(|k| !columns.contains(k)) {
            return Err(SinkError::UndefinedColumn {
                column: missing.clone(),
                relation: relation.to_string(),
            }
            .into());
        }
        Ok(())
    }

    fn run(&self, group: &Arc<Subscription>) -> Result<(), SluiceError> {
        let Some(sink) = group.def.sink.clone() else {
            return Ok(());
        };
        let (columns, _, _) = self.source_columns(&group.def.source)?;
        let status = Arc::new(SinkStatus {
            name: group.def.name.clone(),
            source: group.def.source.clone(),
            topic: sink.topic.clone(),
            key: sink.key.join(", "),
            records_sent: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            position: Mutex::new(Vec::new()),
            last_error: Mutex::new(None),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let task = kafka::KafkaSinkTask {
            group: group.clone(),
            subs: self.subs.clone(),
            sink,
            columns,
            status: status.clone(),
            stop: stop.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sink-{}", group.def.id))
            .spawn(move || task.run())
            .map_err(|e| SluiceError::Internal(format!("cannot start a sink thread: {e}")))?;
        self.running.lock().insert(
            group.def.name.clone(),
            RunningSink {
                stop,
                status,
                thread: Some(thread),
            },
        );
        Ok(())
    }
}
