//! Privileges: who owns each table, view and subscription, what others
//! were granted on it, and the checks statements make. A superuser passes
//! every check; an object's owner holds every privilege on it; an object
//! made before roles existed is owned by the bootstrap superuser.

use sluice_catalog::{Acl, AclKind};
use sluice_sql::{GrantObjects, GrantStatement, Privilege, PUBLIC};

use super::error::AuthError;
use super::roles::{RoleStore, SessionRole, BOOTSTRAP_SUPERUSER};
use sluice_catalog::CatalogError;

/// An object as a denial names it: `table t`, `materialized view v`,
/// `subscription s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Table,
    View,
    Subscription,
}

impl ObjectKind {
    pub fn word(self) -> &'static str {
        match self {
            ObjectKind::Table => "table",
            ObjectKind::View => "materialized view",
            ObjectKind::Subscription => "subscription",
        }
    }

    fn acl_kind(self) -> AclKind {
        match self {
            ObjectKind::Subscription => AclKind::Subscription,
            _ => AclKind::Relation,
        }
    }

    /// The privileges `ALL` stands for on this kind of object.
    fn all(self) -> &'static [Privilege] {
        match self {
            ObjectKind::Subscription => &[Privilege::Usage],
            _ => &[
                Privilege::Select,
                Privilege::Insert,
                Privilege::Update,
                Privilege::Delete,
            ],
        }
    }
}

impl RoleStore {
    fn acl(&self, kind: ObjectKind, name: &str) -> Option<Acl> {
        self.read_catalog(|c| c.acl(kind.acl_kind(), name).cloned())
    }

    /// Whether `who` may use `privilege` on the object.
    pub fn may(
        &self,
        who: &SessionRole,
        kind: ObjectKind,
        name: &str,
        privilege: Privilege,
    ) -> bool {
        if self.is_superuser(who) {
            return true;
        }
        let Some(acl) = self.acl(kind, name) else {
            return who.name == BOOTSTRAP_SUPERUSER;
        };
        acl.owner == who.name
            || [who.name.as_str(), PUBLIC].iter().any(|g| {
                acl.grants
                    .get(*g)
                    .is_some_and(|ps| ps.contains(privilege.name()))
            })
    }

    /// Whether `who` may see the object in `sluice_catalog`: it owns it,
    /// or holds some privilege on it (or is a superuser).
    pub fn may_see(&self, who: &SessionRole, kind: ObjectKind, name: &str) -> bool {
        kind.all().iter().any(|p| self.may(who, kind, name, *p))
    }

    /// 42501 `permission denied for table t` unless `who` may.
    pub fn check(
        &self,
        who: &SessionRole,
        kind: ObjectKind,
        name: &str,
        privilege: Privilege,
    ) -> Result<(), AuthError> {
        if self.may(who, kind, name, privilege) {
            return Ok(());
        }
        Err(AuthError::PermissionDenied(format!(
            "permission denied for {} {name}",
            kind.word()
        )))
    }

    /// 42501 `must be owner of table t` unless `who` owns the object (or
    /// is a superuser).
    pub fn check_owner(
        &self,
        who: &SessionRole,
        kind: ObjectKind,
        name: &str,
    ) -> Result<(), AuthError> {
        if self.is_superuser(who) {
            return Ok(());
        }
        let owner = self
            .acl(kind, name)
            .map(|a| a.owner)
            .unwrap_or_else(|| BOOTSTRAP_SUPERUSER.into());
        if owner == who.name {
            return Ok(());
        }
        Err(AuthError::PermissionDenied(format!(
            "must be owner of {} {name}",
            kind.word()
        )))
    }

