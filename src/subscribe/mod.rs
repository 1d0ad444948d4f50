//! Subscriptions: named consumer groups over a table or an append-only
//! view, with durable committed offsets per partition.
//!
//! A cursor (`DECLARE c SUBSCRIPTION CURSOR FOR s`) starts at the group's
//! committed offsets (or where `SINCE` says) and `FETCH` moves it. The
//! group's offsets are committed when the transaction that fetched commits,
//! or by each FETCH itself outside a transaction block. Offsets live in one
//! small file per group (`<data-dir>/subscriptions/<id>.offsets.log`): each
//! commit appends a CRC-guarded record and fdatasyncs it (one synchronous
//! write, as a table's commit log), the newest whole record wins on
//! recovery, and the file is rewritten with only that record once it grows
//! past a few hundred commits.

mod error;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int32Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use sluice_catalog::{checked_body, KafkaSink, SubscriptionDef, SubscriptionStart};
use sluice_sql::{CreateSubscription, FetchCount, StartAt};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::checkpoint::now_us;
use crate::error::SluiceError;
use crate::log::transaction::OffsetsEntry;
use crate::log::{LogError, LogStore, RecordFile, TableLog};
use crate::query::{changelog_frame, project_frame};
use crate::stream::{change_schema, View, ViewManager};

pub use error::SubscriptionError;

/// What a group has committed, as stored in its offsets file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GroupOffsets {
    /// Next offset to read, per partition.
    offsets: Vec<u64>,
    /// Records skipped per partition because retention deleted them first.
    skipped: Vec<u64>,
    /// Raised by every RESET, so that cursors declared before it cannot
    /// commit over it.
    generation: u64,
    committed_at_us: i64,
    /// Raised by every commit: orders this record against one a
    /// transaction wrote to the transaction log.
    #[serde(default)]
    seq: u64,
}

/// One consumer group.
pub struct Subscription {
    pub def: SubscriptionDef,
    path: PathBuf,
    committed: Mutex<Result<GroupOffsets, String>>,
    /// The offsets file, open for appending; `None` until the first
    /// commit of a group without one, or after a failed write (the next
    /// commit then rewrites the file whole).
    file: Arc<tokio::sync::Mutex<Option<RecordFile>>>,
}

/// Past this size a group's offsets file is rewritten with its newest record.
const OFFSETS_ROTATE_BYTES: u64 = 64 << 10;
/// How far past its last record a group's offsets file is zero-filled.
const OFFSETS_PREALLOCATE_BYTES: u64 = 64 << 10;

impl Subscription {
    fn offsets(&self) -> Result<GroupOffsets, SubscriptionError> {
        self.committed
            .lock()
            .clone()
            .map_err(|reason| SubscriptionError::Damaged {
                name: self.def.name.clone(),
                path: self.path.clone(),
                reason,
            })
    }

    /// Committed offsets per partition and records skipped (for lag).
    pub fn committed(&self) -> Option<(Vec<u64>, Vec<u64>, i64)> {
        self.committed
            .lock()
            .as_ref()
            .ok()
            .map(|g| (g.offsets.clone(), g.skipped.clone(), g.committed_at_us))
    }

    /// Writes new offsets durably, then makes them the group's.
    async fn store(&self, next: GroupOffsets) -> Result<(), SubscriptionError> {
        let mut slot = self.file.lock().await;
        let seq = self.committed.lock().as_ref().map_or(0, |g| g.seq) + 1;
        self.store_locked(&mut slot, GroupOffsets { seq, ..next })
            .await
    }

    /// [`Subscription::store`] with the file already locked.
    async fn store_locked(
        &self,
        slot: &mut Option<RecordFile>,
        next: GroupOffsets,
    ) -> Result<(), SubscriptionError> {
        let write_error = |source| SubscriptionError::Write {
            name: self.def.name.clone(),
            source,
        };
        let body = serde_json::to_vec(&next).map_err(|e| SubscriptionError::Damaged {
            name: self.def.name.clone(),
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let path = self.path.clone();
        let open = slot.take();
        let written = tokio::task::spawn_blocking(move || match open {
            Some(mut file) if file.len() < OFFSETS_ROTATE_BYTES => file.append(&body).map(|_| file),
            Some(mut file) => file.replace(&body).map(|_| file),
            None => RecordFile::create(&path, OFFSETS_PREALLOCATE_BYTES, &body),
        })
        .await
        .map_err(|e| {
            write_error(LogError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e.to_string()),
            })
        })?;
        *slot = Some(written.map_err(write_error)?);
        *self.committed.lock() = Ok(next);
        Ok(())
    }

