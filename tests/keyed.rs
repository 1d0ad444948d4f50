//! Keyed tables: upserts, ON CONFLICT DO NOTHING, UPDATE and DELETE as new
//! versions and tombstones, the latest version per key, changelog(t), and
//! compaction that keeps offsets, survives SIGKILL and removes deleted data
//! from every file.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::s3::S3Server;
use common::{files_containing, load_requests, more_requests, scalar, sqlstate, text_rows, Server};
use rand::{Rng, SeedableRng};

async fn rows(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    text_rows(c, sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upserts_updates_deletes_and_the_changelog() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE requests (request_id TEXT PRIMARY KEY, user_id TEXT, prompt TEXT, score INT NOT NULL)
             WITH (partitions = 3, delete_retention = '1 hour');
         INSERT INTO requests VALUES ('r1', 'u1', 'hello', 5), ('r2', 'u42', 'secret', 9), ('r3', 'u2', 'x', 2);
         INSERT INTO requests VALUES ('r1', 'u1', 'hello again', 6);",
    )
    .await
    .unwrap();
    // ON CONFLICT DO NOTHING: literal rows, and a prepared statement with
    // parameters (the driver's extended protocol); a key repeated within
    // the statement keeps its first row.
    let n = c
        .execute(
            "INSERT INTO requests VALUES ('r3', 'u9', 'ignored', 1), ('r4', 'u9', 'new', 1), ('r4', 'u9', 'dup', 2) ON CONFLICT DO NOTHING",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let insert = c
        .prepare("INSERT INTO requests (request_id, user_id, prompt, score) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING")
        .await
        .unwrap();
    assert_eq!(
        c.execute(&insert, &[&"r1", &"u0", &"no", &0i32])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        c.execute(&insert, &[&"r5", &"u5", &"five", &5i32])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        rows(
            &c,
            "SELECT request_id, user_id, prompt, score FROM requests ORDER BY request_id"
        )
        .await,
        [
            "r1|u1|hello again|6",
            "r2|u42|secret|9",
            "r3|u2|x|2",
            "r4|u9|new|1",
            "r5|u5|five|5"
        ]
    );
    assert_eq!(
        c.execute(
            "UPDATE requests SET score = score + 100, prompt = 'edited' WHERE user_id = 'u2'",
            &[]
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(
        c.execute("DELETE FROM requests WHERE user_id = 'u42'", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        c.execute("DELETE FROM requests WHERE user_id = 'nobody'", &[])
            .await
            .unwrap(),
        0
    );
    let latest = [
        "r1|u1|hello again|6",
        "r3|u2|edited|102",
        "r4|u9|new|1",
        "r5|u5|five|5",
    ];
    assert_eq!(
        rows(
            &c,
            "SELECT request_id, user_id, prompt, score FROM requests ORDER BY request_id"
        )
        .await,
        latest
    );
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM requests").await, 4);
    // Every record, with what it did.
    let log = rows(&c, "SELECT request_id, _op FROM changelog(requests) ORDER BY _ingested_at, _partition, _offset").await;
    assert_eq!(log.len(), 8, "{log:?}");
    assert_eq!(log.iter().filter(|r| r.ends_with("|delete")).count(), 1);
    assert!(log.contains(&"r2|delete".to_string()));
    let tomb = rows(
        &c,
        "SELECT user_id, prompt, score FROM changelog(requests) WHERE _op = 'delete'",
    )
    .await;
    assert_eq!(tomb, ["NULL|NULL|NULL"], "a tombstone is the key alone");
    // The same after SIGKILL.
    server.restart();
    let c = server.connect().await;
    assert_eq!(
        rows(
            &c,
            "SELECT request_id, user_id, prompt, score FROM requests ORDER BY request_id"
        )
        .await,
        latest
    );
    // ON CONFLICT still sees the keys after a restart.
    assert_eq!(
        c.execute(
            "INSERT INTO requests VALUES ('r5', 'x', 'x', 0) ON CONFLICT DO NOTHING",
            &[]
        )
        .await
        .unwrap(),
        0
    );
    assert_eq!(
        c.execute(
            "INSERT INTO requests VALUES ('r2', 'u42', 'back', 1) ON CONFLICT DO NOTHING",
            &[]
        )
        .await
        .unwrap(),
        1,
        "a deleted key can come back"
    );

    for (sql, state) in [
        ("UPDATE requests SET request_id = 'x'", "0A000"),
        ("UPDATE requests SET nope = 1", "42703"),
        ("UPDATE requests SET score = NULL", "23502"),
        ("UPDATE requests SET score = 'abc'", "22P02"),
        ("INSERT INTO requests (request_id, score) VALUES (NULL, 1)", "23502"),
        ("DELETE FROM missing", "42P01"),
        ("CREATE TABLE bad (a INT PRIMARY KEY) APPEND ONLY", "42601"),
        ("CREATE TABLE bad (a INT PRIMARY KEY, b INT) WITH (partition_key = 'b')", "22023"),
        ("CREATE TABLE bad (a INT) WITH (delete_retention = '1 day')", "22023"),
        ("CREATE TABLE bad (a INT PRIMARY KEY, _op TEXT)", "22023"),
        ("CREATE TABLE plain (a INT) APPEND ONLY", ""),
        // An erasure (of nothing here), not a refusal.
        ("DELETE FROM plain", ""),
        ("UPDATE plain SET a = 1", "0A000"),
        ("INSERT INTO plain VALUES (1) ON CONFLICT DO NOTHING", "0A000"),
        ("SELECT * FROM changelog(plain)", "0A000"),
        ("VACUUM plain", "0A000"),
        ("INSERT INTO requests VALUES ('a', 'b', 'c', 1) ON CONFLICT (request_id) DO UPDATE SET score = 2", "0A000"),
    ] {
        match c.batch_execute(sql).await {
            Ok(()) => assert_eq!(state, "", "{sql} should fail"),
            Err(e) => assert_eq!(sqlstate(&e), state, "{sql}: {e}"),
        }
    }
    // A subscription to a keyed table yields its records with _op.
    c.batch_execute("CREATE SUBSCRIPTION s FROM requests; DECLARE k SUBSCRIPTION CURSOR FOR s")
        .await
        .unwrap();
    let fetched = c.query("FETCH ALL FROM k", &[]).await.unwrap();
    assert_eq!(fetched.len(), 9);
    assert_eq!(
        fetched
            .iter()
            .filter(|r| r.get::<_, String>("_op") == "delete")
            .count(),
        1
    );
}

const REQUESTS: &str = "CREATE TABLE requests (request_id TEXT PRIMARY KEY, user_id TEXT, prompt TEXT, response TEXT, created_at TIMESTAMP)
    WITH (partitions = 2, delete_retention = '0s')";

/// After DELETE and compaction with a zero grace period no stored file of
/// the table holds the deleted user's text; offsets of other rows stay.
async fn deletion_reaches_storage(server: &Server, scan: impl Fn() -> Vec<String>) {
    let c = server.connect().await;
    c.batch_execute(REQUESTS).await.unwrap();
    load_requests(&c).await;
    more_requests(&c, "a").await;
    let before = rows(&c, "SELECT request_id, _partition, _offset FROM requests WHERE user_id <> 'u42' ORDER BY request_id").await;
    assert!(!scan().is_empty(), "the marker is stored before the delete");
    assert_eq!(
        c.execute("DELETE FROM requests WHERE user_id = 'u42'", &[])
            .await
            .unwrap(),
        10
    );
    assert_eq!(
        scalar(&c, "SELECT COUNT(*) FROM requests WHERE user_id = 'u42'").await,
        0
    );
    // The tombstones, too, end up in closed segments.
    more_requests(&c, "b").await;
    c.batch_execute("VACUUM requests").await.unwrap();
    let left = scan();
    assert!(
        left.is_empty(),
        "files still holding u42's prompts: {left:?}"
    );
    assert_eq!(
        rows(&c, "SELECT request_id, _partition, _offset FROM requests WHERE user_id <> 'u42' AND request_id NOT LIKE 'later-b-%' ORDER BY request_id").await,
        before,
        "other rows keep their offsets"
    );
    let progress = rows(&c, "SELECT compactions, compacted_records, compaction_progress FROM sluice_catalog.partitions WHERE table_name = 'requests'").await;
    assert!(
        progress.iter().all(|p| p.ends_with("|idle")),
        "{progress:?}"
    );
    let removed = scalar(&c, "SELECT CAST(SUM(compacted_records) AS BIGINT) FROM sluice_catalog.partitions WHERE table_name = 'requests'").await;
    assert!(
        removed >= 10,
        "u42's records and the tombstones went: {removed}"
    );
    // Tombstones older than the grace period went too.
    assert_eq!(
        scalar(
            &c,
            "SELECT COUNT(*) FROM changelog(requests) WHERE _op = 'delete'"
        )
        .await,
        0
    );
}

const SEGMENT_FLAGS: [&str; 4] = ["--segment-bytes", "4000", "--tiering-interval-ms", "100"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_rows_leave_every_local_file_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &SEGMENT_FLAGS);
    let data = server.data_dir.clone();
    deletion_reaches_storage(&server, || files_containing(&data, "PRIVATE-u42")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_rows_leave_every_s3_object_after_compaction() {
    let s3 = S3Server::start("sluice-keyed");
    let dir = tempfile::tempdir().unwrap();
    let mut flags: Vec<String> = SEGMENT_FLAGS.iter().map(|s| s.to_string()).collect();
    flags.push("--object-store".into());
    flags.push(s3.url("db"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start_env(dir.path(), &flags, &s3.env());
    let data = server.data_dir.clone();
    deletion_reaches_storage(&server, || {
        let mut hits = files_containing(&data, "PRIVATE-u42");
        hits.extend(s3.objects_containing("db/tables", "PRIVATE-u42"));
        hits
    })
    .await;
}

/// SIGKILL while compaction rewrites segments: nothing is lost, nothing
/// shows twice, and one copy of each segment remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_is_crash_safe() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &SEGMENT_FLAGS);
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT) WITH (partitions = 2, delete_retention = '0s')")
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut truth: BTreeMap<String, i64> = BTreeMap::new();
    let mut kills = 0;
    let mut interrupted = 0;
    for round in 0..8 {
        let c = server.connect().await;
        for _ in 0..10 {
            // 50 distinct keys: most upserted, some deleted.
            let mut keys: Vec<u32> = (0..300).collect();
            let mut upserts = Vec::new();
            let mut deletes = Vec::new();
            for _ in 0..50 {
                let k = keys.swap_remove(rng.random_range(0..keys.len()));
                let k = format!("k{k}");
                if rng.random_range(0..10) == 0 {
                    deletes.push(format!("'{k}'"));
                    truth.remove(&k);
                } else {
                    let v: i64 = rng.random_range(0..1_000_000);
                    upserts.push(format!("('{k}', {v})"));
                    truth.insert(k, v);
                }
            }
            c.batch_execute(&format!("INSERT INTO kv VALUES {}", upserts.join(", ")))
                .await
                .unwrap();
            if !deletes.is_empty() {
                c.batch_execute(&format!(
                    "DELETE FROM kv WHERE k IN ({})",
                    deletes.join(", ")
                ))
                .await
                .unwrap();
            }
        }
        // Compaction under way, then SIGKILL at a random moment.
        let vacuum = server.connect().await;
        let task = tokio::spawn(async move { vacuum.batch_execute("VACUUM kv").await });
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..120))).await;
        server.kill9();
        if !matches!(task.await, Ok(Ok(()))) {
            interrupted += 1;
        }
        kills += 1;
        server.restart();
        let c = server.connect().await;
        let got: BTreeMap<String, i64> = c
            .query("SELECT k, v FROM kv", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let wrong: Vec<_> = truth
            .keys()
            .chain(got.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| got.get(*k) != truth.get(*k))
            .map(|k| (k, got.get(k), truth.get(k)))
            .collect();
        assert!(
            wrong.is_empty(),
            "round {round}: the latest rows after SIGKILL during compaction differ (key, got, expected): {wrong:?}"
        );
        let dup = scalar(&c, "SELECT COUNT(*) - COUNT(DISTINCT CAST(_partition AS BIGINT) * 1000000 + _offset) FROM changelog(kv)").await;
        assert_eq!(dup, 0, "no record twice");
    }
    // One copy of each segment in the object store.
    let objects = dir.path().join("data").join("objects").join("tables");
    let mut bases = std::collections::HashMap::new();
    for f in files_under(&objects) {
        let name = f.rsplit('/').next().unwrap().to_string();
        let base = name.split(['-', '.']).next().unwrap().to_string();
        let part = f.rsplit('/').nth(1).unwrap().to_string();
        *bases.entry((part, base)).or_insert(0) += 1;
    }
    assert!(bases.values().all(|&n| n == 1), "{bases:?}");
    eprintln!(
        "compaction crash test: {kills} kills ({interrupted} during VACUUM), {} keys exact",
        truth.len()
    );
}

fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if e.path().extension().is_some_and(|x| x == "parquet") {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

/// Compaction drops superseded versions but keeps tombstones younger than
/// `delete_retention`, and reports the dirty ratio it found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn young_tombstones_stay_and_the_dirty_ratio_shows() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &SEGMENT_FLAGS);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT) WITH (delete_retention = '1 hour')",
    )
    .await
    .unwrap();
    let insert = |tag: &'static str| {
        let c = &c;
        async move {
            let values: Vec<String> = (0..100).map(|i| format!("('k{i}', '{tag}-{i}')")).collect();
            c.batch_execute(&format!("INSERT INTO kv VALUES {}", values.join(", ")))
                .await
                .unwrap();
        }
    };
    insert("old").await;
    insert("new").await;
    c.batch_execute("DELETE FROM kv WHERE k IN ('k1', 'k2', 'k3')")
        .await
        .unwrap();
    // Later records close the segments holding the ones above.
    for round in 0..4 {
        let values: Vec<String> = (0..100)
            .map(|i| format!("('later-{round}-{i}', 'x')"))
            .collect();
        c.batch_execute(&format!("INSERT INTO kv VALUES {}", values.join(", ")))
            .await
            .unwrap();
    }
    c.batch_execute("VACUUM kv").await.unwrap();
    let old = scalar(
        &c,
        "SELECT COUNT(*) FROM changelog(kv) WHERE v LIKE 'old-%'",
    )
    .await;
    assert_eq!(old, 0, "superseded versions are gone");
    assert_eq!(
        scalar(
            &c,
            "SELECT COUNT(*) FROM changelog(kv) WHERE _op = 'delete'"
        )
        .await,
        3,
        "tombstones younger than delete_retention stay"
    );
    assert_eq!(
        scalar(
            &c,
            "SELECT COUNT(*) FROM changelog(kv) WHERE v LIKE 'new-%' AND k IN ('k1', 'k2', 'k3')"
        )
        .await,
        0,
        "the versions the tombstones delete are gone"
    );
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM kv").await, 97 + 400);
    let ratio: f64 = c
        .query_one(
            "SELECT dirty_ratio FROM sluice_catalog.partitions WHERE table_name = 'kv'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // 103 of the 603 records could go: the 100 old versions and the 3
    // versions the tombstones delete (the young tombstones stay).
    assert!((ratio - 103.0 / 603.0).abs() < 1e-9, "dirty ratio {ratio}");
}

/// UPDATE and DELETE sent by drivers as prepared statements with `$n`
/// parameters (psycopg 3, asyncpg, JDBC, node-postgres) bind them.
#[tokio::test]
async fn prepared_update_and_delete_bind_their_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k BIGINT PRIMARY KEY, v TEXT, n BIGINT);
         INSERT INTO kv VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30);",
    )
    .await
    .unwrap();
    let update = c
        .prepare("UPDATE kv SET v = $1, n = n + $2 WHERE k = $3")
        .await
        .unwrap();
    assert_eq!(c.execute(&update, &[&"A", &5i64, &1i64]).await.unwrap(), 1);
    assert_eq!(c.execute(&update, &[&"B", &7i64, &2i64]).await.unwrap(), 1);
    assert_eq!(
        c.execute(
            "DELETE FROM kv WHERE k = $1 OR v = $2",
            &[&3i64, &"nothing"]
        )
        .await
        .unwrap(),
        1
    );
    // Inside a transaction block too, and rolled back.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("DELETE FROM kv WHERE k = $1", &[&1i64])
        .await
        .unwrap();
    assert_eq!(scalar(&c, "SELECT count(*) FROM kv").await, 1);
    c.batch_execute("ROLLBACK").await.unwrap();
    let rows: Vec<String> = c
        .query("SELECT k, v, n FROM kv ORDER BY k", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}|{}|{}",
                r.get::<_, i64>(0),
                r.get::<_, String>(1),
                r.get::<_, i64>(2)
            )
        })
        .collect();
    assert_eq!(rows, ["1|A|15", "2|B|27"]);
    // A wrong type for a parameter is the driver's error, not a crash.
    let e = c
        .execute("UPDATE kv SET n = $1 WHERE k = 1", &[&"not a number"])
        .await
        .unwrap_err();
    assert!(!sqlstate(&e).is_empty(), "{e}");
}

