//! Whole catalog queries that drivers send and DataFusion cannot plan,
//! answered by equivalent queries it can.
//!
//! asyncpg looks up every result or parameter type it has no built-in
//! codec for (arrays other than `text[]` and `oid[]`, among others) with
//! one recursive query over `pg_type` (its `typeinfo_tree`). That query's
//! correlated subqueries inside `CASE` do not plan here, and without an
//! answer asyncpg asks again forever. Sluice has no domains, ranges or
//! composite types, so the answer is each asked-for type and the element
//! type of each array among them, elements first, as asyncpg orders it.

use sqlparser::ast::Statement;

const ASYNCPG_TYPE_LOOKUP: &str = "\
SELECT oid, ns, name, kind, basetype, elemtype, elemdelim, range_subtype, attrtypoids, attrnames, depth FROM (
  SELECT t.oid AS oid, ns.nspname AS ns, t.typname AS name, t.typtype AS kind,
    CAST(NULL AS oid) AS basetype, t.typelem AS elemtype, elem_t.typdelim AS elemdelim,
    CAST(NULL AS oid) AS range_subtype, CAST(NULL AS TEXT[]) AS attrtypoids,
    CAST(NULL AS TEXT[]) AS attrnames, 0 AS depth
  FROM pg_catalog.pg_type t
    JOIN pg_catalog.pg_namespace ns ON ns.oid = t.typnamespace
    LEFT JOIN pg_catalog.pg_type elem_t
      ON t.typlen = -1 AND t.typelem != 0 AND t.typelem = elem_t.oid
  WHERE t.oid = ANY($1::oid[])
  UNION ALL
  SELECT e.oid, ns.nspname, e.typname, e.typtype, CAST(NULL AS oid), e.typelem, NULL,
    CAST(NULL AS oid), CAST(NULL AS TEXT[]), CAST(NULL AS TEXT[]), 1
  FROM pg_catalog.pg_type t
    JOIN pg_catalog.pg_type e ON e.oid = t.typelem
    JOIN pg_catalog.pg_namespace ns ON ns.oid = e.typnamespace
  WHERE t.oid = ANY($1::oid[]) AND t.typelem != 0
) ORDER BY depth DESC";

/// The statement that answers `sql` when it is a driver's catalog query
/// Sluice answers differently.
pub fn driver_query(sql: &str) -> Option<Statement> {
    if let Some(rewritten) = psql_role_list(sql) {
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        return sqlparser::parser::Parser::parse_sql(&dialect, &rewritten)
            .ok()?
            .pop();
    }
    if sql.contains("typeinfo_tree") && sql.contains("$1::oid[]") {
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        return sqlparser::parser::Parser::parse_sql(&dialect, ASYNCPG_TYPE_LOOKUP)
            .ok()?
            .pop();
    }
    None
}

/// psql's `\\du` (up to psql 15) lists each role's memberships with an
/// `ARRAY(SELECT ...)` over `pg_auth_members`, which DataFusion cannot
/// plan. Roles here have no members, so the list is empty.
fn psql_role_list(sql: &str) -> Option<String> {
    let start = sql.find("ARRAY(SELECT b.rolname")?;
    let end = start + sql[start..].find(") as memberof")? + ") as memberof".len();
    if !sql[start..end].contains("pg_catalog.pg_auth_members") {
        return None;
    }
    Some(format!(
        "{}CAST('{{}}' AS TEXT) AS memberof{}",
        &sql[..start],
        &sql[end..]
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn asyncpg_type_lookup_parses() {
        let sql = "WITH RECURSIVE typeinfo_tree(oid) AS (SELECT 1) SELECT * FROM typeinfo_tree WHERE oid = any($1::oid[])";
        assert!(super::driver_query(sql).is_some());
        assert!(super::driver_query("SELECT 1").is_none());
    }

    #[test]
    fn psql_role_list_parses() {
        let sql = "SELECT r.rolname, r.rolsuper, r.rolinherit,\n  r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,\n  r.rolconnlimit, r.rolvaliduntil,\n  ARRAY(SELECT b.rolname\n        FROM pg_catalog.pg_auth_members m\n        JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid)\n        WHERE m.member = r.oid) as memberof\n, r.rolreplication\n, r.rolbypassrls\nFROM pg_catalog.pg_roles r\nWHERE r.rolname !~ '^pg_'\nORDER BY 1;";
        let s = super::driver_query(sql).unwrap().to_string();
        assert!(s.contains("CAST('{}' AS TEXT) AS memberof"), "{s}");
    }
}
