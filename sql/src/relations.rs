//! Statements that make, name and refresh relations the way PostgreSQL
//! tools (dbt, pandas, DuckDB) send them:
//!
//! - `CREATE [OR REPLACE] VIEW v [(columns)] AS query`: a named query,
//!   planned each time it is read; `DROP VIEW [IF EXISTS] v, ... [CASCADE]`;
//! - `CREATE TABLE t [(columns)] [APPEND ONLY] [WITH (...)] AS query`: a
//!   table whose columns are the query's, filled from it (a keyed table
//!   with `WITH (primary_key = 'a, b')`);
//! - `ALTER {TABLE | VIEW | MATERIALIZED VIEW} [IF EXISTS] r RENAME TO s`;
//! - `REFRESH MATERIALIZED VIEW [CONCURRENTLY] v [WITH DATA]`: waits until
//!   the view has applied everything committed before it;
//! - `CREATE INDEX [CONCURRENTLY] [IF NOT EXISTS] [name] ON r [USING btree |
//!   hash] (column [ASC | DESC] [NULLS ...], ...) [INCLUDE (...)]` on a table
//!   or a materialized view; `DROP INDEX [IF EXISTS] name, ...`.

use sqlparser::ast;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::Token;

use crate::parse::{object_name, Statement, StreamingClauses};
use crate::SqlError;

/// `CREATE [OR REPLACE] VIEW`.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateQueryView {
    pub name: String,
    /// Names given after the view's name; empty: the query's.
    pub columns: Vec<String>,
    pub query: Box<ast::Query>,
    pub or_replace: bool,
}

/// `CREATE TABLE ... AS query`: what the table is, but for its columns,
/// which the query's result gives ([`CreateTableAs::table`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTableAs {
    pub name: String,
    pub if_not_exists: bool,
    /// Names given after the table's name; empty: the query's.
    pub columns: Vec<String>,
    pub query: Box<ast::Query>,
    /// `WITH (primary_key = 'a, b')`: the key columns.
    pub primary_key: Vec<String>,
    append_only: bool,
    /// The other `WITH (...)` options, as written.
    options: Vec<String>,
}

/// `CREATE INDEX`: the index's columns, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateIndex {
    /// None: PostgreSQL's default name (`<table>_<columns>_idx`).
    pub name: Option<String>,
    pub table: String,
    pub columns: Vec<String>,
    /// Each column's `pg_index.indoption`: 1 for DESC, 2 for NULLS FIRST.
    pub options: Vec<i16>,
    pub if_not_exists: bool,
}

/// What `ALTER ... RENAME` names the relation as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationKind {
    Table,
    View,
    MaterializedView,
}

