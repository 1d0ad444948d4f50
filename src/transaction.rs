//! COMMIT of a transaction block: the records its statements staged and
//! the offsets its subscription cursors reached, made durable and visible
//! in one commit, or not at all.
//!
//! What a transaction touches decides how it commits: one table alone is
//! that table's group commit; one consumer group alone is the group's
//! offsets record; anything more goes through the transaction log
//! ([`crate::log::transaction`]).

use std::sync::Arc;

use crate::error::SluiceError;
use crate::log::{LogStore, Snapshot, StagedWrites};
use crate::subscribe::{SubscriptionCursor, SubscriptionManager};

/// Commits `staged` and the positions of `moved` (cursors that fetched in
/// the transaction) together. A REPEATABLE READ transaction passes its
/// `snapshot`: its writes to keyed tables then fail with 40001, nothing
/// committed, when another transaction committed a record of one of their
/// keys after the snapshot.
pub async fn commit(
    store: &LogStore,
    subs: &SubscriptionManager,
    staged: StagedWrites,
    moved: &[&SubscriptionCursor],
    snapshot: Option<Arc<Snapshot>>,
) -> Result<(), SluiceError> {
    let mut tables = staged.into_tables();
    let mut offsets = subs.prepare_commits(moved).await?;
    match (tables.len(), offsets.len()) {
        (0, 0) => Ok(()),
        (0, 1) => match offsets.pop() {
            Some(group) => Ok(group.write().await?),
            None => Ok(()),
        },
        (1, 0) => match tables.pop() {
            Some((table, records)) => {
                let since = snapshot.map(|s| s.ends(&table));
                table.append_staged(records, since.as_deref()).await?;
                Ok(())
            }
            None => Ok(()),
        },
        _ => {
            let entries = offsets
                .iter()
                .map(|o| o.entry())
                .collect::<Result<Vec<_>, _>>()?;
            store
                .transactions()
                .commit(tables, entries, snapshot)
                .await?;
            for group in offsets {
                group.finish().await;
            }
            Ok(())
        }
    }
}
