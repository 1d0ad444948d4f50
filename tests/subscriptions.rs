//! Subscriptions are consumer groups: cursors, FETCH with a timeout, durable
//! committed offsets (both crash windows), resets, retention skips, lag,
//! view subscriptions; and REBUILD of a view with an atomic swap.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{scalar, sqlstate, text_rows, Server};

/// `(partition, offset)` of every row a FETCH returned.
async fn fetch(c: &tokio_postgres::Client, sql: &str) -> Vec<(i32, i64)> {
    c.query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| (r.get("_partition"), r.get("_offset")))
        .collect()
}

/// The server's clock as text, with commits before and after it kept apart.
async fn time_between_commits(c: &tokio_postgres::Client) -> String {
    tokio::time::sleep(Duration::from_millis(100)).await;
    let now: String = c
        .query_one("SELECT CAST(now() AS TEXT)", &[])
        .await
        .unwrap()
        .get(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    now
}

/// A new connection in a transaction block with cursor `c` on group `g`.
async fn reader_in_transaction(server: &Server) -> tokio_postgres::Client {
    let reader = server.connect().await;
    reader
        .batch_execute("BEGIN; DECLARE c SUBSCRIPTION CURSOR FOR g")
        .await
        .unwrap();
    reader
}

const SETUP: &str = "CREATE TABLE usage (tenant TEXT, tokens BIGINT) APPEND ONLY WITH (partitions = 4, partition_key = 'tenant');";

async fn insert_usage(c: &tokio_postgres::Client, from: i64, n: i64) {
    c.batch_execute(&format!(
        "INSERT INTO usage SELECT 't' || CAST(value AS TEXT), value FROM generate_series({from}, {}) AS s(value) ",
        from + n - 1
    ))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_reads_every_row_once_and_waits_for_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    insert_usage(&c, 0, 1000).await;
    c.batch_execute(
        "CREATE SUBSCRIPTION billing FROM usage; DECLARE c SUBSCRIPTION CURSOR FOR billing",
    )
    .await
    .unwrap();
    // Through the extended protocol (tokio-postgres prepares each FETCH).
    let mut seen = HashSet::new();
    loop {
        let rows = fetch(&c, "FETCH 300 FROM c").await;
        assert!(rows.len() <= 300);
        if rows.is_empty() {
            break;
        }
        for r in rows {
            assert!(seen.insert(r), "row {r:?} fetched twice");
        }
    }
    assert_eq!(seen.len(), 1000);
    let parts: HashSet<i32> = seen.iter().map(|r| r.0).collect();
    assert_eq!(parts.len(), 4, "every partition is read");
    let rows = c.query("FETCH 5 FROM c", &[]).await.unwrap();
    assert!(rows.is_empty(), "no rows: an empty answer at once");

    // With a timeout, FETCH waits for the next commit.
    let writer = server.connect().await;
    let started = Instant::now();
    let insert = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        insert_usage(&writer, 1000, 3).await;
    });
    let rows = fetch(&c, "FETCH 10 FROM c WITH (timeout = '10s')").await;
    let waited = started.elapsed();
    insert.await.unwrap();
    assert!(!rows.is_empty() && rows.len() <= 3, "{rows:?}");
    assert!(waited >= Duration::from_millis(350), "waited {waited:?}");
    assert!(
        waited < Duration::from_secs(5),
        "answered once rows came: {waited:?}"
    );
    let mut rest = rows.len();
    while rest < 3 {
        rest += fetch(&c, "FETCH 10 FROM c").await.len();
    }
    // Nothing comes: the timeout ends the wait with no rows.
    let started = Instant::now();
    assert!(fetch(&c, "FETCH 10 FROM c WITH (timeout = '300ms')")
        .await
        .is_empty());
    assert!(started.elapsed() >= Duration::from_millis(290));

    // psql shows the rows and the columns.
    let (ok, out, err) = server.psql(
        "CREATE SUBSCRIPTION audit FROM usage WITH (start = 'latest');
         SELECT 1;
         DECLARE a SUBSCRIPTION CURSOR FOR audit SINCE EARLIEST;
         FETCH 2 FROM a;\n",
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("_partition") && out.contains("_offset") && out.contains("(2 rows)"),
        "{out}"
    );

    // Lag: the caught-up group has none; a new group at the start lags by all.
    c.batch_execute("CREATE SUBSCRIPTION late FROM usage")
        .await
        .unwrap();
    assert_eq!(
        scalar(&c, "SELECT CAST(SUM(lag_records) AS BIGINT) FROM sluice_catalog.lag WHERE consumer = 'billing'").await,
        0
    );
    assert_eq!(
        scalar(&c, "SELECT CAST(SUM(lag_records) AS BIGINT) FROM sluice_catalog.lag WHERE consumer = 'late'").await,
        1003
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let age: f64 = c
        .query_one(
            "SELECT MAX(lag_seconds) FROM sluice_catalog.lag WHERE consumer = 'late' AND kind = 'subscription'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(age >= 1.0, "the oldest unread record's age: {age}");
}

/// Committed offsets per group: a transaction's FETCHes commit with it; a
/// reader that dies first (connection or server) gets the same rows again;
/// one that committed never does. Outside a transaction each FETCH commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commit_with_the_transaction_through_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    insert_usage(&c, 0, 1000).await;
    c.batch_execute("CREATE SUBSCRIPTION g FROM usage")
        .await
        .unwrap();

    // 1. The client goes away before COMMIT: the rows come again.
    let first = {
        let reader = reader_in_transaction(&server).await;
        fetch(&reader, "FETCH 100 FROM c").await
    };
    assert_eq!(first.len(), 100);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reader = reader_in_transaction(&server).await;
    assert_eq!(fetch(&reader, "FETCH 100 FROM c").await, first);

    // 2. The server is killed before COMMIT: the rows come again.
    server.kill9();
    server.restart();
    let reader = reader_in_transaction(&server).await;
    assert_eq!(fetch(&reader, "FETCH 100 FROM c").await, first);
    // 3. ...and once committed, never again, also after SIGKILL.
    reader.batch_execute("COMMIT").await.unwrap();
    server.restart();
    let reader = reader_in_transaction(&server).await;
    let second = fetch(&reader, "FETCH 100 FROM c").await;
    assert_eq!(second.len(), 100);
    assert!(
        second.iter().all(|r| !first.contains(r)),
        "committed rows never come again"
    );
    // ROLLBACK rewinds.
    reader.batch_execute("ROLLBACK").await.unwrap();

    // 4. Outside a transaction every FETCH commits before answering.
    reader
        .batch_execute("DECLARE a SUBSCRIPTION CURSOR FOR g")
        .await
        .unwrap();
    let auto = fetch(&reader, "FETCH 50 FROM a").await;
    assert_eq!(auto, second[..50].to_vec());
    server.restart();
    let reader = server.connect().await;
    reader
        .batch_execute("DECLARE a SUBSCRIPTION CURSOR FOR g")
        .await
        .unwrap();
    let after = fetch(&reader, "FETCH 50 FROM a").await;
    assert_eq!(after, second[50..].to_vec());

    // Every row, read to the end over the kills, exactly once.
    let mut all: Vec<(i32, i64)> = first.clone();
    all.extend(&second);
    loop {
        let rows = fetch(&reader, "FETCH 400 FROM a").await;
        if rows.is_empty() {
            break;
        }
        all.extend(rows);
    }
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 1000);
    assert_eq!(unique.len(), 1000);
    let committed = scalar(
        &reader,
        "SELECT CAST(SUM(committed_offset) AS BIGINT) FROM sluice_catalog.lag WHERE consumer = 'g'",
    )
    .await;
    assert_eq!(committed, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_reset_drop_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    insert_usage(&c, 0, 100).await;
    let middle = time_between_commits(&c).await;
    insert_usage(&c, 100, 100).await;
    c.batch_execute(
        "CREATE SUBSCRIPTION a FROM usage;
         CREATE SUBSCRIPTION b FROM usage WITH (start = 'latest');
         DECLARE ca SUBSCRIPTION CURSOR FOR a;
         DECLARE cb SUBSCRIPTION CURSOR FOR b;",
    )
    .await
    .unwrap();
    // Groups are independent.
    assert_eq!(fetch(&c, "FETCH ALL FROM ca").await.len(), 200);
    assert!(fetch(&c, "FETCH ALL FROM cb").await.is_empty());
    // RESET moves the committed offsets; new cursors start there.
    let count_from = |sql: &'static str| {
        let c = &c;
        async move {
            c.batch_execute("CLOSE ALL").await.unwrap();
            c.batch_execute(sql).await.unwrap();
            c.batch_execute("DECLARE x SUBSCRIPTION CURSOR FOR b")
                .await
                .unwrap();
            fetch(c, "FETCH ALL FROM x").await.len()
        }
    };
    assert_eq!(
        count_from("ALTER SUBSCRIPTION b RESET TO EARLIEST").await,
        200
    );
    assert_eq!(count_from("ALTER SUBSCRIPTION b RESET TO LATEST").await, 0);
    let ts = format!("ALTER SUBSCRIPTION b RESET TO TIMESTAMP '{middle}'");
    let ts: &'static str = Box::leak(ts.into_boxed_str());
    assert_eq!(count_from(ts).await, 100);
    let end: Vec<i64> = c
        .query("SELECT end_offset FROM sluice_catalog.partitions WHERE table_name = 'usage' ORDER BY partition", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let sql = format!(
        "ALTER SUBSCRIPTION b RESET TO OFFSETS (0 => {}, 2 => {})",
        end[0] - 2,
        end[2] - 3
    );
    c.batch_execute("ALTER SUBSCRIPTION b RESET TO LATEST")
        .await
        .unwrap();
    let sql: &'static str = Box::leak(sql.into_boxed_str());
    assert_eq!(count_from(sql).await, 5);
    // SINCE overrides the committed offsets for one cursor.
    c.batch_execute("DECLARE s SUBSCRIPTION CURSOR FOR b SINCE EARLIEST")
        .await
        .unwrap();
    assert_eq!(fetch(&c, "FETCH ALL FROM s").await.len(), 200);
    // A cursor declared before a RESET cannot commit over it.
    c.batch_execute("DECLARE old SUBSCRIPTION CURSOR FOR a")
        .await
        .unwrap();
    c.batch_execute("ALTER SUBSCRIPTION a RESET TO EARLIEST")
        .await
        .unwrap();
    let e = c.batch_execute("FETCH 1 FROM old").await.unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e}");

    for (sql, state) in [
        ("CREATE SUBSCRIPTION a FROM usage", "42710"),
        ("CREATE SUBSCRIPTION z FROM missing", "42P01"),
        ("DECLARE q SUBSCRIPTION CURSOR FOR missing", "42704"),
        ("DECLARE s SUBSCRIPTION CURSOR FOR b", "42P03"),
        ("FETCH 1 FROM missing", "34000"),
        ("CLOSE missing", "34000"),
        ("ALTER SUBSCRIPTION b RESET TO OFFSETS (9 => 0)", "22023"),
        (
            "ALTER SUBSCRIPTION b RESET TO OFFSETS (0 => 99999)",
            "22023",
        ),
        ("ALTER SUBSCRIPTION b RESET TO TIMESTAMP 'soon'", "22007"),
        (
            "CREATE SUBSCRIPTION x FROM usage WITH (start = 'soon')",
            "22023",
        ),
        ("DROP TABLE usage", "2BP01"),
        ("DROP SUBSCRIPTION missing", "42704"),
        ("DECLARE q CURSOR FOR SELECT 1", "0A000"),
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
    }
    // A failed statement aborts the transaction block until it ends.
    c.batch_execute("BEGIN").await.unwrap();
    assert!(c.batch_execute("FETCH 1 FROM missing").await.is_err());
    let e = c.batch_execute("FETCH 1 FROM s").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();

    c.batch_execute("CLOSE ALL; DROP SUBSCRIPTION a, b; DROP SUBSCRIPTION IF EXISTS a")
        .await
        .unwrap();
    let e = c
        .batch_execute("DECLARE q SUBSCRIPTION CURSOR FOR a")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42704");
    assert_eq!(
        scalar(&c, "SELECT COUNT(*) FROM sluice_catalog.subscriptions").await,
        0
    );
    c.batch_execute("DROP TABLE usage").await.unwrap();
}