/// `ON CONFLICT (key) DO UPDATE SET` every other column `= EXCLUDED.col`,
/// as ORMs write an upsert, replaces the row as a keyed table's INSERT
/// does; every other DO UPDATE would keep part of the old row and is
/// refused with 0A000, saying what is taken.
#[tokio::test]
async fn on_conflict_do_update_that_replaces_the_row_is_an_upsert() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT, note TEXT);
         CREATE TABLE pair (a INT, b TEXT, v BIGINT, PRIMARY KEY (a, b));
         INSERT INTO kv VALUES ('a', 1, 'x') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, note = excluded.note;
         INSERT INTO kv VALUES ('a', 2, 'y'), ('b', 3, NULL) ON CONFLICT (k) DO UPDATE SET note = EXCLUDED.note, v = EXCLUDED.v;
         INSERT INTO kv VALUES ('b', 4, 'z') ON CONFLICT ON CONSTRAINT kv_pkey DO UPDATE SET k = EXCLUDED.k, v = EXCLUDED.v, note = EXCLUDED.note;
         INSERT INTO kv SELECT k || '2', v, note FROM kv ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note;
         INSERT INTO pair VALUES (1, 'p', 1) ON CONFLICT (b, a) DO UPDATE SET v = EXCLUDED.v;
         INSERT INTO pair VALUES (1, 'p', 5) ON CONFLICT (a, b) DO UPDATE SET v = EXCLUDED.v;",
    )
    .await
    .unwrap();
    let prepared = c
        .prepare("INSERT INTO kv (k, v, note) VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note")
        .await
        .unwrap();
    c.execute(&prepared, &[&"a", &7i64, &"prepared"])
        .await
        .unwrap();
    c.execute(&prepared, &[&"c", &8i64, &None::<String>])
        .await
        .unwrap();
    c.batch_execute("BEGIN; INSERT INTO kv VALUES ('a2', 9, 'tx') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note; COMMIT")
        .await
        .unwrap();
    assert_eq!(
        rows(&c, "SELECT k, v, note FROM kv ORDER BY k").await,
        ["a|7|prepared", "a2|9|tx", "b|4|z", "b2|4|z", "c|8|NULL"]
    );
    assert_eq!(rows(&c, "SELECT * FROM pair").await, ["1|p|5"]);
    for (sql, state) in [
        // Part of the row from EXCLUDED, the rest kept: not what a keyed
        // table's INSERT does.
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (k) DO UPDATE SET v = kv.v + 1, note = EXCLUDED.note", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.note, note = EXCLUDED.v", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note WHERE kv.v < 5", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (v) DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT ON CONSTRAINT other DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT DO UPDATE SET v = EXCLUDED.v, note = EXCLUDED.note", "0A000"),
        ("INSERT INTO pair VALUES (1, 'p', 1) ON CONFLICT (a) DO UPDATE SET v = EXCLUDED.v", "0A000"),
        ("INSERT INTO kv VALUES ('a', 1, 'q') ON CONFLICT (k) DO UPDATE SET nope = EXCLUDED.nope, v = EXCLUDED.v, note = EXCLUDED.note", "42703"),
    ] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), state, "{sql}: {e}");
        let e = c.prepare(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), state, "prepared {sql}: {e}");
    }
    // Nothing of a refused statement was stored.
    assert_eq!(
        rows(&c, "SELECT k, v, note FROM kv ORDER BY k").await,
        ["a|7|prepared", "a2|9|tx", "b|4|z", "b2|4|z", "c|8|NULL"]
    );
}
