//! Transaction blocks: writes inside BEGIN are visible to the block at
//! once, to everyone else at COMMIT (all tables together), and never after
//! ROLLBACK, a failed block, a dropped connection or a SIGKILL before
//! COMMIT was acknowledged.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{python_has, scalar, sqlstate, text_rows, Server};
use futures::SinkExt;
use rand::{Rng, SeedableRng};

const TABLES: &str = "
    CREATE TABLE events (id BIGINT, note TEXT) APPEND ONLY WITH (partitions = 3);
    CREATE TABLE audit (id BIGINT, what TEXT) APPEND ONLY;
    CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT);
    INSERT INTO accounts VALUES (1, 100), (2, 200), (3, 300);
";

async fn copy_in(c: &tokio_postgres::Client, sql: &str, data: &str) -> u64 {
    let sink = c.copy_in(sql).await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data.to_string()))
        .await
        .unwrap();
    sink.finish().await.unwrap()
}

/// Every kind of write, on three tables (COPY and a prepared INSERT follow).
const BLOCK: &str = "BEGIN;
     INSERT INTO events VALUES (1, 'a'), (2, 'b');
     INSERT INTO audit SELECT id, 'copied ' || note FROM events;
     UPDATE accounts SET balance = balance - 50 WHERE id = 1;
     DELETE FROM accounts WHERE id = 3;
     INSERT INTO accounts VALUES (4, 400);";

/// Everything a block wrote, as an outsider reads it.
async fn state(c: &tokio_postgres::Client) -> (i64, i64, Vec<String>) {
    (
        scalar(c, "SELECT count(*) FROM events").await,
        scalar(c, "SELECT count(*) FROM audit").await,
        text_rows(c, "SELECT id, balance FROM accounts ORDER BY id").await,
    )
}