/// Retention deletes records a group has not read: the next FETCH resumes
/// at the first retained offset, says so, and the skipped count is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_deleted_by_retention_are_skipped_with_a_notice() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "20000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (id BIGINT, body TEXT) APPEND ONLY WITH (retention_bytes = '40kB');
         CREATE SUBSCRIPTION slow FROM t;",
    )
    .await
    .unwrap();
    for i in 0..20 {
        c.batch_execute(&format!(
            "INSERT INTO t SELECT {i} * 1000 + value, 'row' FROM generate_series(0, 999) AS s(value)"
        ))
        .await
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while scalar(
        &c,
        "SELECT start_offset FROM sluice_catalog.partitions WHERE table_name = 't'",
    )
    .await
        == 0
    {
        assert!(Instant::now() < deadline, "retention did not run");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let start = scalar(
        &c,
        "SELECT start_offset FROM sluice_catalog.partitions WHERE table_name = 't'",
    )
    .await;
    let (ok, out, err) = server.psql("DECLARE c SUBSCRIPTION CURSOR FOR slow; FETCH 5 FROM c;\n");
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("{start}")),
        "reads from the start: {out}"
    );
    assert!(
        err.contains("NOTICE")
            && err.contains("deleted by retention")
            && err.contains(&format!("{start} records skipped, resuming at {start}")),
        "{err}"
    );
    let skipped = scalar(
        &c,
        "SELECT skipped_records FROM sluice_catalog.lag WHERE consumer = 'slow'",
    )
    .await;
    assert_eq!(skipped, start);
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        scalar(&c, "SELECT skipped_records FROM sluice_catalog.subscriptions WHERE subscription_name = 'slow'").await,
        start,
        "the count is durable"
    );
    assert_eq!(
        scalar(
            &c,
            "SELECT committed_offset FROM sluice_catalog.lag WHERE consumer = 'slow'"
        )
        .await,
        start + 5
    );
}

