//! PostgreSQL 15 as the oracle: the same statements sent to a Sluice
//! server and to a PostgreSQL server started beside it, and their answers
//! compared field by field: column names, type oids and typmods, each
//! value's text, the command tag, and an error's SQLSTATE.

use std::path::Path;

use super::postgres::Postgres;
use super::raw_client::{Answer, RawClient};
use super::Server;

/// A Sluice server and a PostgreSQL server holding the same rows.
pub struct Oracle {
    pub server: Server,
    pub pg: Postgres,
    pub sluice: RawClient,
    pub postgres: RawClient,
    /// Kinds of difference let pass (from `allowed.txt`'s `rule` lines).
    pub rules: Rules,
}

/// Differences that `allowed.txt` lets pass everywhere, each by name.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    /// `numeric-scale`: a NUMERIC value that PostgreSQL shows with another
    /// number of digits after the point, equal when the longer is rounded
    /// to the shorter, Sluice's showing at least 16 (or PostgreSQL's).
    pub numeric_scale: bool,
    /// `data-exception-order`: both fail with a data exception (class
    /// 22), each on the first bad row it met.
    pub data_exception_order: bool,
    /// `numeric-range`: Sluice fails with 22003 `value overflows numeric
    /// format` (a value beyond 38 digits) or 22P02 on a numeric NaN or
    /// infinity, where PostgreSQL answers.
    pub numeric_range: bool,
}

/// How the rows of two answers are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// In the order sent: the query's ORDER BY gives a total order.
    AsSent,
    /// As multisets: the query has no ORDER BY at its top.
    Any,
}

impl Oracle {
    pub async fn start(dir: &Path) -> Oracle {
        Oracle::start_with(dir, &[]).await
    }

    pub async fn start_with(dir: &Path, flags: &[&str]) -> Oracle {
        let sluice_dir = dir.join("sluice");
        std::fs::create_dir_all(&sluice_dir).expect("a directory for Sluice");
        let server = Server::start_with(&sluice_dir, flags);
        let pg = Postgres::start(dir);
        let sluice = RawClient::connect(server.port, "sluice", "sluice")
            .await
            .expect("connect to Sluice");
        let postgres = RawClient::connect(pg.port, "postgres", "postgres")
            .await
            .expect("connect to PostgreSQL");
        Oracle {
            server,
            pg,
            sluice,
            postgres,
            rules: Rules::default(),
        }
    }

    /// Connects again to Sluice (after a restart).
    pub async fn reconnect(&mut self) {
        self.sluice = RawClient::connect(self.server.port, "sluice", "sluice")
            .await
            .expect("connect to Sluice");
    }

    /// Connects to Sluice again if the last statement broke the
    /// connection (a broken connection is a difference already).
    pub async fn ensure_connected(&mut self) {
        if self.sluice.one("SELECT 1").await.is_err() {
            self.reconnect().await;
        }
    }

    /// Runs setup statements on both servers; each must succeed on both.
    /// `sluice_only` is appended to Sluice's CREATE TABLE statements that
    /// have no primary key (`WITH (partitions = 3)`, say).
    pub async fn setup(&mut self, sql: &str, sluice_only: &str) {
        for stmt in statements(sql) {
            let for_sluice = if !sluice_only.is_empty()
                && stmt.to_ascii_uppercase().starts_with("CREATE TABLE")
                && !stmt.to_ascii_uppercase().contains("PRIMARY KEY")
            {
                format!("{stmt} {sluice_only}")
            } else {
                stmt.clone()
            };
            for (who, answer) in [
                ("Sluice", self.sluice.one(&for_sluice).await),
                ("PostgreSQL", self.postgres.one(&stmt).await),
            ] {
                match answer {
                    Ok(Answer::Error { sqlstate, message }) => {
                        panic!("{who} refused setup statement {stmt}: {sqlstate} {message}")
                    }
                    Err(e) => panic!("{who} failed on setup statement {stmt}: {e}"),
                    Ok(_) => {}
                }
            }
        }
    }

    /// The two answers to `sql`, or None when they agree.
    pub async fn differs(&mut self, sql: &str) -> Option<Difference> {
        let order = order_of(sql);
        let sluice = self
            .sluice
            .one(sql)
            .await
            .unwrap_or_else(|e| Answer::Error {
                sqlstate: "connection".into(),
                message: e.to_string(),
            });
        let postgres = self
            .postgres
            .one(sql)
            .await
            .unwrap_or_else(|e| Answer::Error {
                sqlstate: "connection".into(),
                message: e.to_string(),
            });
        if same(&sluice, &postgres, order, self.rules) {
            None
        } else {
            Some(Difference {
                sql: sql.to_string(),
                query: sql.to_string(),
                sluice,
                postgres,
            })
        }
    }

