//! Object-store persistence: where closed segments and view checkpoints live
//! durably, on the local file system (the embedded default, under the data
//! directory) or in an S3-compatible store.
//!
//! Every put is atomic: on the local file system the object is written to a
//! temporary file, fsynced, renamed into place and its directory fsynced; on
//! S3 a PUT is atomic by itself. Callers write data objects first and the
//! object that commits them (a manifest) last.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, RetryConfig, WriteMultipart};

/// Errors of the object store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("object store I/O error at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid object store URL {url}: {reason}")]
    Config { url: String, reason: String },
    #[error("object {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
}

crate::layer_error!(StoreError);

impl StoreError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            StoreError::Io { source, .. } if is_disk_full(source) => "53100",
            StoreError::Config { .. } => "22023",
            StoreError::Corrupt { .. } => "XX001",
            _ => "58030",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            StoreError::ObjectStore(object_store::Error::NotFound { .. })
        )
    }
}

fn is_disk_full(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(28) || e.kind() == std::io::ErrorKind::StorageFull
}

/// An object's key (relative to the store's root) and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub key: String,
    pub size: u64,
}

/// The durable store: local directory or S3 bucket and prefix.
pub struct DurableStore {
    inner: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// Set for the local file system: puts go through write-fsync-rename.
    local_root: Option<PathBuf>,
    url: String,
}

/// Suffix of a local object being written; never listed.
const TEMP_SUFFIX: &str = ".tmp";
/// Objects larger than this go to S3 as multipart uploads of `PART_SIZE`.
const MULTIPART_THRESHOLD: usize = 16 << 20;
const PART_SIZE: usize = 8 << 20;
/// Parts of one file upload in flight at once (see `put_file`).
const UPLOADS_IN_FLIGHT: usize = 4;