/// A subscription to an append-only view yields its rows with `_op`, as far
/// as a checkpoint holds them, and keeps its place across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_subscriptions_yield_changes_with_op() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW big AS SELECT tenant, tokens FROM usage WHERE tokens >= 50;
         CREATE SUBSCRIPTION changes FROM big;",
    )
    .await
    .unwrap();
    insert_usage(&c, 0, 100).await;
    c.batch_execute("FLUSH; DECLARE v SUBSCRIPTION CURSOR FOR changes")
        .await
        .unwrap();
    let rows = c.query("FETCH 30 FROM v", &[]).await.unwrap();
    assert_eq!(rows.len(), 30);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.get::<_, String>("_op"), "insert");
        assert_eq!(r.get::<_, i64>("_offset"), i as i64);
        assert!(r.get::<_, i64>("tokens") >= 50);
    }
    server.restart();
    let c = server.connect().await;
    insert_usage(&c, 100, 10).await;
    c.batch_execute("FLUSH; DECLARE v SUBSCRIPTION CURSOR FOR changes")
        .await
        .unwrap();
    let rows = c.query("FETCH ALL FROM v", &[]).await.unwrap();
    assert_eq!(rows.len(), 30, "20 left of the first 50, then 10 new");
    assert_eq!(rows[0].get::<_, i64>("_offset"), 30);
    let e = c
        .batch_execute("DROP MATERIALIZED VIEW big")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "2BP01");
}

