//! Cuts: `CREATE CUT` (one offset per partition of some tables, taken at
//! one commit, which reads `AS OF CUT` return the rows below) and `DROP
//! CUT`. See `crate::log::cut`.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn cut_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        let role = session.role();
        match stmt {
            Statement::CreateCut { name, tables } => {
                if self.store.cut_def(&name).is_some() {
                    return Err(sluice_catalog::CatalogError::DuplicateCut(name).into());
                }
                let all_tables = tables.is_none();
                let tables = match tables {
                    None => self.store.tables(),
                    Some(names) => names
                        .iter()
                        .map(|n| {
                            self.store.table(n).ok_or_else(|| {
                                if self.views.view(n).is_some() {
                                    SluiceError::WrongObjectType(n.clone(), "table")
                                } else {
                                    SluiceError::UndefinedTable(n.clone())
                                }
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                };
                // A cut keeps rows from retention: it takes the right to
                // read every table it covers.
                if !self.roles.is_superuser(&role) {
                    for t in &tables {
                        self.roles.check(
                            &role,
                            ObjectKind::Table,
                            &t.name(),
                            sluice_sql::Privilege::Select,
                        )?;
                    }
                }
                // Kept before the cut is taken, so that each covers no
                // offset past it; the cut then keeps one per view.
                let early = self.views.keep_latest_checkpoints();
                let cut = match crate::log::cut::take_cut(
                    &self.store,
                    &name,
                    &tables,
                    all_tables,
                    &role.name,
                )
                .await
                {
                    Ok(cut) => cut,
                    Err(e) => {
                        for m in early {
                            self.views.checkpoints().unpin(m.view_id, m.epoch);
                        }
                        return Err(e.into());
                    }
                };
                let kept = self.views.keep_checkpoints_at(&cut, early).await;
                if let Err(e) = self.store.set_cut_view_checkpoints(&name, kept.clone()) {
                    for k in &kept {
                        self.views.checkpoints().unpin(k.view_id, k.epoch);
                    }
                    return Err(e.into());
                }
                Ok(Outcome::done("CREATE CUT"))
            }
            Statement::DropCut { names, if_exists } => {
                // All named cuts are checked before any is dropped.
                let mut found = Vec::new();
                for name in &names {
                    if let Some(d) = self
                        .store
                        .dataset_defs()
                        .into_iter()
                        .find(|d| d.versions.iter().any(|v| &v.cut == name))
                    {
                        return Err(SluiceError::DependentObjects {
                            kind: "cut",
                            name: name.clone(),
                            dependent: format!("dataset {}", d.name),
                        });
                    }
                    match self.store.cut_def(name) {
                        Some(cut) => {
                            self.check_owns(&role, &cut.owner, "cut", name)?;
                            found.push(name.clone());
                        }
                        None if if_exists => {}
                        None => {
                            return Err(
                                sluice_catalog::CatalogError::UndefinedCut(name.clone()).into()
                            )
                        }
                    }
                }
                for name in found {
                    let cut = self.store.drop_cut_def(&name)?;
                    self.views.release_checkpoints(&cut);
                }
                Ok(Outcome::done("DROP CUT"))
            }
            _ => Err(SluiceError::Internal("not a cut statement".into())),
        }
    }

    /// 42501 unless `role` is `owner` (of the cut or dataset `name`) or a
    /// superuser: cuts and datasets are not objects the grants know.
    pub(super) fn check_owns(
        &self,
        role: &SessionRole,
        owner: &str,
        kind: &str,
        name: &str,
    ) -> Result<(), SluiceError> {
        if owner == role.name || self.roles.is_superuser(role) {
            return Ok(());
        }
        Err(
            crate::auth::AuthError::PermissionDenied(format!("must be owner of {kind} {name}"))
                .into(),
        )
    }
}
