use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::types::{
    CutDef, CutViewCheckpoint, DatasetDef, IndexDef, QueryViewDef, SubscriptionDef, TableDef,
    ViewDef,
};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("catalog file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("relation \"{0}\" already exists")]
    DuplicateTable(String),
    #[error("relation \"{0}\" does not exist")]
    UndefinedTable(String),
    #[error("subscription \"{0}\" already exists")]
    DuplicateSubscription(String),
    #[error("subscription \"{0}\" does not exist")]
    UndefinedSubscription(String),
    #[error("dataset \"{0}\" already exists")]
    DuplicateDataset(String),
    #[error("dataset \"{0}\" does not exist")]
    UndefinedDataset(String),
    #[error("cut \"{0}\" already exists")]
    DuplicateCut(String),
    #[error("cut \"{0}\" does not exist")]
    UndefinedCut(String),
    #[error("role \"{0}\" already exists")]
    DuplicateRole(String),
    #[error("role \"{0}\" does not exist")]
    UndefinedRole(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CatalogError + '_ {
    move |source| CatalogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct CatalogDocument {
    next_table_id: u64,
    tables: Vec<TableDef>,
    #[serde(default)]
    views: Vec<ViewDef>,
    #[serde(default)]
    subscriptions: Vec<SubscriptionDef>,
    #[serde(default)]
    query_views: Vec<QueryViewDef>,
    #[serde(default)]
    indexes: Vec<IndexDef>,
    #[serde(default)]
    cuts: Vec<CutDef>,
    #[serde(default)]
    datasets: Vec<DatasetDef>,
}

impl CatalogDocument {
    /// Tables and views share one id sequence; ids are never reused.
    fn take_id(&mut self) -> u64 {
        let id = self.next_table_id;
        self.next_table_id += 1;
        id
    }
}

fn remove_named<T>(
    items: &mut Vec<T>,
    name: &str,
    name_of: impl Fn(&T) -> &String,
) -> Result<T, CatalogError> {
    let pos = items
        .iter()
        .position(|item| name_of(item) == name)
        .ok_or_else(|| CatalogError::UndefinedTable(name.to_string()))?;
    Ok(items.remove(pos))
}

/// The durable catalog. Every change is written to disk before it returns.
#[derive(Debug)]
pub struct Catalog {
    path: PathBuf,
    doc: CatalogDocument,
}

const FILE_NAME: &str = "catalog.json";

impl Catalog {
    /// Opens (or creates) the catalog stored in `dir`.
    pub fn open(dir: &Path) -> Result<Catalog, CatalogError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join(FILE_NAME);
        let doc = match fs::read(&path) {
            Ok(bytes) => decode(&path, &bytes)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => CatalogDocument {
                next_table_id: 1,
                tables: vec![],
                views: vec![],
                subscriptions: vec![],
                query_views: vec![],
                indexes: vec![],
                cuts: vec![],
                datasets: vec![],
            },
            Err(e) => return Err(io_err(&path)(e)),
        };
        Ok(Catalog { path, doc })
    }

    pub fn tables(&self) -> &[TableDef] {
        &self.doc.tables
    }

    pub fn table(&self, name: &str) -> Option<&TableDef> {
        self.doc.tables.iter().find(|t| t.name == name)
    }

    pub fn views(&self) -> &[ViewDef] {
        &self.doc.views
    }

    pub fn view(&self, name: &str) -> Option<&ViewDef> {
        self.doc.views.iter().find(|v| v.name == name)
    }

    /// Relations and indexes share one namespace, as in PostgreSQL.
    fn name_taken(&self, name: &str) -> bool {
        self.table(name).is_some()
            || self.view(name).is_some()
            || self.query_view(name).is_some()
            || self.index(name).is_some()
    }

    pub fn indexes(&self) -> &[IndexDef] {
        &self.doc.indexes
    }

    pub fn index(&self, name: &str) -> Option<&IndexDef> {
        self.doc.indexes.iter().find(|i| i.name == name)
    }

    /// Adds an index, assigning its id.
    pub fn create_index(&mut self, mut index: IndexDef) -> Result<IndexDef, CatalogError> {
        if self.name_taken(&index.name) {
            return Err(CatalogError::DuplicateTable(index.name));
        }
        self.update(|doc| {
            index.id = doc.take_id();
            doc.indexes.push(index.clone());
            Ok(index)
        })
    }

    pub fn drop_index(&mut self, name: &str) -> Result<IndexDef, CatalogError> {
        self.update(|doc| remove_named(&mut doc.indexes, name, |i| &i.name))
    }

    pub fn query_views(&self) -> &[QueryViewDef] {
        &self.doc.query_views
    }

    pub fn query_view(&self, name: &str) -> Option<&QueryViewDef> {
        self.doc.query_views.iter().find(|v| v.name == name)
    }

    /// Adds a view (a named query), assigning its id; with `or_replace`,
    /// replaces the view of that name (keeping its id).
    pub fn create_query_view(
        &mut self,
        mut view: QueryViewDef,
        or_replace: bool,
    ) -> Result<QueryViewDef, CatalogError> {
        let existing = self.query_view(&view.name).map(|v| v.id);
        match existing {
            Some(id) if or_replace => self.update(|doc| {
                view.id = id;
                if let Some(slot) = doc.query_views.iter_mut().find(|v| v.id == id) {
                    *slot = view.clone();
                }
                Ok(view)
            }),
            _ if self.name_taken(&view.name) => Err(CatalogError::DuplicateTable(view.name)),
            _ => self.update(|doc| {
                view.id = doc.take_id();
                doc.query_views.push(view.clone());
                Ok(view)
            }),
        }
    }

    pub fn drop_query_view(&mut self, name: &str) -> Result<QueryViewDef, CatalogError> {
        self.update(|doc| remove_named(&mut doc.query_views, name, |v| &v.name))
    }

    /// Gives the table or view (a named query) `from` the name `to`, in one
    /// durable change. Materialized views are renamed elsewhere: their
    /// running dataflow knows its name.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), CatalogError> {
        if self.name_taken(to) {
            return Err(CatalogError::DuplicateTable(to.to_string()));
        }
        self.update(|doc| {
            if let Some(t) = doc.tables.iter_mut().find(|t| t.name == from) {
                t.name = to.to_string();
                return Ok(());
            }
            if let Some(v) = doc.query_views.iter_mut().find(|v| v.name == from) {
                v.name = to.to_string();
                return Ok(());
            }
            Err(CatalogError::UndefinedTable(from.to_string()))
        })
    }

    /// Adds a materialized view, assigning its id, and persists the catalog.
    pub fn create_view(&mut self, mut view: ViewDef) -> Result<ViewDef, CatalogError> {
        if self.name_taken(&view.name) {
            return Err(CatalogError::DuplicateTable(view.name));
        }
        self.update(|doc| {
            view.id = doc.take_id();
            doc.views.push(view.clone());
            Ok(view)
        })
    }

    /// Takes a fresh id (persisted, so it is never handed out again).
    pub fn reserve_id(&mut self) -> Result<u64, CatalogError> {
        self.update(|doc| Ok(doc.take_id()))
    }

    /// Replaces the view of the same name by `view` (a rebuild), in one
    /// durable change; returns the definition replaced.
    pub fn replace_view(&mut self, view: ViewDef) -> Result<ViewDef, CatalogError> {
        self.update(|doc| {
            let slot = doc
                .views
                .iter_mut()
                .find(|v| v.name == view.name)
                .ok_or_else(|| CatalogError::UndefinedTable(view.name.clone()))?;
            let (old, new) = (slot.id, view.id);
            let replaced = std::mem::replace(slot, view);
            // The rebuilt view keeps its indexes.
            for i in doc.indexes.iter_mut().filter(|i| i.on == old) {
                i.on = new;
            }
            Ok(replaced)
        })
    }

    /// Removes a materialized view and persists the catalog.
    /// Removes a materialized view (and its indexes) and persists the
    /// catalog.
    pub fn drop_view(&mut self, name: &str) -> Result<ViewDef, CatalogError> {
        self.update(|doc| {
            let view = remove_named(&mut doc.views, name, |v| &v.name)?;
            doc.indexes.retain(|i| i.on != view.id);
            Ok(view)
        })
    }

    pub fn subscriptions(&self) -> &[SubscriptionDef] {
        &self.doc.subscriptions
    }

    /// Adds a subscription, assigning its id, and persists the catalog.
    /// Subscriptions have their own namespace, as in PostgreSQL.
    pub fn create_subscription(
        &mut self,
        mut sub: SubscriptionDef,
    ) -> Result<SubscriptionDef, CatalogError> {
        if self.doc.subscriptions.iter().any(|s| s.name == sub.name) {
            return Err(CatalogError::DuplicateSubscription(sub.name));
        }
        self.update(|doc| {
            sub.id = doc.take_id();
            doc.subscriptions.push(sub.clone());
            Ok(sub)
        })
    }

    pub fn drop_subscription(&mut self, name: &str) -> Result<SubscriptionDef, CatalogError> {
        self.update(|doc| {
            remove_named(&mut doc.subscriptions, name, |s| &s.name)
                .map_err(|_| CatalogError::UndefinedSubscription(name.to_string()))
        })
    }

    pub fn cuts(&self) -> &[CutDef] {
        &self.doc.cuts
    }

    /// Adds a cut, assigning its id, and persists the catalog. Cuts have
    /// their own namespace.
    pub fn create_cut(&mut self, mut cut: CutDef) -> Result<CutDef, CatalogError> {
        if self.doc.cuts.iter().any(|c| c.name == cut.name) {
            return Err(CatalogError::DuplicateCut(cut.name));
        }
        self.update(|doc| {
            cut.id = doc.take_id();
            doc.cuts.push(cut.clone());
            Ok(cut)
        })
    }

    /// Records the view checkpoints a cut keeps.
    pub fn set_cut_view_checkpoints(
        &mut self,
        name: &str,
        kept: Vec<CutViewCheckpoint>,
    ) -> Result<(), CatalogError> {
        self.update(|doc| {
            let cut = doc
                .cuts
                .iter_mut()
                .find(|c| c.name == name)
                .ok_or_else(|| CatalogError::UndefinedCut(name.to_string()))?;
            cut.view_checkpoints = kept;
            Ok(())
        })
    }

    pub fn drop_cut(&mut self, name: &str) -> Result<CutDef, CatalogError> {
        self.update(|doc| {
            remove_named(&mut doc.cuts, name, |c| &c.name)
                .map_err(|_| CatalogError::UndefinedCut(name.to_string()))
        })
    }

    pub fn datasets(&self) -> &[DatasetDef] {
        &self.doc.datasets
    }

    /// Adds a dataset (with its first version), assigning its id. Datasets
    /// have their own namespace.
    pub fn create_dataset(&mut self, mut d: DatasetDef) -> Result<DatasetDef, CatalogError> {
        if self.doc.datasets.iter().any(|x| x.name == d.name) {
            return Err(CatalogError::DuplicateDataset(d.name));
        }
        self.update(|doc| {
            d.id = doc.take_id();
            doc.datasets.push(d.clone());
            Ok(d)
        })
    }

    /// Replaces a dataset's definition (a new version).
    pub fn replace_dataset(&mut self, d: DatasetDef) -> Result<(), CatalogError> {
        self.update(|doc| {
            let at = doc
                .datasets
                .iter()
                .position(|x| x.name == d.name)
                .ok_or_else(|| CatalogError::UndefinedDataset(d.name.clone()))?;
            doc.datasets[at] = d;
            Ok(())
        })
    }

    /// Removes a dataset and the cuts its versions read at.
    pub fn drop_dataset(&mut self, name: &str) -> Result<DatasetDef, CatalogError> {
        self.update(|doc| {
            let d = remove_named(&mut doc.datasets, name, |d| &d.name)
                .map_err(|_| CatalogError::UndefinedDataset(name.to_string()))?;
            doc.cuts
                .retain(|c| !d.versions.iter().any(|v| v.cut == c.name));
            Ok(d)
        })
    }

    /// Adds a table, assigning its id, and persists the catalog.
    pub fn create_table(&mut self, mut table: TableDef) -> Result<TableDef, CatalogError> {
        if self.name_taken(&table.name) {
            return Err(CatalogError::DuplicateTable(table.name));
        }
        self.update(|doc| {
            table.id = doc.take_id();
            doc.tables.push(table.clone());
            Ok(table)
        })
    }

    /// Removes a table and persists the catalog; returns the removed definition.
    /// Removes a table (and its indexes) and persists the catalog;
    /// returns the removed definition.
    pub fn drop_table(&mut self, name: &str) -> Result<TableDef, CatalogError> {
        self.update(|doc| {
            let table = remove_named(&mut doc.tables, name, |t| &t.name)?;
            doc.indexes.retain(|i| i.on != table.id);
            Ok(table)
        })
    }

    /// Applies a change to a copy of the document and persists it; the
    /// catalog in memory changes only once the new document is on disk.
    fn update<T>(
        &mut self,
        change: impl FnOnce(&mut CatalogDocument) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        let mut doc = self.doc.clone();
        let out = change(&mut doc)?;
        self.persist(&doc)?;
        self.doc = doc;
        Ok(out)
    }

    fn persist(&self, doc: &CatalogDocument) -> Result<(), CatalogError> {
        let json = serde_json::to_vec_pretty(doc).map_err(|e| CatalogError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&self.path, &with_checksum(&json))
    }
}