    /// 42501 with `message` unless `who` is a superuser.
    pub fn check_superuser(&self, who: &SessionRole, message: &str) -> Result<(), AuthError> {
        if self.is_superuser(who) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied(message.into()))
        }
    }

    /// `who` made the objects: it owns them, and nothing is granted on
    /// them yet (whatever an older object of the same name had).
    pub fn created(
        &self,
        who: &SessionRole,
        kind: ObjectKind,
        names: &[String],
    ) -> Result<(), AuthError> {
        let changes = names
            .iter()
            .map(|n| {
                let acl = Acl {
                    owner: who.name.clone(),
                    grants: Default::default(),
                };
                (kind.acl_kind(), n.clone(), Some(acl))
            })
            .collect();
        self.write_catalog(|c| c.set_acls(changes))?;
        Ok(())
    }

    /// The objects are gone: so are their owners and grants.
    pub fn dropped(&self, kind: ObjectKind, names: &[String]) -> Result<(), AuthError> {
        let changes = names
            .iter()
            .map(|n| (kind.acl_kind(), n.clone(), None))
            .collect();
        self.write_catalog(|c| c.set_acls(changes))?;
        Ok(())
    }

    /// The object is now named `to`: its owner and grants go with it.
    pub fn renamed(&self, kind: ObjectKind, from: &str, to: &str) -> Result<(), AuthError> {
        let acl = self.acl(kind, from);
        let changes = vec![
            (kind.acl_kind(), from.to_string(), None),
            (kind.acl_kind(), to.to_string(), acl),
        ];
        self.write_catalog(|c| c.set_acls(changes))?;
        Ok(())
    }

    /// `GRANT` or `REVOKE`, as `who`, on `objects` (each with its kind,
    /// found by the caller): all of it or nothing.
    pub fn grant(
        &self,
        who: &SessionRole,
        stmt: &GrantStatement,
        objects: &[(ObjectKind, String)],
    ) -> Result<(), AuthError> {
        for grantee in &stmt.grantees {
            if grantee != PUBLIC && self.role(grantee).is_none() {
                return Err(CatalogError::UndefinedRole(grantee.clone()).into());
            }
        }
        let mut changes = vec![];
        for (kind, name) in objects {
            self.check_owner(who, *kind, name)?;
            let mut acl = self.acl(*kind, name).unwrap_or_else(|| Acl {
                owner: BOOTSTRAP_SUPERUSER.into(),
                grants: Default::default(),
            });
            let privileges: Vec<Privilege> = if stmt.all {
                kind.all().to_vec()
            } else {
                stmt.privileges.clone()
            };
            for grantee in &stmt.grantees {
                let held = acl.grants.entry(grantee.clone()).or_default();
                for p in &privileges {
                    if stmt.grant {
                        held.insert(p.name().to_string());
                    } else {
                        held.remove(p.name());
                    }
                }
                if held.is_empty() {
                    acl.grants.remove(grantee);
                }
            }
            changes.push((kind.acl_kind(), name.clone(), Some(acl)));
        }
        self.write_catalog(|c| c.set_acls(changes))?;
        Ok(())
    }

    /// The objects `name` owns (a role that owns any cannot be dropped).
    pub fn owned_by(&self, name: &str) -> Vec<String> {
        self.read_catalog(|c| {
            c.objects_of(name)
                .into_iter()
                .filter(|(_, _, owns)| *owns)
                .map(|(_, n, _)| n)
                .collect()
        })
    }
}

/// Which objects a `GRANT` names, by kind.
pub fn grant_targets(
    objects: &GrantObjects,
    relation_kind: impl Fn(&str) -> Option<ObjectKind>,
    all_relations: impl Fn() -> Vec<(ObjectKind, String)>,
    subscription_exists: impl Fn(&str) -> bool,
) -> Result<Vec<(ObjectKind, String)>, AuthError> {
    match objects {
        GrantObjects::AllInPublic => Ok(all_relations()),
        GrantObjects::Relations(names) => names
            .iter()
            .map(|n| {
                relation_kind(n).map(|k| (k, n.clone())).ok_or_else(|| {
                    AuthError::UndefinedObject(format!("relation \"{n}\" does not exist"), "42P01")
                })
            })
            .collect(),
        GrantObjects::Subscriptions(names) => names
            .iter()
            .map(|n| {
                if subscription_exists(n) {
                    Ok((ObjectKind::Subscription, n.clone()))
                } else {
                    Err(AuthError::UndefinedObject(
                        format!("subscription \"{n}\" does not exist"),
                        "42704",
                    ))
                }
            })
            .collect(),
    }
}