/// Runs a REBUILD through psql while another connection reads the view's
/// total and its progress: (totals seen, reads that saw progress, psql ok,
/// psql stderr).
async fn rebuild_watched(server: &Server, script: &str) -> (HashSet<i64>, usize, bool, String) {
    let reader = server.connect().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut seen = HashSet::new();
            let mut progress = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seen.insert(scalar(&reader, "SELECT CAST(SUM(n) AS BIGINT) FROM totals").await);
                let p = reader
                    .query_one(
                        "SELECT backfill, backfill_done_rows FROM sluice_catalog.views WHERE view_name = 'totals'",
                        &[],
                    )
                    .await
                    .unwrap();
                if p.get::<_, Option<String>>(0).as_deref() == Some("rebuild") {
                    progress += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (seen, progress)
        })
    };
    let (ok, _, err) = tokio::task::block_in_place(|| server.psql(script));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (seen, progress) = watch.await.unwrap();
    (seen, progress, ok, err)
}

/// Applies a view's changes (`_op` insert/delete) to a multiset of rows.
fn apply_changes(
    state: &mut std::collections::BTreeMap<(String, i64), i64>,
    rows: &[tokio_postgres::Row],
) {
    for r in rows {
        let key = (r.get::<_, String>("tenant"), r.get::<_, i64>("total"));
        let n = state.entry(key.clone()).or_insert(0);
        match r.get::<_, String>("_op").as_str() {
            "insert" => *n += 1,
            "delete" => *n -= 1,
            other => panic!("unknown _op {other}"),
        }
        assert!(*n >= 0, "a delete of a row that was not there: {key:?}");
        if *n == 0 {
            state.remove(&key);
        }
    }
}