    /// Asserts that Sluice answers `sql` as PostgreSQL does.
    pub async fn check(&mut self, sql: &str) {
        if let Some(d) = self.differs(sql).await {
            panic!("{d}");
        }
    }

    /// Sluice's answer alone.
    pub async fn sluice(&mut self, sql: &str) -> Answer {
        self.sluice.one(sql).await.expect("Sluice answers")
    }

    /// PostgreSQL's answer alone.
    pub async fn postgres(&mut self, sql: &str) -> Answer {
        self.postgres.one(sql).await.expect("PostgreSQL answers")
    }

    /// Compares `SELECT * FROM view` on Sluice with `query` on PostgreSQL
    /// (rows as multisets, columns by type; names are the view's).
    pub async fn view_differs(&mut self, view: &str, query: &str) -> Option<Difference> {
        let sluice = self
            .sluice
            .one(&format!("SELECT * FROM {view}"))
            .await
            .unwrap_or_else(|e| Answer::Error {
                sqlstate: "connection".into(),
                message: e.to_string(),
            });
        let postgres = self
            .postgres
            .one(query)
            .await
            .unwrap_or_else(|e| Answer::Error {
                sqlstate: "connection".into(),
                message: e.to_string(),
            });
        // A view whose query ends in ORDER BY is read in that order.
        let order = match top_level_order_by(query) {
            true => Order::AsSent,
            false => Order::Any,
        };
        if same(&sluice, &postgres, order, self.rules) {
            None
        } else {
            Some(Difference {
                sql: format!("view {view}: {query}"),
                query: query.to_string(),
                sluice,
                postgres,
            })
        }
    }
}

/// Whether `query` has an ORDER BY outside parentheses that orders its
/// rows completely (WITH TIES keeps rows that tie, in no order).
fn top_level_order_by(query: &str) -> bool {
    let upper = query.to_uppercase();
    if upper.contains("WITH TIES") {
        return false;
    }
    let mut depth = 0i32;
    upper.char_indices().any(|(i, c)| {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        depth == 0 && upper[i..].starts_with(" ORDER BY ")
    })
}

/// Two answers that differ.
#[derive(Debug, Clone)]
pub struct Difference {
    /// The statement as shown (a view's with its name and the step).
    pub sql: String,
    /// The query PostgreSQL answered, as `allowed.txt` names it.
    pub query: String,
    pub sluice: Answer,
    pub postgres: Answer,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.sql)?;
        writeln!(f, "  Sluice:     {}", show(&self.sluice))?;
        write!(f, "  PostgreSQL: {}", show(&self.postgres))
    }
}

fn show(a: &Answer) -> String {
    match a {
        Answer::Rows { columns, rows, .. } => {
            let cols: Vec<String> = columns
                .iter()
                .map(|c| {
                    if c.typmod >= 0 {
                        format!("{}:{}({})", c.name, c.type_oid, c.typmod)
                    } else {
                        format!("{}:{}", c.name, c.type_oid)
                    }
                })
                .collect();
            let shown: Vec<String> = rows
                .iter()
                .take(8)
                .map(|r| {
                    r.iter()
                        .map(|v| v.clone().unwrap_or_else(|| "NULL".into()))
                        .collect::<Vec<_>>()
                        .join("|")
                })
                .collect();
            let more = if rows.len() > 8 {
                format!(" ... ({} rows)", rows.len())
            } else {
                String::new()
            };
            format!("[{}] {:?}{more}", cols.join(", "), shown)
        }
        Answer::Command { tag } => format!("command {tag}"),
        Answer::Error { sqlstate, message } => format!("ERROR {sqlstate} {message}"),
    }
}

