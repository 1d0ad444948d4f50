//! Tables and their DDL: `CREATE TABLE` (a log table, or one a Kafka
//! source feeds), `DROP TABLE`, and `VACUUM` (erasure that finishes).

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn table_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateTable(ct) => {
                let name = ct.table.name.clone();
                let existed = self.store.table(&name).is_some();
                if ct.table.options.source.is_some() {
                    if self
                        .sources
                        .create_table(ct.table, ct.if_not_exists)
                        .await?
                    {
                        let dead = crate::source::dead_letter_table_name(&name);
                        self.roles
                            .created(&session.role(), ObjectKind::Table, &[name, dead])?;
                    }
                    return Ok(Outcome::done("CREATE TABLE"));
                }
                self.store.create_table(ct.table, ct.if_not_exists)?;
                if !existed {
                    self.roles
                        .created(&session.role(), ObjectKind::Table, &[name])?;
                }
                Ok(Outcome::done("CREATE TABLE"))
            }
            Statement::DropTable { names, if_exists } => {
                for name in &names {
                    if self.store.table(name).is_none() {
                        if self.views.view(name).is_some() {
                            return Err(SluiceError::WrongObjectType(name.clone(), "table"));
                        }
                        if if_exists {
                            continue;
                        }
                        return Err(SluiceError::UndefinedTable(name.clone()));
                    }
                    self.roles
                        .check_owner(&session.role(), ObjectKind::Table, name)?;
                    self.check_dependents("table", name)?;
                    if let Some(table) = self.store.table(name) {
                        if let Some(of) = &table.def().options.dead_letters_of {
                            if self.store.table(of).is_some() && !names.contains(of) {
                                return Err(SluiceError::ObjectInUse(format!(
                                    "table \"{name}\" holds the dead letters of table \"{of}\": DROP TABLE {of} drops both"
                                )));
                            }
                        }
                        if table.def().options.source.is_some() {
                            self.check_dependents(
                                "table",
                                &crate::source::dead_letter_table_name(name),
                            )?;
                        }
                    }
                }
                for name in &names {
                    let Some(table) = self.store.table(name) else {
                        continue;
                    };
                    let mut dropped = vec![name.clone()];
                    if table.def().options.source.is_some() {
                        self.sources.stop(name).await;
                        dropped.push(crate::source::dead_letter_table_name(name));
                    }
                    for name in dropped {
                        if self.store.table(&name).is_some() {
                            self.store.drop_table(&name)?;
                            self.roles
                                .dropped(ObjectKind::Table, std::slice::from_ref(&name))?;
                        }
                    }
                }
                Ok(Outcome::done("DROP TABLE"))
            }
            Statement::Compact { table } => {
                let log = keyed_table(&self.store, &table, "VACUUM")?;
                self.roles
                    .check_owner(&session.role(), ObjectKind::Table, &table)?;
                // Erasure that finishes: the active segment closes, so
                // that every record committed so far is in a closed
                // segment; the views reading the table apply the deletes
                // and keep that state as their only checkpoint, which also
                // lets compaction reach every record; closed segments go to
                // the object store, where compaction rewrites them.
                vacuum(&self.store, &self.objects, &self.views, &log).await?;
                Ok(Outcome::done("VACUUM"))
            }
            Statement::ShowTables => Err(SluiceError::Unsupported("SHOW TABLES".into())),
            other => Err(misrouted("tables", &other)),
        }
    }
}

/// `VACUUM` of a keyed table (see `Statement::Compact`).
pub(super) async fn vacuum(
    store: &Arc<LogStore>,
    objects: &Arc<DurableStore>,
    views: &Arc<ViewManager>,
    log: &Arc<TableLog>,
) -> Result<crate::log::CompactionReport, SluiceError> {
    let table = log.def().name.clone();
    log.close_active_segments().await?;
    views.erase_from(&table).await?;
    crate::log::tier_table(log, objects, &store.cut_pins(log)).await?;
    let horizon =
        crate::log::below_snapshots(views.compaction_horizon(), store.transactions().clone())(log);
    let report = crate::log::compact_table(log, objects, &horizon).await?;
    tracing::info!(table = %table, ?report, "compacted on request");
    Ok(report)
}
