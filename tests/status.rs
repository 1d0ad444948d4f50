//! What an operator looks at: the status page (over HTTP and rendered in
//! headless Chromium), `sluice_catalog.sessions`, `/readyz` while views
//! replay after a crash, and the ingest and compaction metrics.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{http_get, sample, scalar, text_rows, Server};

/// A table, a view over it, a subscription and some rows.
async fn workload(c: &tokio_postgres::Client) {
    c.batch_execute(
        "CREATE TABLE clicks (id BIGINT, page TEXT) WITH (partitions = 2);
         CREATE MATERIALIZED VIEW clicks_per_page AS SELECT page, count(*) AS n FROM clicks GROUP BY page;
         CREATE SUBSCRIPTION click_export FROM clicks;
         INSERT INTO clicks SELECT x AS id, CAST(x % 5 AS TEXT) AS page FROM generate_series(1, 1000) AS s(x);
         FLUSH",
    )
    .await
    .unwrap();
}

/// The cells of the HTML table rows in `section` that mention `needle`.
fn rows_with<'a>(html: &'a str, section: &str, needle: &str) -> Vec<&'a str> {
    let start = html
        .find(&format!("<section id=\"{section}\">"))
        .unwrap_or_else(|| panic!("no section {section} in:\n{html}"));
    let body = &html[start..];
    let body = &body[..body.find("</section>").unwrap_or(body.len())];
    body.split("<tr>").filter(|r| r.contains(needle)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_tables_views_subscriptions_checkpoints_and_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    workload(&c).await;
    // A statement running on another connection is listed with its text.
    let sleeper = server.connect().await;
    let running = tokio::spawn(async move { sleeper.simple_query("SELECT pg_sleep(3)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (status, html) = http_get(server.http_port, "/").await;
    assert_eq!(status, 200);
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no external assets"
    );
    let tables = rows_with(&html, "tables", "<td>clicks</td>");
    assert_eq!(tables.len(), 1, "{html}");
    assert!(
        tables[0].contains("<td class=\"n\">1000</td>"),
        "records: {}",
        tables[0]
    );
    assert_eq!(
        rows_with(&html, "partitions", "<td>clicks</td>").len(),
        2,
        "one row per partition"
    );
    let views = rows_with(&html, "views", "<td>clicks_per_page</td>");
    assert_eq!(views.len(), 1, "{html}");
    assert!(
        views[0].contains("<td class=\"n\">5</td>"),
        "state rows: {}",
        views[0]
    );
    let subs = rows_with(&html, "subscriptions", "<td>click_export</td>");
    assert_eq!(subs.len(), 1, "{html}");
    assert!(
        subs[0].contains("<td class=\"n\">1000</td>"),
        "lag: {}",
        subs[0]
    );
    assert!(!rows_with(&html, "checkpoints", "<td>clicks_per_page</td>").is_empty());
    let sessions = rows_with(&html, "sessions", "pg_sleep(3)");
    assert_eq!(sessions.len(), 1, "{html}");
    assert!(sessions[0].contains("<td>active</td>"), "{}", sessions[0]);

    // The part the page's script fetches: the sections without the page.
    let (status, part) = http_get(server.http_port, "/?part=main").await;
    assert_eq!(status, 200);
    assert!(part.starts_with("<section id=\"tables\">"), "{part}");
    assert!(!part.contains("<script>"));
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_runs_in_headless_chromium_without_script_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    workload(&c).await;
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/", server.http_port);
    // Virtual time runs the page's timers without waiting for them: the
    // budget covers two refreshes.
    let out = tokio::task::spawn_blocking(move || {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=12000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--dump-dom")
            .arg(&url)
            .output()
            .expect("chromium (Debian's package, installed by .ci/run)")
    })
    .await
    .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    assert!(
        dom.contains("data-script=\"ready\""),
        "the page's script did not run:\n{dom}\n{log}"
    );
    assert!(!dom.contains("data-errors"), "script errors:\n{dom}\n{log}");
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("Error")))
        .collect();
    assert!(console_errors.is_empty(), "{console_errors:?}");
    assert!(
        dom.contains("data-refreshes="),
        "the page never refreshed itself:\n{dom}"
    );
    assert!(dom.contains("clicks_per_page"), "{dom}");
    assert!(dom.contains("click_export"), "{dom}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_each_connection_and_what_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    workload(&c).await;
    // A prepared statement (extended protocol) is listed by its text.
    let sleeper = server.connect().await;
    let prepared = sleeper
        .prepare("SELECT pg_sleep($1) AS slept")
        .await
        .unwrap();
    let running = tokio::spawn(async move { sleeper.query(&prepared, &[&2.0f64]).await });
    // psql (simple protocol), in a transaction block left open.
    let mut psql = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &server.port.to_string(),
            "-U",
            "ops",
            "-d",
            "sluice",
            "-c",
            "BEGIN",
            "-c",
            "SELECT count(*) FROM clicks",
            "-c",
            "SELECT pg_sleep(2)",
        ])
        .env("PGAPPNAME", "status-check")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let rows = text_rows(
        &c,
        "SELECT user_name || ' ' || application_name || ' ' || state || ' ' || query \
         FROM sluice_catalog.sessions WHERE query LIKE '%pg_sleep%' AND query NOT LIKE '%sessions%' \
         ORDER BY query",
    )
    .await;
    let all = text_rows(
        &c,
        "SELECT state || ' ' || query FROM sluice_catalog.sessions",
    )
    .await;
    assert_eq!(rows.len(), 2, "{rows:?} of {all:?}");
    assert!(
        rows.iter()
            .any(|r| r.ends_with("active SELECT pg_sleep($1) AS slept")),
        "{rows:?}"
    );
    assert!(
        rows.contains(&"ops status-check active SELECT pg_sleep(2)".to_string()),
        "{rows:?}"
    );
    // The connection asking sees itself, running this very query.
    let me = text_rows(
        &c,
        "SELECT state || ' ' || query FROM sluice_catalog.sessions WHERE query LIKE '%whoami-7%'",
    )
    .await;
    assert_eq!(me.len(), 1, "{me:?}");
    assert!(me[0].starts_with("active "), "{me:?}");
    running.await.unwrap().expect("the prepared sleep");
    assert!(psql.wait().unwrap().success());
    // Both are gone once they disconnect; backend_start is set.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = scalar(
        &c,
        "SELECT count(*) FROM sluice_catalog.sessions WHERE backend_start IS NOT NULL",
    )
    .await;
    assert_eq!(left, 1, "only this connection is left");
}

