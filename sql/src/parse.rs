use sqlparser::ast::{
    self, CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, ObjectType,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Word};

use crate::ddl::{self, CreateTable};
use crate::error::SqlError;
use crate::subscription::{
    parse_subscription_statement, CreateSink, CreateSubscription, Fetch, StartAt,
};

/// An `ON CONFLICT ... DO UPDATE SET ...` clause, as names.
#[derive(Debug, Clone, PartialEq)]
pub struct ConflictUpdate {
    /// The conflict target: its columns, or `ON CONSTRAINT name`.
    pub columns: Vec<String>,
    pub constraint: Option<String>,
    /// Each assignment's column, and the column of `EXCLUDED` it takes
    /// (None: any other expression).
    pub sets: Vec<(String, Option<String>)>,
    /// It has a WHERE clause.
    pub filtered: bool,
}

/// One statement, classified by who executes it.
#[derive(Debug, Clone)]
pub enum Statement {
    CreateTable(Box<CreateTable>),
    DropTable {
        names: Vec<String>,
        if_exists: bool,
    },
    ShowTables,
    /// `COPY t [(cols)] FROM STDIN ...`
    CopyFrom(CopyFrom),
    CopyTo(CopyTo),
    /// `INSERT INTO t ...`; `values` is set when every value is a plain
    /// literal or a parameter (`$n`), so the server can convert the rows
    /// without planning a query.
    Insert {
        table: String,
        columns: Vec<String>,
        values: Option<Vec<Vec<InsertValue>>>,
        /// `ON CONFLICT DO NOTHING` (keyed tables); the statement carries no
        /// ON CONFLICT clause any more.
        on_conflict_do_nothing: bool,
        /// `ON CONFLICT ... DO UPDATE SET ...`: what it names, for the
        /// server to check that it replaces the whole row, which is what
        /// an INSERT into a keyed table does.
        on_conflict_update: Option<ConflictUpdate>,
        /// `RETURNING list`, as the query `SELECT list FROM table [AS
        /// alias]` to compute over the rows written; the statement carries
        /// no RETURNING clause.
        returning: Option<String>,
        statement: Box<ast::Statement>,
    },
    /// `UPDATE t SET col = expr, ... [WHERE cond]` (keyed tables): each
    /// assignment's column and expression as SQL text.
    Update {
        table: String,
        assignments: Vec<(String, String)>,
        selection: Option<String>,
    },
    /// `DELETE FROM t [WHERE cond]` (keyed tables).
    Delete {
        table: String,
        selection: Option<String>,
    },
    /// `ERASE FROM t [WHERE cond] [WITH (suppress = ...)]`, or over `ALL
    /// TABLES` (`table` None) that have the condition's columns; a DELETE
    /// on an append-only table is one too.
    Erase {
        table: Option<String>,
        selection: Option<String>,
        /// `'forever'` or a duration, as written.
        suppress: Option<String>,
    },
    /// `VERIFY ERASURE n`: scan every file for rows erasure n removed.
    VerifyErasure {
        id: u64,
    },
    /// `VACUUM t` or `ALTER TABLE t COMPACT`: compact a keyed table now.
    Compact {
        table: String,
    },
    /// `CREATE MATERIALIZED VIEW [IF NOT EXISTS] name AS query`
    CreateView(CreateView),
    /// `DROP MATERIALIZED VIEW [IF EXISTS] name [, ...]`
    DropView {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `SHOW MATERIALIZED VIEWS`
    ShowViews,
    /// `EXPLAIN MATERIALIZED VIEW v`: the view's operator graph.
    ExplainView {
        name: String,
    },
    /// `EXPLAIN CREATE MATERIALIZED VIEW ...`: the graph the view would
    /// have, without creating it.
    ExplainCreateView(CreateView),
    /// `FLUSH`: wait until every view reflects every acknowledged row.
    Flush,
    /// `REFRESH MATERIALIZED VIEW v`: waits until `v` has applied every
    /// row committed before it (a view is always current otherwise).
    RefreshView {
        name: String,
        with_data: bool,
    },
    /// `CREATE [OR REPLACE] VIEW`: a named query.
    CreateQueryView(crate::relations::CreateQueryView),
    /// `DROP VIEW`.
    DropQueryView {
        names: Vec<String>,
        if_exists: bool,
        cascade: bool,
    },
    /// `CREATE TABLE ... AS query`.
    CreateTableAs(Box<crate::relations::CreateTableAs>),
    /// `CREATE INDEX`.
    CreateIndex(crate::relations::CreateIndex),
    /// `DROP INDEX`.
    DropIndex {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `ALTER {TABLE | VIEW | MATERIALIZED VIEW} r RENAME TO s`.
    RenameRelation {
        kind: crate::relations::RelationKind,
        name: String,
        to: String,
        if_exists: bool,
    },
    Transaction(TransactionOp),
    /// `DEALLOCATE [PREPARE] name | ALL` (`None`: all).
    Deallocate(Option<String>),
    /// `SET name = value` (session settings are accepted and remembered).
    Set {
        name: String,
        value: String,
    },
    CreateSubscription(CreateSubscription),
    /// `CREATE SINK s FROM relation INTO kafka WITH (...)`
    CreateSink(Box<CreateSink>),
    DropSink {
        names: Vec<String>,
        if_exists: bool,
    },
    DropSubscription {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `ALTER SUBSCRIPTION s RESET TO ...`
    ResetSubscription {
        name: String,
        to: StartAt,
    },
    /// `DECLARE c SUBSCRIPTION CURSOR FOR s [SINCE ...]`
    DeclareCursor {
        name: String,
        subscription: String,
        since: Option<StartAt>,
    },
    Fetch(Fetch),
    /// `CLOSE c`, or `CLOSE ALL` (`name` is none).
    CloseCursor {
        name: Option<String>,
    },
    /// `ALTER MATERIALIZED VIEW v REBUILD [FROM EARLIEST | FROM TIMESTAMP '...']`
    RebuildView {
        name: String,
        from: StartAt,
    },
    /// `CREATE CUT name [FOR t1, t2 | FOR ALL TABLES]` (all tables when
    /// `tables` is none).
    CreateCut {
        name: String,
        tables: Option<Vec<String>>,
    },
    /// `DROP CUT [IF EXISTS] name [, ...]`
    DropCut {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `CREATE DATASET name AS query [AS OF CUT c] [WITH (split ...)]`
    CreateDataset(Box<crate::datasets::CreateDataset>),
    /// `REFRESH DATASET name [AS OF CUT c]`: a new version.
    RefreshDataset {
        name: String,
        at_cut: Option<String>,
    },
    /// `COPY DATASET name [VERSION n] TO 'path' [WITH (FORMAT parquet)]`
    CopyDataset {
        name: String,
        version: Option<u32>,
        location: String,
    },
    /// `VERIFY DATASET name VERSION n`
    VerifyDataset {
        name: String,
        version: u32,
    },
    /// `DROP DATASET [IF EXISTS] name [, ...]`
    DropDataset {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `CREATE ROLE name [WITH] options` (and `CREATE USER`, which adds
    /// LOGIN).
    CreateRole {
        name: String,
        options: crate::roles::RoleOptions,
    },
    /// `ALTER ROLE name [WITH] options`
    AlterRole {
        name: String,
        options: crate::roles::RoleOptions,
    },
    /// `DROP ROLE [IF EXISTS] name [, ...]`
    DropRole {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `GRANT` or `REVOKE` of privileges on tables, views, subscriptions.
    Grant(crate::roles::GrantStatement),
    /// Anything else: handed to DataFusion.
    Query(Box<ast::Statement>),
}

#[derive(Debug, Clone)]
pub struct CreateView {
    pub name: String,
    pub if_not_exists: bool,
    /// The defining query.
    pub query: Box<ast::Query>,
    pub emit_on_window_close: bool,
    /// `WITH (allowed_lateness = '30 seconds')`, in microseconds.
    pub allowed_lateness_us: i64,
}

impl Statement {
    /// The command, when the statement writes rows or changes the schema:
    /// what a READ ONLY transaction refuses.
    pub fn writes(&self) -> Option<&'static str> {
        Some(match self {
            Statement::CreateTable(_) => "CREATE TABLE",
            Statement::DropTable { .. } => "DROP TABLE",
            Statement::CopyFrom(_) => "COPY FROM",
            Statement::Insert { .. } => "INSERT",
            Statement::Update { .. } => "UPDATE",
            Statement::Delete { .. } => "DELETE",
            Statement::Compact { .. } => "VACUUM",
            Statement::Erase { .. } => "ERASE",
            Statement::CreateView(_) => "CREATE MATERIALIZED VIEW",
            Statement::CreateQueryView(_) => "CREATE VIEW",
            Statement::DropQueryView { .. } => "DROP VIEW",
            Statement::CreateTableAs(_) => "CREATE TABLE AS",
            Statement::CreateIndex(_) => "CREATE INDEX",
            Statement::DropIndex { .. } => "DROP INDEX",
            Statement::RenameRelation { .. } => "ALTER TABLE",
            Statement::DropView { .. } => "DROP MATERIALIZED VIEW",
            Statement::RebuildView { .. } => "ALTER MATERIALIZED VIEW",
            Statement::CreateSubscription(_) => "CREATE SUBSCRIPTION",
            Statement::DropSubscription { .. } => "DROP SUBSCRIPTION",
            Statement::CreateSink(_) => "CREATE SINK",
            Statement::DropSink { .. } => "DROP SINK",
            Statement::ResetSubscription { .. } => "ALTER SUBSCRIPTION",
            Statement::CreateRole { .. } => "CREATE ROLE",
            Statement::AlterRole { .. } => "ALTER ROLE",
            Statement::DropRole { .. } => "DROP ROLE",
            Statement::Grant(g) if g.grant => "GRANT",
            Statement::Grant(_) => "REVOKE",
            Statement::Query(q) => match q.as_ref() {
                ast::Statement::Insert(_) => "INSERT",
                ast::Statement::Update { .. } => "UPDATE",
                ast::Statement::Delete(_) => "DELETE",
                ast::Statement::CreateTable(_) => "CREATE TABLE",
                ast::Statement::CreateView { .. } => "CREATE VIEW",
                ast::Statement::AlterTable { .. } => "ALTER TABLE",
                ast::Statement::Drop { .. } => "DROP",
                ast::Statement::Truncate { .. } => "TRUNCATE",
                _ => return None,
            },
            _ => return None,
        })
    }
}

/// The isolation levels a transaction here keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Each statement reads the newest committed rows (and READ
    /// UNCOMMITTED, which PostgreSQL also runs as READ COMMITTED).
    #[default]
    ReadCommitted,
    /// Every statement of the transaction reads the tables as they were
    /// committed when its first statement ran.
    RepeatableRead,
}

impl IsolationLevel {
    /// The name `SHOW transaction_isolation` answers.
    pub fn name(self) -> &'static str {
        match self {
            IsolationLevel::ReadCommitted => "read committed",
            IsolationLevel::RepeatableRead => "repeatable read",
        }
    }
}

/// What `BEGIN`, `SET TRANSACTION` or `SET SESSION CHARACTERISTICS` asked
/// for; `None` leaves a mode as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransactionModes {
    pub isolation: Option<IsolationLevel>,
    pub read_only: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionOp {
    Begin(TransactionModes),
    /// `SET TRANSACTION ...`: the open transaction's modes.
    SetModes(TransactionModes),
    /// `SET TRANSACTION SNAPSHOT 'id'`: read what the transaction that
    /// exported `id` (`pg_export_snapshot()`) reads.
    SetSnapshot(String),
    /// `SET SESSION CHARACTERISTICS AS TRANSACTION ...` and
    /// `SET default_transaction_isolation | default_transaction_read_only`:
    /// the modes of the session's later transactions.
    SetDefaults(TransactionModes),
    Commit,
    Rollback,
    /// `SAVEPOINT name`
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`
    Release(String),
    /// `ROLLBACK TO [SAVEPOINT] name`
    RollbackTo(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    /// PostgreSQL's binary copy format (COPY FROM only).
    Binary,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFrom {
    pub table: String,
    pub columns: Vec<String>,
    pub format: CopyFormat,
    pub header: bool,
    pub delimiter: char,
    pub null: String,
    pub quote: char,
    pub escape: char,
}

/// Where `COPY ... TO` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTarget {
    Stdout,
    /// A file path on the server, or an `s3://bucket/key` URL.
    Location(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Text,
    Csv,
    /// PostgreSQL's binary copy format (TO STDOUT only).
    Binary,
    Parquet,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CopyTo {
    pub query: Box<ast::Query>,
    pub target: ExportTarget,
    pub format: ExportFormat,
    pub header: bool,
    pub delimiter: char,
    pub null: String,
}

/// Splits a query string into its statements at top-level semicolons,
/// respecting quotes, comments and dollar quoting. Each statement is the
/// exact source text between the semicolons; empty ones are dropped.
///
/// A text past [`crate::depth::MAX_QUERY_BYTES`] (54000) or nesting past
/// [`crate::depth::MAX_NESTING_DEPTH`] (54001) is refused here, before any
/// syntax tree is built.
pub fn split_statements(sql: &str) -> Result<Vec<String>, SqlError> {
    crate::depth::check_query_size(sql)?;
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let plain: Vec<Token> = tokens.iter().map(|t| t.token.clone()).collect();
    crate::depth::check_nesting(&plain)?;
    let byte_at = |line: u64, column: u64| byte_offset(sql, line, column);
    let mut out = Vec::new();
    let mut begin = 0;
    for t in &tokens {
        if t.token == Token::SemiColon {
            let end = byte_at(t.span.start.line, t.span.start.column);
            push_nonempty(&mut out, &sql[begin..end]);
            begin = (end + 1).min(sql.len());
        }
    }
    push_nonempty(&mut out, &sql[begin..]);
    Ok(out)
}

fn start_of_token(sql: &str, t: &TokenWithSpan) -> usize {
    byte_offset(sql, t.span.start.line, t.span.start.column)
}

/// An ON CONFLICT DO UPDATE clause as names: `SET v = EXCLUDED.v` is
/// `("v", Some("v"))`.
fn conflict_update(target: Option<ast::ConflictTarget>, update: ast::DoUpdate) -> ConflictUpdate {
    let (columns, constraint) = match target {
        Some(ast::ConflictTarget::Columns(c)) => (c.iter().map(ident_name).collect(), None),
        Some(ast::ConflictTarget::OnConstraint(name)) => (Vec::new(), Some(object_name(&name))),
        None => (Vec::new(), None),
    };
    let sets = update
        .assignments
        .iter()
        .map(|a| {
            let column = match &a.target {
                ast::AssignmentTarget::ColumnName(name) => object_name(name),
                other => other.to_string(),
            };
            let source = match &a.value {
                ast::Expr::CompoundIdentifier(parts)
                    if parts.len() == 2 && parts[0].value.eq_ignore_ascii_case("excluded") =>
                {
                    Some(ident_name(&parts[1]))
                }
                _ => None,
            };
            (column, source)
        })
        .collect();
    ConflictUpdate {
        columns,
        constraint,
        sets,
        filtered: update.selection.is_some(),
    }
}

/// Byte offset of a tokenizer location (1-based line and character column).
pub(crate) fn byte_offset(sql: &str, line: u64, column: u64) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match sql[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return sql.len(),
        }
    }
    sql[start..]
        .char_indices()
        .nth(column.saturating_sub(1) as usize)
        .map(|(i, _)| start + i)
        .unwrap_or(sql.len())
}

fn push_nonempty(out: &mut Vec<String>, text: &str) {
    let trimmed = text.trim();
    if has_code(trimmed) {
        out.push(trimmed.to_string());
    }
}

/// True when the text holds something besides comments.
fn has_code(text: &str) -> bool {
    Tokenizer::new(&PostgreSqlDialect {}, text)
        .tokenize()
        .map(|ts| {
            ts.iter()
                .any(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        })
        .unwrap_or(!text.is_empty())
}

/// The statement with its comments (`--` to the end of a line, `/* */`)
/// made spaces, so that the statements Sluice recognizes by their words
/// (FLUSH, VACUUM, subscriptions, roles) take comments anywhere, as
/// PostgreSQL does; None when there is none. Comments inside string
/// literals are text and stay.
fn without_comments(sql: &str) -> Option<String> {
    use sqlparser::tokenizer::Whitespace;
    if !sql.contains("--") && !sql.contains("/*") {
        return None;
    }
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut found = false;
    let text: String = tokens
        .iter()
        .map(|t| match t {
            Token::Whitespace(Whitespace::SingleLineComment { .. })
            | Token::Whitespace(Whitespace::MultiLineComment(_)) => {
                found = true;
                " ".to_string()
            }
            t => t.to_string(),
        })
        .collect();
    found.then_some(text)
}

/// Parses one statement (as produced by [`split_statements`]).
pub fn parse_sql(sql: &str) -> Result<Statement, SqlError> {
    let uncommented = without_comments(sql);
    let sql = uncommented.as_deref().unwrap_or(sql);
    let words: Vec<String> = sql
        .split_whitespace()
        .map(|w| w.trim_end_matches(';').to_lowercase())
        .collect();
    match words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["flush"] => return Ok(Statement::Flush),
        ["show", "materialized", "views"] => return Ok(Statement::ShowViews),
        ["explain", "materialized", "view", _] => {
            let name = sql.split_whitespace().nth(3).unwrap_or_default();
            return Ok(Statement::ExplainView {
                name: unquote_word(name.trim_end_matches(';')),
            });
        }
        ["explain", "create", "materialized", "view", ..] => {
            let rest = sql.trim_start();
            return match parse_sql(&rest["explain".len()..])? {
                Statement::CreateView(view) => Ok(Statement::ExplainCreateView(view)),
                _ => Err(SqlError::Syntax(
                    "EXPLAIN CREATE MATERIALIZED VIEW takes a CREATE MATERIALIZED VIEW statement"
                        .into(),
                )),
            };
        }
        ["vacuum", table] | ["alter", "table", table, "compact"] => {
            return Ok(Statement::Compact {
                table: table.trim_matches('"').to_string(),
            })
        }
        _ => {}
    }
    if let Some(statement) = crate::relations::parse_relation_statement(sql)? {
        return Ok(statement);
    }
    if let Some(statement) = crate::erasures::parse_erasure_statement(sql)? {
        return Ok(statement);
    }
    if let Some(statement) = crate::datasets::parse_dataset_statement(sql)? {
        return Ok(statement);
    }
    if let Some(statement) = parse_subscription_statement(sql)? {
        return Ok(statement);
    }
    if let Some(statement) = crate::roles::parse_role_statement(sql)? {
        return Ok(statement);
    }
    if let Some(grant) = crate::roles::parse_grant_statement(sql)? {
        return Ok(Statement::Grant(grant));
    }
    let (sql, clauses) = strip_streaming_clauses(sql)?;
    let sql = crate::token_syntax::between_symmetric(&sql).unwrap_or(sql);
    let sql = crate::token_syntax::postfix_null_tests(&sql).unwrap_or(sql);
    let sql = crate::reads::mark_reads(&sql)?.unwrap_or(sql);
    let sql = crate::asof::mark_asof_joins(&sql)?.unwrap_or(sql);
    let mut statements = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(crate::depth::PARSER_RECURSION_LIMIT)
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| match e {
            sqlparser::parser::ParserError::RecursionLimitExceeded => SqlError::TooDeep(
                "the statement nests too deeply for the parser (subqueries or parentheses)".into(),
            ),
            e => SqlError::Syntax(strip_parser_prefix(&e.to_string())),
        })?;
    if statements.len() != 1 {
        return Err(SqlError::Syntax(format!(
            "expected one statement, found {}",
            statements.len()
        )));
    }
    let statement = statements.remove(0);
    classify(statement, clauses)
}

fn strip_parser_prefix(msg: &str) -> String {
    msg.trim_start_matches("sql parser error: ").to_string()
}

/// The streaming clauses of `CREATE TABLE` that plain PostgreSQL syntax does
/// not have, removed from the SQL before sqlparser reads it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StreamingClauses {
    /// `APPEND ONLY` after the column list.
    pub append_only: bool,
    /// `WATERMARK FOR column AS expr` in the column list: the column and
    /// the expression's text.
    pub watermark: Option<(String, String)>,
    /// `EMIT ON WINDOW CLOSE` at the end of `CREATE MATERIALIZED VIEW`.
    pub emit_on_window_close: bool,
}

/// Removes `APPEND ONLY` and `WATERMARK FOR ... AS ...` from a `CREATE TABLE`.
fn strip_streaming_clauses(sql: &str) -> Result<(String, StreamingClauses), SqlError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let sig: Vec<_> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let is_word = |t: &Token, kw: &str| matches!(t, Token::Word(Word { value, quote_style: None, .. }) if value.eq_ignore_ascii_case(kw));
    let mut clauses = StreamingClauses::default();
    if sig.len() < 2 || !is_word(&sig[0].token, "create") {
        return Ok((sql.to_string(), clauses));
    }
    if is_word(&sig[1].token, "materialized") {
        let words: Vec<&Token> = sig
            .iter()
            .map(|t| &t.token)
            .filter(|t| !matches!(t, Token::EOF | Token::SemiColon))
            .collect();
        let n = words.len();
        if n >= 4
            && is_word(words[n - 4], "emit")
            && is_word(words[n - 3], "on")
            && is_word(words[n - 2], "window")
            && is_word(words[n - 1], "close")
        {
            clauses.emit_on_window_close = true;
            let emit = sig
                .iter()
                .rposition(|t| is_word(&t.token, "emit"))
                .unwrap_or(0);
            return Ok((sql[..start_of_token(sql, sig[emit])].to_string(), clauses));
        }
        return Ok((sql.to_string(), clauses));
    }
    if !is_word(&sig[1].token, "table") {
        return Ok((sql.to_string(), clauses));
    }
    let start_of = |n: usize| byte_offset(sql, sig[n].span.start.line, sig[n].span.start.column);
    let end_of = |n: usize| byte_offset(sql, sig[n].span.end.line, sig[n].span.end.column);
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0i32;
    let mut n = 0;
    while n < sig.len() {
        match sig[n].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth == 0
            && n + 1 < sig.len()
            && is_word(&sig[n].token, "append")
            && is_word(&sig[n + 1].token, "only")
        {
            clauses.append_only = true;
            cuts.push((start_of(n), end_of(n + 1)));
            n += 2;
            continue;
        }
        if depth == 1
            && n + 3 < sig.len()
            && is_word(&sig[n].token, "watermark")
            && is_word(&sig[n + 1].token, "for")
            && is_word(&sig[n + 3].token, "as")
        {
            let column = match &sig[n + 2].token {
                Token::Word(w) if w.quote_style.is_some() => w.value.clone(),
                Token::Word(w) => w.value.to_lowercase(),
                other => {
                    return Err(SqlError::Syntax(format!(
                        "expected a column after WATERMARK FOR, found {other}"
                    )))
                }
            };
            // The clause ends at the next comma or the list's closing paren.
            let mut m = n + 4;
            let mut d = 1;
            while m < sig.len() {
                match sig[m].token {
                    Token::LParen => d += 1,
                    Token::RParen if d == 1 => break,
                    Token::RParen => d -= 1,
                    Token::Comma if d == 1 => break,
                    _ => {}
                }
                m += 1;
            }
            if m >= sig.len() || m == n + 4 {
                return Err(SqlError::Syntax("incomplete WATERMARK clause".into()));
            }
            let expr = sql[end_of(n + 3)..start_of(m)].trim().to_string();
            if clauses.watermark.replace((column, expr)).is_some() {
                return Err(SqlError::Syntax(
                    "a table takes one WATERMARK clause".into(),
                ));
            }
            let prev_comma = n > 0 && sig[n - 1].token == Token::Comma;
            if prev_comma {
                cuts.push((start_of(n - 1), start_of(m)));
            } else if sig[m].token == Token::Comma {
                cuts.push((start_of(n), end_of(m)));
            } else {
                return Err(SqlError::Syntax("a table needs at least one column".into()));
            }
            n = m;
            continue;
        }
        n += 1;
    }
    if cuts.is_empty() {
        return Ok((sql.to_string(), clauses));
    }
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (from, to) in cuts {
        out.push_str(&sql[at..from]);
        out.push(' ');
        at = to;
    }
    out.push_str(&sql[at..]);
    Ok((out, clauses))
}

pub(crate) fn object_name(name: &ast::ObjectName) -> String {
    // Unquoted identifiers fold to lower case, as in PostgreSQL; the schema
    // part of `public.t` is accepted and dropped.
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(ident_name)
        .unwrap_or_else(|| name.to_string())
}

pub fn ident_name(ident: &ast::Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

fn classify(statement: ast::Statement, clauses: StreamingClauses) -> Result<Statement, SqlError> {
    match statement {
        ast::Statement::CreateTable(ct) if ct.query.is_some() => {
            crate::relations::create_table_as(ct, &clauses)
        }
        ast::Statement::CreateTable(ct) => Ok(Statement::CreateTable(Box::new(ddl::create_table(
            &ct, &clauses,
        )?))),
        ast::Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            ..
        } => Ok(Statement::DropTable {
            names: names.iter().map(object_name).collect(),
            if_exists,
        }),
        ast::Statement::ShowTables { .. } => Ok(Statement::ShowTables),
        ast::Statement::CreateView(view) if view.materialized => create_view(view, &clauses),
        ast::Statement::CreateView(view) => crate::relations::create_query_view(view),
        ast::Statement::Drop {
            object_type: ObjectType::View,
            if_exists,
            names,
            cascade,
            ..
        } => Ok(Statement::DropQueryView {
            names: names.iter().map(object_name).collect(),
            if_exists,
            cascade,
        }),
        ast::Statement::Drop {
            object_type: ObjectType::Index,
            if_exists,
            names,
            ..
        } => Ok(Statement::DropIndex {
            names: names.iter().map(object_name).collect(),
            if_exists,
        }),
        ast::Statement::CreateIndex(ci) => crate::relations::create_index(ci),
        ast::Statement::Drop {
            object_type: ObjectType::MaterializedView,
            if_exists,
            names,
            ..
        } => Ok(Statement::DropView {
            names: names.iter().map(object_name).collect(),
            if_exists,
        }),
        ast::Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            ..
        } => copy_statement(source, to, target, options, legacy_options),
        ast::Statement::Insert(mut insert) => {
            let table = match &insert.table {
                ast::TableObject::TableName(name) => object_name(name),
                other => {
                    return Err(SqlError::Unsupported(format!(
                        "INSERT into {other} is not supported"
                    )))
                }
            };
            let returning = insert.returning.take().map(|items| {
                format!(
                    "SELECT {} FROM \"{}\"{}",
                    items
                        .iter()
                        .map(|i| i.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    table.replace('"', "\"\""),
                    insert
                        .table_alias
                        .as_ref()
                        .map(|a| format!(" AS {}", a.alias))
                        .unwrap_or_default()
                )
            });
            if returning.is_some() && insert.on.is_some() {
                // Which rows an ON CONFLICT wrote (kept, replaced or
                // skipped) is decided in the log, after the statement.
                return Err(SqlError::Unsupported(
                    "INSERT ... ON CONFLICT ... RETURNING is not supported; leave out RETURNING, or read the rows back by their key".into(),
                ));
            }
            let mut on_conflict_update = None;
            let on_conflict_do_nothing = match insert.on.take() {
                None => false,
                Some(ast::OnInsert::OnConflict(ast::OnConflict {
                    action: ast::OnConflictAction::DoNothing,
                    ..
                })) => true,
                Some(ast::OnInsert::OnConflict(ast::OnConflict {
                    conflict_target,
                    action: ast::OnConflictAction::DoUpdate(update),
                })) => {
                    on_conflict_update = Some(conflict_update(conflict_target, update));
                    false
                }
                Some(other) => {
                    return Err(SqlError::Unsupported(format!(
                        "{other} is not supported: an INSERT into a keyed table already replaces the row with the same key; ON CONFLICT DO NOTHING keeps the existing one"
                    )))
                }
            };
            let columns = insert
                .columns
                .iter()
                .map(|c| {
                    c.0.last()
                        .and_then(|p| p.as_ident())
                        .map(ident_name)
                        .unwrap_or_default()
                })
                .collect();
            let values = insert.source.as_deref().and_then(insert_values);
            Ok(Statement::Insert {
                table,
                columns,
                values,
                on_conflict_do_nothing,
                on_conflict_update,
                returning,
                statement: Box::new(ast::Statement::Insert(insert)),
            })
        }
        ast::Statement::StartTransaction { modes, .. } => Ok(Statement::Transaction(
            TransactionOp::Begin(transaction_modes(&modes)?),
        )),
        ast::Statement::Commit { .. } => Ok(Statement::Transaction(TransactionOp::Commit)),
        ast::Statement::Rollback {
            savepoint: Some(name),
            ..
        } => Ok(Statement::Transaction(TransactionOp::RollbackTo(
            ident_name(&name),
        ))),
        ast::Statement::Rollback { .. } => Ok(Statement::Transaction(TransactionOp::Rollback)),
        ast::Statement::Deallocate { name, .. } => Ok(Statement::Deallocate(
            (!(name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all")))
                .then(|| ident_name(&name)),
        )),
        ast::Statement::Savepoint { name } => Ok(Statement::Transaction(TransactionOp::Savepoint(
            ident_name(&name),
        ))),
        ast::Statement::ReleaseSavepoint { name } => Ok(Statement::Transaction(
            TransactionOp::Release(ident_name(&name)),
        )),
        ast::Statement::Set(set) => set_statement(set),
        // RESET is SET ... TO DEFAULT; RESET ALL names every setting.
        ast::Statement::Reset(r) => Ok(Statement::Set {
            name: match r.reset {
                ast::Reset::ALL => "all".into(),
                ast::Reset::ConfigurationParameter(p) => p.to_string().to_lowercase(),
            },
            value: "DEFAULT".into(),
        }),
        ast::Statement::Update(update) => update_statement(update),
        ast::Statement::Delete(delete) => delete_statement(delete),
        ast::Statement::Truncate(_) => Err(SqlError::Unsupported(
            "TRUNCATE is not supported: the log keeps every record until retention deletes it"
                .into(),
        )),
        ast::Statement::AlterTable(_)
        | ast::Statement::CreateSchema { .. }
        | ast::Statement::CreateDatabase { .. } => Err(SqlError::Unsupported(format!(
            "statement not supported yet: {}",
            first_words(&statement.to_string())
        ))),
        other => Ok(Statement::Query(Box::new(other))),
    }
}

/// The one plain table a DML statement names.
fn single_table(tables: &[ast::TableWithJoins], what: &str) -> Result<String, SqlError> {
    match tables {
        [t] if t.joins.is_empty() => match &t.relation {
            ast::TableFactor::Table { name, .. } => Ok(object_name(name)),
            other => Err(SqlError::Unsupported(format!(
                "{what} of {other} is not supported"
            ))),
        },
        _ => Err(SqlError::Unsupported(format!(
            "{what} names one table, without joins"
        ))),
    }
}

fn update_statement(update: ast::Update) -> Result<Statement, SqlError> {
    if update.from.is_some() || update.returning.is_some() || update.limit.is_some() {
        return Err(SqlError::Unsupported(
            "UPDATE ... FROM, RETURNING and LIMIT are not supported".into(),
        ));
    }
    let table = single_table(std::slice::from_ref(&update.table), "UPDATE")?;
    let mut assignments = Vec::new();
    for a in &update.assignments {
        let column = match &a.target {
            ast::AssignmentTarget::ColumnName(name) => object_name(name),
            other => {
                return Err(SqlError::Unsupported(format!(
                    "assignment to {other} is not supported"
                )))
            }
        };
        assignments.push((column, a.value.to_string()));
    }
    Ok(Statement::Update {
        table,
        assignments,
        selection: update.selection.map(|s| s.to_string()),
    })
}

fn delete_statement(delete: ast::Delete) -> Result<Statement, SqlError> {
    if delete.using.is_some() || delete.returning.is_some() || delete.limit.is_some() {
        return Err(SqlError::Unsupported(
            "DELETE ... USING, RETURNING and LIMIT are not supported".into(),
        ));
    }
    let tables = match &delete.from {
        ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
    };
    Ok(Statement::Delete {
        table: single_table(tables, "DELETE")?,
        selection: delete.selection.map(|s| s.to_string()),
    })
}

fn create_view(view: ast::CreateView, clauses: &StreamingClauses) -> Result<Statement, SqlError> {
    if view.or_replace || !view.columns.is_empty() {
        return Err(SqlError::Unsupported(
            "CREATE OR REPLACE and column lists are not supported for materialized views".into(),
        ));
    }
    let mut allowed_lateness_us = 0;
    let options = match &view.options {
        ast::CreateTableOptions::None => vec![],
        ast::CreateTableOptions::With(list) => list.clone(),
        other => {
            return Err(SqlError::Unsupported(format!(
                "materialized view options {other} are not supported; use WITH (allowed_lateness = '...')"
            )))
        }
    };
    for opt in options {
        match opt {
            ast::SqlOption::KeyValue { key, value }
                if key.value.eq_ignore_ascii_case("allowed_lateness") =>
            {
                let text = match &value {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    other => other.to_string(),
                };
                allowed_lateness_us = crate::ddl::parse_duration_us(&text)?;
            }
            other => {
                return Err(SqlError::InvalidOption(format!(
                    "unrecognized materialized view option {other} (known: allowed_lateness)"
                )))
            }
        }
    }
    Ok(Statement::CreateView(CreateView {
        name: object_name(&view.name),
        if_not_exists: view.if_not_exists,
        query: view.query,
        emit_on_window_close: clauses.emit_on_window_close,
        allowed_lateness_us,
    }))
}

/// A name as one word of the statement: quoted names keep their case.
fn unquote_word(word: &str) -> String {
    match word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => word.to_lowercase(),
    }
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// An isolation level by name. SERIALIZABLE is refused: nothing here
/// detects the read/write dependencies it would have to fail.
fn isolation_level(level: &str) -> Result<IsolationLevel, SqlError> {
    let level = level.trim().trim_matches('\'').to_ascii_lowercase();
    match level.split_whitespace().collect::<Vec<_>>().join(" ").as_str() {
        "read committed" | "read uncommitted" | "default" => Ok(IsolationLevel::ReadCommitted),
        "repeatable read" => Ok(IsolationLevel::RepeatableRead),
        other => Err(SqlError::Unsupported(format!(
            "transaction isolation level {} is not supported; use REPEATABLE READ (one snapshot for the whole transaction) or READ COMMITTED",
            other.to_uppercase()
        ))),
    }
}

/// `on`/`off` (and PostgreSQL's other spellings of a boolean setting).
fn setting_bool(value: &str) -> Result<bool, SqlError> {
    match value
        .trim()
        .trim_matches('\'')
        .to_ascii_lowercase()
        .as_str()
    {
        "on" | "true" | "yes" | "1" | "t" => Ok(true),
        "off" | "false" | "no" | "0" | "f" | "default" => Ok(false),
        other => Err(SqlError::InvalidOption(format!(
            "parameter requires a Boolean value, not \"{other}\""
        ))),
    }
}

fn transaction_modes(modes: &[ast::TransactionMode]) -> Result<TransactionModes, SqlError> {
    let mut out = TransactionModes::default();
    for mode in modes {
        match mode {
            ast::TransactionMode::IsolationLevel(level) => {
                out.isolation = Some(isolation_level(&level.to_string())?)
            }
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadOnly) => {
                out.read_only = Some(true)
            }
            ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {
                out.read_only = Some(false)
            }
        }
    }
    Ok(out)
}

fn set_statement(set: ast::Set) -> Result<Statement, SqlError> {
    if let ast::Set::SetTransaction {
        snapshot: Some(id),
        session: false,
        ..
    } = &set
    {
        let id = match &id.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            other => other.to_string(),
        };
        return Ok(Statement::Transaction(TransactionOp::SetSnapshot(id)));
    }
    if let ast::Set::SetTransaction { modes, session, .. } = &set {
        let modes = transaction_modes(modes)?;
        return Ok(Statement::Transaction(match session {
            true => TransactionOp::SetDefaults(modes),
            false => TransactionOp::SetModes(modes),
        }));
    }
    if let ast::Set::SingleAssignment {
        variable, values, ..
    } = &set
    {
        let name = variable.to_string().to_lowercase();
        let value = values.first().map(|v| v.to_string()).unwrap_or_default();
        let modes = match name.as_str() {
            "transaction_isolation" | "default_transaction_isolation" => TransactionModes {
                isolation: Some(isolation_level(&value)?),
                read_only: None,
            },
            "transaction_read_only" | "default_transaction_read_only" => TransactionModes {
                isolation: None,
                read_only: Some(setting_bool(&value)?),
            },
            _ => TransactionModes::default(),
        };
        if modes != TransactionModes::default() {
            return Ok(Statement::Transaction(match name.starts_with("default_") {
                true => TransactionOp::SetDefaults(modes),
                false => TransactionOp::SetModes(modes),
            }));
        }
    }
    match set {
        ast::Set::SingleAssignment {
            variable, values, ..
        } => Ok(Statement::Set {
            name: variable.to_string().to_lowercase(),
            value: values
                .iter()
                .map(|v| match v {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
        }),
        ast::Set::SetTimeZone { value, .. } => Ok(Statement::Set {
            name: "timezone".into(),
            value: value.to_string().trim_matches('\'').to_string(),
        }),
        other => Ok(Statement::Set {
            name: other.to_string(),
            value: String::new(),
        }),
    }
}

/// What COPY's options say, before the direction is known.
struct CopyOptions {
    format: String,
    header: bool,
    delimiter: Option<char>,
    null: Option<String>,
    quote: char,
    escape: Option<char>,
}

impl CopyOptions {
    /// Tab for text, comma for CSV, unless DELIMITER says otherwise.
    fn delimiter_or_default(&self, csv: bool) -> char {
        self.delimiter.unwrap_or(if csv { ',' } else { '\t' })
    }

    /// `\N` for text, the empty string for CSV, unless NULL says otherwise.
    fn null_or_default(&self, csv: bool) -> String {
        self.null
            .clone()
            .unwrap_or_else(|| if csv { String::new() } else { "\\N".into() })
    }
}

fn copy_options(
    options: Vec<CopyOption>,
    legacy_options: Vec<CopyLegacyOption>,
) -> Result<CopyOptions, SqlError> {
    let unsupported = |o: &dyn std::fmt::Display| {
        SqlError::Unsupported(format!("COPY option {o} is not supported"))
    };
    let mut out = CopyOptions {
        format: "text".into(),
        header: false,
        delimiter: None,
        null: None,
        quote: '"',
        escape: None,
    };
    for option in options {
        match option {
            CopyOption::Format(f) => out.format = f.value.to_lowercase(),
            CopyOption::Header(h) => out.header = h,
            CopyOption::Delimiter(d) => out.delimiter = Some(d),
            CopyOption::Null(n) => out.null = Some(n),
            CopyOption::Quote(q) => out.quote = q,
            CopyOption::Escape(e) => out.escape = Some(e),
            CopyOption::Freeze(_) | CopyOption::Encoding(_) => {}
            other => return Err(unsupported(&other)),
        }
    }
    for option in legacy_options {
        match option {
            CopyLegacyOption::Csv(csv) => {
                out.format = "csv".into();
                for o in csv {
                    match o {
                        CopyLegacyCsvOption::Header => out.header = true,
                        CopyLegacyCsvOption::Quote(q) => out.quote = q,
                        CopyLegacyCsvOption::Escape(e) => out.escape = Some(e),
                        other => return Err(unsupported(&other)),
                    }
                }
            }
            CopyLegacyOption::Delimiter(d) => out.delimiter = Some(d),
            CopyLegacyOption::Null(n) => out.null = Some(n),
            CopyLegacyOption::Header => out.header = true,
            // `COPY ... TO STDOUT WITH BINARY`, the spelling from before
            // PostgreSQL 9.0 that it still takes (connectorx sends it).
            CopyLegacyOption::Binary => out.format = "binary".into(),
            other => return Err(unsupported(&other)),
        }
    }
    if out.header && out.format == "text" {
        return Err(SqlError::Unsupported(
            "COPY HEADER is available only in CSV mode".into(),
        ));
    }
    Ok(out)
}

fn copy_statement(
    source: CopySource,
    to: bool,
    target: CopyTarget,
    options: Vec<CopyOption>,
    legacy_options: Vec<CopyLegacyOption>,
) -> Result<Statement, SqlError> {
    let opts = copy_options(options, legacy_options)?;
    if to {
        return copy_to(source, target, opts);
    }
    let (table_name, columns) = match source {
        CopySource::Table {
            table_name,
            columns,
        } => (table_name, columns),
        CopySource::Query(_) => {
            return Err(SqlError::Syntax(
                "COPY (query) is only allowed with TO".into(),
            ))
        }
    };
    if !matches!(target, CopyTarget::Stdin) {
        return Err(SqlError::Unsupported(
            "COPY FROM a file is not supported; use COPY ... FROM STDIN (psql's \\copy)".into(),
        ));
    }
    let format = match opts.format.as_str() {
        "text" => CopyFormat::Text,
        "csv" => CopyFormat::Csv,
        "binary" => CopyFormat::Binary,
        other => {
            return Err(SqlError::Unsupported(format!(
                "COPY FROM format \"{other}\" is not supported (text, csv, binary)"
            )))
        }
    };
    let csv = format == CopyFormat::Csv;
    let copy = CopyFrom {
        table: object_name(&table_name),
        columns: columns.iter().map(ident_name).collect(),
        format,
        header: opts.header,
        delimiter: opts.delimiter_or_default(csv),
        null: opts.null_or_default(csv),
        quote: opts.quote,
        escape: if csv {
            opts.escape.unwrap_or(opts.quote)
        } else {
            '"'
        },
    };
    Ok(Statement::CopyFrom(copy))
}

/// `COPY (query) TO STDOUT | 'path' | 's3://...'` and `COPY t [(cols)] TO ...`.
fn copy_to(
    source: CopySource,
    target: CopyTarget,
    opts: CopyOptions,
) -> Result<Statement, SqlError> {
    let query = match source {
        CopySource::Query(q) => q,
        CopySource::Table {
            table_name,
            columns,
        } => {
            let cols = if columns.is_empty() {
                "*".to_string()
            } else {
                columns
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let sql = format!("SELECT {cols} FROM {table_name}");
            Parser::new(&PostgreSqlDialect {})
                .try_with_sql(&sql)
                .and_then(|mut p| p.parse_query())
                .map_err(|e| SqlError::Syntax(e.to_string()))?
        }
    };
    let target = match target {
        CopyTarget::Stdout => ExportTarget::Stdout,
        CopyTarget::File { filename } => ExportTarget::Location(filename),
        other => {
            return Err(SqlError::Unsupported(format!(
                "COPY TO {other} is not supported (STDOUT, a file path or an s3:// URL)"
            )))
        }
    };
    let format = match opts.format.as_str() {
        "text" => ExportFormat::Text,
        "csv" => ExportFormat::Csv,
        "parquet" => ExportFormat::Parquet,
        "binary" => ExportFormat::Binary,
        other => {
            return Err(SqlError::Unsupported(format!(
                "COPY TO format \"{other}\" is not supported (text, csv, binary, parquet)"
            )))
        }
    };
    match (&target, format) {
        (ExportTarget::Stdout, ExportFormat::Parquet) => {
            return Err(SqlError::Unsupported(
                "COPY TO STDOUT writes text, csv or binary; write Parquet to a path or an s3:// URL".into(),
            ))
        }
        (
            ExportTarget::Location(_),
            ExportFormat::Text | ExportFormat::Csv | ExportFormat::Binary,
        ) => {
            return Err(SqlError::Unsupported(
                "COPY TO a path or URL writes Parquet (WITH (FORMAT parquet)); use TO STDOUT for text or csv".into(),
            ))
        }
        _ => {}
    }
    let csv = format == ExportFormat::Csv;
    Ok(Statement::CopyTo(CopyTo {
        query,
        target,
        format,
        header: opts.header,
        delimiter: opts.delimiter_or_default(csv),
        null: opts.null_or_default(csv),
    }))
}

/// The rows of `VALUES (...), (...)` as text, when every value is a literal.
/// One value of an `INSERT ... VALUES` row the server converts itself.
#[derive(Debug, Clone, PartialEq)]
pub enum InsertValue {
    /// A literal's text (`None`: NULL).
    Literal(Option<String>),
    /// A parameter, `$n` (1-based).
    Param(usize),
}

impl InsertValue {
    fn of(expr: &ast::Expr) -> Option<InsertValue> {
        if let ast::Expr::Value(v) = expr {
            if let ast::Value::Placeholder(p) = &v.value {
                let n = p.strip_prefix('$')?.parse::<usize>().ok()?;
                return (n >= 1).then_some(InsertValue::Param(n));
            }
        }
        literal_text(expr).map(InsertValue::Literal)
    }
}

fn insert_values(query: &ast::Query) -> Option<Vec<Vec<InsertValue>>> {
    if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() {
        return None;
    }
    let ast::SetExpr::Values(values) = query.body.as_ref() else {
        return None;
    };
    values
        .rows
        .iter()
        .map(|row| row.iter().map(InsertValue::of).collect::<Option<Vec<_>>>())
        .collect()
}

/// A literal's text, or `None` (outer) when the expression is not a literal.
fn literal_text(expr: &ast::Expr) -> Option<Option<String>> {
    match expr {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Null => Some(None),
            ast::Value::Number(n, _) => Some(Some(n.to_string())),
            ast::Value::SingleQuotedString(s)
            | ast::Value::EscapedStringLiteral(s)
            | ast::Value::DoubleQuotedString(s) => Some(Some(s.clone())),
            ast::Value::DollarQuotedString(s) => Some(Some(s.value.clone())),
            ast::Value::Boolean(b) => Some(Some(b.to_string())),
            _ => None,
        },
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match literal_text(expr)? {
            Some(s) if s.starts_with(|c: char| c.is_ascii_digit() || c == '.') => {
                Some(Some(format!("-{s}")))
            }
            _ => None,
        },
        // A typed literal's text is read as the column's type, except a
        // timestamptz's: stored in a timestamp column it is its UTC time,
        // not its text without the zone, so the planned INSERT casts it.
        ast::Expr::TypedString(ts) => match (&ts.data_type, &ts.value.value) {
            (
                ast::DataType::Timestamp(
                    _,
                    ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone,
                ),
                _,
            ) => None,
            (ast::DataType::Custom(name, _), _)
                if name.to_string().eq_ignore_ascii_case("timestamptz") =>
            {
                None
            }
            (_, ast::Value::SingleQuotedString(s)) => Some(Some(s.clone())),
            _ => None,
        },
        ast::Expr::Nested(e) => literal_text(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_top_level_semicolons_only() {
        let parts = split_statements("select ';'; select 2 ;; -- c\n").unwrap();
        assert_eq!(parts, vec!["select ';'", "select 2"]);
    }

    #[test]
    fn append_only_is_recognised() {
        let s = parse_sql(
            "CREATE TABLE usage (tenant TEXT NOT NULL, tokens BIGINT) APPEND ONLY \
             WITH (partitions = 4, partition_key = 'tenant', retention = '7 days')",
        )
        .unwrap();
        let Statement::CreateTable(ct) = s else {
            panic!("expected CREATE TABLE, got {s:?}")
        };
        assert!(ct.append_only);
        assert_eq!(ct.table.options.partitions, 4);
        assert_eq!(ct.table.options.partition_key.as_deref(), Some("tenant"));
        assert_eq!(ct.table.options.retention_secs, Some(7 * 86400));
        assert!(!ct.table.columns[0].nullable);
    }

    #[test]
    fn literal_and_parameter_inserts_are_extracted() {
        let s = parse_sql("INSERT INTO t (a, b) VALUES (1, 'x'), (-2.5, NULL)").unwrap();
        let Statement::Insert {
            table,
            columns,
            values,
            ..
        } = s
        else {
            panic!()
        };
        assert_eq!(table, "t");
        assert_eq!(columns, vec!["a", "b"]);
        let lit = |s: &str| InsertValue::Literal(Some(s.to_string()));
        assert_eq!(
            values.unwrap(),
            vec![
                vec![lit("1"), lit("x")],
                vec![lit("-2.5"), InsertValue::Literal(None)]
            ]
        );
        let s = parse_sql("INSERT INTO t VALUES ($2, 'k', $1)").unwrap();
        let Statement::Insert { values, .. } = s else {
            panic!()
        };
        assert_eq!(
            values.unwrap(),
            vec![vec![InsertValue::Param(2), lit("k"), InsertValue::Param(1)]]
        );
        for planned in [
            "INSERT INTO t VALUES ($1, now())",
            "INSERT INTO t VALUES ($1::int)",
        ] {
            let s = parse_sql(planned).unwrap();
            assert!(
                matches!(s, Statement::Insert { values: None, .. }),
                "{planned}"
            );
        }
    }

    #[test]
    fn copy_options() {
        let Statement::CopyFrom(c) =
            parse_sql("COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER true)").unwrap()
        else {
            panic!()
        };
        assert_eq!(c.format, CopyFormat::Csv);
        assert!(c.header);
        assert_eq!(c.delimiter, ',');
        let Statement::CopyFrom(c) = parse_sql("COPY t FROM STDIN csv header").unwrap() else {
            panic!()
        };
        assert_eq!(c.format, CopyFormat::Csv);
        assert!(c.header);
        let Statement::CopyFrom(c) = parse_sql("COPY t FROM STDIN").unwrap() else {
            panic!()
        };
        assert_eq!(c.format, CopyFormat::Text);
        assert_eq!(c.null, "\\N");
        // The spelling from before PostgreSQL 9.0, which connectorx sends.
        for sql in [
            "COPY (SELECT 1) TO STDOUT WITH BINARY",
            "COPY t TO STDOUT BINARY",
        ] {
            let Statement::CopyTo(c) = parse_sql(sql).unwrap() else {
                panic!("{sql}")
            };
            assert_eq!(c.format, ExportFormat::Binary, "{sql}");
        }
        let Statement::CopyFrom(c) = parse_sql("COPY t FROM STDIN WITH BINARY").unwrap() else {
            panic!()
        };
        assert_eq!(c.format, CopyFormat::Binary);
    }

    #[test]
    fn view_statements() {
        let Statement::CreateView(v) = parse_sql(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS v AS SELECT tenant, SUM(tokens) FROM usage GROUP BY tenant",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(v.name, "v");
        assert!(v.if_not_exists);
        let Statement::CreateView(v) = parse_sql(
            "CREATE MATERIALIZED VIEW v WITH (allowed_lateness = '30 seconds') AS SELECT 1 EMIT ON WINDOW CLOSE",
        )
        .unwrap() else {
            panic!()
        };
        assert!(v.emit_on_window_close);
        assert_eq!(v.allowed_lateness_us, 30_000_000);
        assert!(matches!(
            parse_sql("DROP MATERIALIZED VIEW IF EXISTS v, w").unwrap(),
            Statement::DropView {
                if_exists: true,
                ..
            }
        ));
        assert!(matches!(parse_sql("FLUSH").unwrap(), Statement::Flush));
        // Comments anywhere, as dbt and other tools send them.
        assert!(matches!(
            parse_sql("/* dbt's header */ FLUSH").unwrap(),
            Statement::Flush
        ));
        assert!(matches!(
            parse_sql("-- a note\nFLUSH -- done").unwrap(),
            Statement::Flush
        ));
        assert!(matches!(
            parse_sql("VACUUM /* now */ t").unwrap(),
            Statement::Compact { table } if table == "t"
        ));
        match parse_sql("/* x */ INSERT INTO t VALUES ('a -- b /* c */')").unwrap() {
            Statement::Insert {
                values: Some(rows), ..
            } => assert!(matches!(
                &rows[0][0],
                InsertValue::Literal(Some(v)) if v == "a -- b /* c */"
            )),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_sql("DEALLOCATE ALL").unwrap(),
            Statement::Deallocate(None)
        ));
        assert!(matches!(
            parse_sql("DEALLOCATE PREPARE \"_pg3_1\"").unwrap(),
            Statement::Deallocate(Some(n)) if n == "_pg3_1"
        ));
        assert!(matches!(
            parse_sql("show materialized views").unwrap(),
            Statement::ShowViews
        ));
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(matches!(parse_sql("SELEC 1"), Err(SqlError::Syntax(_))));
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn append_only_keeps_literals_exact() {
        let (sql, c) = strip_streaming_clauses(
            "CREATE TABLE t (a TEXT)\nAPPEND  ONLY WITH (retention = '7 days')",
        )
        .unwrap();
        assert!(c.append_only);
        assert_eq!(
            sql,
            "CREATE TABLE t (a TEXT)\n  WITH (retention = '7 days')"
        );
    }

    #[test]
    fn watermark_clause_is_taken_out_of_the_column_list() {
        let (sql, c) = strip_streaming_clauses(
            "CREATE TABLE t (a TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5 seconds') APPEND ONLY",
        )
        .unwrap();
        assert!(c.append_only);
        assert_eq!(
            c.watermark,
            Some(("ts".into(), "ts - INTERVAL '5 seconds'".into()))
        );
        assert_eq!(sql, "CREATE TABLE t (a TEXT, ts TIMESTAMP )  ");
        let (sql, c) =
            strip_streaming_clauses("CREATE TABLE t (WATERMARK FOR ts AS ts, ts TIMESTAMP)")
                .unwrap();
        assert_eq!(c.watermark, Some(("ts".into(), "ts".into())));
        assert_eq!(sql, "CREATE TABLE t (  ts TIMESTAMP)");
    }

    #[test]
    fn split_keeps_literals_exact() {
        let sql = "INSERT INTO t VALUES ('it''s; fine', E'a\\nb', $$x;y$$); SELECT 'é'";
        let parts = split_statements(sql).unwrap();
        assert_eq!(
            parts[0],
            "INSERT INTO t VALUES ('it''s; fine', E'a\\nb', $$x;y$$)"
        );
        assert_eq!(parts[1], "SELECT 'é'");
    }
}