impl CreateTableAs {
    /// The table with `columns` (each a name and PostgreSQL's name of its
    /// type, as `format_type` gives it), checked as `CREATE TABLE` is.
    pub fn table(&self, columns: &[(String, String)]) -> Result<crate::CreateTable, SqlError> {
        if !self.columns.is_empty() && self.columns.len() > columns.len() {
            return Err(SqlError::Syntax(
                "CREATE TABLE AS specifies too many column names".into(),
            ));
        }
        let mut list: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| {
                let name = self.columns.get(i).unwrap_or(name);
                format!("{} {ty}", quoted(name))
            })
            .collect();
        if !self.primary_key.is_empty() {
            let key: Vec<String> = self.primary_key.iter().map(|k| quoted(k)).collect();
            list.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        let sql = format!(
            "CREATE TABLE {}{} ({}){}{}",
            if self.if_not_exists {
                "IF NOT EXISTS "
            } else {
                ""
            },
            quoted(&self.name),
            list.join(", "),
            if self.append_only { " APPEND ONLY" } else { "" },
            match self.options.is_empty() {
                true => String::new(),
                false => format!(" WITH ({})", self.options.join(", ")),
            }
        );
        match crate::parse_sql(&sql)? {
            Statement::CreateTable(t) => Ok(*t),
            _ => Err(SqlError::Syntax(format!("not a CREATE TABLE: {sql}"))),
        }
    }
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `CREATE VIEW` (not materialized).
pub(crate) fn create_query_view(view: ast::CreateView) -> Result<Statement, SqlError> {
    if !matches!(view.options, ast::CreateTableOptions::None) {
        return Err(SqlError::Unsupported(format!(
            "view options {} are not supported",
            view.options
        )));
    }
    Ok(Statement::CreateQueryView(CreateQueryView {
        name: object_name(&view.name),
        columns: view
            .columns
            .iter()
            .map(|c| crate::ident_name(&c.name))
            .collect(),
        query: view.query,
        or_replace: view.or_replace,
    }))
}

/// `CREATE INDEX`: an ordered index of plain columns (one index serves
/// `btree`'s and `hash`'s uses, and both orders).
pub(crate) fn create_index(ci: ast::CreateIndex) -> Result<Statement, SqlError> {
    let unsupported = |what: &str| Err(SqlError::Unsupported(what.to_string()));
    if ci.unique {
        return unsupported(
            "unique indexes are not supported; a keyed table (PRIMARY KEY) keeps one row per key",
        );
    }
    if ci.predicate.is_some() {
        return unsupported("partial indexes (CREATE INDEX ... WHERE) are not supported");
    }
    if !ci.with.is_empty() || !ci.index_options.is_empty() || !ci.alter_options.is_empty() {
        return unsupported("index storage options are not supported");
    }
    if let Some(using) = &ci.using {
        let kind = using.to_string().to_lowercase();
        if kind != "btree" && kind != "hash" {
            return Err(SqlError::Unsupported(format!(
                "access method \"{kind}\" is not supported; indexes are btree"
            )));
        }
    }
    let mut columns = Vec::with_capacity(ci.columns.len());
    let mut options = Vec::with_capacity(ci.columns.len());
    for c in &ci.columns {
        match &c.column.expr {
            ast::Expr::Identifier(id) if c.operator_class.is_none() => {
                columns.push(crate::ident_name(id));
                let descending = c.column.options.asc == Some(false);
                // NULLS FIRST is DESC's default, NULLS LAST ASC's.
                let nulls_first = c.column.options.nulls_first.unwrap_or(descending);
                options.push(i16::from(descending) | (i16::from(nulls_first) << 1));
            }
            other => {
                return Err(SqlError::Unsupported(format!(
                    "indexes on expressions or with operator classes are not supported: {other}"
                )))
            }
        }
    }
    Ok(Statement::CreateIndex(CreateIndex {
        name: ci.name.as_ref().map(object_name),
        table: object_name(&ci.table_name),
        columns,
        options,
        if_not_exists: ci.if_not_exists,
    }))
}

/// `CREATE TABLE ... AS query`.
pub(crate) fn create_table_as(
    ct: ast::CreateTable,
    clauses: &StreamingClauses,
) -> Result<Statement, SqlError> {
    let Some(query) = ct.query.clone() else {
        return Err(SqlError::Syntax("CREATE TABLE AS needs a query".into()));
    };
    // `CREATE TABLE t (a, b) AS ...` names the columns; a column list with
    // types is not CREATE TABLE AS.
    let mut columns = Vec::with_capacity(ct.columns.len());
    for c in &ct.columns {
        if !matches!(c.data_type, ast::DataType::Unspecified) || !c.options.is_empty() {
            return Err(SqlError::Syntax(
                "CREATE TABLE AS takes column names without types".into(),
            ));
        }
        columns.push(crate::ident_name(&c.name));
    }
    if clauses.watermark.is_some() || !ct.constraints.is_empty() {
        return Err(SqlError::Unsupported(
            "CREATE TABLE AS takes no constraints or watermark; use WITH (primary_key = '...')"
                .into(),
        ));
    }
    let mut primary_key = Vec::new();
    let mut options = Vec::new();
    match &ct.table_options {
        ast::CreateTableOptions::None => {}
        ast::CreateTableOptions::With(list) => {
            for opt in list {
                match opt {
                    ast::SqlOption::KeyValue { key, value }
                        if key.value.eq_ignore_ascii_case("primary_key") =>
                    {
                        let text = match value {
                            ast::Expr::Value(v) => match &v.value {
                                ast::Value::SingleQuotedString(s) => s.clone(),
                                other => other.to_string(),
                            },
                            other => other.to_string(),
                        };
                        primary_key = text
                            .split(',')
                            .map(|k| k.trim().to_string())
                            .filter(|k| !k.is_empty())
                            .collect();
                    }
                    other => options.push(other.to_string()),
                }
            }
        }
        other => {
            return Err(SqlError::Unsupported(format!(
                "table options {other} are not supported; use WITH (...)"
            )))
        }
    }
    Ok(Statement::CreateTableAs(Box::new(CreateTableAs {
        name: object_name(&ct.name),
        if_not_exists: ct.if_not_exists,
        columns,
        query,
        primary_key,
        append_only: clauses.append_only,
        options,
    })))
}

/// `REFRESH MATERIALIZED VIEW` and `ALTER ... RENAME TO`; None for any
/// other statement.
pub(crate) fn parse_relation_statement(sql: &str) -> Result<Option<Statement>, SqlError> {
    let mut p = match Parser::new(&PostgreSqlDialect {}).try_with_sql(sql) {
        Ok(p) => p,
        Err(_) => return Ok(None),
    };
    let syntax = |e: ParserError| SqlError::Syntax(e.to_string().replace("sql parser error: ", ""));
    if p.parse_keywords(&[Keyword::CREATE, Keyword::TABLE]) {
        return table_as_with_column_names(sql, &mut p);
    }
    if p.parse_keywords(&[Keyword::REFRESH, Keyword::MATERIALIZED, Keyword::VIEW]) {
        let _ = p.parse_keyword(Keyword::CONCURRENTLY);
        let name = object_name(&p.parse_object_name(false).map_err(syntax)?);
        let mut with_data = true;
        if p.parse_keyword(Keyword::WITH) {
            with_data = !p.parse_keyword(Keyword::NO);
            p.expect_keyword(Keyword::DATA).map_err(syntax)?;
        }
        end(&mut p).map_err(syntax)?;
        return Ok(Some(Statement::RefreshView { name, with_data }));
    }
    if !p.parse_keyword(Keyword::ALTER) {
        return Ok(None);
    }
    let kind = if p.parse_keyword(Keyword::TABLE) {
        RelationKind::Table
    } else if p.parse_keyword(Keyword::VIEW) {
        RelationKind::View
    } else if p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
        RelationKind::MaterializedView
    } else {
        return Ok(None);
    };
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let Ok(name) = p.parse_object_name(false) else {
        return Ok(None);
    };
    if !p.parse_keywords(&[Keyword::RENAME, Keyword::TO]) {
        return Ok(None);
    }
    let to = p.parse_identifier().map_err(syntax)?;
    end(&mut p).map_err(syntax)?;
    Ok(Some(Statement::RenameRelation {
        kind,
        name: object_name(&name),
        to: crate::ident_name(&to),
        if_exists,
    }))
}