    /// The offsets a cursor's position commits; `None` when they are what
    /// the group has.
    fn next_offsets(
        &self,
        cursor: &SubscriptionCursor,
    ) -> Result<Option<GroupOffsets>, SubscriptionError> {
        let current = self.offsets()?;
        if current.generation != cursor.generation {
            return Err(SubscriptionError::ResetSinceDeclare {
                subscription: self.def.name.clone(),
                cursor: cursor.name.clone(),
            });
        }
        let unchanged =
            current.offsets == cursor.position && cursor.skipped.iter().all(|&s| s == 0);
        if unchanged {
            return Ok(None);
        }
        let skipped = current
            .skipped
            .iter()
            .zip(&cursor.skipped)
            .map(|(a, b)| a + b)
            .collect();
        Ok(Some(GroupOffsets {
            offsets: cursor.position.clone(),
            skipped,
            generation: current.generation,
            committed_at_us: now_us(),
            seq: current.seq + 1,
        }))
    }

    /// Commits a cursor's position for the group.
    async fn commit(&self, cursor: &mut SubscriptionCursor) -> Result<(), SubscriptionError> {
        let mut slot = self.file.lock().await;
        if let Some(next) = self.next_offsets(cursor)? {
            self.store_locked(&mut slot, next).await?;
        }
        cursor.skipped.iter_mut().for_each(|s| *s = 0);
        Ok(())
    }
}

/// A group's new offsets in a transaction, with the group's file locked
/// until they are written.
pub struct PreparedOffsets {
    group: Arc<Subscription>,
    slot: tokio::sync::OwnedMutexGuard<Option<RecordFile>>,
    next: GroupOffsets,
}

impl PreparedOffsets {
    /// The record the transaction log carries for the group.
    pub fn entry(&self) -> Result<OffsetsEntry, SluiceError> {
        Ok(OffsetsEntry {
            subscription: self.group.def.id,
            seq: self.next.seq,
            body: serde_json::to_value(&self.next)
                .map_err(|e| SluiceError::Internal(e.to_string()))?,
        })
    }

    /// Writes the offsets to the group's own file: the commit of a
    /// transaction that moved this group's cursor and wrote nothing else.
    pub async fn write(mut self) -> Result<(), SubscriptionError> {
        let group = self.group.clone();
        group.store_locked(&mut self.slot, self.next).await
    }

    /// Writes the offsets to the group's own file, once the transaction
    /// that carries them is durable. A failed write is logged: the
    /// transaction log holds them until the next start.
    pub async fn finish(mut self) {
        let group = self.group.clone();
        if let Err(e) = group.store_locked(&mut self.slot, self.next.clone()).await {
            warn!(subscription = %group.def.name, error = %e,
                  "offsets committed by a transaction not written to the group's file");
            *group.committed.lock() = Ok(self.next);
        }
    }
}

/// What a group reads.
#[derive(Clone)]
enum Source {
    Table(Arc<TableLog>),
    View(Arc<View>),
}

impl Source {
    fn partitions(&self) -> usize {
        match self {
            Source::Table(t) => t.partitions().len(),
            Source::View(_) => 1,
        }
    }

