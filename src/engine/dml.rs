//! Statements that write rows or move them in bulk: `INSERT` (literal
//! rows staged directly, anything else through a plan), `UPDATE`,
//! `DELETE`, and `COPY` from a client or to a client, a file or the object
//! store.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn change_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CopyTo(copy) => {
                if matches!(copy.target, ExportTarget::Location(_)) {
                    self.roles.check_superuser(
                        &session.role(),
                        "permission denied to COPY to a file: only superusers may COPY to a file or an object store; COPY ... TO STDOUT (psql's \\copy) works for everyone",
                    )?;
                }
                let (plan, columns) = self
                    .planner
                    .plan_shown(ast::Statement::Query(copy.query.clone()), &session.role())
                    .await?;
                let rows = self.query_rows(session, plan).await?;
                match &copy.target {
                    ExportTarget::Stdout => Ok(Outcome::CopyOut {
                        rows,
                        copy: Box::new(copy),
                        columns,
                    }),
                    ExportTarget::Location(location) => {
                        let (n, sha256) = export::to_location(rows, columns, location).await?;
                        self.register_export(session, location, None, n, sha256)?;
                        Ok(Outcome::Done {
                            tag: "COPY",
                            rows: Some(n),
                        })
                    }
                }
            }
            Statement::CopyFrom(copy) => {
                let table = self
                    .store
                    .table(&copy.table)
                    .ok_or_else(|| SluiceError::UndefinedTable(copy.table.clone()))?;
                table.check_statement_writes()?;
                self.roles.check(
                    &session.role(),
                    ObjectKind::Table,
                    &copy.table,
                    sluice_sql::Privilege::Insert,
                )?;
                let columns = if copy.columns.is_empty() {
                    table.def().columns.len()
                } else {
                    copy.columns.len()
                };
                let binary = copy.format == sluice_sql::CopyFormat::Binary;
                // Outside a transaction block the rows move to disk as they
                // come (see `copy.rs`): the statement limit bounds nothing
                // there, not even one staged batch of wide rows.
                let may_spill = session.transaction.lock().staging().is_none();
                let limit = match may_spill {
                    true => u64::MAX,
                    false => table.max_statement_bytes(),
                };
                let parser = CopyParser::new(&table.def(), copy, limit)?;
                *session.copy.lock() = Some(CopyState {
                    table,
                    parser: Some(parser),
                    routed: Default::default(),
                    spilled: None,
                    may_spill,
                    error: None,
                    watch: session.cancel.watch(),
                    _running: self.connections.running().ok(),
                });
                Ok(Outcome::CopyIn { binary, columns })
            }
            Statement::Insert {
                table,
                columns,
                values: Some(rows),
                on_conflict_do_nothing,
                on_conflict_update,
                returning,
                ..
            } if rows
                .iter()
                .flatten()
                .all(|v| matches!(v, InsertValue::Literal(_))) =>
            {
                let log = self
                    .store
                    .table(&table)
                    .ok_or_else(|| SluiceError::UndefinedTable(table.clone()))?;
                log.check_statement_writes()?;
                self.roles.check(
                    &session.role(),
                    ObjectKind::Table,
                    &table,
                    sluice_sql::Privilege::Insert,
                )?;
                check_on_conflict(
                    &log.def(),
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                let columns = match columns.is_empty() {
                    true => {
                        implicit_insert_columns(&log.def(), rows.first().map_or(0, |r| r.len()))
                    }
                    false => columns,
                };
                let mut stager = RowStager::new(&log.def(), &columns, false)?
                    .with_limit(log.max_statement_bytes());
                for (i, row) in rows.iter().enumerate() {
                    let fields: Vec<Option<&str>> = row
                        .iter()
                        .map(|v| match v {
                            InsertValue::Literal(text) => text.as_deref(),
                            InsertValue::Param(_) => None,
                        })
                        .collect();
                    stager.push_row(&fields, i as u64 + 1)?;
                }
                let batches = stager.finish()?;
                let returning = self
                    .plan_returning(session, &table, returning.as_deref())
                    .await?;
                self.insert_rows(
                    session,
                    &log,
                    batches,
                    on_conflict_do_nothing,
                    returning.as_ref(),
                )
                .await
            }
            Statement::Insert {
                table,
                statement,
                on_conflict_do_nothing,
                on_conflict_update,
                returning,
                ..
            } => {
                let statement = self.planner.insert_with_columns(
                    &table,
                    *statement,
                    on_conflict_do_nothing,
                    on_conflict_update.as_ref(),
                )?;
                let plan = self.planner.plan(statement, &session.role()).await?;
                match self
                    .plan_returning(session, &table, returning.as_deref())
                    .await?
                {
                    Some(returning) => self.run_insert_returning(session, plan, &returning).await,
                    None => self.run_plan(session, plan, None, true).await,
                }
            }
            Statement::Update {
                table,
                assignments,
                selection,
            } => {
                self.check_change(session, &table, sluice_sql::Privilege::Update)?;
                self.update(session, &table, &assignments, selection.as_deref())
                    .await
            }
            Statement::Delete { table, selection } => {
                // An append-only table's rows go only by erasure (which
                // also says what a name that is no table is).
                if self
                    .store
                    .table(&table)
                    .is_none_or(|t| t.def().is_append_only())
                    && self.store.name_exists(&table)
                {
                    return self
                        .erase(session, Some(table), selection, None, "DELETE")
                        .await;
                }
                self.check_change(session, &table, sluice_sql::Privilege::Delete)?;
                self.delete(session, &table, selection.as_deref()).await
            }
            other => Err(misrouted("dml", &other)),
        }
    }

    /// A prepared INSERT's rows, from the bound values, appended (or
    /// staged in the open block).
    pub(crate) async fn run_insert(
        &self,
        session: &Session,
        insert: &PreparedInsert,
        params: &[BoundParam<'_>],
        returning: Option<&super::returning::Returning>,
    ) -> Result<Outcome, SluiceError> {
        let log = self
            .store
            .table(&insert.table)
            .ok_or_else(|| SluiceError::UndefinedTable(insert.table.clone()))?;
        let batches = insert.stage(&log.def(), params, log.max_statement_bytes())?;
        self.insert_rows(
            session,
            &log,
            batches,
            insert.on_conflict_do_nothing,
            returning,
        )
        .await
    }

    /// `UPDATE t SET ... [WHERE ...]` on a keyed table: the matching latest
    /// rows with the new values, appended as new versions in one statement.
    pub(crate) async fn update(
        &self,
        session: &Session,
        table: &str,
        assignments: &[(String, String)],
        selection: Option<&str>,
    ) -> Result<Outcome, SluiceError> {
        let sql = update_query(&self.store, table, assignments, selection)?;
        let plan = self.plan_query(&sql, &session.role()).await?;
        self.change_rows(
            session,
            &RowChange::Update {
                table: table.to_string(),
            },
            plan,
        )
        .await
    }

    /// `DELETE FROM t [WHERE ...]` on a keyed table: a tombstone for the key
    /// of each matching latest row, appended in one statement.
    pub(crate) async fn delete(
        &self,
        session: &Session,
        table: &str,
        selection: Option<&str>,
    ) -> Result<Outcome, SluiceError> {
        let sql = delete_query(&self.store, table, selection)?;
        let plan = self.plan_query(&sql, &session.role()).await?;
        self.change_rows(
            session,
            &RowChange::Delete {
                table: table.to_string(),
            },
            plan,
        )
        .await
    }

    /// Runs an UPDATE's or DELETE's query and writes what it found: new
    /// versions, or tombstones of the keys.
    pub(crate) async fn change_rows(
        &self,
        session: &Session,
        change: &RowChange,
        plan: LogicalPlan,
    ) -> Result<Outcome, SluiceError> {
        let found = self.collect_plan(session, plan).await?;
        match change {
            RowChange::Update { table } => {
                let log = keyed_table(&self.store, table, "UPDATE")?;
                let def = log.def();
                let mut row = 1;
                let mut batches = Vec::new();
                let mut tombstones = Vec::new();
                for b in found.iter().filter(|b| b.num_rows() > 0) {
                    if def.options.keyed_by_row {
                        tombstones.push(crate::log::keyed::row_tombstones(
                            &def,
                            &old_rows(&def, b)?,
                        )?);
                    }
                    batches.push(conform_batch(&def, b, row)?);
                    row += b.num_rows() as u64;
                }
                let updated = row - 1;
                // One statement: the old rows' tombstones, then the new rows.
                tombstones.extend(batches);
                let n = self.write(session, &log, tombstones, false).await?;
                let n = match def.options.keyed_by_row {
                    true => updated,
                    false => n,
                };
                Ok(Outcome::Done {
                    tag: "UPDATE",
                    rows: Some(n),
                })
            }
            RowChange::Erase { table, .. } => Err(SluiceError::Internal(format!(
                "a DELETE of append-only table \"{table}\" runs as an erasure"
            ))),
            RowChange::Delete { table } => {
                let log = keyed_table(&self.store, table, "DELETE")?;
                let tombstones = tombstones_of(&log.def(), &found)?;
                let n = self.write(session, &log, tombstones, false).await?;
                Ok(Outcome::Done {
                    tag: "DELETE",
                    rows: Some(n),
                })
            }
        }
    }

    /// UPDATE or DELETE on `table` (an existing table).
    pub(crate) fn check_change(
        &self,
        session: &Session,
        table: &str,
        privilege: sluice_sql::Privilege,
    ) -> Result<(), SluiceError> {
        if let Some(t) = self.store.table(table) {
            t.check_statement_writes()?;
            self.roles
                .check(&session.role(), ObjectKind::Table, table, privilege)?;
        }
        Ok(())
    }

    /// Rows a statement writes: appended now, or staged in the open
    /// transaction block until COMMIT.
    pub(crate) async fn write(
        &self,
        session: &Session,
        log: &Arc<TableLog>,
        batches: Vec<RecordBatch>,
        on_conflict_do_nothing: bool,
    ) -> Result<u64, SluiceError> {
        // The last look before the rows are committed.
        session.cancel.watch().check()?;
        let staging = session.transaction.lock().staging();
        Ok(match staging {
            None => log.append_keyed(batches, on_conflict_do_nothing).await?,
            Some(staged) => stage_statement(&staged, log, batches, on_conflict_do_nothing).await?,
        })
    }
}