/// Rows loaded before the crash: the view replays all of them at the
/// next start (`SLUICE_RECOVERY_ROWS` sets another number).
fn recovery_rows() -> i64 {
    std::env::var("SLUICE_RECOVERY_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_views_replay_the_log_and_200_once_they_have() {
    let rows = recovery_rows();
    let dir = tempfile::tempdir().unwrap();
    // No checkpoint but the view's first: a restart replays every row.
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "3600000"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE ev (id BIGINT, tenant BIGINT) WITH (partitions = 2);
         CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, count(*) AS n FROM ev GROUP BY tenant;",
    )
    .await
    .unwrap();
    c.batch_execute(&format!(
        "INSERT INTO ev SELECT x AS id, x % 100 AS tenant FROM generate_series(1, {rows}) AS s(x)"
    ))
    .await
    .unwrap();
    drop(c);
    server.kill9();

    let ready_before = server.start_again_until_http();
    let mut statuses = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (status, _) = http_get(server.http_port, "/readyz").await;
        if statuses.last() != Some(&status) {
            statuses.push(status);
        }
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(statuses, [503, 200], "503 while recovering, then 200");
    // Ready means replayed: the view has applied every row.
    server.wait_ready(ready_before);
    let c = server.connect().await;
    assert_eq!(
        scalar(&c, "SELECT lag_rows FROM sluice_catalog.views").await,
        0
    );
    assert_eq!(
        scalar(&c, "SELECT CAST(sum(n) AS BIGINT) FROM per_tenant").await,
        rows
    );
    assert!(server.log_text().contains("recovery done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingested_bytes_and_compaction_reach_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments, tiered at once: compaction has closed segments to
    // rewrite.
    let server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "4000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k BIGINT PRIMARY KEY, v TEXT) WITH (partitions = 1, delete_retention = '0s')",
    )
    .await
    .unwrap();
    // 40 versions of each of 20 keys.
    for round in 0..40 {
        c.batch_execute(&format!(
            "INSERT INTO kv SELECT x AS k, repeat('{round}', 100) AS v FROM generate_series(1, 20) AS s(x)"
        ))
        .await
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar(&c, "SELECT CAST(remote_segments AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = 'kv'").await < 3 {
        assert!(Instant::now() < deadline, "segments never reached the object store");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.batch_execute("VACUUM kv").await.unwrap();

    let reclaimed = scalar(
        &c,
        "SELECT compacted_bytes_reclaimed FROM sluice_catalog.partitions WHERE table_name = 'kv'",
    )
    .await;
    assert!(reclaimed > 0, "compaction reclaimed {reclaimed} bytes");
    let ingested = scalar(
        &c,
        "SELECT ingested_bytes FROM sluice_catalog.tables WHERE table_name = 'kv'",
    )
    .await;
    assert!(ingested > 40 * 20 * 100, "ingested {ingested} bytes");

    let (status, metrics) = http_get(server.http_port, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(&metrics, "sluice_table_ingested_bytes{table=\"kv\"}"),
        ingested as f64
    );
    assert_eq!(
        sample(&metrics, "sluice_compaction_reclaimed_bytes{table=\"kv\"}"),
        reclaimed as f64
    );
    let runs = scalar(
        &c,
        "SELECT compactions FROM sluice_catalog.partitions WHERE table_name = 'kv'",
    )
    .await;
    assert!(runs >= 1);
    assert!(sample(&metrics, "sluice_compaction_runs{table=\"kv\"}") >= runs as f64);
    for line in [
        "# HELP sluice_object_store_failures",
        "# HELP sluice_table_ingested_bytes",
        "# HELP sluice_compaction_runs",
    ] {
        assert!(metrics.contains(line), "{line} missing");
    }
}
