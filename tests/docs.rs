//! Every SQL example in `docs/` runs against a real server, in the order
//! of its page (one server per page), through psql as a reader would paste
//! it; where the page shows psql's output right after (a ```` ```text ````
//! block), the output must be what is shown. A block marked
//! ```` ```sql no-run ```` needs what the tests cannot give it (a Kafka
//! broker, an S3 bucket, a file on the reader's machine) and is counted,
//! not run.

mod common;

use std::path::{Path, PathBuf};

use common::Server;

/// One fenced block of a page.
#[derive(Debug)]
struct Block {
    info: String,
    text: String,
    line: usize,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in page.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    text: String::new(),
                    line: i + 1,
                })
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// psql's output as compared: trailing blanks of each line and blank
/// lines at the end dropped.
fn normalized(text: &str) -> String {
    text.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

fn pages() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

#[test]
fn every_sql_example_in_docs_runs_and_shows_its_output() {
    let (mut ran, mut checked, mut not_run) = (0, 0, 0);
    let mut failures = Vec::new();
    for page in pages() {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        let blocks = blocks(&std::fs::read_to_string(&page).unwrap());
        if !blocks.iter().any(|b| b.info == "sql") {
            not_run += blocks.iter().filter(|b| b.info.starts_with("sql")).count();
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let server = Server::start(dir.path());
        for (i, block) in blocks.iter().enumerate() {
            if block.info.starts_with("sql") && block.info != "sql" {
                not_run += 1;
                continue;
            }
            if block.info != "sql" {
                continue;
            }
            ran += 1;
            let (ok, stdout, stderr) = server.psql(&block.text);
            if !ok {
                failures.push(format!("{name}:{}: {}", block.line, stderr.trim()));
                continue;
            }
            if let Some(shown) = blocks.get(i + 1).filter(|b| b.info == "text") {
                checked += 1;
                if normalized(&stdout) != normalized(&shown.text) {
                    failures.push(format!(
                        "{name}:{}: the output differs from the page's\n--- shown\n{}\n--- got\n{}",
                        block.line,
                        normalized(&shown.text),
                        normalized(&stdout)
                    ));
                }
            }
        }
    }
    eprintln!("docs: {ran} SQL examples run, {checked} outputs checked, {not_run} marked no-run");
    assert!(ran > 0, "no SQL example found in docs/");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The README's example, pasted into a shell as it says: the SQL of its
/// `psql ... <<'SQL'` block runs without an error, and the view it creates
/// shows the rows the example's inserts make.
#[test]
fn the_readme_example_runs_as_pasted() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("<<'SQL'\n").expect("the README's psql example") + "<<'SQL'\n".len();
    let end = start
        + readme[start..]
            .find("\nSQL\n")
            .expect("the end of the example");
    let sql = &readme[start..end];
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let (ok, stdout, stderr) = server.psql(sql);
    assert!(ok, "the README's example failed: {stderr}");
    assert!(
        stdout.contains("acme   | 2026-01-01 10:00:00 | 2026-01-01 10:01:00 |    205 |      3"),
        "the view's rows: {stdout}"
    );
}