    /// Rows a FETCH returns: the table's columns and `_partition`, `_offset`;
    /// a view's columns, `_op`, `_partition` and `_offset`.
    fn schema(&self) -> SchemaRef {
        let mut fields: Vec<Field> = match self {
            // A keyed table's records say what they do, as in changelog(t).
            Source::Table(t) if t.def().is_keyed() => {
                let mut f: Vec<Field> = t
                    .def()
                    .columns
                    .iter()
                    .map(|c| c.to_field().with_nullable(true))
                    .collect();
                f.push(Field::new(sluice_catalog::OP_COLUMN, DataType::Utf8, false));
                f
            }
            Source::Table(t) => t
                .def()
                .columns
                .iter()
                .map(|c| c.to_field().with_nullable(true))
                .collect(),
            Source::View(v) => change_schema(&v.schema)
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect(),
        };
        fields.push(Field::new("_partition", DataType::Int32, false));
        fields.push(Field::new("_offset", DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }

    fn earliest(&self) -> Vec<u64> {
        match self {
            Source::Table(t) => t.partitions().iter().map(|p| p.start_offset()).collect(),
            Source::View(_) => vec![0],
        }
    }

    fn latest(&self) -> Vec<u64> {
        match self {
            Source::Table(t) => t.commits().borrow().clone(),
            Source::View(v) => vec![v.durable_rows()],
        }
    }
}

/// An open `DECLARE ... SUBSCRIPTION CURSOR`: a group and where this
/// reader is in it.
pub struct SubscriptionCursor {
    pub name: String,
    pub group: Arc<Subscription>,
    pub schema: SchemaRef,
    position: Vec<u64>,
    /// Records skipped (deleted by retention) since the last commit.
    skipped: Vec<u64>,
    /// Partition the next FETCH starts with (they take turns).
    next_partition: usize,
    generation: u64,
    /// Declared inside a transaction block: closed when it ends.
    pub declared_in_transaction: bool,
    /// Position (and skipped records, and the partition next in turn)
    /// before the first FETCH of the open transaction.
    at_begin: Option<(Vec<u64>, Vec<u64>, usize)>,
    /// The last frame read per partition (its base offset and rows), since
    /// a frame usually holds more rows than one FETCH takes.
    last_frame: Vec<Option<(u64, RecordBatch)>>,
}

impl SubscriptionCursor {
    /// Remembers where a transaction's first FETCH started.
    pub fn begin_fetch_in_transaction(&mut self) {
        if self.at_begin.is_none() {
            self.at_begin = Some((
                self.position.clone(),
                self.skipped.clone(),
                self.next_partition,
            ));
        }
    }

    /// The next offset to read, per partition of the source.
    pub fn position(&self) -> &[u64] {
        &self.position
    }

    /// True when a FETCH of the open transaction moved the cursor.
    pub fn fetched_in_transaction(&self) -> bool {
        self.at_begin.is_some()
    }

    /// Goes back to where the transaction's first FETCH started.
    pub fn rollback(&mut self) {
        if let Some((position, skipped, next_partition)) = self.at_begin.take() {
            self.position = position;
            self.skipped = skipped;
            self.next_partition = next_partition;
        }
    }
}

/// All subscriptions.
pub struct SubscriptionManager {
    dir: PathBuf,
    store: Arc<LogStore>,
    views: Arc<ViewManager>,
    groups: RwLock<HashMap<String, Arc<Subscription>>>,
}

fn offsets_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id}.offsets.log"))
}

/// A group's offsets file and its newest committed offsets; `Ok(None)` when
/// the group has no file yet.
fn open_offsets(dir: &Path, id: u64) -> Result<Option<(RecordFile, GroupOffsets)>, String> {
    let path = offsets_path(dir, id);
    if !path.exists() {
        // Before 0.13 the offsets were one JSON document, replaced whole.
        return match read_offsets_document(&dir.join(format!("{id}.offsets")))? {
            Some(g) => {
                let body = serde_json::to_vec(&g).map_err(|e| e.to_string())?;
                let file = RecordFile::create(&path, OFFSETS_PREALLOCATE_BYTES, &body)
                    .map_err(|e| e.to_string())?;
                Ok(Some((file, g)))
            }
            None => Ok(None),
        };
    }
    let (file, records) = RecordFile::open(&path, OFFSETS_PREALLOCATE_BYTES, |body| {
        serde_json::from_slice::<GroupOffsets>(body).is_ok()
    })
    .map_err(|e| e.to_string())?;
    // The file is created holding a record, so none means damage.
    let last = records
        .last()
        .ok_or("no whole record in the offsets file")?;
    let g = serde_json::from_slice(last).map_err(|e| e.to_string())?;
    Ok(Some((file, g)))
}

fn read_offsets_document(path: &Path) -> Result<Option<GroupOffsets>, String> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let body = checked_body(&bytes).map_err(str::to_string)?;
            serde_json::from_slice(body)
                .map(Some)
                .map_err(|e| e.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// A timestamp literal in microseconds since the epoch (UTC when no zone).
pub fn timestamp_us(text: &str) -> Result<i64, SubscriptionError> {
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text.trim())
        .map(|ns| ns / 1000)
        .map_err(|_| SubscriptionError::BadTimestamp(text.to_string()))
}

