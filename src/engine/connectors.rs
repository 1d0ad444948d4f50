//! Sinks: `CREATE SINK` and `DROP SINK` (sources are tables: see
//! `tables`).

use super::*;

impl Engine {
    /// Runs a statement of this family (see the module header).
    pub(super) async fn sink_statement(
        &self,
        session: &Session,
        stmt: Statement,
    ) -> Result<Outcome, SluiceError> {
        match stmt {
            Statement::CreateSink(c) => {
                let role = session.role();
                if let Some(kind) = self.relation_kind(&c.source) {
                    self.roles
                        .check(&role, kind, &c.source, sluice_sql::Privilege::Select)?;
                }
                if self.sinks.create(&c).await? {
                    self.roles.created(
                        &role,
                        ObjectKind::Subscription,
                        std::slice::from_ref(&c.name),
                    )?;
                }
                Ok(Outcome::done("CREATE SINK"))
            }
            Statement::DropSink { names, if_exists } => {
                for name in &names {
                    if self.subs.exists(name) {
                        self.roles
                            .check_owner(&session.role(), ObjectKind::Subscription, name)?;
                    }
                }
                self.sinks.drop_sinks(&names, if_exists).await?;
                self.roles.dropped(ObjectKind::Subscription, &names)?;
                Ok(Outcome::done("DROP SINK"))
            }
            other => Err(misrouted("connectors", &other)),
        }
    }
}
