//! `COPY ... FROM STDIN`: the rows of the whole statement are parsed and
//! validated as they arrive, then appended to the log as one atomic statement
//! when the data ends (inside a transaction block: staged until COMMIT).

use std::sync::Arc;

use tracing::{info_span, Instrument};

use super::{Engine, Session};
use crate::error::SluiceError;
use crate::ingest::CopyParser;
use crate::log::transaction::stage_statement;
use crate::log::{RoutedRows, TableLog};
use crate::query::cancel::{Running, StatementWatch};

pub struct CopyState {
    pub table: Arc<TableLog>,
    pub parser: Option<CopyParser>,
    /// Rows converted so far, already split by partition.
    pub routed: RoutedRows,
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
            Ok::<_, SluiceError>(match staging {
                None => state.table.append_routed(routed).await?,
                // Inside a transaction block the rows wait for COMMIT.
                Some(staged) => {
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