#[tokio::test]
async fn rollback_discards_and_commit_publishes_every_kind_of_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    let other = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let before = state(&other).await;

    c.batch_execute(BLOCK).await.unwrap();
    assert_eq!(
        copy_in(&c, "COPY events FROM STDIN", "3\tc\n4\td\n").await,
        2
    );
    let insert = c
        .prepare("INSERT INTO events VALUES ($1, $2)")
        .await
        .unwrap();
    c.execute(&insert, &[&5i64, &"e"]).await.unwrap();
    // The block reads its own writes ...
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 5);
    assert_eq!(scalar(&c, "SELECT count(*) FROM audit").await, 2);
    assert_eq!(
        text_rows(&c, "SELECT id, balance FROM accounts ORDER BY id").await,
        vec!["1|50", "2|200", "4|400"]
    );
    // ... and nobody else does.
    assert_eq!(state(&other).await, before);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(state(&c).await, before);
    assert_eq!(state(&other).await, before);

    // The same block committed: all of it, for everyone.
    c.batch_execute(BLOCK).await.unwrap();
    copy_in(&c, "COPY events FROM STDIN", "3\tc\n4\td\n").await;
    c.batch_execute("COMMIT").await.unwrap();
    let after = (
        4,
        2,
        vec!["1|50".to_string(), "2|200".into(), "4|400".into()],
    );
    assert_eq!(state(&other).await, after);

    // A connection that goes away mid-block leaves nothing.
    {
        let gone = server.connect().await;
        gone.batch_execute(
            "BEGIN; INSERT INTO events VALUES (9, 'lost'); INSERT INTO audit VALUES (9, 'lost')",
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(state(&other).await, after);

    // ROLLBACK TO SAVEPOINT takes back the writes since the savepoint.
    c.batch_execute(
        "BEGIN; INSERT INTO events VALUES (10, 'kept'); SAVEPOINT s;
         INSERT INTO events VALUES (11, 'undone'); DELETE FROM accounts WHERE id = 1;
         ROLLBACK TO SAVEPOINT s; COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(
        text_rows(&other, "SELECT id FROM events WHERE id >= 10").await,
        vec!["10"]
    );
    assert_eq!(scalar(&other, "SELECT count(*) FROM accounts").await, 3);

    // ON CONFLICT DO NOTHING sees the block's own keys.
    c.batch_execute(
        "BEGIN; INSERT INTO accounts VALUES (7, 1);
         INSERT INTO accounts VALUES (7, 2), (2, 2) ON CONFLICT DO NOTHING; COMMIT",
    )
    .await
    .unwrap();
    assert_eq!(
        text_rows(
            &other,
            "SELECT id, balance FROM accounts WHERE id IN (2, 7) ORDER BY id"
        )
        .await,
        vec!["2|200", "7|1"]
    );

    // And all of it survives a restart (the multi-table commits went
    // through the transaction log).
    drop((c, other));
    let mut server = server;
    server.restart();
    let c = server.connect().await;
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 5);
    assert_eq!(scalar(&c, "SELECT count(*) FROM accounts").await, 4);
}

#[tokio::test]
async fn a_failed_block_refuses_everything_until_it_ends_and_commit_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let fails = |sql: &'static str, code: &'static str| {
        let c = &c;
        async move {
            let e = c.simple_query(sql).await.unwrap_err();
            assert_eq!(sqlstate(&e), code, "{sql}: {e}");
        }
    };
    c.batch_execute("BEGIN; INSERT INTO events VALUES (3, 'c')")
        .await
        .unwrap();
    fails("SELECT 1/0", "22012").await;
    fails("INSERT INTO events VALUES (4, 'd')", "25P02").await;
    // Prepared statements too.
    let e = c
        .execute("INSERT INTO events VALUES ($1, 'd')", &[&4i64])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25P02", "{e}");
    // COMMIT of a failed block rolls it back (psql below shows its tag).
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 0);
    // A statement that fails at Parse (a driver's prepare) aborts the
    // block as well.
    c.batch_execute("BEGIN; INSERT INTO events VALUES (5, 'e')")
        .await
        .unwrap();
    let e = c.prepare("SELEC 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42601", "{e}");
    fails("INSERT INTO events VALUES (6, 'f')", "25P02").await;
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 0);

    // The same through psql, as the issue tried it (going on after errors,
    // as psql does by default).
    let (ok, out, err) = server.psql_on_errors_continue(
        "BEGIN; INSERT INTO events VALUES (1, 'a'); INSERT INTO events VALUES (2, 'b'); ROLLBACK;
         SELECT count(*) FROM events;
         BEGIN; INSERT INTO events VALUES (3, 'c');
         SELECT 1/0;
         INSERT INTO events VALUES (4, 'd');
         COMMIT;
         SELECT count(*) FROM events;",
    );
    assert!(ok, "{err}");
    assert!(err.contains("division by zero"), "{err}");
    assert!(
        err.contains(
            "current transaction is aborted, commands ignored until end of transaction block"
        ),
        "{err}"
    );
    // The COMMIT of the failed block answers ROLLBACK.
    let tags: Vec<&str> = out
        .lines()
        .filter(|l| *l == "ROLLBACK" || *l == "COMMIT")
        .collect();
    assert_eq!(tags, ["ROLLBACK", "ROLLBACK"], "{out}");
    let counts: Vec<&str> = out.lines().filter(|l| l.trim() == "0").collect();
    assert_eq!(counts.len(), 2, "{out}");

    // SERIALIZABLE cannot be kept: refused, not pretended.
    for sql in [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET default_transaction_isolation = 'serializable'",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), "0A000", "{sql}: {e}");
    }
    c.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED; COMMIT")
        .await
        .unwrap();
}

async fn fails_with(c: &tokio_postgres::Client, sql: &str, code: &str) {
    let e = c.batch_execute(sql).await.unwrap_err();
    assert_eq!(sqlstate(&e), code, "{sql}: {e}");
}

