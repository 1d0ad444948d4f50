//! `pg_roles` (what psql's `\du` and drivers read) filled from Sluice's
//! roles, through datafusion-pg-catalog's context provider.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use crate::auth::{ObjectKind, RoleStore};

/// The roles as `pg_catalog` asks for them, read when it is queried.
#[derive(Debug, Clone)]
pub struct RoleDirectory(pub Arc<RoleStore>);

#[async_trait]
impl PgCatalogContextProvider for RoleDirectory {
    async fn roles(&self) -> Vec<String> {
        self.0.roles().into_iter().map(|r| r.name).collect()
    }

    async fn role(&self, name: &str) -> Option<Role> {
        self.0.role(name).map(|r| Role {
            name: r.name,
            is_superuser: r.superuser,
            can_login: r.login,
            can_create_db: r.superuser,
            can_create_role: r.superuser || r.create_role,
            can_create_user: r.superuser || r.create_role,
            can_replication: false,
            grants: vec![],
            inherited_roles: vec![],
        })
    }
}

/// `has_table_privilege(user, table, privileges)`: whether the role may
/// use any of the privileges (`'SELECT'`, `'SELECT, INSERT'`) on the table
/// or view, by its grants. The two-argument form (the session's role) is
/// given its user when the statement is bound (`bind_session_user`).
pub fn has_table_privilege(roles: Arc<RoleStore>) -> ScalarUDF {
    create_udf(
        "has_table_privilege",
        vec![DataType::Utf8, DataType::Utf8, DataType::Utf8],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(move |args| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let [users, tables, privileges] = arrays.as_slice() else {
                return Err(datafusion::error::DataFusionError::Plan(
                    "has_table_privilege takes a role, a table and privileges".into(),
                ));
            };
            let (users, tables, privileges) = (
                users.as_string::<i32>(),
                tables.as_string::<i32>(),
                privileges.as_string::<i32>(),
            );
            let out: BooleanArray = (0..users.len())
                .map(|i| {
                    if users.is_null(i) || tables.is_null(i) || privileges.is_null(i) {
                        return None;
                    }
                    let who = roles.session_of(users.value(i));
                    let table = tables.value(i);
                    let table = table
                        .strip_prefix("public.")
                        .unwrap_or(table)
                        .trim_matches('"');
                    Some(privileges.value(i).split(',').any(|p| {
                        let p = p.trim().to_uppercase();
                        let p = p.trim_end_matches(" WITH GRANT OPTION");
                        let privilege = match p {
                            "SELECT" => sluice_sql::Privilege::Select,
                            "INSERT" => sluice_sql::Privilege::Insert,
                            "UPDATE" => sluice_sql::Privilege::Update,
                            "DELETE" => sluice_sql::Privilege::Delete,
                            _ => return false,
                        };
                        roles.may(&who, ObjectKind::Table, table, privilege)
                    }))
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out)))
        }),
    )
}