/// A DELETE's found rows (see `delete_query`) as the tombstones that
/// delete them.
pub(crate) fn tombstones_of(
    def: &sluice_catalog::TableDef,
    found: &[RecordBatch],
) -> Result<Vec<RecordBatch>, SluiceError> {
    Ok(found
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| match def.options.keyed_by_row {
            true => crate::log::keyed::row_tombstones(def, b),
            false => crate::log::keyed::tombstones(def, b),
        })
        .collect::<Result<_, _>>()?)
}

/// An UPDATE's found rows of a table keyed by row, as the old rows: their
/// old values under the columns' names, with `_partition` and `_offset`.
fn old_rows(
    def: &sluice_catalog::TableDef,
    found: &RecordBatch,
) -> Result<RecordBatch, SluiceError> {
    let mut fields = Vec::with_capacity(def.columns.len() + 2);
    let mut columns = Vec::with_capacity(def.columns.len() + 2);
    let names = def
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| (super::planner::old_value_name(i), c.name.clone()))
        .chain(
            sluice_catalog::HIDDEN_COLUMNS[..2]
                .iter()
                .map(|h| (h.to_string(), h.to_string())),
        );
    for (found_as, name) in names {
        let i = found.schema().index_of(&found_as).map_err(|_| {
            SluiceError::Internal(format!("an UPDATE's rows have no column \"{found_as}\""))
        })?;
        let field = found.schema().field(i).clone().with_name(name);
        fields.push(field);
        columns.push(found.column(i).clone());
    }
    Ok(RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(fields)),
        columns,
    )?)
}