/// The view's rows as the same multiset.
async fn view_rows(c: &tokio_postgres::Client) -> std::collections::BTreeMap<(String, i64), i64> {
    let mut out = std::collections::BTreeMap::new();
    for r in c
        .query("SELECT tenant, total FROM totals", &[])
        .await
        .unwrap()
    {
        *out.entry((r.get(0), r.get(1))).or_insert(0) += 1;
    }
    out
}

/// A view that updates rows in place: its subscription yields a change log
/// (its rows as inserts when the subscription starts it, then each
/// checkpoint's deletes and inserts) that replays to the view's rows,
/// across a SIGKILL too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_view_subscriptions_yield_deletes_and_inserts() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    c.batch_execute(
        "CREATE MATERIALIZED VIEW totals AS SELECT substr(tenant, 1, 2) AS tenant, CAST(SUM(tokens) AS BIGINT) AS total FROM usage GROUP BY substr(tenant, 1, 2)",
    )
    .await
    .unwrap();
    insert_usage(&c, 0, 100).await;
    c.batch_execute("FLUSH; CREATE SUBSCRIPTION changes FROM totals")
        .await
        .unwrap();
    let mut state = std::collections::BTreeMap::new();
    c.batch_execute("DECLARE v SUBSCRIPTION CURSOR FOR changes")
        .await
        .unwrap();
    let rows = c.query("FETCH ALL FROM v", &[]).await.unwrap();
    assert!(
        rows.iter().all(|r| r.get::<_, String>("_op") == "insert"),
        "the log starts with the view's rows"
    );
    apply_changes(&mut state, &rows);
    assert_eq!(state, view_rows(&c).await);

    insert_usage(&c, 100, 50).await;
    c.batch_execute("FLUSH").await.unwrap();
    let rows = c.query("FETCH ALL FROM v", &[]).await.unwrap();
    assert!(
        rows.iter().any(|r| r.get::<_, String>("_op") == "delete"),
        "an update retracts the old row"
    );
    apply_changes(&mut state, &rows);
    assert_eq!(state, view_rows(&c).await);

    // After SIGKILL the log (and the group's committed offsets) are back.
    server.restart();
    let c = server.connect().await;
    insert_usage(&c, 150, 50).await;
    c.batch_execute("FLUSH; DECLARE v SUBSCRIPTION CURSOR FOR changes")
        .await
        .unwrap();
    let rows = c.query("FETCH ALL FROM v", &[]).await.unwrap();
    apply_changes(&mut state, &rows);
    assert_eq!(state, view_rows(&c).await);
    // A second group from the earliest change replays to the same rows.
    c.batch_execute(
        "CREATE SUBSCRIPTION again FROM totals; DECLARE w SUBSCRIPTION CURSOR FOR again",
    )
    .await
    .unwrap();
    let mut replay = std::collections::BTreeMap::new();
    apply_changes(
        &mut replay,
        &c.query("FETCH ALL FROM w", &[]).await.unwrap(),
    );
    assert_eq!(replay, state);
    let e = c
        .batch_execute("ALTER MATERIALIZED VIEW totals REBUILD")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");
    c.batch_execute("CLOSE ALL; DROP SUBSCRIPTION changes, again; DROP MATERIALIZED VIEW totals")
        .await
        .unwrap();
}

