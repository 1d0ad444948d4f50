//! Point reads sent as text with literal keys (psql, psycopg2, any driver
//! that binds parameters on the client). They are looked up before the
//! compatibility parser reads the text again for psql's catalog queries. The query with its keys taken out
//! as parameters (`sluice_sql::parameterize_key_literals`) is planned once
//! per role and text; when it is a point read, later queries of the same
//! text with other keys run it with their literals as the parameters, and
//! skip the planner as a prepared point read does.
//!
//! A statement that may change what a plan found (a table or view created
//! or dropped, a privilege granted or revoked, a role changed) empties the
//! cache when it completes, and a plan made before that is not kept.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::common::{ParamValues, ScalarValue};
use sluice_sql::sqlparser::ast;
use sluice_sql::{KeyLiteral, Statement};

use super::{Engine, Outcome, Session};
use crate::system::PointRead;

/// The most texts kept; past it the cache starts again empty.
const MAX_TEXTS: usize = 4096;

/// A text's point read, or None when the text is no point read.
type Entry = Option<Arc<(PointRead, SchemaRef)>>;

#[derive(Default)]
pub struct TextPointReads {
    inner: parking_lot::Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// Moves with every emptying: a plan made under an earlier one is
    /// not kept.
    generation: u64,
    /// By role and parameterized text.
    entries: HashMap<(String, String), Entry>,
}

impl TextPointReads {
    fn get(&self, key: &(String, String)) -> (u64, Option<Entry>) {
        let c = self.inner.lock();
        (c.generation, c.entries.get(key).cloned())
    }

    fn put(&self, key: (String, String), generation: u64, entry: Entry) {
        let mut c = self.inner.lock();
        if c.generation != generation {
            return;
        }
        if c.entries.len() >= MAX_TEXTS {
            c.entries.clear();
        }
        c.entries.insert(key, entry);
    }

    fn forget(&self, key: &(String, String)) {
        self.inner.lock().entries.remove(key);
    }

    /// Called after `stmt` ran: empties the cache when it may have
    /// changed a plan's tables, views or privileges.
    pub fn after(&self, stmt_changed_catalog: bool) {
        if stmt_changed_catalog {
            let mut c = self.inner.lock();
            c.generation += 1;
            c.entries.clear();
        }
    }
}

/// Whether a statement may change what a cached plan found.
pub fn changes_catalog(stmt: &Statement) -> bool {
    !matches!(
        stmt,
        Statement::Query(_)
            | Statement::Insert { .. }
            | Statement::Update { .. }
            | Statement::Delete { .. }
            | Statement::CopyFrom(_)
            | Statement::CopyTo(_)
            | Statement::Flush
            | Statement::Transaction(_)
            | Statement::Set { .. }
            | Statement::Fetch(_)
            | Statement::DeclareCursor { .. }
            | Statement::CloseCursor { .. }
            | Statement::Deallocate { .. }
            | Statement::ShowTables
            | Statement::ShowViews
            | Statement::ExplainView { .. }
            | Statement::ExplainCreateView(_)
            | Statement::ResetSubscription { .. }
            | Statement::Compact { .. }
    )
}

impl Engine {
    /// The answer of a text query that is a point read with literal keys,
    /// from its cached plan; None when it is not one (or its literals do
    /// not fit the key columns exactly), for the caller to plan it.
    pub(super) async fn text_point_read(
        &self,
        session: &Session,
        sql: &str,
        query: &ast::Query,
    ) -> Option<Outcome> {
        // Catalog queries and queries naming the session's role take the
        // compatibility parser's rewrites of their text
        // (`Planner::compat_statement`); a point read names neither.
        let lower = sql.to_ascii_lowercase();
        if ["pg_", "information_schema", "current_", "session_user"]
            .iter()
            .any(|m| lower.contains(m))
        {
            return None;
        }
        let mut parameterized = query.clone();
        let literals = sluice_sql::parameterize_key_literals(&mut parameterized)?;
        let role = session.role();
        let key = (role.name.clone(), parameterized.to_string());
        let (generation, found) = self.text_reads.get(&key);
        let entry = match found {
            Some(entry) => entry,
            None => {
                let statement = self
                    .planner
                    .compat
                    .rewrite(ast::Statement::Query(Box::new(parameterized)));
                let planned = self.planner.plan_shown(statement, &role).await.ok();
                let entry = planned.and_then(|(plan, columns)| {
                    let read = PointRead::recognize(&plan)?;
                    Some(Arc::new((read, columns)))
                });
                self.text_reads.put(key.clone(), generation, entry.clone());
                entry
            }
        }?;
        let (read, columns) = entry.as_ref();
        let params = ParamValues::List(
            literals
                .into_iter()
                .map(|l| {
                    match l {
                        KeyLiteral::Integer(i) => ScalarValue::Int64(Some(i)),
                        KeyLiteral::Text(s) => ScalarValue::Utf8(Some(s)),
                        KeyLiteral::Boolean(b) => ScalarValue::Boolean(Some(b)),
                    }
                    .into()
                })
                .collect(),
        );
        if !read.params_fit(&params) || (read.reads_table() && session.transaction.lock().open) {
            return None;
        }
        match read.execute(&self.views, &self.store, Some(&params)).await {
            Ok(batch) => Some(Outcome::Batches {
                schema: columns.clone(),
                batches: vec![batch],
                tag: "SELECT",
            }),
            // A view or table gone or changed: planned again, which gives
            // the answer or the error.
            Err(_) => {
                self.text_reads.forget(&key);
                None
            }
        }
    }
}
