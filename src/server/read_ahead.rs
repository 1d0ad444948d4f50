//! Read-ahead of a subscription cursor's next FETCH.
//!
//! A consumer (psql, a driver's loop) sends the next `FETCH n` as soon as
//! it has dealt with the rows of the last one, and meanwhile the server
//! would sit idle. So after a FETCH in autocommit that filled its count, a
//! copy of the cursor reads the next `n` rows and encodes them on another
//! task while the client works. The next FETCH takes them when it asks for
//! the same count, in the same formats, from the same place (the same
//! group, generation and position as the copy started from), and then
//! commits the copy's position as any FETCH commits its own: nothing moves
//! before that FETCH arrives, and a read-ahead never used changes nothing.
//!
//! Anything else drops it: a FETCH of another count or format, inside a
//! transaction block, of another cursor, or from a cursor that moved or
//! was declared again. A read-ahead that found fewer rows than its count
//! is not used, so a consumer at the tail reads what is committed when it
//! asks, and a FETCH with a timeout still waits for new rows.

use std::sync::Arc;

use futures::{stream, StreamExt};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, QueryResponse};
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;
use sluice_sql::FetchCount;
use tokio::task::JoinHandle;
use tracing::{debug_span, Instrument};

use super::encode;
use crate::subscribe::{SubscriptionCursor, SubscriptionManager};

/// FETCHes of more rows than this are not read ahead: the rows would be
/// held twice over while the client works.
const MAX_ROWS: u64 = 100_000;

/// The next FETCH's rows, being read and encoded.
pub struct ReadAhead {
    /// Where the copy started: the cursor as the last FETCH left it.
    from: SubscriptionCursor,
    count: u64,
    format: String,
    options: FormatOptions,
    task: JoinHandle<Option<Fetched>>,
}

/// What a read-ahead found: the copy of the cursor after it, and its rows
/// encoded.
pub struct Fetched {
    cursor: SubscriptionCursor,
    notices: Vec<String>,
    fields: Arc<Vec<FieldInfo>>,
    rows: Vec<DataRow>,
}

impl Fetched {
    pub fn cursor(&self) -> &SubscriptionCursor {
        &self.cursor
    }

    /// The copy of the cursor after these rows, the notices its read
    /// sent, the number of rows, and the FETCH's answer.
    pub fn into_parts(self) -> (SubscriptionCursor, Vec<String>, usize, QueryResponse) {
        let count = self.rows.len();
        let mut resp = QueryResponse::new(self.fields, stream::iter(self.rows.into_iter().map(Ok)));
        resp.set_command_tag("FETCH");
        (self.cursor, self.notices, count, resp)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ReadAhead {
    /// Starts reading the FETCH after one that returned `returned` rows
    /// from `cursor`, if that FETCH filled its count.
    pub fn start(
        subs: &Arc<SubscriptionManager>,
        cursor: &SubscriptionCursor,
        count: &FetchCount,
        returned: usize,
        format: &Format,
        options: &FormatOptions,
    ) -> Option<ReadAhead> {
        let FetchCount::Rows(count) = *count else {
            return None;
        };
        if count == 0 || count > MAX_ROWS || returned as u64 != count {
            return None;
        }
        let mut copy = cursor.clone();
        let subs = subs.clone();
        let task_format = format.clone();
        let task_options = Arc::new(options.clone());
        let span = debug_span!("fetch_read_ahead", cursor = %cursor.name, count);
        let task = tokio::spawn(
            async move {
                copy.begin_fetch_in_transaction();
                let mut notices = Vec::new();
                let batches = subs
                    .fetch(&mut copy, FetchCount::Rows(count), None, &mut notices)
                    .await
                    .ok()?;
                let found: usize = batches.iter().map(|b| b.num_rows()).sum();
                if found as u64 != count {
                    return None;
                }
                let schema = copy.schema.clone();
                let resp = encode::batches(&schema, batches, &task_format, task_options).ok()?;
                let fields = resp.row_schema();
                // A row that fails to encode is left to the FETCH itself,
                // which reports it.
                let rows: Vec<DataRow> = resp
                    .data_rows
                    .collect::<Vec<_>>()
                    .await
                    .into_iter()
                    .collect::<Result<_, _>>()
                    .ok()?;
                Some(Fetched {
                    cursor: copy,
                    notices,
                    fields,
                    rows,
                })
            }
            .instrument(span),
        );
        Some(ReadAhead {
            from: cursor.clone(),
            count,
            format: format!("{format:?}"),
            options: options.clone(),
            task,
        })
    }

    /// The rows read ahead, when they answer a FETCH of `count` rows from
    /// `cursor` in `format`; `None` when they do not (or there were too
    /// few), and the FETCH reads for itself.
    pub async fn take(
        mut self,
        cursor: &SubscriptionCursor,
        count: &FetchCount,
        format: &Format,
        options: &FormatOptions,
    ) -> Option<Fetched> {
        let same = matches!(*count, FetchCount::Rows(n) if n == self.count)
            && self.from.same_place(cursor)
            && self.format == format!("{format:?}")
            && &self.options == options;
        if !same {
            return None;
        }
        // A read-ahead that failed (or panicked) leaves the FETCH to read
        // for itself, and to report what went wrong.
        (&mut self.task).await.ok().flatten()
    }
}