/// REBUILD computes the view again while the old one serves, then swaps:
/// a reader sees the old rows or the new ones, never a mix; progress shows
/// in psql as NOTICEs and in `sluice_catalog.views`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_swaps_atomically_and_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    for i in 0..4 {
        insert_usage(&c, i * 500_000, 500_000).await;
    }
    let cut = time_between_commits(&c).await;
    insert_usage(&c, 2_000_000, 1000).await;
    c.batch_execute(
        "CREATE MATERIALIZED VIEW totals AS SELECT _partition AS p, COUNT(*) AS n FROM usage GROUP BY _partition; FLUSH",
    )
    .await
    .unwrap();
    let total = "SELECT CAST(SUM(n) AS BIGINT) FROM totals";
    assert_eq!(scalar(&c, total).await, 2_001_000);

    // From a time: only what was ingested since; readers see the old rows
    // until the swap, then the new ones.
    let (seen, _, ok, err) = rebuild_watched(
        &server,
        &format!("ALTER MATERIALIZED VIEW totals REBUILD FROM TIMESTAMP '{cut}';\n"),
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        seen.iter().all(|&n| n == 2_001_000 || n == 1000),
        "old rows or new rows, never a mix: {seen:?}"
    );
    assert_eq!(scalar(&c, total).await, 1000, "rebuilt from the cut");
    // The rebuilt view is durable: after SIGKILL it comes back as rebuilt.
    server.restart();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(scalar(&c, total).await, 1000);

    // From the earliest retained offset: 2,001,000 rows again, with
    // progress in psql and in sluice_catalog.views.
    let (seen, progress, ok, err) =
        rebuild_watched(&server, "ALTER MATERIALIZED VIEW totals REBUILD;\n").await;
    assert!(ok, "{err}");
    assert!(
        seen.iter().all(|&n| n == 2_001_000 || n == 1000),
        "old rows or new rows, never a mix: {seen:?}"
    );
    assert!(progress > 0, "sluice_catalog.views showed the rebuild");
    assert!(
        err.contains("NOTICE") && err.contains("rebuild of \"totals\"") && err.contains("rows/s"),
        "psql prints progress: {err}"
    );
    assert_eq!(scalar(&c, total).await, 2_001_000);

    // A new view's backfill: FLUSH prints its progress while it waits.
    let (ok, _, err) = server.psql(
        "CREATE MATERIALIZED VIEW per_tenant AS SELECT tenant, COUNT(*) AS n FROM usage GROUP BY tenant;
         FLUSH;\n",
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("NOTICE") && err.contains("backfill of \"per_tenant\""),
        "psql prints the backfill's progress: {err}"
    );
    for (sql, state) in [
        ("ALTER MATERIALIZED VIEW usage REBUILD", "42809"),
        ("ALTER MATERIALIZED VIEW missing REBUILD", "42P01"),
        (
            "ALTER MATERIALIZED VIEW totals REBUILD FROM TIMESTAMP 'x'",
            "22007",
        ),
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
    }
}

