//! The differential suite: Sluice against PostgreSQL 15 on the same rows.
//!
//! - `corpus_answers_as_postgres`: every query of `tests/differential/
//!   corpus/*.sql` over the tables of `schema.sql`;
//! - `random_queries_answer_as_postgres`: queries from a generator with a
//!   fixed seed (`SLUICE_DIFFERENTIAL_QUERIES` sets how many, 1,800 by
//!   default; `SLUICE_FUZZ_SEED` the seed);
//! - `views_answer_as_postgres`: each view of `views.sql` against its
//!   query in PostgreSQL, after inserts, updates, deletes and a SIGKILL.
//!
//! Answers compare column names, type oids and typmods, values as text,
//! and SQLSTATEs. A difference fails the test unless `allowed.txt` lists
//! its query with the reason.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::differential::{statements, Difference, Oracle};
use common::raw_client::Answer;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(suite_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The queries `allowed.txt` lists, with their reasons: a query line, then
/// one or more lines starting with whitespace that say why.
fn allowed() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut query: Option<String> = None;
    for line in read("allowed.txt").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(q) = &query {
                out.entry(q.clone())
                    .and_modify(|r: &mut String| {
                        r.push(' ');
                        r.push_str(line.trim())
                    })
                    .or_insert_with(|| line.trim().to_string());
            }
        } else {
            query = Some(line.trim().trim_end_matches(';').to_string());
        }
    }
    for (q, why) in &out {
        assert!(!why.is_empty(), "allowed.txt: no reason for {q}");
    }
    out
}

/// Fails with every difference not allowed; prints the count compared.
fn report(what: &str, compared: usize, differences: Vec<Difference>) {
    let allowed = allowed();
    let (allowed_seen, wrong): (Vec<_>, Vec<_>) = differences
        .into_iter()
        .partition(|d| allowed.contains_key(&d.sql));
    eprintln!(
        "{what}: {compared} queries compared with PostgreSQL, {} differences ({} allowed)",
        wrong.len() + allowed_seen.len(),
        allowed_seen.len()
    );
    if let Ok(path) = std::env::var("SLUICE_DIFFERENTIAL_REPORT") {
        let text: Vec<String> = wrong.iter().map(|d| d.to_string()).collect();
        let _ = std::fs::write(path, text.join("\n\n"));
    }
    assert!(
        wrong.is_empty(),
        "{} answers differ from PostgreSQL's:\n\n{}",
        wrong.len(),
        wrong
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

async fn loaded_oracle(dir: &Path) -> Oracle {
    let mut oracle = Oracle::start(dir).await;
    oracle
        .setup(&read("schema.sql"), "WITH (partitions = 3)")
        .await;
    oracle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_answers_as_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let mut oracle = loaded_oracle(dir.path()).await;
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite_dir().join("corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let only = std::env::var("SLUICE_DIFFERENTIAL_ONLY").ok();
    let mut differences = Vec::new();
    let mut compared = 0;
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        for sql in statements(&std::fs::read_to_string(&file).unwrap()) {
            compared += 1;
            if let Some(d) = oracle.differs(&sql).await {
                differences.push(d);
            }
            // A query that broke the connection is a difference already;
            // the next one gets a fresh connection.
            if matches!(oracle.sluice("SELECT 1").await, Answer::Error { .. }) {
                oracle.reconnect().await;
            }
        }
    }
    report("corpus", compared, differences);
}