/// Whether Sluice's answer `a` is PostgreSQL's `b`.
fn same(a: &Answer, b: &Answer, order: Order, rules: Rules) -> bool {
    match (a, b) {
        (
            Answer::Rows {
                columns: ca,
                rows: ra,
                ..
            },
            Answer::Rows {
                columns: cb,
                rows: rb,
                ..
            },
        ) => {
            if ca != cb || ra.len() != rb.len() {
                return false;
            }
            let kinds: Vec<Value> = ca
                .iter()
                .map(|c| match c.type_oid {
                    700 => Value::Float(1e-6),
                    701 => Value::Float(1e-12),
                    1700 if rules.numeric_scale => Value::Numeric,
                    _ => Value::Text,
                })
                .collect();
            let (mut ra, mut rb) = (ra.clone(), rb.clone());
            if order == Order::Any {
                ra.sort();
                rb.sort();
            }
            if ra.iter().zip(&rb).all(|(a, b)| same_row(a, b, &kinds)) {
                return true;
            }
            // Values equal but written apart sort apart: match the rows
            // one by one instead.
            order == Order::Any && {
                let mut unmatched: Vec<&Vec<Option<String>>> = rb.iter().collect();
                ra.iter().all(
                    |a| match unmatched.iter().position(|b| same_row(a, b, &kinds)) {
                        Some(i) => {
                            unmatched.swap_remove(i);
                            true
                        }
                        None => false,
                    },
                )
            }
        }
        (Answer::Command { tag: ta }, Answer::Command { tag: tb }) => ta == tb,
        (Answer::Error { sqlstate: sa, .. }, Answer::Error { sqlstate: sb, .. }) => {
            sa == sb || (rules.data_exception_order && sa.starts_with("22") && sb.starts_with("22"))
        }
        (Answer::Error { sqlstate, message }, Answer::Rows { .. }) if rules.numeric_range => {
            (sqlstate == "22003" && message.contains("value overflows numeric format"))
                || (sqlstate == "22P02"
                    && message.contains("for type numeric")
                    && ["NaN", "Infinity"].iter().any(|v| message.contains(v)))
        }
        _ => false,
    }
}

/// How a column's values compare.
#[derive(Debug, Clone, Copy)]
enum Value {
    Text,
    /// Floats within a relative tolerance: a sum's last digits depend on
    /// the order it adds in, which neither server promises.
    Float(f64),
    /// Numerics under the `numeric-scale` rule.
    Numeric,
}

fn same_row(a: &[Option<String>], b: &[Option<String>], kinds: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .zip(kinds)
            .all(|((x, y), kind)| match (x, y, kind) {
                (Some(x), Some(y), _) if x == y => true,
                (Some(x), Some(y), Value::Float(t)) => match (x.parse::<f64>(), y.parse::<f64>()) {
                    (Ok(x), Ok(y)) => (x - y).abs() <= t * x.abs().max(y.abs()),
                    _ => false,
                },
                (Some(x), Some(y), Value::Numeric) => same_numeric(x, y),
                _ => x == y,
            })
}

/// `sluice` and `postgres` are the same number shown with different
/// numbers of digits after the point: the longer rounded (half away from
/// zero) to the shorter's digits is the shorter, and Sluice shows at least
/// 16 digits or as many as PostgreSQL.
fn same_numeric(sluice: &str, postgres: &str) -> bool {
    let scale = |v: &str| v.split_once('.').map(|(_, f)| f.len()).unwrap_or(0);
    let (ss, ps) = (scale(sluice), scale(postgres));
    if ss < ps.min(16) {
        return false;
    }
    let (long, short) = if ss > ps {
        (sluice, postgres)
    } else {
        (postgres, sluice)
    };
    match round_text(long, scale(short)) {
        Some(r) => r == short,
        None => false,
    }
}

/// A decimal's text rounded half away from zero to `digits` after the
/// point.
fn round_text(v: &str, digits: usize) -> Option<String> {
    let (neg, v) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut all: Vec<u8> = int.bytes().chain(frac.bytes().take(digits)).collect();
    let up = frac.as_bytes().get(digits).is_some_and(|d| *d >= b'5');
    if up {
        let mut i = all.len();
        loop {
            if i == 0 {
                all.insert(0, b'1');
                break;
            }
            i -= 1;
            if all[i] == b'9' {
                all[i] = b'0';
            } else {
                all[i] += 1;
                break;
            }
        }
    }
    let int_len = all.len() - digits;
    let mut out = String::new();
    let zero = all.iter().all(|d| *d == b'0');
    if neg && !zero {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&all[..int_len]).ok()?);
    if digits > 0 {
        out.push('.');
        out.push_str(std::str::from_utf8(&all[int_len..]).ok()?);
    }
    Some(out)
}

/// Whether a query's top level orders its rows.
pub fn order_of(sql: &str) -> Order {
    use sluice_sql::sqlparser::{ast, dialect::PostgreSqlDialect, parser::Parser};
    match Parser::parse_sql(&PostgreSqlDialect {}, sql) {
        Ok(stmts) => match stmts.first() {
            Some(ast::Statement::Query(q)) if q.order_by.is_some() => Order::AsSent,
            _ => Order::Any,
        },
        Err(_) => Order::Any,
    }
}

/// The statements of a script: split at semicolons that end a line,
/// without the `--` comment lines.
pub fn statements(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
        if trimmed.ends_with(';') {
            let stmt = current.trim().trim_end_matches(';').trim().to_string();
            if !stmt.is_empty() {
                out.push(stmt);
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}