/// REPEATABLE READ: every statement of the block reads the tables as they
/// were at its first statement (plus its own writes), and a write to a key
/// someone else committed since fails with 40001, nothing committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeatable_read_keeps_one_snapshot_and_the_first_committer_wins() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        &["--segment-bytes", "4000", "--tiering-interval-ms", "100"],
    );
    let c = server.connect().await;
    let other = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();

    // One snapshot, over several tables, for the whole block.
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    assert_eq!(
        text_rows(&c, "SHOW transaction_isolation").await,
        ["repeatable read"]
    );
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 0);
    other
        .batch_execute(
            "INSERT INTO events VALUES (1, 'x'), (2, 'y');
             INSERT INTO audit VALUES (1, 'later');
             UPDATE accounts SET balance = 999 WHERE id = 2;
             INSERT INTO accounts VALUES (7, 700);",
        )
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 0);
    assert_eq!(scalar(&c, "SELECT count(*) FROM audit").await, 0);
    assert_eq!(
        text_rows(&c, "SELECT id, balance FROM accounts ORDER BY id").await,
        ["1|100", "2|200", "3|300"]
    );
    fails_with(
        &c,
        "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "25001",
    )
    .await;
    c.batch_execute("ROLLBACK").await.unwrap();
    // Its own writes are seen, on top of the snapshot.
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .await
        .unwrap();
    other
        .batch_execute("INSERT INTO events VALUES (3, 'z')")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO events VALUES (10, 'mine')")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 3);
    // Appends never conflict.
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 4);

    // A key updated by someone else since the snapshot: 40001 at COMMIT,
    // on one table and with a second table in the transaction.
    for second_table in ["", "INSERT INTO audit VALUES (99, 'lost');"] {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .unwrap();
        let seen = scalar(&c, "SELECT balance FROM accounts WHERE id = 1").await;
        other
            .batch_execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            .await
            .unwrap();
        c.batch_execute(&format!(
            "UPDATE accounts SET balance = balance - 10 WHERE id = 1; {second_table}"
        ))
        .await
        .unwrap();
        assert_eq!(
            scalar(&c, "SELECT balance FROM accounts WHERE id = 1").await,
            seen - 10
        );
        fails_with(&c, "COMMIT", "40001").await;
        assert_eq!(
            scalar(&other, "SELECT balance FROM accounts WHERE id = 1").await,
            seen + 1,
            "the concurrent update stays, the stale one is not committed"
        );
        assert_eq!(
            scalar(&other, "SELECT count(*) FROM audit WHERE id = 99").await,
            0
        );
    }
    // Other keys do not conflict.
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .await
        .unwrap();
    other
        .batch_execute("UPDATE accounts SET balance = 0 WHERE id = 3")
        .await
        .unwrap();
    c.batch_execute("DELETE FROM accounts WHERE id = 7; COMMIT")
        .await
        .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT id, balance FROM accounts ORDER BY id").await,
        ["1|102", "2|999", "3|0"]
    );

    // Compaction keeps the versions an open snapshot reads.
    c.batch_execute(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT);
         SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await
    .unwrap();
    let fill = |tag: &'static str| {
        let other = &other;
        async move {
            let values: Vec<String> = (0..100).map(|i| format!("('k{i}', '{tag}')")).collect();
            other
                .batch_execute(&format!("INSERT INTO kv VALUES {}", values.join(", ")))
                .await
                .unwrap();
        }
    };
    fill("old").await;
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(
        text_rows(&c, "SHOW transaction_isolation").await,
        ["repeatable read"]
    );
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM kv WHERE v = 'old'").await,
        100
    );
    for _ in 0..5 {
        fill("new").await;
    }
    other.batch_execute("VACUUM kv").await.unwrap();
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM kv WHERE v = 'old'").await,
        100
    );
    c.batch_execute("COMMIT; SET default_transaction_isolation = 'read committed'")
        .await
        .unwrap();
    other.batch_execute("VACUUM kv").await.unwrap();
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM changelog(kv) WHERE v = 'old'").await,
        0,
        "once the snapshot is gone, compaction removes the old versions"
    );
    assert_eq!(
        text_rows(&c, "SHOW transaction_isolation").await,
        ["read committed"]
    );
}