fn decode(path: &Path, bytes: &[u8]) -> Result<CatalogDocument, CatalogError> {
    let corrupt = |reason: &str| CatalogError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let json = checked_body(bytes).map_err(corrupt)?;
    serde_json::from_slice(json).map_err(|e| corrupt(&e.to_string()))
}

/// Prefixes a document with its CRC32C as a hex line, so that a torn or
/// corrupted copy is detected when read.
pub fn with_checksum(body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("{:08x}\n", crc32c::crc32c(body)).into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The body of a document written by [`with_checksum`], if its CRC holds.
pub fn checked_body(bytes: &[u8]) -> Result<&[u8], &'static str> {
    if bytes.len() < 9 || bytes[8] != b'\n' {
        return Err("missing checksum header");
    }
    let header = std::str::from_utf8(&bytes[..8]).map_err(|_| "bad checksum header")?;
    let expected = u32::from_str_radix(header, 16).map_err(|_| "bad checksum header")?;
    let body = &bytes[9..];
    if crc32c::crc32c(body) != expected {
        return Err("checksum mismatch");
    }
    Ok(body)
}

/// Writes `bytes` to `path` so that a crash leaves either the old or the new
/// content: temp file, fsync, rename, fsync of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CatalogError> {
    write_atomically_with_mode(path, bytes, 0o644)
}

