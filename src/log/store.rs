//! All tables' logs and the catalog that names them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use sluice_catalog::{
    Catalog, CatalogError, CutDef, DatasetDef, IndexDef, QueryViewDef, SubscriptionDef, TableDef,
    ViewDef,
};
use tracing::{info, warn};

use super::column_index::ColumnIndex;
use super::erasure::{ErasureLedger, ExportRegistry, EXPORTS_FILE};
use super::error::LogError;
use super::table::TableLog;
use super::transaction::{TransactionCoordinator, TransactionLog};
use super::LogConfig;

pub struct LogStore {
    data_dir: PathBuf,
    transactions: Arc<TransactionCoordinator>,
    catalog: parking_lot::Mutex<Catalog>,
    tables: RwLock<HashMap<String, Arc<TableLog>>>,
    config: LogConfig,
    /// Reads that used each materialized view's index, by index name (a
    /// table's index counts its own).
    view_index_scans: parking_lot::Mutex<HashMap<String, u64>>,
    /// Every erasure request (see [`super::erasure`]).
    erasures: parking_lot::Mutex<ErasureLedger>,
    /// Files exports wrote, for erasures to reach.
    exports: parking_lot::Mutex<ExportRegistry>,
}

impl LogStore {
    /// Opens the data directory, recovering every table in the catalog.
    pub fn open(data_dir: &Path, config: LogConfig) -> Result<LogStore, LogError> {
        let catalog = Catalog::open(&data_dir.join("catalog"))?;
        let tables_dir = data_dir.join("tables");
        std::fs::create_dir_all(&tables_dir).map_err(LogError::io(&tables_dir))?;
        let transactions = TransactionLog::open(data_dir)?;
        let mut tables = HashMap::new();
        for def in catalog.tables() {
            let dir = table_dir(data_dir, def.id);
            let ends = transactions.recovered().table_ends(def.id);
            let frames = transactions.carried_frames(def.id);
            let log = TableLog::open(def.clone(), &dir, config, ends, frames)?;
            // Indexes are built again by the first read that uses them.
            for index in catalog.indexes().iter().filter(|i| i.on == def.id) {
                log.add_index(Arc::new(ColumnIndex::new(
                    &index.name,
                    def,
                    &index.columns,
                )?));
            }
            info!(table = %def.name, partitions = def.options.partitions, "recovered table");
            tables.insert(def.name.clone(), Arc::new(log));
        }
        // Rows erasures removed stay out of every read from the start.
        let erasures = ErasureLedger::open(data_dir)?;
        for record in erasures.records() {
            for rows in &record.erased {
                let table = tables.values().find(|t| t.def().id == rows.table_id);
                if let Some(part) = table.and_then(|t| t.partitions().get(rows.partition as usize))
                {
                    part.erase(rows.offsets.iter().copied());
                }
            }
        }
        // Directories of dropped tables whose removal a crash interrupted.
        let known: Vec<u64> = catalog.tables().iter().map(|t| t.id).collect();
        if let Ok(entries) = std::fs::read_dir(&tables_dir) {
            for entry in entries.flatten() {
                let id = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u64>().ok());
                if let Some(id) = id.filter(|id| !known.contains(id)) {
                    warn!(id, "removing files of a dropped table");
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        Ok(LogStore {
            data_dir: data_dir.to_path_buf(),
            transactions: Arc::new(TransactionCoordinator::new(transactions)),
            catalog: parking_lot::Mutex::new(catalog),
            tables: RwLock::new(tables),
            config,
            view_index_scans: parking_lot::Mutex::new(HashMap::new()),
            erasures: parking_lot::Mutex::new(erasures),
            exports: parking_lot::Mutex::new(ExportRegistry::open_file(data_dir, EXPORTS_FILE)?),
        })
    }

    /// The files exports wrote.
    pub fn exports(&self) -> &parking_lot::Mutex<ExportRegistry> {
        &self.exports
    }

    /// The erasure ledger.
    pub fn erasures(&self) -> &parking_lot::Mutex<ErasureLedger> {
        &self.erasures
    }

    /// Commits transactions that span tables or consumer groups.
    pub fn transactions(&self) -> &Arc<TransactionCoordinator> {
        &self.transactions
    }

    pub fn table(&self, name: &str) -> Option<Arc<TableLog>> {
        self.tables.read().get(name).cloned()
    }

    pub fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tables.read().keys().cloned().collect();
        names.sort();
        names
    }

    pub fn tables(&self) -> Vec<Arc<TableLog>> {
        let mut t: Vec<_> = self.tables.read().values().cloned().collect();
        t.sort_by(|a, b| a.def().name.cmp(&b.def().name));
        t
    }

    pub fn view_defs(&self) -> Vec<ViewDef> {
        self.catalog.lock().views().to_vec()
    }

    pub fn view_exists(&self, name: &str) -> bool {
        self.catalog.lock().view(name).is_some()
    }

    /// True when a table or a view has this name.
    pub fn name_exists(&self, name: &str) -> bool {
        self.table(name).is_some() || self.view_exists(name) || self.query_view(name).is_some()
    }

    pub fn index_defs(&self) -> Vec<IndexDef> {
        self.catalog.lock().indexes().to_vec()
    }

    pub fn index_def(&self, name: &str) -> Option<IndexDef> {
        self.catalog.lock().index(name).cloned()
    }

    /// Records an index durably, assigning its id; a table's index is
    /// attached to its log, to be built by the caller.
    pub fn create_index_def(
        &self,
        def: IndexDef,
    ) -> Result<(IndexDef, Option<TableIndex>), LogError> {
        let mut catalog = self.catalog.lock();
        let table = catalog
            .tables()
            .iter()
            .find(|t| t.id == def.on)
            .and_then(|t| self.tables.read().get(&t.name).cloned());
        let index = match &table {
            Some(t) => Some(Arc::new(ColumnIndex::new(
                &def.name,
                &t.def(),
                &def.columns,
            )?)),
            None => None,
        };
        let def = catalog.create_index(def)?;
        let attached = table.zip(index).map(|(t, i)| {
            t.add_index(i.clone());
            (t, i)
        });
        Ok((def, attached))
    }

    /// Notes a read that used a materialized view's index.
    pub fn note_view_index_scan(&self, name: &str) {
        *self
            .view_index_scans
            .lock()
            .entry(name.to_string())
            .or_default() += 1;
    }

    pub fn view_index_scans(&self, name: &str) -> u64 {
        self.view_index_scans.lock().get(name).copied().unwrap_or(0)
    }

    /// Removes an index durably, and from its table's log.
    pub fn drop_index_def(&self, name: &str) -> Result<IndexDef, LogError> {
        let mut catalog = self.catalog.lock();
        let def = catalog.drop_index(name)?;
        self.view_index_scans.lock().remove(name);
        if let Some(t) = catalog.tables().iter().find(|t| t.id == def.on) {
            if let Some(log) = self.tables.read().get(&t.name) {
                log.remove_index(name);
            }
        }
        Ok(def)
    }

    /// The views that are named queries (`CREATE VIEW`).
    pub fn query_views(&self) -> Vec<QueryViewDef> {
        self.catalog.lock().query_views().to_vec()
    }

    pub fn query_view(&self, name: &str) -> Option<QueryViewDef> {
        self.catalog.lock().query_view(name).cloned()
    }

    /// Records a view (a named query) durably; `or_replace` replaces one
    /// of the same name.
    pub fn create_query_view(
        &self,
        def: QueryViewDef,
        or_replace: bool,
    ) -> Result<QueryViewDef, LogError> {
        Ok(self.catalog.lock().create_query_view(def, or_replace)?)
    }

    pub fn drop_query_view(&self, name: &str) -> Result<QueryViewDef, LogError> {
        Ok(self.catalog.lock().drop_query_view(name)?)
    }

    /// Renames a table or a view (a named query): durably in the catalog,
    /// then in memory, where the table's log, writer and readers carry on
    /// under the new name.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), LogError> {
        let mut catalog = self.catalog.lock();
        catalog.rename(from, to)?;
        let mut tables = self.tables.write();
        if let Some(t) = tables.remove(from) {
            t.rename(to);
            tables.insert(to.to_string(), t);
        }
        Ok(())
    }