impl SubscriptionManager {
    /// Loads every subscription in the catalog with its committed offsets.
    /// A group whose offsets file is missing (a crash right after CREATE)
    /// starts where its definition says.
    pub fn open(
        store: Arc<LogStore>,
        views: Arc<ViewManager>,
    ) -> Result<Arc<SubscriptionManager>, SluiceError> {
        let dir = store.data_dir().join("subscriptions");
        std::fs::create_dir_all(&dir)
            .map_err(|e| SluiceError::Internal(format!("cannot create {}: {e}", dir.display())))?;
        let manager = Arc::new(SubscriptionManager {
            dir,
            store: store.clone(),
            views,
            groups: RwLock::new(HashMap::new()),
        });
        let mut known = Vec::new();
        let transactions = store.transactions().recovered();
        for def in store.subscription_defs() {
            let path = offsets_path(&manager.dir, def.id);
            known.push(path.clone());
            let (mut file, mut committed) = match open_offsets(&manager.dir, def.id) {
                Ok(Some((file, g))) => (Some(file), Ok(g)),
                Ok(None) => (None, manager.initial_offsets(&def)),
                Err(reason) => {
                    warn!(subscription = %def.name, path = %path.display(), %reason,
                          "committed offsets cannot be read; the group needs ALTER SUBSCRIPTION ... RESET");
                    (None, Err(reason))
                }
            };
            // Offsets a transaction committed that the group's own file
            // does not hold yet (a crash between the two writes).
            let newer = transactions
                .group_offsets(def.id)
                .and_then(|e| serde_json::from_value::<GroupOffsets>(e.body.clone()).ok())
                .filter(|t| committed.as_ref().is_ok_and(|g| t.seq > g.seq) || file.is_none());
            if let Some(t) = newer {
                let body =
                    serde_json::to_vec(&t).map_err(|e| SluiceError::Internal(e.to_string()))?;
                let written = match file.take() {
                    Some(mut f) => f.append(&body).map(|_| f),
                    None => RecordFile::create(&path, OFFSETS_PREALLOCATE_BYTES, &body),
                };
                file = Some(written?);
                info!(subscription = %def.name, "offsets recovered from the transaction log");
                committed = Ok(t);
            }
            manager.groups.write().insert(
                def.name.clone(),
                Arc::new(Subscription {
                    def,
                    path,
                    committed: Mutex::new(committed),
                    file: Arc::new(tokio::sync::Mutex::new(file)),
                }),
            );
        }
        // Offsets files of dropped subscriptions (a crash between the
        // catalog change and the removal).
        if let Ok(entries) = std::fs::read_dir(&manager.dir) {
            for entry in entries.flatten() {
                if !known.contains(&entry.path()) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(manager)
    }

    fn initial_offsets(&self, def: &SubscriptionDef) -> Result<GroupOffsets, String> {
        let source = self.source(&def.source).map_err(|e| e.to_string())?;
        let offsets = match def.start {
            SubscriptionStart::Earliest => source.earliest(),
            SubscriptionStart::Latest => source.latest(),
        };
        Ok(GroupOffsets {
            skipped: vec![0; offsets.len()],
            offsets,
            generation: 0,
            committed_at_us: now_us(),
            seq: 0,
        })
    }

    fn source(&self, name: &str) -> Result<Source, SubscriptionError> {
        if let Some(t) = self.store.table(name) {
            return Ok(Source::Table(t));
        }
        match self.views.view(name) {
            Some(v) => Ok(Source::View(v)),
            None => Err(SubscriptionError::UndefinedSource(name.to_string())),
        }
    }

    /// Whether a subscription of this name exists.
    pub fn exists(&self, name: &str) -> bool {
        self.groups.read().contains_key(name)
    }

    /// A consumer group by name.
    pub fn get(&self, name: &str) -> Option<Arc<Subscription>> {
        self.groups.read().get(name).cloned()
    }

    pub fn subscriptions(&self) -> Vec<Arc<Subscription>> {
        let mut v: Vec<_> = self.groups.read().values().cloned().collect();
        v.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        v
    }

    fn group(&self, name: &str) -> Result<Arc<Subscription>, SubscriptionError> {
        self.groups
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| SubscriptionError::UndefinedSubscription(name.to_string()))
    }

    /// Names of the subscriptions that read `relation`.
    pub fn dependents(&self, relation: &str) -> Vec<String> {
        self.subscriptions()
            .iter()
            .filter(|s| s.def.source == relation)
            .map(|s| s.def.name.clone())
            .collect()
    }

    /// Offsets for a position: per partition, given the group's current
    /// ones (explicit offsets may name some partitions only).
    fn resolve(
        &self,
        source: &Source,
        at: &StartAt,
        current: Option<&[u64]>,
    ) -> Result<Vec<u64>, SubscriptionError> {
        Ok(match at {
            StartAt::Earliest => source.earliest(),
            StartAt::Latest => source.latest(),
            StartAt::Timestamp(text) => {
                let ts = timestamp_us(text)?;
                match source {
                    Source::Table(t) => t
                        .partitions()
                        .iter()
                        .map(|p| p.offset_at_time(ts))
                        .collect(),
                    Source::View(_) => {
                        return Err(SubscriptionError::Unsupported(
                            "a view's rows carry no ingest time; use EARLIEST, LATEST or OFFSETS"
                                .into(),
                        ))
                    }
                }
            }
            StartAt::Offsets(list) => {
                let n = source.partitions();
                let mut out = current
                    .map(<[u64]>::to_vec)
                    .unwrap_or_else(|| source.earliest());
                for &(partition, offset) in list {
                    let slot = out.get_mut(partition as usize).ok_or_else(|| {
                        SubscriptionError::InvalidPosition(format!(
                            "partition {partition} does not exist (the source has {n})"
                        ))
                    })?;
                    *slot = offset;
                }
                let latest = source.latest();
                if let Some((k, (o, e))) = out
                    .iter()
                    .zip(&latest)
                    .enumerate()
                    .find(|(_, (o, e))| o > e)
                {
                    return Err(SubscriptionError::InvalidPosition(format!(
                        "offset {o} of partition {k} is past its end ({e})"
                    )));
                }
                out
            }
        })
    }

    /// `CREATE SUBSCRIPTION`: the definition, then its first offsets.
    pub async fn create(&self, c: &CreateSubscription) -> Result<(), SluiceError> {
        self.create_group(c, None).await
    }

    /// A consumer group: a subscription's, or a sink's when `sink` is set.
    pub async fn create_group(
        &self,
        c: &CreateSubscription,
        sink: Option<KafkaSink>,
    ) -> Result<(), SluiceError> {
        let source = self.source(&c.source)?;
        if self.groups.read().contains_key(&c.name) {
            return Err(sluice_catalog::CatalogError::DuplicateSubscription(c.name.clone()).into());
        }
        let start = match c.start {
            StartAt::Latest => SubscriptionStart::Latest,
            _ => SubscriptionStart::Earliest,
        };
        let def = self.store.create_subscription_def(SubscriptionDef {
            id: 0,
            name: c.name.clone(),
            source: c.source.clone(),
            start,
            sink,
        })?;
        // A view that updates rows in place starts its change log (its rows
        // as inserts, then each epoch's deletes and inserts) and a
        // checkpoint must hold it before offsets into it mean anything.
        if let Source::View(v) = &source {
            if !v.append_only {
                v.want_changes(true);
                if let Err(e) = v.wait_changes_durable().await {
                    let _ = self.store.drop_subscription_def(&c.name);
                    self.stop_changes_if_unread(&c.source);
                    return Err(e);
                }
            }
        }
        let offsets = self.resolve(&source, &c.start, None)?;
        let group = Arc::new(Subscription {
            path: offsets_path(&self.dir, def.id),
            committed: Mutex::new(Err("not written yet".into())),
            file: Arc::new(tokio::sync::Mutex::new(None)),
            def,
        });
        let first = GroupOffsets {
            skipped: vec![0; offsets.len()],
            offsets,
            generation: 0,
            committed_at_us: now_us(),
            seq: 0,
        };
        if let Err(e) = group.store(first).await {
            let _ = self.store.drop_subscription_def(&c.name);
            return Err(e.into());
        }
        info!(subscription = %c.name, source = %c.source, "created subscription");
        self.groups.write().insert(c.name.clone(), group);
        Ok(())
    }

    /// `DROP SUBSCRIPTION`, or with `sinks` the groups of `DROP SINK`
    /// (the sinks already stopped).
    pub fn drop_subscriptions(
        &self,
        names: &[String],
        if_exists: bool,
        sinks: bool,
    ) -> Result<(), SluiceError> {
        for name in names {
            let is_sink = self.groups.read().get(name).map(|g| g.def.sink.is_some());
            match (is_sink, sinks) {
                (Some(true), false) => return Err(SubscriptionError::IsSink(name.clone()).into()),
                (Some(false), true) => {
                    return Err(SluiceError::WrongObjectType(name.clone(), "sink"))
                }
                (None, false) if !if_exists => {
                    return Err(SubscriptionError::UndefinedSubscription(name.clone()).into())
                }
                (None, true) if !if_exists => {
                    return Err(SubscriptionError::UndefinedSink(name.clone()).into())
                }
                _ => {}
            }
        }
        for name in names {
            let Some(group) = self.groups.read().get(name).cloned() else {
                continue;
            };
            self.store.drop_subscription_def(name)?;
            self.groups.write().remove(name);
            if let Err(e) = std::fs::remove_file(&group.path) {
                warn!(path = %group.path.display(), error = %e, "could not remove a dropped subscription's offsets");
            }
            self.stop_changes_if_unread(&group.def.source);
        }
        Ok(())
    }

    /// A view nobody subscribes to any more drops its change log.
    fn stop_changes_if_unread(&self, source: &str) {
        let read = self
            .store
            .subscription_defs()
            .iter()
            .any(|s| s.source == source);
        if let (false, Some(v)) = (read, self.views.view(source)) {
            if !v.append_only {
                v.want_changes(false);
            }
        }
    }

    /// `ALTER SUBSCRIPTION s RESET TO ...`: new committed offsets; cursors
    /// declared before it can no longer commit.
    pub async fn reset(&self, name: &str, to: &StartAt) -> Result<(), SluiceError> {
        let group = self.group(name)?;
        let source = self.source(&group.def.source)?;
        let current = group.committed();
        let offsets = self.resolve(&source, to, current.as_ref().map(|c| c.0.as_slice()))?;
        let generation = group.committed.lock().as_ref().map_or(0, |g| g.generation) + 1;
        group
            .store(GroupOffsets {
                skipped: current
                    .map(|c| c.1)
                    .unwrap_or_else(|| vec![0; offsets.len()]),
                offsets,
                generation,
                committed_at_us: now_us(),
                seq: 0,
            })
            .await?;
        Ok(())
    }

    /// `DECLARE c SUBSCRIPTION CURSOR FOR s [SINCE ...]`
    pub fn declare(
        &self,
        cursor: &str,
        subscription: &str,
        since: Option<&StartAt>,
        in_transaction: bool,
    ) -> Result<SubscriptionCursor, SluiceError> {
        let group = self.group(subscription)?;
        let source = self.source(&group.def.source)?;
        let committed = group.offsets()?;
        // Partitions that `SINCE OFFSETS` does not name start at the
        // earliest retained offset: the reader keeps its own offsets.
        let position = match since {
            Some(at) => self.resolve(&source, at, None)?,
            None => committed.offsets.clone(),
        };
        Ok(SubscriptionCursor {
            name: cursor.to_string(),
            schema: source.schema(),
            skipped: vec![0; position.len()],
            position,
            next_partition: 0,
            generation: committed.generation,
            declared_in_transaction: in_transaction,
            at_begin: None,
            last_frame: vec![None; source.partitions()],
            group,
        })
    }

    /// Locks the group of each cursor that moved in a transaction and
    /// computes its new offsets, for a commit with the transaction's
    /// writes. Groups are locked in id order; of two cursors of one group,
    /// the last one's position is committed, as two commits in a row would.
    pub async fn prepare_commits(
        &self,
        cursors: &[&SubscriptionCursor],
    ) -> Result<Vec<PreparedOffsets>, SluiceError> {
        let mut last: std::collections::BTreeMap<u64, &SubscriptionCursor> = Default::default();
        for c in cursors {
            last.insert(c.group.def.id, c);
        }
        let mut out = Vec::new();
        for cursor in last.into_values() {
            let group = cursor.group.clone();
            let slot = group.file.clone().lock_owned().await;
            if let Some(next) = group.next_offsets(cursor)? {
                out.push(PreparedOffsets { group, slot, next });
            }
        }
        Ok(out)
    }

    /// After a transaction committed its cursors' positions: they start
    /// the next transaction from there.
    pub fn committed_in_transaction(cursor: &mut SubscriptionCursor) {
        cursor.skipped.iter_mut().for_each(|s| *s = 0);
        cursor.at_begin = None;
    }

    /// Commits a cursor's position as its group's offsets.
    pub async fn commit(&self, cursor: &mut SubscriptionCursor) -> Result<(), SluiceError> {
        let group = cursor.group.clone();
        group.commit(cursor).await?;
        cursor.at_begin = None;
        Ok(())
    }

    /// `FETCH`: up to `count` rows from the cursor's position; with a
    /// timeout, waits that long for a first row when none is there.
    pub async fn fetch(
        &self,
        cursor: &mut SubscriptionCursor,
        count: FetchCount,
        timeout: Option<Duration>,
        notices: &mut Vec<String>,
    ) -> Result<Vec<RecordBatch>, SluiceError> {
        if !self.groups.read().contains_key(&cursor.group.def.name) {
            return Err(
                SubscriptionError::UndefinedSubscription(cursor.group.def.name.clone()).into(),
            );
        }
        let limit = match count {
            FetchCount::Rows(n) => usize::try_from(n).unwrap_or(usize::MAX),
            FetchCount::All => usize::MAX,
        };
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let source = self.source(&cursor.group.def.source)?;
            // Subscribe before reading, so a commit in between still wakes us.
            let mut changed = Changes::of(&source);
            let batches = match &source {
                Source::Table(t) => {
                    read_table(t, cursor, limit, &cursor.group.def.name.clone(), notices).await?
                }
                Source::View(v) => read_view(v, cursor, limit)?,
            };
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            let Some(deadline) = deadline else {
                return Ok(batches);
            };
            if rows > 0 || limit == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(batches);
            }
            if tokio::time::timeout_at(deadline, changed.wait())
                .await
                .is_err()
            {
                return Ok(batches);
            }
        }
    }
}

