//! Roles: who may log in, with which secret, and with which attributes.
//!
//! Kept apart from the catalog document in `roles.json`, which only the
//! server's user may read (mode 0600), since it holds each role's SCRAM
//! secret. Written as the catalog is: atomically, with a CRC32C header, so
//! a torn write is detected rather than half-read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::{checked_body, with_checksum, write_atomically_with_mode, CatalogError};

/// What SCRAM-SHA-256 needs to check a password: the salt, the iteration
/// count and `Hi(password, salt, iterations)` (RFC 5802's SaltedPassword),
/// both base64. The password itself is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: String,
    pub salted_password: String,
}

/// One role, with the attributes `CREATE ROLE` sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleDef {
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    pub create_role: bool,
    /// None: the role has no password and cannot log in by password.
    pub secret: Option<ScramSecret>,
}

/// Who owns an object and what others were granted on it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acl {
    pub owner: String,
    /// Grantee (a role, or `public`) to the privileges it holds, by name
    /// (`SELECT`, `INSERT`, `UPDATE`, `DELETE`, `USAGE`).
    pub grants: BTreeMap<String, BTreeSet<String>>,
}

/// The two namespaces objects are granted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclKind {
    /// Tables and views (one namespace).
    Relation,
    Subscription,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct RolesDocument {
    roles: Vec<RoleDef>,
    #[serde(default)]
    relations: BTreeMap<String, Acl>,
    #[serde(default)]
    subscriptions: BTreeMap<String, Acl>,
    /// A random key (hex) from which an unknown user's made-up salt is
    /// derived, the same across restarts, so that a login attempt cannot
    /// tell an unknown role from a wrong password.
    mock_key: String,
}

/// The durable set of roles. Every change is on disk before it returns.
#[derive(Debug)]
pub struct RoleCatalog {
    path: PathBuf,
    doc: RolesDocument,
}

const FILE_NAME: &str = "roles.json";

