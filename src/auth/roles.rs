//! The roles, their SCRAM secrets, and the role statements: who may create,
//! alter and drop which role.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use parking_lot::RwLock;
use pgwire::api::auth::sasl::scram::gen_salted_password;
use ring::rand::{SecureRandom, SystemRandom};
use sluice_catalog::{CatalogError, RoleCatalog, RoleDef, ScramSecret};
use sluice_sql::RoleOptions;
use tracing::info;

use super::error::AuthError;

/// The superuser the first start creates. It cannot be dropped or lose
/// SUPERUSER, so that someone can always administer the server.
pub const BOOTSTRAP_SUPERUSER: &str = "sluice";

/// SCRAM's PBKDF2 iterations for new secrets (PostgreSQL's default).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Who a session is. Rights are read from the role as it is now, so an
/// `ALTER ROLE ... NOSUPERUSER` reaches sessions already open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRole {
    pub name: String,
    /// Logged in under `trust` with a name that is no role: such a session
    /// has a superuser's rights, as every connection did before roles.
    pub trusted_unknown: bool,
}

impl Default for SessionRole {
    fn default() -> SessionRole {
        SessionRole {
            name: BOOTSTRAP_SUPERUSER.into(),
            trusted_unknown: true,
        }
    }
}

/// What a login is checked against: a role's secret, or a made-up one
/// for a name that has none, which no password matches.
pub struct LoginSecret {
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
    pub iterations: u32,
}

/// The roles of the server, shared by every connection.
#[derive(Debug)]
pub struct RoleStore {
    catalog: RwLock<RoleCatalog>,
    /// Logins are trusted: a name that is no role has a superuser's rights.
    trust: std::sync::atomic::AtomicBool,
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    // SystemRandom reads the OS's generator; it fails only where there is
    // none, which leaves zeros, so fall back to the time as a last resort.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8;
        }
    }
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new secret for `password`: a fresh salt, 4096 iterations.
pub fn scram_secret(password: &str) -> ScramSecret {
    let salt = random_bytes(16);
    let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS as usize);
    ScramSecret {
        iterations: SCRAM_ITERATIONS,
        salt: BASE64.encode(&salt),
        salted_password: BASE64.encode(salted),
    }
}

impl RoleStore {
    /// Opens the roles kept in `dir`.
    pub fn open(dir: &std::path::Path) -> Result<RoleStore, AuthError> {
        let catalog = RoleCatalog::open(dir, || hex(&random_bytes(32)))?;
        Ok(RoleStore {
            catalog: RwLock::new(catalog),
            trust: false.into(),
        })
    }

    /// Makes sure the bootstrap superuser exists and, when `password` is
    /// given and it has none yet, gives it that password. Returns whether
    /// it has a password now.
    pub fn bootstrap(&self, password: Option<&str>) -> Result<bool, AuthError> {
        let mut catalog = self.catalog.write();
        let secret = password.filter(|p| !p.is_empty()).map(scram_secret);
        match catalog.role(BOOTSTRAP_SUPERUSER).cloned() {
            None => {
                catalog.create(RoleDef {
                    name: BOOTSTRAP_SUPERUSER.into(),
                    superuser: true,
                    login: true,
                    create_role: true,
                    secret: secret.clone(),
                })?;
                info!(
                    role = BOOTSTRAP_SUPERUSER,
                    "created the bootstrap superuser"
                );
            }
            Some(mut role) if role.secret.is_none() && secret.is_some() => {
                role.secret = secret.clone();
                catalog.replace(role)?;
                info!(
                    role = BOOTSTRAP_SUPERUSER,
                    "set the bootstrap superuser's password"
                );
            }
            Some(_) => {}
        }
        Ok(catalog
            .role(BOOTSTRAP_SUPERUSER)
            .is_some_and(|r| r.secret.is_some()))
    }

    pub(super) fn read_catalog<T>(&self, f: impl FnOnce(&RoleCatalog) -> T) -> T {
        f(&self.catalog.read())
    }

    pub(super) fn write_catalog<T>(
        &self,
        f: impl FnOnce(&mut RoleCatalog) -> Result<T, CatalogError>,
    ) -> Result<T, CatalogError> {
        f(&mut self.catalog.write())
    }

    /// Whether logins are trusted (see [`SessionRole::trusted_unknown`]).
    pub fn set_trust(&self, trust: bool) {
        self.trust
            .store(trust, std::sync::atomic::Ordering::Relaxed);
    }