/// `ON CONFLICT ... DO UPDATE SET ...` is what an INSERT into a keyed
/// table does anyway (the row with the same key is replaced) when its
/// target is the primary key and it sets every other column from
/// `EXCLUDED`, as ORMs' upserts write it; anything else would keep parts
/// of the old row, which a keyed table's INSERT does not.
pub(crate) fn check_conflict_update(
    def: &sluice_catalog::TableDef,
    update: Option<&sluice_sql::ConflictUpdate>,
) -> Result<(), SluiceError> {
    let Some(update) = update else {
        return Ok(());
    };
    let key = &def.options.primary_key;
    let refuse = |why: String| {
        SluiceError::Unsupported(format!(
            "ON CONFLICT DO UPDATE on \"{}\" {why}: an INSERT into a keyed table replaces the whole row with the same key, so DO UPDATE is taken only as ON CONFLICT ({}) DO UPDATE SET every other column = EXCLUDED.column, with no WHERE",
            def.name,
            key.join(", ")
        ))
    };
    let target_is_key = match &update.constraint {
        Some(name) => *name == format!("{}_pkey", def.name),
        None => {
            let mut named = update.columns.clone();
            named.sort();
            named.dedup();
            let mut primary = key.clone();
            primary.sort();
            named == primary && update.columns.len() == key.len()
        }
    };
    if !target_is_key {
        return Err(refuse(
            "needs the primary key as its conflict target".into(),
        ));
    }
    if update.filtered {
        return Err(refuse("has a WHERE clause".into()));
    }
    for (column, source) in &update.sets {
        if def.column_index(column).is_none() {
            return Err(crate::ingest::IngestError::UndefinedColumn(column.clone()).into());
        }
        if source.as_deref() != Some(column.as_str()) {
            return Err(refuse(format!(
                "sets \"{column}\" to something other than EXCLUDED.{column}"
            )));
        }
    }
    for c in &def.columns {
        if !key.contains(&c.name) && !update.sets.iter().any(|(s, _)| *s == c.name) {
            return Err(refuse(format!("does not set \"{}\"", c.name)));
        }
    }
    Ok(())
}