    /// Records a view definition durably.
    pub fn create_view_def(&self, def: ViewDef) -> Result<ViewDef, LogError> {
        Ok(self.catalog.lock().create_view(def)?)
    }

    pub fn reserve_id(&self) -> Result<u64, LogError> {
        Ok(self.catalog.lock().reserve_id()?)
    }

    /// Swaps in a rebuilt view's definition; returns the old one.
    pub fn replace_view_def(&self, def: ViewDef) -> Result<ViewDef, LogError> {
        Ok(self.catalog.lock().replace_view(def)?)
    }

    pub fn drop_view_def(&self, name: &str) -> Result<ViewDef, LogError> {
        Ok(self.catalog.lock().drop_view(name)?)
    }

    pub fn subscription_defs(&self) -> Vec<SubscriptionDef> {
        self.catalog.lock().subscriptions().to_vec()
    }

    /// Records a subscription durably, assigning its id.
    pub fn create_subscription_def(
        &self,
        def: SubscriptionDef,
    ) -> Result<SubscriptionDef, LogError> {
        Ok(self.catalog.lock().create_subscription(def)?)
    }

    pub fn drop_subscription_def(&self, name: &str) -> Result<SubscriptionDef, LogError> {
        Ok(self.catalog.lock().drop_subscription(name)?)
    }

