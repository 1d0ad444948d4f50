//! Roles and privileges: `CREATE`/`ALTER`/`DROP ROLE`, `GRANT` and
//! `REVOKE`.

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn role_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateRole { name, options } => {
                self.roles.create(&session.role(), &name, &options)?;
                Ok(Outcome::done("CREATE ROLE"))
            }
            Statement::AlterRole { name, options } => {
                self.roles.alter(&session.role(), &name, &options)?;
                Ok(Outcome::done("ALTER ROLE"))
            }
            Statement::DropRole { names, if_exists } => {
                self.roles.drop_roles(&session.role(), &names, if_exists)?;
                Ok(Outcome::done("DROP ROLE"))
            }
            Statement::Grant(g) => {
                let targets = grant_targets(
                    &g.objects,
                    |n| self.relation_kind(n),
                    || {
                        let mut all: Vec<(ObjectKind, String)> = self
                            .store
                            .tables()
                            .iter()
                            .map(|t| (ObjectKind::Table, t.def().name.clone()))
                            .collect();
                        all.extend(
                            self.views
                                .views()
                                .iter()
                                .map(|v| (ObjectKind::View, v.def.name.clone())),
                        );
                        all
                    },
                    |n| self.subs.exists(n),
                )?;
                self.roles.grant(&session.role(), &g, &targets)?;
                Ok(Outcome::done(if g.grant { "GRANT" } else { "REVOKE" }))
            }
            other => Err(misrouted("roles", &other)),
        }
    }
}
