//! One data directory, one server.
//!
//! A server holds an exclusive lock (`flock`) on `<data dir>/sluice.pid`,
//! a file that names its process, for as long as it serves, as
//! PostgreSQL's postmaster.pid does. A second server on the same directory
//! would append to the same segment files and corrupt them; it finds the
//! lock held and refuses to start, naming the holder. The kernel drops the
//! lock when its process ends, however it ends (`kill -9` included), so a
//! file left by a dead server is simply taken over.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why a data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    #[error("data directory {dir} is in use by another Sluice server{holder}: its lock file {file} is held; stop that server first, or give this one another --data-dir")]
    Held {
        dir: PathBuf,
        file: PathBuf,
        /// " (pid 1234)" when the file names it.
        holder: String,
    },
    #[error("cannot lock data directory {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The lock on a data directory; dropping it lets another server in.
#[derive(Debug)]
pub struct DataDirLock {
    // Held open: closing the file releases the lock.
    _file: File,
}

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "sluice.pid";

impl DataDirLock {
    /// Locks `dir` (creating it if needed) for this process, or says who
    /// holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, DirLockError> {
        let io = |source| DirLockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut named = String::new();
                let _ = file.read_to_string(&mut named);
                let holder = match named.lines().next().map(str::trim) {
                    Some(pid) if !pid.is_empty() => format!(" (pid {pid})"),
                    _ => String::new(),
                };
                return Err(DirLockError::Held {
                    dir: dir.to_path_buf(),
                    file: path,
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Ours now: whatever pid a dead holder left is replaced.
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_is_refused_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let refused = DataDirLock::acquire(dir.path()).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_stale_pid_file_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "999999\n").unwrap();
        let _lock = DataDirLock::acquire(dir.path()).unwrap();
        let pid = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
    }
}