    /// The session a login as `name` would have.
    pub fn session_of(&self, name: &str) -> SessionRole {
        SessionRole {
            name: name.into(),
            trusted_unknown: self.role(name).is_none()
                && self.trust.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    pub fn role(&self, name: &str) -> Option<RoleDef> {
        self.catalog.read().role(name).cloned()
    }

    pub fn roles(&self) -> Vec<RoleDef> {
        self.catalog.read().roles().to_vec()
    }

    /// Whether `who` has a superuser's rights now.
    pub fn is_superuser(&self, who: &SessionRole) -> bool {
        match self.role(&who.name) {
            Some(role) => role.superuser,
            None => who.trusted_unknown,
        }
    }

    fn may_create_roles(&self, who: &SessionRole) -> bool {
        match self.role(&who.name) {
            Some(role) => role.superuser || role.create_role,
            None => who.trusted_unknown,
        }
    }

    /// What a password login as `user` is checked against. A user that is
    /// no role, or has no password, gets a salt derived from the server's
    /// mock key (the same at every attempt) and a random secret, so the
    /// exchange goes as far, and fails the same way, as a wrong password.
    pub fn login_secret(&self, user: &str) -> LoginSecret {
        let catalog = self.catalog.read();
        if let Some(secret) = catalog.role(user).and_then(|r| r.secret.as_ref()) {
            if let (Ok(salt), Ok(salted_password)) = (
                BASE64.decode(&secret.salt),
                BASE64.decode(&secret.salted_password),
            ) {
                return LoginSecret {
                    salt,
                    salted_password,
                    iterations: secret.iterations,
                };
            }
        }
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, catalog.mock_key().as_bytes());
        let tag = ring::hmac::sign(&key, user.as_bytes());
        LoginSecret {
            salt: tag.as_ref()[..16].to_vec(),
            salted_password: random_bytes(32),
            iterations: SCRAM_ITERATIONS,
        }
    }

    /// `CREATE ROLE`, as `who`.
    pub fn create(&self, who: &SessionRole, name: &str, o: &RoleOptions) -> Result<(), AuthError> {
        if !self.may_create_roles(who) {
            return Err(AuthError::PermissionDenied(
                "permission denied to create role".into(),
            ));
        }
        if o.superuser == Some(true) && !self.is_superuser(who) {
            return Err(AuthError::PermissionDenied(
                "permission denied to create role: only superusers may create roles with SUPERUSER"
                    .into(),
            ));
        }
        if name.starts_with("pg_") {
            return Err(AuthError::PermissionDenied(format!(
                "role name \"{name}\" is reserved: role names starting with \"pg_\" are reserved"
            )));
        }
        self.catalog.write().create(RoleDef {
            name: name.into(),
            superuser: o.superuser.unwrap_or(false),
            login: o.login.unwrap_or(false),
            create_role: o.create_role.unwrap_or(false),
            secret: o
                .password
                .clone()
                .flatten()
                .filter(|p| !p.is_empty())
                .map(|p| scram_secret(&p)),
        })?;
        Ok(())
    }

    /// `ALTER ROLE`, as `who`: superusers alter any role; CREATEROLE
    /// roles alter roles that are not superusers, without granting
    /// SUPERUSER; anyone may change their own password.
    pub fn alter(&self, who: &SessionRole, name: &str, o: &RoleOptions) -> Result<(), AuthError> {
        let mut role = self
            .role(name)
            .ok_or_else(|| CatalogError::UndefinedRole(name.into()))?;
        let only_password = o.superuser.is_none() && o.login.is_none() && o.create_role.is_none();
        let allowed = self.is_superuser(who)
            || (self.may_create_roles(who) && !role.superuser && o.superuser != Some(true))
            || (only_password && who.name == name);
        if !allowed {
            return Err(AuthError::PermissionDenied(format!(
                "permission denied to alter role \"{name}\""
            )));
        }
        if name == BOOTSTRAP_SUPERUSER && (o.superuser == Some(false) || o.login == Some(false)) {
            return Err(AuthError::PermissionDenied(format!(
                "permission denied to alter role \"{name}\": the bootstrap superuser must keep SUPERUSER and LOGIN"
            )));
        }
        if let Some(v) = o.superuser {
            role.superuser = v;
        }
        if let Some(v) = o.login {
            role.login = v;
        }
        if let Some(v) = o.create_role {
            role.create_role = v;
        }
        if let Some(password) = &o.password {
            role.secret = password
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(scram_secret);
        }
        self.catalog.write().replace(role)?;
        Ok(())
    }

    /// `DROP ROLE`, as `who`: all of `names` or none.
    pub fn drop_roles(
        &self,
        who: &SessionRole,
        names: &[String],
        if_exists: bool,
    ) -> Result<(), AuthError> {
        let mut dropped = vec![];
        for name in names {
            let Some(role) = self.role(name) else {
                if if_exists {
                    continue;
                }
                return Err(CatalogError::UndefinedRole(name.clone()).into());
            };
            if name == BOOTSTRAP_SUPERUSER {
                return Err(AuthError::ObjectInUse(format!(
                    "cannot drop role {name} because it is required by the database system"
                )));
            }
            if *name == who.name {
                return Err(AuthError::ObjectInUse(
                    "current user cannot be dropped".into(),
                ));
            }
            let owned = self.owned_by(name);
            if !owned.is_empty() {
                return Err(AuthError::DependentObjects(format!(
                    "role \"{name}\" cannot be dropped because some objects depend on it: it owns {}",
                    owned.join(", ")
                )));
            }
            let allowed = self.is_superuser(who) || (self.may_create_roles(who) && !role.superuser);
            if !allowed {
                return Err(AuthError::PermissionDenied(format!(
                    "permission denied to drop role \"{name}\""
                )));
            }
            dropped.push(name.clone());
        }
        self.catalog.write().drop_roles(&dropped)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(name: &str) -> SessionRole {
        SessionRole {
            name: name.into(),
            trusted_unknown: false,
        }
    }

    fn opts(f: impl FnOnce(&mut RoleOptions)) -> RoleOptions {
        let mut o = RoleOptions::default();
        f(&mut o);
        o
    }

    #[test]
    fn who_may_create_alter_and_drop_roles() {
        let dir = tempfile::tempdir().unwrap();
        let roles = RoleStore::open(dir.path()).unwrap();
        assert!(roles.bootstrap(Some("secret")).unwrap());
        let root = who(BOOTSTRAP_SUPERUSER);
        roles
            .create(&root, "admin", &opts(|o| o.create_role = Some(true)))
            .unwrap();
        roles
            .create(
                &root,
                "alice",
                &opts(|o| {
                    o.login = Some(true);
                    o.password = Some(Some("pw".into()));
                }),
            )
            .unwrap();
        let admin = who("admin");
        let alice = who("alice");
        // CREATEROLE creates plain roles, not superusers.
        roles
            .create(&admin, "bob", &RoleOptions::default())
            .unwrap();
        let e = roles
            .create(&admin, "boss", &opts(|o| o.superuser = Some(true)))
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42501");
        let e = roles
            .create(&alice, "carol", &RoleOptions::default())
            .unwrap_err();
        assert_eq!(e.to_string(), "permission denied to create role");
        // Anyone may change their own password, and nothing else.
        roles
            .alter(
                &alice,
                "alice",
                &opts(|o| o.password = Some(Some("new".into()))),
            )
            .unwrap();
        let e = roles
            .alter(&alice, "alice", &opts(|o| o.superuser = Some(true)))
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42501");
        let e = roles
            .alter(
                &admin,
                BOOTSTRAP_SUPERUSER,
                &opts(|o| o.password = Some(None)),
            )
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42501");
        let e = roles
            .alter(
                &root,
                BOOTSTRAP_SUPERUSER,
                &opts(|o| o.superuser = Some(false)),
            )
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42501");
        // Dropping: all or nothing, never the bootstrap role or oneself.
        let e = roles
            .drop_roles(&root, &["bob".into(), "nobody".into()], false)
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42704");
        assert!(roles.role("bob").is_some());
        roles
            .drop_roles(&root, &["bob".into(), "nobody".into()], true)
            .unwrap();
        assert!(roles.role("bob").is_none());
        let e = roles
            .drop_roles(&root, &[BOOTSTRAP_SUPERUSER.into()], false)
            .unwrap_err();
        assert_eq!(e.sqlstate(), "55006");
        let e = roles
            .drop_roles(&admin, &["admin".into()], false)
            .unwrap_err();
        assert_eq!(e.to_string(), "current user cannot be dropped");
        let e = roles
            .create(&root, "alice", &RoleOptions::default())
            .unwrap_err();
        assert_eq!(e.sqlstate(), "42710");
    }

    #[test]
    fn an_unknown_user_gets_a_stable_made_up_salt() {
        let dir = tempfile::tempdir().unwrap();
        let roles = RoleStore::open(dir.path()).unwrap();
        roles.bootstrap(Some("pw")).unwrap();
        let a = roles.login_secret("nobody");
        let b = roles.login_secret("nobody");
        assert_eq!(a.salt, b.salt);
        assert_ne!(a.salted_password, b.salted_password);
        assert_ne!(roles.login_secret("other").salt, a.salt);
        let real = roles.login_secret(BOOTSTRAP_SUPERUSER);
        assert_eq!(
            real.salted_password,
            gen_salted_password("pw", &real.salt, 4096)
        );
        // The file never holds the password.
        let text = std::fs::read_to_string(dir.path().join("roles.json")).unwrap();
        assert!(!text.contains("\"pw\""));
    }
}