/// READ ONLY transactions (and a session whose default is READ ONLY)
/// refuse writes with 25006 and read as usual.
#[tokio::test]
async fn read_only_transactions_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    c.batch_execute("START TRANSACTION READ ONLY")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM accounts").await, 3);
    fails_with(&c, "INSERT INTO events VALUES (1, 'x')", "25006").await;
    c.batch_execute("ROLLBACK").await.unwrap();
    c.batch_execute("BEGIN; SET TRANSACTION READ ONLY")
        .await
        .unwrap();
    fails_with(&c, "UPDATE accounts SET balance = 0", "25006").await;
    c.batch_execute("ROLLBACK").await.unwrap();
    // Read only can be asked after a query; read write cannot.
    c.batch_execute("BEGIN READ ONLY; SELECT 1").await.unwrap();
    fails_with(&c, "SET TRANSACTION READ WRITE", "25001").await;
    c.batch_execute("ROLLBACK").await.unwrap();

    c.batch_execute("SET default_transaction_read_only = on")
        .await
        .unwrap();
    assert_eq!(text_rows(&c, "SHOW transaction_read_only").await, ["on"]);
    for sql in [
        "INSERT INTO events VALUES (1, 'x')",
        "DELETE FROM accounts",
        "CREATE TABLE t2 (a BIGINT) APPEND ONLY",
        "DROP TABLE events",
    ] {
        fails_with(&c, sql, "25006").await;
    }
    // A prepared INSERT too.
    let e = c
        .execute("INSERT INTO events VALUES ($1, $2)", &[&5i64, &"p"])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25006", "{e}");
    c.batch_execute("BEGIN READ WRITE; INSERT INTO events VALUES (1, 'x'); COMMIT")
        .await
        .unwrap();
    c.batch_execute("SET default_transaction_read_only = off; INSERT INTO events VALUES (2, 'y')")
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM events").await, 2);
}

/// A writer commits the same rows to two tables in each transaction; a
/// reader never sees one table ahead of the other, whether it reads both
/// in one statement or one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_never_see_part_of_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let setup = server.connect().await;
    setup
        .batch_execute(
            "CREATE TABLE a (n BIGINT) APPEND ONLY WITH (partitions = 2);
             CREATE TABLE b (n BIGINT) APPEND ONLY WITH (partitions = 2);",
        )
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let c = server.connect().await;
        let done = done.clone();
        tokio::spawn(async move {
            for i in 0..150i64 {
                c.batch_execute(&format!(
                    "BEGIN; INSERT INTO a VALUES ({i}), ({i}); INSERT INTO b VALUES ({i}), ({i}); COMMIT"
                ))
                .await
                .unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let reader = server.connect().await;
    let mut reads = 0;
    while !done.load(Ordering::Acquire) {
        let both = text_rows(
            &reader,
            "SELECT (SELECT count(*) FROM a) AS a, (SELECT count(*) FROM b) AS b",
        )
        .await;
        let (x, y) = both[0].split_once('|').unwrap();
        assert_eq!(x, y, "one statement saw a part of a transaction");
        // b read after a: it has at least what a had.
        let a = scalar(&reader, "SELECT count(*) FROM a").await;
        let b = scalar(&reader, "SELECT count(*) FROM b").await;
        assert!(b >= a, "b ({b}) behind a ({a}) read before it");
        assert_eq!(a % 2, 0, "half a transaction's rows in a");
        reads += 1;
    }
    writer.await.unwrap();
    assert!(reads > 0);
    assert_eq!(scalar(&reader, "SELECT count(*) FROM b").await, 300);
}

fn kills() -> usize {
    common::crash_runs_or(8)
}

/// Clients run transactions of several statements over three tables while
/// the server is killed with SIGKILL at random moments. After each restart
/// every transaction is wholly present or wholly absent, and every one
/// whose COMMIT was acknowledged is present.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transactions_are_all_or_nothing_through_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE orders (tx TEXT, item BIGINT) APPEND ONLY WITH (partitions = 4);
         CREATE TABLE lines (tx TEXT, n BIGINT) APPEND ONLY WITH (partitions = 2);
         CREATE TABLE latest (tx TEXT PRIMARY KEY, items BIGINT);",
    )
    .await
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7a);
    let mut acknowledged: BTreeSet<String> = BTreeSet::new();
    for round in 0..kills() {
        let port = server.port;
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for client in 0..3 {
            let stop = stop.clone();
            let conn = format!("host=127.0.0.1 port={port} user=t dbname=t");
            clients.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                let Ok((c, conn)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await else {
                    return acked;
                };
                tokio::spawn(conn);
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    let tx = format!("r{round}c{client}t{i}");
                    let items = 1 + i % 5;
                    let mut sql = String::from("BEGIN;");
                    for item in 0..items {
                        sql.push_str(&format!("INSERT INTO orders VALUES ('{tx}', {item});"));
                    }
                    sql.push_str(&format!(
                        "INSERT INTO lines SELECT tx, count(*) FROM orders WHERE tx = '{tx}' GROUP BY tx;
                         INSERT INTO latest VALUES ('{tx}', {items});
                         COMMIT;"
                    ));
                    match c.batch_execute(&sql).await {
                        Ok(()) => acked.push(tx),
                        Err(_) => break,
                    }
                    i += 1;
                }
                acked
            }));
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..700))).await;
        server.kill9();
        stop.store(true, Ordering::Release);
        for client in clients {
            acknowledged.extend(client.await.unwrap());
        }
        server.restart();
        let c = server.connect().await;
        let orders = group_counts(&c, "SELECT tx, count(*) FROM orders GROUP BY tx").await;
        let lines = group_counts(&c, "SELECT tx, sum(n) FROM lines GROUP BY tx").await;
        let latest = group_counts(&c, "SELECT tx, items FROM latest").await;
        for (tx, n) in &orders {
            assert_eq!(lines.get(tx), Some(n), "{tx}: orders without its line");
            assert_eq!(
                latest.get(tx),
                Some(n),
                "{tx}: orders without its latest row"
            );
        }
        assert_eq!(orders.len(), lines.len(), "lines without orders");
        assert_eq!(orders.len(), latest.len(), "latest rows without orders");
        for tx in &acknowledged {
            assert!(orders.contains_key(tx), "acknowledged {tx} lost");
        }
    }
    assert!(
        acknowledged.len() > 10,
        "{} transactions",
        acknowledged.len()
    );
}