/// [`write_atomically`], the new file created with permission bits `mode`
/// (0o600 for a file only the server's user may read).
pub fn write_atomically_with_mode(
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), CatalogError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    // A temp file a crash left keeps its old mode when truncated.
    let _ = fs::remove_file(&tmp);
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err(dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ColumnDef, SqlType, TableOptions};

    fn table(name: &str) -> TableDef {
        TableDef {
            id: 0,
            name: name.into(),
            columns: vec![ColumnDef {
                name: "a".into(),
                ty: SqlType::BigInt,
                nullable: true,
            }],
            options: TableOptions::default(),
        }
    }

    #[test]
    fn tables_survive_reopen_and_ids_are_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Catalog::open(dir.path()).unwrap();
        let t1 = c.create_table(table("t1")).unwrap();
        c.drop_table("t1").unwrap();
        let t2 = c.create_table(table("t2")).unwrap();
        assert!(t2.id > t1.id);
        assert!(matches!(
            c.create_table(table("t2")),
            Err(CatalogError::DuplicateTable(_))
        ));
        let c = Catalog::open(dir.path()).unwrap();
        assert_eq!(c.tables().len(), 1);
        assert_eq!(c.table("t2").unwrap().id, t2.id);
    }

    #[test]
    fn views_share_names_and_ids_with_tables() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Catalog::open(dir.path()).unwrap();
        let t = c.create_table(table("t")).unwrap();
        let view = |name: &str| ViewDef {
            id: 0,
            name: name.into(),
            query: "SELECT 1".into(),
            emit_on_window_close: false,
            allowed_lateness_us: 0,
            start_offsets: None,
        };
        assert!(matches!(
            c.create_view(view("t")),
            Err(CatalogError::DuplicateTable(_))
        ));
        let v = c.create_view(view("v")).unwrap();
        assert!(v.id > t.id);
        assert!(matches!(
            c.create_table(table("v")),
            Err(CatalogError::DuplicateTable(_))
        ));
        let c2 = Catalog::open(dir.path()).unwrap();
        assert_eq!(c2.view("v").unwrap().id, v.id);
        let mut c = c2;
        c.drop_view("v").unwrap();
        assert!(matches!(
            c.drop_view("v"),
            Err(CatalogError::UndefinedTable(_))
        ));
        assert!(Catalog::open(dir.path()).unwrap().views().is_empty());
    }

    #[test]
    fn corrupt_catalog_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Catalog::open(dir.path()).unwrap();
        c.create_table(table("t1")).unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 5] ^= 0x55;
        fs::write(&path, bytes).unwrap();
        assert!(matches!(
            Catalog::open(dir.path()),
            Err(CatalogError::Corrupt { .. })
        ));
    }
}