/// `CREATE TABLE t (a, b) AS query`, which the parser does not read: the
/// statement without the names, then the names. None for anything else.
fn table_as_with_column_names(sql: &str, p: &mut Parser) -> Result<Option<Statement>, SqlError> {
    let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
    let Ok(name) = p.parse_object_name(false) else {
        return Ok(None);
    };
    if !p.consume_token(&Token::LParen) {
        return Ok(None);
    }
    let mut columns = Vec::new();
    loop {
        let Ok(column) = p.parse_identifier() else {
            return Ok(None);
        };
        columns.push(crate::ident_name(&column));
        if p.consume_token(&Token::RParen) {
            break;
        }
        if !p.consume_token(&Token::Comma) {
            return Ok(None);
        }
    }
    let rest = p.peek_token().span.start;
    let rest = &sql[crate::parse::byte_offset(sql, rest.line, rest.column)..];
    let without = format!(
        "CREATE TABLE {}{name} {rest}",
        if if_not_exists { "IF NOT EXISTS " } else { "" }
    );
    match crate::parse_sql(&without)? {
        Statement::CreateTableAs(mut t) => {
            t.columns = columns;
            Ok(Some(Statement::CreateTableAs(t)))
        }
        _ => Ok(None),
    }
}

fn end(p: &mut Parser) -> Result<(), ParserError> {
    let _ = p.consume_token(&Token::SemiColon);
    p.expect_token(&Token::EOF).map(|_| ())
}

#[cfg(test)]
mod tests {
    use crate::{parse_sql, Statement};

    #[test]
    fn relation_statements_as_tools_send_them() {
        assert!(matches!(
            parse_sql("refresh materialized view \"sluice\".\"public\".\"mv\"").unwrap(),
            Statement::RefreshView { name, with_data: true } if name == "mv"
        ));
        assert!(matches!(
            parse_sql("/* dbt */ REFRESH MATERIALIZED VIEW CONCURRENTLY mv WITH NO DATA;").unwrap(),
            Statement::RefreshView {
                with_data: false,
                ..
            }
        ));
        assert!(matches!(
            parse_sql("alter table \"sluice\".\"public\".\"m__dbt_tmp\" rename to \"m\"").unwrap(),
            Statement::RenameRelation { kind: super::RelationKind::Table, name, to, if_exists: false }
                if name == "m__dbt_tmp" && to == "m"
        ));
        assert!(matches!(
            parse_sql("ALTER MATERIALIZED VIEW IF EXISTS a RENAME TO B").unwrap(),
            Statement::RenameRelation { kind: super::RelationKind::MaterializedView, to, if_exists: true, .. }
                if to == "b"
        ));
        match parse_sql("create or replace view v (a, b) as (select 1, 2)").unwrap() {
            Statement::CreateQueryView(v) => {
                assert_eq!((v.name.as_str(), v.or_replace), ("v", true));
                assert_eq!(v.columns, ["a", "b"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_sql("DROP VIEW IF EXISTS a, b CASCADE").unwrap(),
            Statement::DropQueryView { names, if_exists: true, cascade: true } if names == ["a", "b"]
        ));
        match parse_sql(
            "create table t WITH (partitions = 2, primary_key = 'id') as (select id, name from s)",
        )
        .unwrap()
        {
            Statement::CreateTableAs(t) => {
                assert_eq!(t.primary_key, ["id"]);
                let table = t
                    .table(&[
                        ("id".into(), "bigint".into()),
                        ("name".into(), "text".into()),
                    ])
                    .unwrap();
                assert_eq!(table.table.options.partitions, 2);
                assert_eq!(table.table.options.primary_key, ["id"]);
                assert!(!table.table.columns[0].nullable);
            }
            other => panic!("{other:?}"),
        }
    }
}
