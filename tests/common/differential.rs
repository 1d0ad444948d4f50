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
        }
    }

    /// Connects again to Sluice (after a restart).
    pub async fn reconnect(&mut self) {
        self.sluice = RawClient::connect(self.server.port, "sluice", "sluice")
            .await
            .expect("connect to Sluice");
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
        if same(&sluice, &postgres, order) {
            None
        } else {
            Some(Difference {
                sql: sql.to_string(),
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
        if same(&sluice, &postgres, Order::Any) {
            None
        } else {
            Some(Difference {
                sql: format!("view {view}: {query}"),
                sluice,
                postgres,
            })
        }
    }
}

/// Two answers that differ.
#[derive(Debug, Clone)]
pub struct Difference {
    pub sql: String,
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

fn same(a: &Answer, b: &Answer, order: Order) -> bool {
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
            if ca != cb {
                return false;
            }
            let floats: Vec<Option<f64>> = ca
                .iter()
                .map(|c| match c.type_oid {
                    700 => Some(1e-6),
                    701 => Some(1e-12),
                    _ => None,
                })
                .collect();
            let (mut ra, mut rb) = (ra.clone(), rb.clone());
            if order == Order::Any {
                ra.sort();
                rb.sort();
            }
            ra.len() == rb.len() && ra.iter().zip(&rb).all(|(a, b)| same_row(a, b, &floats))
        }
        (Answer::Command { tag: ta }, Answer::Command { tag: tb }) => ta == tb,
        (Answer::Error { sqlstate: sa, .. }, Answer::Error { sqlstate: sb, .. }) => sa == sb,
        _ => false,
    }
}

/// Two rows are the same when their values' texts are, except that
/// floats may differ in their last digits (a sum's digits depend on the
/// order it adds in, which neither server promises).
fn same_row(a: &[Option<String>], b: &[Option<String>], floats: &[Option<f64>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .zip(floats)
            .all(|((x, y), tolerance)| match (x, y, tolerance) {
                (Some(x), Some(y), Some(t)) if x != y => match (x.parse::<f64>(), y.parse::<f64>())
                {
                    (Ok(x), Ok(y)) => (x - y).abs() <= t * x.abs().max(y.abs()),
                    _ => false,
                },
                _ => x == y,
            })
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