/// `(partition, offset)` of every row a FETCH sent through the simple
/// protocol, as psql sends it.
async fn fetch_simple(c: &tokio_postgres::Client, sql: &str) -> Vec<(i32, i64)> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                r.get("_partition").and_then(|v| v.parse().ok()).unwrap(),
                r.get("_offset").and_then(|v| v.parse().ok()).unwrap(),
            )),
            _ => None,
        })
        .collect()
}

async fn lag(c: &tokio_postgres::Client, group: &str) -> i64 {
    scalar(
        c,
        &format!("SELECT CAST(SUM(lag_records) AS BIGINT) FROM sluice_catalog.lag WHERE consumer = '{group}'"),
    )
    .await
}

/// FETCHes of changing counts through both protocols: every row once, in
/// order per partition, and after each FETCH the group has committed
/// exactly what it returned. At the tail a FETCH sees rows committed since
/// the last; a cursor declared again after RESET starts over; a FETCH
/// rolled back returns the same rows again (the partition next in turn
/// goes back too); a closed connection commits nothing more; a cursor
/// declared before a RESET or of a dropped group is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_commits_what_it_returns_and_rollback_returns_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let admin = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    insert_usage(&c, 0, 1000).await;
    c.batch_execute("CREATE SUBSCRIPTION g FROM usage; DECLARE c SUBSCRIPTION CURSOR FOR g")
        .await
        .unwrap();

    // Counts that repeat and change, both protocols; after each FETCH the
    // group has committed exactly what it returned.
    let mut seen = Vec::new();
    let counts = [100, 100, 100, 50, 50, 100, 7, 100, 100, 100, 100, 100, 100];
    for (i, n) in counts.iter().enumerate() {
        let sql = format!("FETCH {n} FROM c");
        let rows = match i % 3 {
            2 => fetch(&c, &sql).await,
            _ => fetch_simple(&c, &sql).await,
        };
        seen.extend(rows);
        assert_eq!(
            lag(&admin, "g").await,
            1000 - seen.len() as i64,
            "after FETCH {i}"
        );
    }
    assert_eq!(seen.len(), 1000);
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 1000, "a row was fetched twice");
    for p in 0..4 {
        let offsets: Vec<i64> = seen.iter().filter(|r| r.0 == p).map(|r| r.1).collect();
        assert!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "partition {p} out of order"
        );
    }

    // At the tail, the next FETCH sees rows committed after the last.
    insert_usage(&c, 1000, 5).await;
    assert_eq!(fetch_simple(&c, "FETCH 4 FROM c").await.len(), 4);
    insert_usage(&c, 1005, 10).await;
    assert_eq!(fetch_simple(&c, "FETCH 4 FROM c").await.len(), 4);
    assert_eq!(fetch_simple(&c, "FETCH 100 FROM c").await.len(), 7);

    // A cursor declared again at another place reads from there.
    c.batch_execute("CREATE SUBSCRIPTION h FROM usage; DECLARE d SUBSCRIPTION CURSOR FOR h")
        .await
        .unwrap();
    let first = fetch_simple(&c, "FETCH 10 FROM d").await;
    let second = fetch_simple(&c, "FETCH 10 FROM d").await;
    c.batch_execute(
        "CLOSE d; ALTER SUBSCRIPTION h RESET TO EARLIEST; DECLARE d SUBSCRIPTION CURSOR FOR h",
    )
    .await
    .unwrap();
    assert_eq!(fetch_simple(&c, "FETCH 10 FROM d").await, first);
    // A FETCH rolled back returns the same rows again.
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(fetch_simple(&c, "FETCH 10 FROM d").await, second);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(fetch_simple(&c, "FETCH 10 FROM d").await, second);
    let third = fetch_simple(&c, "FETCH 10 FROM d").await;
    // A closed connection commits nothing more.
    drop(c);
    assert_eq!(lag(&admin, "h").await, 1015 - 30);
    admin
        .batch_execute("DECLARE e SUBSCRIPTION CURSOR FOR h")
        .await
        .unwrap();
    let next = fetch_simple(&admin, "FETCH 10 FROM e").await;
    assert!(next
        .iter()
        .all(|r| !third.contains(r) && !second.contains(r)));
    assert_eq!(next.len(), 10);
    // A RESET refuses the cursors declared before it.
    fetch_simple(&admin, "FETCH 10 FROM e").await;
    admin
        .batch_execute("ALTER SUBSCRIPTION h RESET TO EARLIEST")
        .await
        .unwrap();
    let e = admin.simple_query("FETCH 10 FROM e").await.unwrap_err();
    assert_eq!(sqlstate(&e), "55000", "{e}");
    assert_eq!(lag(&admin, "h").await, 1015);
    // A dropped group's cursor is refused.
    admin
        .batch_execute("CLOSE e; DECLARE e SUBSCRIPTION CURSOR FOR h")
        .await
        .unwrap();
    fetch_simple(&admin, "FETCH 10 FROM e").await;
    admin.batch_execute("DROP SUBSCRIPTION h").await.unwrap();
    let e = admin.simple_query("FETCH 10 FROM e").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42704", "{e}");
}

