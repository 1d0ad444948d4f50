//! `COPY ... FROM STDIN`: the rows of the whole statement are parsed and
//! validated as they arrive, then appended to the log as one atomic statement
//! when the data ends (inside a transaction block: staged until COMMIT).
//! Outside a transaction block, rows past [`COPY_MEMORY_BYTES`] (or half
//! of `--max-statement-bytes`, if less) move to disk as they come
//! (`log::spilled_rows`), so a COPY of any size loads in bounded memory
//! and still commits all its rows or none.

use std::sync::Arc;

use tracing::{info_span, Instrument};

use super::{Engine, Session};
use crate::error::SluiceError;
use crate::ingest::CopyParser;
use crate::log::spilled_rows::SpilledRows;
use crate::log::transaction::stage_statement;
use crate::log::{RoutedRows, TableLog};

/// The most Arrow bytes of rows a COPY outside a transaction block holds
/// in memory before it moves them to disk.
pub const COPY_MEMORY_BYTES: u64 = 64 << 20;
use crate::query::cancel::{Running, StatementWatch};

pub struct CopyState {
    pub table: Arc<TableLog>,
    pub parser: Option<CopyParser>,
    /// Rows converted so far, already split by partition.
    pub routed: RoutedRows,
    /// Rows moved to disk (see the module header); None while all are in
    /// memory, and always inside a transaction block.
    pub spilled: Option<SpilledRows>,
    /// Whether rows may move to disk: not inside a transaction block,
    /// whose statements are staged in memory until COMMIT.
    pub may_spill: bool,
    /// The first error; later data is read and dropped, as PostgreSQL does.
    pub error: Option<SluiceError>,
    /// The COPY statement's: a cancel or timeout during the data is its
    /// error, and nothing is stored.
    pub watch: StatementWatch,
    /// The COPY runs until its data ends: a shutdown waits for it.
    pub _running: Option<Running>,
}

impl CopyState {
    /// Drops what was converted: the statement fails with `e`.
    fn fail(&mut self, e: SluiceError) {
        self.error = Some(e);
        self.parser = None;
        self.routed = RoutedRows::default();
        self.spilled = None;
    }

    /// Moves the routed rows to disk once they take more memory than a
    /// COPY holds.
    fn spill_if_large(&mut self) -> Result<(), SluiceError> {
        let bound = COPY_MEMORY_BYTES.min(self.table.max_statement_bytes() / 2);
        if !self.may_spill || self.routed.bytes() < bound {
            return Ok(());
        }
        let routed = std::mem::take(&mut self.routed);
        let spilled = match &mut self.spilled {
            Some(s) => s,
            None => {
                let Some((_, first)) = routed.first_part() else {
                    return Ok(());
                };
                let schema = first.schema();
                self.spilled.insert(SpilledRows::new(
                    &self.table.dir,
                    self.table.partition_count(),
                    schema,
                )?)
            }
        };
        spilled.add(routed)?;
        if let Some(parser) = self.parser.as_mut() {
            parser.forget_staged();
        }
        Ok(())
    }
}

impl Engine {
    /// A piece of the COPY's data.
    pub fn copy_data(&self, session: &Session, data: &[u8]) {
        let mut guard = session.copy.lock();
        let Some(state) = guard.as_mut() else {
            return;
        };
        if state.error.is_some() {
            return;
        }
        if let Err(e) = state.watch.check() {
            state.fail(e);
            return;
        }
        let Some(parser) = state.parser.as_mut() else {
            return;
        };
        let fed = parser.feed(data).map_err(SluiceError::from).and_then(|_| {
            for batch in parser.take_batches() {
                state.table.route_into(&batch, &mut state.routed)?;
            }
            Ok(())
        });
        let fed = fed.and_then(|_| state.spill_if_large());
        if let Err(e) = fed {
            state.fail(e);
        }
    }

    /// The data ended: the rows are appended (or staged in the open block)
    /// as one statement. Returns how many.
    pub async fn copy_done(&self, session: &Session) -> Result<u64, SluiceError> {
        let state = session
            .copy
            .lock()
            .take()
            .ok_or_else(|| SluiceError::Protocol("CopyDone without COPY in progress".into()))?;
        let span = info_span!("copy_from", table = %state.table.def().name);
        let staging = session.transaction.lock().staging();
        let rows = async {
            if let Some(e) = state.error {
                return Err(e);
            }
            let mut routed = state.routed;
            let parser = state
                .parser
                .ok_or_else(|| SluiceError::Protocol("COPY state lost".into()))?;
            for batch in parser.finish()? {
                state.table.route_into(&batch, &mut routed)?;
            }
            // The last look: from here the rows are committed.
            state.watch.check()?;
            Ok::<_, SluiceError>(match (staging, state.spilled) {
                (None, Some(spilled)) => state.table.append_spilled(spilled, routed).await?,
                (None, None) => state.table.append_routed(routed).await?,
                // Inside a transaction block the rows wait for COMMIT.
                (Some(staged), _) => {
                    stage_statement(&staged, &state.table, routed.into_batches(), false).await?
                }
            })
        }
        .instrument(span)
        .await;
        if rows.is_err() {
            session.note_failure();
        }
        rows
    }

    /// The client gave up the COPY: nothing of it is stored.
    pub fn copy_fail(&self, session: &Session, message: &str) -> SluiceError {
        session.copy.lock().take();
        SluiceError::Protocol(format!("COPY from stdin failed: {message}"))
    }
}
