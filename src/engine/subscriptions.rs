//! Subscriptions and their cursors: `CREATE`/`DROP SUBSCRIPTION`,
//! `ALTER SUBSCRIPTION ... RESET`, `DECLARE`, `FETCH` and `CLOSE`.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn subscription_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateSubscription(c) => {
                let role = session.role();
                if let Some(kind) = self.relation_kind(&c.source) {
                    self.roles
                        .check(&role, kind, &c.source, sluice_sql::Privilege::Select)?;
                }
                self.subs.create(&c).await?;
                self.roles.created(
                    &role,
                    ObjectKind::Subscription,
                    std::slice::from_ref(&c.name),
                )?;
                Ok(Outcome::done("CREATE SUBSCRIPTION"))
            }
            Statement::DropSubscription { names, if_exists } => {
                for name in &names {
                    self.roles
                        .check_owner(&session.role(), ObjectKind::Subscription, name)?;
                }
                self.subs.drop_subscriptions(&names, if_exists, false)?;
                self.roles.dropped(ObjectKind::Subscription, &names)?;
                Ok(Outcome::done("DROP SUBSCRIPTION"))
            }
            Statement::ResetSubscription { name, to } => {
                self.refuse_sink_group(&name)?;
                self.roles
                    .check_owner(&session.role(), ObjectKind::Subscription, &name)?;
                self.subs.reset(&name, &to).await?;
                Ok(Outcome::done("ALTER SUBSCRIPTION"))
            }
            Statement::DeclareCursor {
                name,
                subscription,
                since,
            } => {
                let s = session;
                if s.cursors.lock().contains_key(&name) {
                    return Err(SubscriptionError::DuplicateCursor(name).into());
                }
                self.refuse_sink_group(&subscription)?;
                if self.subs.exists(&subscription) {
                    self.roles.check(
                        &s.role(),
                        ObjectKind::Subscription,
                        &subscription,
                        sluice_sql::Privilege::Usage,
                    )?;
                }
                let in_transaction = s.transaction.lock().open;
                let cursor =
                    self.subs
                        .declare(&name, &subscription, since.as_ref(), in_transaction)?;
                s.cursors.lock().insert(name, cursor);
                Ok(Outcome::done("DECLARE CURSOR"))
            }
            Statement::Fetch(fetch) => self.fetch(session, fetch).await,
            Statement::CloseCursor { name } => {
                let s = session;
                let mut cursors = s.cursors.lock();
                match name {
                    Some(name) => {
                        cursors
                            .remove(&name)
                            .ok_or(SubscriptionError::UndefinedCursor(name))?;
                    }
                    None => cursors.clear(),
                }
                Ok(Outcome::done("CLOSE CURSOR"))
            }
            other => Err(misrouted("subscriptions", &other)),
        }
    }

    /// FETCH from a subscription cursor. Outside a transaction block the
    /// new position is committed before the rows are sent.
    pub(crate) async fn fetch(
        &self,
        session: &Session,
        fetch: sluice_sql::Fetch,
    ) -> Result<Outcome, SluiceError> {
        let s = session;
        let in_transaction = s.transaction.lock().open;
        let mut cursor = s
            .cursors
            .lock()
            .remove(&fetch.cursor)
            .ok_or_else(|| SubscriptionError::UndefinedCursor(fetch.cursor.clone()))?;
        cursor.begin_fetch_in_transaction();
        let timeout = fetch
            .timeout_us
            .map(|us| std::time::Duration::from_micros(us.max(0) as u64));
        let mut notices = Vec::new();
        let watch = s.cancel.watch();
        let result = async {
            // A cancel while the FETCH reads or waits for rows stops it
            // with nothing committed; the cursor goes back below.
            let batches = watch
                .run(
                    self.subs
                        .fetch(&mut cursor, fetch.count, timeout, &mut notices),
                )
                .await?;
            watch.check()?;
            if !in_transaction {
                self.subs.commit(&mut cursor).await?;
            }
            Ok::<_, SluiceError>(batches)
        }
        .await;
        if result.is_err() && !in_transaction {
            cursor.rollback();
        }
        let schema = cursor.schema.clone();
        s.cursors.lock().insert(cursor.name.clone(), cursor);
        let _ = SCAN_NOTICES.try_with(|n| n.lock().extend(notices));
        Ok(Outcome::Batches {
            schema,
            batches: result?,
            tag: "FETCH",
        })
    }

    /// A sink's consumer group is the sink's alone: no cursor reads it and
    /// no RESET moves it.
    pub(crate) fn refuse_sink_group(&self, name: &str) -> Result<(), SluiceError> {
        match self.subs.get(name) {
            Some(g) if g.def.sink.is_some() => {
                Err(SubscriptionError::IsSink(name.to_string()).into())
            }
            _ => Ok(()),
        }
    }
}

/// A FETCH prepared with Parse: its rows have the cursor's schema.
pub fn prepared_fetch(session: &Session, sql: &str) -> Result<Option<Prepared>, SluiceError> {
    // Every Parse comes here: only a statement that starts with FETCH is
    // read again.
    let starts_with_fetch = sql
        .trim_start()
        .get(..5)
        .is_some_and(|w| w.eq_ignore_ascii_case("fetch"));
    if !starts_with_fetch {
        return Ok(None);
    }
    let Ok(pieces) = split_statements(sql) else {
        return Ok(None);
    };
    let [piece] = pieces.as_slice() else {
        return Ok(None);
    };
    let Ok(Statement::Fetch(fetch)) = parse_sql(piece) else {
        return Ok(None);
    };
    let schema = session
        .cursors
        .lock()
        .get(&fetch.cursor)
        .map(|c| c.schema.clone())
        .ok_or(SubscriptionError::UndefinedCursor(fetch.cursor))?;
    Ok(Some(Prepared::Rows {
        sql: piece.clone(),
        schema,
    }))
}