/// An INSERT's ON CONFLICT clause: DO NOTHING and DO UPDATE need a key to
/// conflict on, and DO UPDATE must mean the upsert a keyed table's INSERT
/// is ([`check_conflict_update`]).
pub(crate) fn check_on_conflict(
    def: &sluice_catalog::TableDef,
    do_nothing: bool,
    update: Option<&sluice_sql::ConflictUpdate>,
) -> Result<(), SluiceError> {
    if (do_nothing || update.is_some()) && !def.has_primary_key() {
        return Err(SluiceError::Unsupported(format!(
            "ON CONFLICT needs a table with a PRIMARY KEY to conflict on; \"{}\" has none",
            def.name
        )));
    }
    check_conflict_update(def, update)
}

/// Runs an `INSERT ... SELECT` plan. A cancel stops it while the SELECT
/// computes; the rows are appended when the plan's sink has them all.
pub(crate) async fn insert_count(
    plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    task: datafusion::execution::TaskContext,
    watch: StatementWatch,
) -> Result<Outcome, SluiceError> {
    // The sink looks at the statement's watch (see `LogSink`).
    let mut config = task.session_config().clone();
    config.set_extension(Arc::new(watch));
    let task = Arc::new(task.with_session_config(config));
    let batches = QueryExecutor::get().collect(plan, task).await?;
    let rows = batches
        .first()
        .and_then(|b| b.column_by_name("count"))
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>().map(|a| a.value(0)))
        .unwrap_or(0);
    Ok(Outcome::Done {
        tag: "INSERT",
        rows: Some(rows),
    })
}
