//! What a role statement or a privilege check refuses, and what stops a
//! login, each with its SQLSTATE.

use sluice_catalog::CatalogError;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// 42501, worded as PostgreSQL words it ("permission denied to create
    /// role").
    #[error("{0}")]
    PermissionDenied(String),
    /// 55006: the role is in use (the current user, the bootstrap
    /// superuser).
    #[error("{0}")]
    ObjectInUse(String),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// A role that owns objects cannot be dropped (2BP01).
    #[error("{0}")]
    DependentObjects(String),
    /// An object a GRANT names does not exist (its SQLSTATE with it).
    #[error("{0}")]
    UndefinedObject(String, &'static str),
    /// The server's own settings cannot be used (a certificate that does not
    /// load, trust on a public address).
    #[error("{0}")]
    Config(String),
}

crate::layer_error!(AuthError);

impl AuthError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            AuthError::PermissionDenied(_) => "42501",
            AuthError::ObjectInUse(_) => "55006",
            AuthError::DependentObjects(_) => "2BP01",
            AuthError::UndefinedObject(_, code) => code,
            AuthError::Catalog(CatalogError::DuplicateRole(_)) => "42710",
            AuthError::Catalog(CatalogError::UndefinedRole(_)) => "42704",
            AuthError::Catalog(CatalogError::Corrupt { .. }) => "XX001",
            AuthError::Catalog(_) => "58030",
            AuthError::Config(_) => "F0000",
        }
    }
}
