//! The checkpoint manifest: the one object whose appearance commits a view's
//! checkpoint epoch. It names every data file of the view's state (files of
//! earlier epochs included, since appended rows are written once) and the
//! next source offset per partition that the state covers.

use serde::{Deserialize, Serialize};

use crate::store::{checked_body, with_checksum};

/// What a checkpoint data file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Rows the view has appended for good (a filter's rows, closed
    /// windows). Written once, listed by every later manifest.
    Rows,
    /// Running aggregate state of the open groups (keys and accumulator
    /// states). Rewritten each epoch.
    Groups,
    /// Late rows kept for `sluice_catalog.late_rows`. Written once.
    Late,
    /// The rows one part of an operator's state holds (a join's side,
    /// named by the file's `part`, in that side's own columns). Written
    /// whole when an operator took rows out since the last epoch, kept
    /// otherwise. (Files without `part`, from earlier versions, hold every
    /// part as a row of Arrow IPC bytes.)
    Operators,
    /// What one part of an operator's state gained since the last epoch,
    /// when the operators only gained rows: written once, listed by every
    /// later manifest until the next whole `Operators` files.
    OperatorRows,
    /// Rows the change log of a view that updates rows in place gained
    /// (its rows with `_op`). Written once, listed by every later manifest
    /// while the log is kept.
    Changes,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointFile {
    /// Key in the object store, relative to the store's root.
    pub key: String,
    pub kind: FileKind,
    pub rows: u64,
    pub bytes: u64,
    pub crc32c: u32,
    /// For operator state: which stage of the view's dataflow and which
    /// part of its state the file holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<StatePartId>,
}

/// An operator's place in a view's dataflow and the part of its state
/// (0 and 1: a join's left and right side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePartId {
    pub stage: u32,
    pub part: u32,
}

/// The view's event-time clock: enough to make the same watermark
/// decisions after recovery as without a crash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewClockState {
    pub max_event_us: Vec<Option<i64>>,
    pub last_commit_us: Vec<Option<i64>>,
    pub first_commit_us: Option<i64>,
    pub watermark_us: Option<i64>,
    /// A view over several inputs: each input's clock, in the order of
    /// the view's inputs (a view input's is empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<ViewClockState>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointManifest {
    pub view_id: u64,
    pub view: String,
    pub epoch: u64,
    pub started_at_us: i64,
    pub completed_at_us: i64,
    /// Next offset to read per source partition (for a view over a view:
    /// the upstream rows consumed).
    pub source_offsets: Vec<u64>,
    pub clock: ViewClockState,
    pub late_count: u64,
    pub files: Vec<CheckpointFile>,
    /// The view keeps a change log (it has subscriptions): `Changes` files
    /// hold it, and the view's rows at this epoch are its base.
    #[serde(default)]
    pub changes_kept: bool,
    /// Operator parts number each stage of the dataflow once: an aggregate
    /// the query repeats shares one stage. Manifests written before say
    /// false, numbering a stage per operator as lifted.
    #[serde(default)]
    pub stages_shared: bool,
    /// Rows of the sources on which the view's expressions failed (see
    /// `stream::compile::failed_rows`): reads fail while any is counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_rows: Vec<FailedRowEntry>,
}

/// A row of a view's sources on which the view's expressions fail, as a
/// checkpoint keeps it: a hash of where it came from and its values (not
/// the values), how often it counts, and its error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedRowEntry {
    pub key: String,
    pub count: i64,
    pub sqlstate: String,
    pub message: String,
}

impl CheckpointManifest {
    /// Directory of a view's checkpoint objects.
    pub fn view_prefix(view_id: u64) -> String {
        format!("views/{view_id}")
    }

    /// Key of the manifest of one epoch; keys sort by epoch.
    pub fn key(view_id: u64, epoch: u64) -> String {
        format!("views/{view_id}/manifest-{epoch:020}.json")
    }

    /// The epoch a manifest key names, if it is one.
    pub fn epoch_of_key(key: &str) -> Option<u64> {
        key.rsplit('/')
            .next()?
            .strip_prefix("manifest-")?
            .strip_suffix(".json")?
            .parse()
            .ok()
    }

    /// Key of a data file written in an epoch.
    pub fn data_key(view_id: u64, epoch: u64, name: &str) -> String {
        format!("views/{view_id}/epoch-{epoch:020}/{name}")
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain data with no maps keyed by non-strings cannot fail.
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        with_checksum(&json)
    }

    pub fn decode(bytes: &[u8]) -> Result<CheckpointManifest, String> {
        let body = checked_body(bytes)?;
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_detects_corruption() {
        let m = CheckpointManifest {
            view_id: 7,
            view: "v".into(),
            epoch: 3,
            started_at_us: 1,
            completed_at_us: 2,
            source_offsets: vec![10, 20],
            changes_kept: false,
            stages_shared: true,
            failed_rows: vec![FailedRowEntry {
                key: "00ff".into(),
                count: 2,
                sqlstate: "22012".into(),
                message: "division by zero".into(),
            }],
            clock: ViewClockState {
                max_event_us: vec![Some(5), None],
                last_commit_us: vec![Some(1), None],
                first_commit_us: Some(1),
                watermark_us: Some(4),
                inputs: Vec::new(),
            },
            late_count: 1,
            files: vec![CheckpointFile {
                key: CheckpointManifest::data_key(7, 3, "rows.parquet"),
                kind: FileKind::Rows,
                rows: 2,
                bytes: 100,
                crc32c: 9,
                part: None,
            }],
        };
        let bytes = m.encode();
        assert_eq!(CheckpointManifest::decode(&bytes).unwrap(), m);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 3);
        assert!(CheckpointManifest::decode(&torn).is_err());
        let key = CheckpointManifest::key(7, 3);
        assert_eq!(CheckpointManifest::epoch_of_key(&key), Some(3));
        assert_eq!(CheckpointManifest::epoch_of_key("views/7/epoch-3/x"), None);
    }
}
