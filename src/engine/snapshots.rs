//! Exported snapshots, so that several connections read one consistent
//! cut (DuckDB's parallel scan of an attached database does this):
//! `pg_export_snapshot()` names the transaction's snapshot (a REPEATABLE
//! READ block's, or one taken for the call in any other), and `SET
//! TRANSACTION SNAPSHOT 'id'` at the start of another session's REPEATABLE
//! READ block makes that block read it. As in PostgreSQL, an id can be
//! imported only while the exporting transaction is open.

use std::ops::ControlFlow;

use sluice_sql::sqlparser::ast::{Expr, Value, VisitMut, VisitorMut};

use super::*;

impl Engine {
    /// Replaces each `pg_export_snapshot()` in `stmt` by the id of the
    /// snapshot it exports; whether there was one.
    pub(super) async fn export_snapshots(
        &self,
        session: &Session,
        stmt: &mut ast::Statement,
    ) -> Result<bool, SluiceError> {
        if !calls_export(stmt) {
            return Ok(false);
        }
        self.begin_statement(session).await;
        let held = session.transaction.lock().snapshot.clone();
        let snapshot = match held {
            Some(s) => s,
            None => {
                let tables = self.store.tables();
                let s = self.store.transactions().take_snapshot(&tables).await;
                let mut t = session.transaction.lock();
                if t.open {
                    t.exported.push(s.clone());
                }
                s
            }
        };
        let id = self.store.transactions().export_snapshot(&snapshot);
        let _ = stmt.visit(&mut ExportCalls {
            replace_with: Some(id),
            found: false,
        });
        Ok(true)
    }

    /// `SET TRANSACTION SNAPSHOT 'id'`.
    pub(super) fn import_snapshot(&self, session: &Session, id: &str) -> Result<(), SluiceError> {
        let defaults = session.defaults.lock().isolation;
        let mut t = session.transaction.lock();
        if t.failed {
            return Err(SluiceError::TransactionAborted);
        }
        if t.queried || t.snapshot.is_some() {
            return Err(SluiceError::ActiveTransaction(
                "SET TRANSACTION SNAPSHOT must be called before any query",
            ));
        }
        // As in PostgreSQL, the isolation level is checked first (outside
        // a block, the session's).
        let isolation = match t.open {
            true => t.characteristics.isolation,
            false => defaults,
        };
        if isolation != sluice_sql::IsolationLevel::RepeatableRead {
            return Err(SluiceError::Unsupported(
                "a snapshot-importing transaction must have isolation level SERIALIZABLE or \
                 REPEATABLE READ"
                    .into(),
            ));
        }
        if !t.open {
            return Err(SluiceError::NoTransactionBlock("SET TRANSACTION SNAPSHOT"));
        }
        let snapshot = self
            .store
            .transactions()
            .imported_snapshot(id)
            .ok_or_else(|| SluiceError::InvalidSnapshot(id.to_string()))?;
        t.snapshot = Some(snapshot);
        Ok(())
    }
}

/// Replaces each `pg_export_snapshot()` in `stmt` by an empty id, to
/// describe its result without exporting; whether there was one.
pub(super) fn stand_in_for_export(stmt: &mut ast::Statement) -> bool {
    let mut stand_in = ExportCalls {
        replace_with: Some(String::new()),
        found: false,
    };
    let _ = stmt.visit(&mut stand_in);
    stand_in.found
}

fn calls_export(stmt: &mut ast::Statement) -> bool {
    let mut finder = ExportCalls {
        replace_with: None,
        found: false,
    };
    let _ = stmt.visit(&mut finder);
    finder.found
}

struct ExportCalls {
    replace_with: Option<String>,
    found: bool,
}

impl VisitorMut for ExportCalls {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        let named = f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_export_snapshot"));
        let no_args = match &f.args {
            ast::FunctionArguments::None => true,
            ast::FunctionArguments::List(l) => l.args.is_empty(),
            ast::FunctionArguments::Subquery(_) => false,
        };
        if named && no_args {
            self.found = true;
            if let Some(id) = &self.replace_with {
                *expr = Expr::Value(Value::SingleQuotedString(id.clone()).into());
            }
        }
        ControlFlow::Continue(())
    }
}