    pub fn cut_defs(&self) -> Vec<CutDef> {
        self.catalog.lock().cuts().to_vec()
    }

    pub fn cut_def(&self, name: &str) -> Option<CutDef> {
        self.catalog
            .lock()
            .cuts()
            .iter()
            .find(|c| c.name == name)
            .cloned()
    }

    /// Records a cut durably, assigning its id.
    pub fn create_cut_def(&self, def: CutDef) -> Result<CutDef, LogError> {
        Ok(self.catalog.lock().create_cut(def)?)
    }

    /// Records the view checkpoints a cut keeps.
    pub fn set_cut_view_checkpoints(
        &self,
        name: &str,
        kept: Vec<sluice_catalog::CutViewCheckpoint>,
    ) -> Result<(), LogError> {
        Ok(self.catalog.lock().set_cut_view_checkpoints(name, kept)?)
    }

    pub fn drop_cut_def(&self, name: &str) -> Result<CutDef, LogError> {
        Ok(self.catalog.lock().drop_cut(name)?)
    }

    pub fn dataset_defs(&self) -> Vec<DatasetDef> {
        self.catalog.lock().datasets().to_vec()
    }

    pub fn dataset_def(&self, name: &str) -> Option<DatasetDef> {
        self.catalog
            .lock()
            .datasets()
            .iter()
            .find(|d| d.name == name)
            .cloned()
    }

    pub fn create_dataset_def(&self, def: DatasetDef) -> Result<DatasetDef, LogError> {
        Ok(self.catalog.lock().create_dataset(def)?)
    }

    pub fn replace_dataset_def(&self, def: DatasetDef) -> Result<(), LogError> {
        Ok(self.catalog.lock().replace_dataset(def)?)
    }

    /// Drops a dataset and the cuts of its versions.
    pub fn drop_dataset_def(&self, name: &str) -> Result<DatasetDef, LogError> {
        Ok(self.catalog.lock().drop_dataset(name)?)
    }

    /// Per partition of `table`, the offset below which the cuts over it
    /// need every retained row: retention deletes no segment that starts
    /// below it.
    pub fn cut_pins(&self, table: &TableLog) -> Vec<u64> {
        let mut pins = vec![0u64; table.partitions().len()];
        for cut in self.catalog.lock().cuts() {
            for t in cut.tables.iter().filter(|t| t.table_id == table.def().id) {
                for (pin, (start, end)) in pins.iter_mut().zip(t.starts.iter().zip(&t.ends)) {
                    if end > start {
                        *pin = (*pin).max(*end);
                    }
                }
            }
        }
        pins
    }

    /// Per partition of `table`, the least end of a cut over it (u64::MAX
    /// without one): compaction keeps the versions a read at each cut
    /// sees by working below it only.
    pub fn cut_floor(&self, table: &TableLog) -> Vec<u64> {
        let mut floor = vec![u64::MAX; table.partitions().len()];
        for cut in self.catalog.lock().cuts() {
            for t in cut.tables.iter().filter(|t| t.table_id == table.def().id) {
                for (f, end) in floor.iter_mut().zip(&t.ends) {
                    *f = (*f).min(*end);
                }
            }
        }
        floor
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Creates a table durably. `Ok(None)` when it exists and `if_not_exists`.
    pub fn create_table(
        &self,
        def: TableDef,
        if_not_exists: bool,
    ) -> Result<Option<Arc<TableLog>>, LogError> {
        let mut catalog = self.catalog.lock();
        if catalog.table(&def.name).is_some() || catalog.view(&def.name).is_some() {
            if if_not_exists {
                return Ok(None);
            }
            return Err(CatalogError::DuplicateTable(def.name).into());
        }
        let def = catalog.create_table(def)?;
        let dir = table_dir(&self.data_dir, def.id);
        let log = match TableLog::open(def.clone(), &dir, self.config, None, Vec::new()) {
            Ok(log) => Arc::new(log),
            Err(e) => {
                let _ = catalog.drop_table(&def.name);
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        self.tables.write().insert(def.name.clone(), log.clone());
        Ok(Some(log))
    }

    /// Drops a table: the catalog first (durably), then its files.
    pub fn drop_table(&self, name: &str) -> Result<(), LogError> {
        let mut catalog = self.catalog.lock();
        let def = catalog.drop_table(name)?;
        self.tables.write().remove(name);
        let dir = table_dir(&self.data_dir, def.id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            warn!(dir = %dir.display(), error = %e, "could not remove files of dropped table");
        }
        Ok(())
    }
}

/// A table and one of its indexes.
pub type TableIndex = (Arc<TableLog>, Arc<ColumnIndex>);

fn table_dir(data_dir: &Path, id: u64) -> PathBuf {
    data_dir.join("tables").join(id.to_string())
}
