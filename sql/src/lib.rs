//! Sluice's SQL dialect.
//!
//! PostgreSQL syntax (through `sqlparser`) plus the streaming extensions
//! (`APPEND ONLY` tables, and later watermarks and emit clauses). The server
//! hands each statement here first: streaming and storage statements come back
//! as [`Statement`] variants the server executes itself, and everything else
//! comes back as [`Statement::Query`] for DataFusion.

mod array_subquery;
mod asof;
mod catalog_query;
mod catalog_subquery;
mod ctes;
mod ctid;
mod datasets;
mod ddl;
mod depth;
mod determinism;
mod driver_queries;
mod erasures;
mod error;
mod hidden;
mod key_literals;
mod ordinality;
mod parse;
mod postgres_syntax;
mod reads;
mod regproc;
mod relations;
mod result_names;
mod roles;
mod scopes;
mod session_user;
mod set_returning;
mod subscription;
mod token_syntax;
mod windows;

pub use asof::{rewrite_asof_joins, unmark_asof_joins, ASOF_MARK};
pub use catalog_query::reads_catalog;
pub use catalog_subquery::{protect_projection_subqueries, rewrite_catalog_subqueries};
pub use ctes::inline_ctes;
pub use ctid::{rewrite_ctid_ranges, ROWS_PER_BLOCK as CTID_ROWS_PER_BLOCK};
pub use datasets::{read_relations_at, CreateDataset, SplitSpec};
pub use ddl::{interval_range, parse_duration_secs, parse_duration_us, CreateTable};
pub use depth::{MAX_NESTING_DEPTH, MAX_QUERY_BYTES};
pub use determinism::unfixed_function;
pub use driver_queries::driver_query;
pub use error::SqlError;
pub use hidden::{hide_system_columns, RelationColumns};
pub use key_literals::{parameterize_key_literals, KeyLiteral};
pub use ordinality::rewrite_ordinality;
pub use parse::{
    ident_name, parse_sql, split_statements, ConflictUpdate, CopyFormat, CopyFrom, CopyTo,
    CreateView, ExportFormat, ExportTarget, InsertValue, IsolationLevel, Statement,
    TransactionModes, TransactionOp,
};
pub use postgres_syntax::rewrite_postgres_syntax;
pub use reads::{AsOf, ReadAt, Sample, SampleMethod, READ_MARK};
pub use regproc::{
    regproc_literals_in_text, rewrite_regproc_literals, rewrite_regproc_zero,
    REGTYPE_NAMES_FUNCTION, REGTYPE_NAME_FUNCTION,
};
pub use relations::{CreateIndex, CreateQueryView, CreateTableAs, RelationKind};
pub use result_names::{name_result_columns, ResultName};
pub use roles::{redact_passwords, GrantObjects, GrantStatement, Privilege, RoleOptions, PUBLIC};
pub use scopes::{refuse_windows_in_lateral, rename_shadowing_relations};
pub use session_user::bind_session_user;
pub use set_returning::rewrite_set_returning;
pub use sqlparser;
pub use subscription::{CreateSink, CreateSubscription, Fetch, FetchCount, StartAt};
pub use windows::{rewrite_window_functions, WindowSpec};

/// Parses one statement of PostgreSQL's SQL, for the rewrite modules' tests.
#[cfg(test)]
pub(crate) fn parse_one(sql: &str) -> sqlparser::ast::Statement {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    sqlparser::parser::Parser::parse_sql(&dialect, sql)
        .expect("test SQL parses")
        .remove(0)
}