impl RoleCatalog {
    /// Opens the roles kept in `dir`, or creates the file with no roles and
    /// `mock_key` (hex) as its mock-authentication key.
    pub fn open(
        dir: &Path,
        mock_key: impl FnOnce() -> String,
    ) -> Result<RoleCatalog, CatalogError> {
        fs::create_dir_all(dir).map_err(|source| CatalogError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(FILE_NAME);
        match fs::read(&path) {
            Ok(bytes) => {
                let body = checked_body(&bytes).map_err(|reason| CatalogError::Corrupt {
                    path: path.clone(),
                    reason: reason.into(),
                })?;
                let doc = serde_json::from_slice(body).map_err(|e| CatalogError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                Ok(RoleCatalog { path, doc })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let roles = RoleCatalog {
                    path,
                    doc: RolesDocument {
                        mock_key: mock_key(),
                        ..RolesDocument::default()
                    },
                };
                roles.persist(&roles.doc)?;
                Ok(roles)
            }
            Err(source) => Err(CatalogError::Io { path, source }),
        }
    }

    pub fn roles(&self) -> &[RoleDef] {
        &self.doc.roles
    }

    pub fn role(&self, name: &str) -> Option<&RoleDef> {
        self.doc.roles.iter().find(|r| r.name == name)
    }

    fn acls(doc: &RolesDocument, kind: AclKind) -> &BTreeMap<String, Acl> {
        match kind {
            AclKind::Relation => &doc.relations,
            AclKind::Subscription => &doc.subscriptions,
        }
    }

    /// The owner and grants of an object; None for one made before roles
    /// existed (owned by the bootstrap superuser, granted to no one).
    pub fn acl(&self, kind: AclKind, name: &str) -> Option<&Acl> {
        Self::acls(&self.doc, kind).get(name)
    }

    /// Every object `role` owns or holds a grant on.
    pub fn objects_of(&self, role: &str) -> Vec<(AclKind, String, bool)> {
        let mut out = vec![];
        for kind in [AclKind::Relation, AclKind::Subscription] {
            for (name, acl) in Self::acls(&self.doc, kind) {
                if acl.owner == role {
                    out.push((kind, name.clone(), true));
                } else if acl.grants.contains_key(role) {
                    out.push((kind, name.clone(), false));
                }
            }
        }
        out
    }

    /// Sets (or, with None, forgets) the ACLs of several objects at once.
    pub fn set_acls(
        &mut self,
        changes: Vec<(AclKind, String, Option<Acl>)>,
    ) -> Result<(), CatalogError> {
        let mut doc = self.doc.clone();
        for (kind, name, acl) in changes {
            let map = match kind {
                AclKind::Relation => &mut doc.relations,
                AclKind::Subscription => &mut doc.subscriptions,
            };
            match acl {
                Some(acl) => {
                    map.insert(name, acl);
                }
                None => {
                    map.remove(&name);
                }
            }
        }
        self.commit(doc)
    }

    pub fn mock_key(&self) -> &str {
        &self.doc.mock_key
    }

    pub fn create(&mut self, role: RoleDef) -> Result<(), CatalogError> {
        if self.role(&role.name).is_some() {
            return Err(CatalogError::DuplicateRole(role.name));
        }
        let mut doc = self.doc.clone();
        doc.roles.push(role);
        self.commit(doc)
    }

    /// Replaces the role named `role.name`.
    pub fn replace(&mut self, role: RoleDef) -> Result<(), CatalogError> {
        let mut doc = self.doc.clone();
        let slot = doc
            .roles
            .iter_mut()
            .find(|r| r.name == role.name)
            .ok_or_else(|| CatalogError::UndefinedRole(role.name.clone()))?;
        *slot = role;
        self.commit(doc)
    }

    /// Drops every role in `names` or none of them, with the grants they
    /// hold.
    pub fn drop_roles(&mut self, names: &[String]) -> Result<(), CatalogError> {
        let mut doc = self.doc.clone();
        for acl in doc
            .relations
            .values_mut()
            .chain(doc.subscriptions.values_mut())
        {
            for name in names {
                acl.grants.remove(name);
            }
        }
        for name in names {
            let pos = doc
                .roles
                .iter()
                .position(|r| &r.name == name)
                .ok_or_else(|| CatalogError::UndefinedRole(name.clone()))?;
            doc.roles.remove(pos);
        }
        self.commit(doc)
    }

    fn commit(&mut self, doc: RolesDocument) -> Result<(), CatalogError> {
        self.persist(&doc)?;
        self.doc = doc;
        Ok(())
    }

    fn persist(&self, doc: &RolesDocument) -> Result<(), CatalogError> {
        let body = serde_json::to_vec_pretty(doc).map_err(|e| CatalogError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        write_atomically_with_mode(&self.path, &with_checksum(&body), 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn role(name: &str) -> RoleDef {
        RoleDef {
            name: name.into(),
            superuser: false,
            login: true,
            create_role: false,
            secret: Some(ScramSecret {
                iterations: 4096,
                salt: "c2FsdA==".into(),
                salted_password: "cHc=".into(),
            }),
        }
    }

    #[test]
    fn roles_survive_reopening_in_a_file_only_the_owner_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut roles = RoleCatalog::open(dir.path(), || "00ff".into()).unwrap();
        roles.create(role("alice")).unwrap();
        roles.create(role("bob")).unwrap();
        assert!(matches!(
            roles.create(role("alice")),
            Err(CatalogError::DuplicateRole(_))
        ));
        let mut changed = role("bob");
        changed.superuser = true;
        roles.replace(changed.clone()).unwrap();
        roles.drop_roles(&["alice".into()]).unwrap();
        assert!(matches!(
            roles.drop_roles(&["bob".into(), "nobody".into()]),
            Err(CatalogError::UndefinedRole(_))
        ));

        let reopened = RoleCatalog::open(dir.path(), || "other".into()).unwrap();
        assert_eq!(reopened.roles(), &[changed]);
        assert_eq!(reopened.mock_key(), "00ff");
        let mode = fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_torn_roles_file_is_reported_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut roles = RoleCatalog::open(dir.path(), || "00".into()).unwrap();
        roles.create(role("alice")).unwrap();
        let path = dir.path().join(FILE_NAME);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        assert!(matches!(
            RoleCatalog::open(dir.path(), || "00".into()),
            Err(CatalogError::Corrupt { .. })
        ));
    }
}
