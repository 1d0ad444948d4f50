//! Transaction blocks and session settings: `BEGIN`, `COMMIT`, `ROLLBACK`,
//! savepoints, `SET` (`statement_timeout` among them) and `DEALLOCATE`.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn transaction_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            // The simple protocol handles DEALLOCATE before it gets here.
            Statement::Deallocate(_) => Err(SluiceError::Unsupported(
                "DEALLOCATE in the extended query protocol; send it as a simple query".into(),
            )),
            Statement::Transaction(op) => self.transaction(session, op).await,
            Statement::Set { name, value } if name == "statement_timeout" || name == "all" => {
                let timeout = match value.to_lowercase().as_str() {
                    "default" | "" => None,
                    v => Some(
                        parse_timeout(v).ok_or_else(|| SluiceError::InvalidParameter {
                            name: name.clone(),
                            value: value.clone(),
                        })?,
                    ),
                };
                session.cancel.set_timeout(timeout);
                Ok(Outcome::done("SET"))
            }
            Statement::Set { .. } => Ok(Outcome::done("SET")),
            other => Err(misrouted("transactions", &other)),
        }
    }

    /// BEGIN, COMMIT, ROLLBACK. COMMIT makes the block's writes and the
    /// positions of the subscription cursors that fetched in it durable
    /// and visible in one commit; ROLLBACK (or COMMIT of a failed block)
    /// drops the writes and rewinds the cursors. Cursors declared in the
    /// block close with it.
    pub(crate) async fn transaction(
        &self,
        session: &Session,
        op: TransactionOp,
    ) -> Result<Outcome, SluiceError> {
        let s = session;
        let state = s.transaction.lock().clone();
        match &op {
            TransactionOp::Begin(modes) => {
                if state.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                if !state.open {
                    *s.transaction.lock() = TransactionState {
                        open: true,
                        characteristics: s.defaults.lock().with(*modes),
                        ..Default::default()
                    };
                }
                return Ok(Outcome::TransactionStart("BEGIN"));
            }
            TransactionOp::SetModes(modes) => {
                // Outside a block PostgreSQL only warns, and nothing
                // changes.
                if state.open {
                    s.transaction.lock().set_modes(*modes)?;
                }
                return Ok(Outcome::done("SET"));
            }
            TransactionOp::SetSnapshot(id) => {
                self.import_snapshot(s, id)?;
                return Ok(Outcome::done("SET"));
            }
            TransactionOp::SetDefaults(modes) => {
                if state.failed {
                    return Err(SluiceError::TransactionAborted);
                }
                let mut defaults = s.defaults.lock();
                *defaults = defaults.with(*modes);
                return Ok(Outcome::done("SET"));
            }
            TransactionOp::Savepoint(_)
            | TransactionOp::Release(_)
            | TransactionOp::RollbackTo(_) => {
                let tag = s.transaction.lock().savepoint(&op)?;
                return Ok(Outcome::done(tag));
            }
            TransactionOp::Commit | TransactionOp::Rollback => {}
        }
        let commit = op == TransactionOp::Commit && !state.failed;
        let staged = std::mem::take(&mut *state.staged.lock());
        let mut cursors = std::mem::take(&mut *s.cursors.lock());
        let result = match commit {
            true => {
                let moved: Vec<&SubscriptionCursor> = cursors
                    .values()
                    .filter(|c| c.fetched_in_transaction())
                    .collect();
                crate::transaction::commit(
                    &self.store,
                    &self.subs,
                    staged,
                    &moved,
                    state.snapshot.clone(),
                )
                .await
            }
            false => Ok(()),
        };
        for cursor in cursors.values_mut() {
            if !cursor.fetched_in_transaction() {
                continue;
            }
            match commit && result.is_ok() {
                true => SubscriptionManager::committed_in_transaction(cursor),
                false => cursor.rollback(),
            }
        }
        cursors.retain(|_, c| !c.declared_in_transaction);
        s.cursors.lock().extend(cursors);
        *s.transaction.lock() = TransactionState::default();
        result?;
        Ok(Outcome::TransactionEnd(if commit {
            "COMMIT"
        } else {
            "ROLLBACK"
        }))
    }
}

pub(crate) fn transaction_setting(name: &str) -> Option<TransactionSetting> {
    match name {
        "transaction_isolation"
        | "transaction isolation level"
        | "default_transaction_isolation" => Some(TransactionSetting::Isolation),
        "transaction_read_only" | "default_transaction_read_only" => {
            Some(TransactionSetting::ReadOnly)
        }
        _ => None,
    }
}

/// The column name of `SHOW <setting>`, when `stmt` shows a setting the
/// session keeps (a transaction setting, `statement_timeout`).
pub(crate) fn shown_session_setting(stmt: &Statement) -> Option<String> {
    let Statement::Query(q) = stmt else {
        return None;
    };
    let ast::Statement::ShowVariable { variable } = q.as_ref() else {
        return None;
    };
    let name = shown_name(variable);
    (transaction_setting(&name).is_some() || name == "statement_timeout").then_some(name)
}

/// The setting `SHOW` names (`transaction isolation level` in words).
pub(crate) fn shown_name(variable: &[ast::Ident]) -> String {
    variable
        .iter()
        .map(|i| i.value.to_lowercase())
        .collect::<Vec<_>>()
        .join(" ")
}
