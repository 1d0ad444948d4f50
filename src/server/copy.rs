//! `COPY ... FROM STDIN`: the rows of the whole statement are parsed and
//! validated as they arrive, then appended to the log as one atomic statement
//! when the client sends CopyDone (inside a transaction block: staged until
//! COMMIT).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::Tag;
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;
use tracing::info_span;
use tracing::Instrument;

use crate::error::SluiceError;
use crate::ingest::CopyParser;
use crate::log::transaction::stage_statement;
use crate::log::{RoutedRows, TableLog};

use super::handler::{note_failure, session, Handlers};
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

#[async_trait]
impl CopyHandler for Handlers {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let s = session(client);
        let mut guard = s.copy.lock();
        if let Some(state) = guard.as_mut() {
            if state.error.is_none() {
                if let Err(e) = state.watch.check() {
                    state.error = Some(e);
                    state.parser = None;
                    state.routed = RoutedRows::default();
                }
                if let Some(parser) = state.parser.as_mut() {
                    let fed = parser
                        .feed(&copy_data.data)
                        .map_err(SluiceError::from)
                        .and_then(|_| {
                            for batch in parser.take_batches() {
                                state.table.route_into(&batch, &mut state.routed)?;
                            }
                            Ok(())
                        });
                    if let Err(e) = fed {
                        state.error = Some(e);
                        state.parser = None;
                        state.routed = RoutedRows::default();
                    }
                }
            }
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let state = session(client).copy.lock().take();
        let Some(state) = state else {
            return Err(
                SluiceError::Protocol("CopyDone without COPY in progress".into()).into_pg(),
            );
        };
        let span = info_span!("copy_from", table = %state.table.def.name);
        let staging = session(client).transaction.lock().staging();
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
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                note_failure(client);
                return Err(e.into_pg());
            }
        };
        client
            .send(PgWireBackendMessage::CommandComplete(
                Tag::new("COPY").with_rows(rows as usize).into(),
            ))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        session(client).copy.lock().take();
        SluiceError::Protocol(format!("COPY from stdin failed: {}", fail.message)).into_pg()
    }
}