async fn group_counts(c: &tokio_postgres::Client, sql: &str) -> BTreeMap<String, i64> {
    c.query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect()
}

fn worker(server: &Server, drain: bool) -> Child {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/read_process_write.py"
    );
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .args(["--dsn", &server.conn_string()])
        .args(["--batch", "170"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if drain {
        cmd.arg("--drain");
    }
    cmd.spawn().expect("python3 runs the worker")
}

/// The read-process-write example: the worker's per-batch totals and its
/// subscription offsets commit in one transaction, so through 20 SIGKILLs
/// (of the server and of the worker) the totals equal the table's sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_process_write_is_exact_through_sigkill() {
    if !python_has("psycopg") {
        panic!("python3 with psycopg 3 is needed (.ci/run installs it)");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE usage (tenant TEXT, tokens BIGINT) APPEND ONLY
             WITH (partitions = 4, partition_key = 'tenant')",
    )
    .await
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x3b);
    let load = |rng: &mut rand::rngs::StdRng| {
        let rows: Vec<String> = (0..400)
            .map(|_| format!("t{}\t{}", rng.random_range(0..9), rng.random_range(1..1000)))
            .collect();
        rows.join("\n") + "\n"
    };
    let first = load(&mut rng);
    copy_in(&c, "COPY usage FROM STDIN", &first).await;
    let mut w = worker(&server, false);
    for round in 0..20 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
        if round % 2 == 0 {
            server.kill9();
            server.restart();
            let c = server.connect().await;
            let more = load(&mut rng);
            copy_in(&c, "COPY usage FROM STDIN", &more).await;
        } else {
            let _ = w.kill();
        }
        let _ = w.wait();
        w = worker(&server, false);
    }
    let _ = w.kill();
    let _ = w.wait();
    let mut last = worker(&server, true);
    let status = last.wait().unwrap();
    assert!(status.success(), "draining worker failed: {status}");
    let c = server.connect().await;
    let want = text_rows(&c, "SELECT count(*), sum(tokens) FROM usage").await;
    let got = text_rows(&c, "SELECT sum(events), sum(tokens) FROM billing_batches").await;
    assert_eq!(got, want, "totals differ from the table's sums");
    // No batch counted twice.
    let batches = scalar(&c, "SELECT count(*) FROM billing_batches").await;
    let distinct = scalar(
        &c,
        "SELECT count(*) FROM (SELECT DISTINCT first_partition, first_offset FROM billing_batches)",
    )
    .await;
    assert_eq!(batches, distinct);
    // 11 loads of 400 rows, at most 170 a batch.
    assert!(batches >= 26, "{batches} batches");
}