/// One group's standing in one partition, for `sluice_catalog.lag`.
pub struct GroupLag {
    pub name: String,
    pub source: String,
    pub partition: usize,
    pub committed: u64,
    pub end: u64,
    /// Ingest time of the oldest record not committed (None when caught
    /// up, or for a view, whose rows carry no ingest time).
    pub oldest_unread_us: Option<i64>,
    pub skipped: u64,
    /// The group is a sink's.
    pub sink: bool,
}

impl SubscriptionManager {
    pub fn lag(&self) -> Vec<GroupLag> {
        let mut out = Vec::new();
        for g in self.subscriptions() {
            let (Some((offsets, skipped, _)), Ok(source)) =
                (g.committed(), self.source(&g.def.source))
            else {
                continue;
            };
            let ends = source.latest();
            for (k, (&c, &e)) in offsets.iter().zip(&ends).enumerate() {
                let oldest = match &source {
                    Source::Table(t) if e > c => t
                        .partitions()
                        .get(k)
                        .and_then(|p| p.ingested_at(c.max(p.start_offset()))),
                    Source::Table(_) => Some(now_us()),
                    Source::View(_) => None,
                };
                out.push(GroupLag {
                    name: g.def.name.clone(),
                    source: g.def.source.clone(),
                    partition: k,
                    committed: c,
                    end: e,
                    oldest_unread_us: oldest,
                    skipped: skipped.get(k).copied().unwrap_or(0),
                    sink: g.def.sink.is_some(),
                });
            }
        }
        out
    }
}