impl DurableStore {
    /// The local file system under `root`.
    pub fn local(root: &Path) -> Result<DurableStore, StoreError> {
        std::fs::create_dir_all(root).map_err(|source| StoreError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        Ok(DurableStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(root)?),
            prefix: ObjectPath::default(),
            local_root: Some(root.to_path_buf()),
            url: format!("file://{}", root.display()),
        })
    }

    /// An S3-compatible store at `s3://bucket/prefix`, configured by the
    /// usual `AWS_*` variables (`AWS_ENDPOINT`, `AWS_REGION`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`).
    /// Requests give up after a few seconds so that callers see an outage
    /// and retry on their own schedule (checkpoints back off, uploads wait).
    pub fn s3(url: &str) -> Result<DurableStore, StoreError> {
        let parsed = url::Url::parse(url).map_err(|e| StoreError::Config {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if parsed.scheme() != "s3" {
            return Err(StoreError::Config {
                url: url.to_string(),
                reason: "expected s3://bucket/prefix".into(),
            });
        }
        let bucket = parsed.host_str().ok_or_else(|| StoreError::Config {
            url: url.to_string(),
            reason: "missing bucket".into(),
        })?;
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let client = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(10));
        // As `AmazonS3Builder::from_env`, but on top of our client options
        // (which `with_client_options` would otherwise replace).
        let mut builder = AmazonS3Builder::new()
            .with_client_options(client)
            .with_retry(retry);
        for (key, value) in std::env::vars() {
            if key.starts_with("AWS_") {
                if let Ok(k) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    builder = builder.with_config(k, value);
                }
            }
        }
        let store = builder.with_bucket_name(bucket).build()?;
        Ok(DurableStore {
            inner: Arc::new(store),
            prefix: ObjectPath::from(parsed.path().trim_matches('/')),
            local_root: None,
            url: url.to_string(),
        })
    }

    /// `s3://...` URLs go to S3; anything else is a local directory.
    pub fn open(url: Option<&str>, default_root: &Path) -> Result<DurableStore, StoreError> {
        match url {
            Some(u) if u.starts_with("s3://") => DurableStore::s3(u),
            Some(u) => DurableStore::local(Path::new(u.trim_start_matches("file://"))),
            None => DurableStore::local(default_root),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The underlying store, for readers that fetch byte ranges themselves
    /// (Parquet footers and row groups).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.inner.clone()
    }

    /// Where `key` lives in [`DurableStore::object_store`].
    pub fn object_path(&self, key: &str) -> ObjectPath {
        self.path(key)
    }

    fn path(&self, key: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in key.split('/').filter(|s| !s.is_empty()) {
            p = p.join(part);
        }
        p
    }

    fn key_of(&self, path: &ObjectPath) -> String {
        match path.prefix_match(&self.prefix) {
            Some(parts) => parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/"),
            None => path.to_string(),
        }
    }

    /// Stores `bytes` under `key` atomically and durably.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        self.put_all(vec![(key.to_string(), bytes)]).await
    }

    /// Stores several objects, each atomically; all are durable when this
    /// returns. Locally each directory is fsynced once for all of them.
    pub async fn put_all(&self, objects: Vec<(String, Bytes)>) -> Result<(), StoreError> {
        counted("put", self.put_all_uncounted(objects).await)
    }

    async fn put_all_uncounted(&self, objects: Vec<(String, Bytes)>) -> Result<(), StoreError> {
        match &self.local_root {
            Some(root) => {
                let root = root.clone();
                let at = root.clone();
                tokio::task::spawn_blocking(move || write_durably(&root, &objects))
                    .await
                    .map_err(|e| StoreError::Io {
                        path: at,
                        source: std::io::Error::other(e.to_string()),
                    })?
            }
            None => {
                for (key, bytes) in objects {
                    let path = self.path(&key);
                    if bytes.len() > MULTIPART_THRESHOLD {
                        // Parts of a few MB each finish well inside the
                        // request timeout; the object appears only when
                        // the upload completes.
                        let upload = self.inner.put_multipart(&path).await?;
                        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
                        writer.put(bytes);
                        writer.finish().await?;
                    } else {
                        self.inner.put(&path, bytes.into()).await?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Stores the local file at `file` under `key`, read in parts of a
    /// few MB (an object store takes them as a multipart upload, at most
    /// a few parts in flight), so that a file of any size goes up in
    /// bounded memory. The object appears when the upload completes.
    pub async fn put_file(&self, key: &str, file: &Path) -> Result<(), StoreError> {
        counted("put", self.put_file_uncounted(key, file).await)
    }

    async fn put_file_uncounted(&self, key: &str, file: &Path) -> Result<(), StoreError> {
        use tokio::io::AsyncReadExt;
        let io = |source| StoreError::Io {
            path: file.to_path_buf(),
            source,
        };
        // An object store always takes it in parts (one for a small file),
        // so that one path serves every size.
        if self.local_root.is_some() {
            let bytes = tokio::fs::read(file).await.map_err(io)?;
            return self
                .put_all_uncounted(vec![(key.to_string(), bytes.into())])
                .await;
        }
        let upload = self.inner.put_multipart(&self.path(key)).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut reader = tokio::fs::File::open(file).await.map_err(io)?;
        let mut part = vec![0u8; PART_SIZE];
        loop {
            let mut filled = 0;
            while filled < part.len() {
                let n = reader.read(&mut part[filled..]).await.map_err(io)?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            writer.wait_for_capacity(UPLOADS_IN_FLIGHT).await?;
            writer.write(&part[..filled]);
        }
        writer.finish().await?;
        Ok(())
    }

    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let got: Result<Bytes, StoreError> =
            async { Ok(self.inner.get(&self.path(key)).await?.bytes().await?) }.await;
        counted("get", got)
    }

    /// Objects whose key starts with `prefix/`, sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<StoredObject>, StoreError> {
        let path = self.path(prefix);
        let found: Vec<object_store::ObjectMeta> =
            match self.inner.list(Some(&path)).try_collect().await {
                Ok(v) => v,
                // A local directory that was never created lists as empty.
                Err(object_store::Error::NotFound { .. }) => Vec::new(),
                Err(e) => return counted("list", Err(e.into())),
            };
        let mut out: Vec<StoredObject> = found
            .into_iter()
            .map(|m| StoredObject {
                key: self.key_of(&m.location),
                size: m.size,
            })
            .filter(|o| !o.key.ends_with(TEMP_SUFFIX))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Deletes an object; a missing one is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.inner.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => counted("delete", Err(e.into())),
        }
    }

    /// Deletes every object under `prefix/`.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), StoreError> {
        for o in self.list(prefix).await? {
            self.delete(&o.key).await?;
        }
        Ok(())
    }
}

/// Counts a failed request for `/metrics` (after object_store's own
/// retries). A missing object is an answer, not a failure.
fn counted<T>(operation: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
    if let Err(e) = &result {
        if !e.is_not_found() {
            crate::metrics::METRICS.object_store_failure(operation);
        }
    }
    result
}

/// Write each object to a temporary name, fsync, rename; then fsync each
/// directory once: a crash leaves the old state or a whole new object,
/// never a part.
fn write_durably(root: &Path, objects: &[(String, Bytes)]) -> Result<(), StoreError> {
    use std::io::Write;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| StoreError::Io { path: p, source }
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (key, bytes) in objects {
        let path = root.join(key);
        let dir = path.parent().unwrap_or(root).to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(TEMP_SUFFIX);
        let tmp = PathBuf::from(tmp);
        let result = (|| {
            let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(bytes).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result?;
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    for dir in dirs {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_put_get_list_delete() {
        let dir = tempfile::tempdir().unwrap();
        let store = DurableStore::local(dir.path()).unwrap();
        assert!(store.list("views").await.unwrap().is_empty());
        store
            .put("views/1/a.json", Bytes::from_static(b"one"))
            .await
            .unwrap();
        store
            .put("views/1/b.json", Bytes::from_static(b"two!"))
            .await
            .unwrap();
        std::fs::write(dir.path().join("views/1/c.json.tmp"), b"torn").unwrap();
        let listed = store.list("views/1").await.unwrap();
        assert_eq!(
            listed,
            vec![
                StoredObject {
                    key: "views/1/a.json".into(),
                    size: 3
                },
                StoredObject {
                    key: "views/1/b.json".into(),
                    size: 4
                },
            ]
        );
        assert_eq!(&store.get("views/1/b.json").await.unwrap()[..], b"two!");
        store.delete("views/1/a.json").await.unwrap();
        store.delete("views/1/a.json").await.unwrap();
        assert!(store
            .get("views/1/a.json")
            .await
            .unwrap_err()
            .is_not_found());
        store.delete_prefix("views").await.unwrap();
        assert!(store.list("views").await.unwrap().is_empty());
    }
}