/// A keyed table's subscription reads through compaction: the records
/// VACUUM removed (holes) are no rows, a FETCH of n goes past them to n
/// records, and applying what a reader fetched gives the table. (Before,
/// every FETCH after VACUUM failed with XX000: `_op` NULL in a column
/// declared NOT NULL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_subscriptions_fetch_through_vacuum() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    for retention in ["'0s'", "'1 hour'"] {
        c.batch_execute(&format!(
            "DROP SUBSCRIPTION IF EXISTS g; DROP TABLE IF EXISTS acc;
             CREATE TABLE acc (id INT PRIMARY KEY, v TEXT) WITH (delete_retention = {retention});
             CREATE SUBSCRIPTION g FROM acc WITH (start = 'earliest');
             INSERT INTO acc SELECT i, 'v' || i FROM generate_series(1, 40) i;
             UPDATE acc SET v = 'w' || id WHERE id <= 20;
             DELETE FROM acc WHERE id % 7 = 0;
             VACUUM acc;"
        ))
        .await
        .unwrap();
        for since in ["", " SINCE EARLIEST"] {
            c.batch_execute(&format!("DECLARE c SUBSCRIPTION CURSOR FOR g{since}"))
                .await
                .unwrap();
            let mut seen = std::collections::BTreeMap::new();
            loop {
                let rows = text_rows(&c, "FETCH 5 FROM c").await;
                if rows.is_empty() {
                    break;
                }
                for r in rows {
                    let f: Vec<&str> = r.split('|').collect();
                    match f[2] {
                        "delete" => seen.remove(f[0]),
                        _ => seen.insert(f[0].to_string(), f[1].to_string()),
                    };
                }
            }
            c.batch_execute("CLOSE c").await.unwrap();
            let fetched: Vec<String> = seen.iter().map(|(k, v)| format!("{k}|{v}")).collect();
            let mut table = text_rows(&c, "SELECT id, v FROM acc").await;
            table.sort();
            let mut fetched = fetched;
            fetched.sort();
            assert_eq!(fetched, table, "retention {retention}{since}");
        }
    }
}