/// A watch of the source's durable end.
enum Changes {
    Table(watch::Receiver<Vec<u64>>),
    View(watch::Receiver<u64>),
}

impl Changes {
    fn of(source: &Source) -> Changes {
        match source {
            Source::Table(t) => {
                let mut rx = t.commits();
                rx.borrow_and_update();
                Changes::Table(rx)
            }
            Source::View(v) => {
                let mut rx = v.watch_durable_rows();
                rx.borrow_and_update();
                Changes::View(rx)
            }
        }
    }

    async fn wait(&mut self) {
        let closed = match self {
            Changes::Table(rx) => rx.changed().await.is_err(),
            Changes::View(rx) => rx.changed().await.is_err(),
        };
        if closed {
            // The source is gone; the next read reports it.
            std::future::pending::<()>().await;
        }
    }
}

/// A keyed table's FETCH schema with `_op` (column `op`) nullable: a
/// frame's rows before its holes are left out.
fn with_holes(schema: &SchemaRef, op: usize) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| f.as_ref().clone().with_nullable(f.is_nullable() || i == op))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Reads up to `limit` committed records from the table, partitions taking
/// turns. Records retention deleted before the group read them are
/// skipped, counted and announced.
async fn read_table(
    table: &TableLog,
    cursor: &mut SubscriptionCursor,
    limit: usize,
    group: &str,
    notices: &mut Vec<String>,
) -> Result<Vec<RecordBatch>, SluiceError> {
    let ends = table.commits().borrow().clone();
    let parts = table.partitions();
    let data_columns = table.def().columns.len();
    let keyed = table.def().is_keyed();
    let projection: Vec<usize> = (0..data_columns + 2).collect();
    let mut out = Vec::new();
    let mut remaining = limit;
    let n = parts.len();
    for i in 0..n {
        if remaining == 0 {
            break;
        }
        let k = (cursor.next_partition + i) % n;
        let part = &parts[k];
        let start = part.start_offset();
        if cursor.position[k] < start {
            let skipped = start - cursor.position[k];
            part.note_read_below_start();
            notices.push(format!(
                "subscription \"{group}\": partition {k} of \"{}\": offsets {} to {} were deleted by retention before the group read them; {skipped} records skipped, resuming at {start}",
                table.def().name,
                cursor.position[k],
                start - 1
            ));
            cursor.skipped[k] += skipped;
            cursor.position[k] = start;
        }
        let end = ends[k];
        for meta in part.frames_in_range(cursor.position[k], end) {
            if remaining == 0 {
                break;
            }
            let rows = match &cursor.last_frame[k] {
                Some((base, rows)) if *base == meta.header.base_offset => rows.clone(),
                _ => {
                    let raw = part.read_frame(&meta).await?;
                    let rows = if keyed {
                        let all = changelog_frame(&raw, &meta, k as i32, data_columns, true)?;
                        let wanted: Vec<usize> = (0..data_columns + 3).collect();
                        let b = all.project(&wanted)?;
                        // Holes (records compaction removed) keep their
                        // offsets with a NULL `_op` until they are left out
                        // below.
                        RecordBatch::try_new(
                            with_holes(&cursor.schema, data_columns),
                            b.columns().to_vec(),
                        )?
                    } else {
                        project_frame(
                            &raw,
                            &meta,
                            k as i32,
                            &projection,
                            data_columns,
                            &cursor.schema,
                        )?
                    };
                    cursor.last_frame[k] = Some((meta.header.base_offset, rows.clone()));
                    rows
                }
            };
            // Holes compaction left take offsets but are no records: a
            // FETCH of n goes on past them until it has n records.
            while remaining > 0 {
                let skip = cursor.position[k].saturating_sub(meta.header.base_offset) as usize;
                let available = (rows.num_rows().saturating_sub(skip) as u64)
                    .min(end.saturating_sub(cursor.position[k]))
                    as usize;
                let take = available.min(remaining);
                if take == 0 {
                    break;
                }
                let slice = rows.slice(skip, take);
                let records = match keyed {
                    true => {
                        let present = arrow::compute::is_not_null(slice.column(data_columns))?;
                        let records = arrow::compute::filter_record_batch(&slice, &present)?;
                        RecordBatch::try_new(cursor.schema.clone(), records.columns().to_vec())?
                    }
                    // Rows an erasure removed are no records either.
                    false => match part.erased_mask(cursor.position[k], take) {
                        Some(kept) => arrow::compute::filter_record_batch(&slice, &kept)?,
                        None => slice,
                    },
                };
                cursor.position[k] += take as u64;
                remaining -= records.num_rows();
                out.push(records);
            }
        }
    }
    cursor.next_partition = (cursor.next_partition + 1) % n.max(1);
    Ok(out)
}

/// Reads up to `limit` rows of a view's change stream that a checkpoint
/// holds.
fn read_view(
    view: &View,
    cursor: &mut SubscriptionCursor,
    limit: usize,
) -> Result<Vec<RecordBatch>, SluiceError> {
    let durable = view.durable_rows();
    let from = cursor.position[0];
    if from >= durable || limit == 0 {
        return Ok(Vec::new());
    }
    let to = durable.min(from.saturating_add(limit as u64));
    let mut out = Vec::new();
    let mut at = from;
    for part in view.change_rows(from, to)? {
        let n = part.num_rows() as u64;
        let mut columns: Vec<ArrayRef> = part.columns().to_vec();
        columns.push(Arc::new(Int32Array::from(vec![0; n as usize])));
        columns.push(Arc::new(Int64Array::from_iter_values(
            at as i64..(at + n) as i64,
        )));
        out.push(RecordBatch::try_new(cursor.schema.clone(), columns)?);
        at += n;
    }
    cursor.position[0] = at;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(next: u64) -> GroupOffsets {
        GroupOffsets {
            offsets: vec![next, 2],
            skipped: vec![0, 0],
            generation: 1,
            committed_at_us: 5,
            seq: next,
        }
    }

    #[test]
    fn newest_commit_wins_and_the_old_document_is_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_offsets(dir.path(), 7).unwrap().is_none());
        // A group committed by an older version: one JSON document.
        let json = serde_json::to_vec(&offsets(3)).unwrap();
        std::fs::write(
            dir.path().join("7.offsets"),
            sluice_catalog::with_checksum(&json),
        )
        .unwrap();
        let (mut file, g) = open_offsets(dir.path(), 7).unwrap().unwrap();
        assert_eq!(g.offsets, vec![3, 2]);
        for next in 4..=9 {
            file.append(&serde_json::to_vec(&offsets(next)).unwrap())
                .unwrap();
        }
        drop(file);
        let (_, g) = open_offsets(dir.path(), 7).unwrap().unwrap();
        assert_eq!(g.offsets, vec![9, 2]);
    }

    #[test]
    fn a_file_without_a_whole_record_is_damage_not_a_new_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = offsets_path(dir.path(), 3);
        RecordFile::create(&path, 64, &serde_json::to_vec(&offsets(1)).unwrap()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = open_offsets(dir.path(), 3).err().unwrap();
        assert!(err.contains("no whole record"), "{err}");
    }
}
