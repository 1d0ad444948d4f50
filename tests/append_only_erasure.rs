//! Erasure of append-only tables: `DELETE` and `ERASE FROM` remove a
//! user's rows from the log (local segments, the object store, the commit
//! logs), from five views (an aggregate, a join, a Top-N, a window, a view
//! over a view), and from their checkpoints, while other rows keep their
//! offsets, a subscription part-way through goes on without the rows, and
//! a cut and a dataset version read without them. No file of the data
//! directory holds the user's value afterwards (raw bytes and decoded
//! Parquet), `VERIFY ERASURE` finds nothing, and the ledger says what was
//! done. An erasure in force drops matching rows written later; one
//! interrupted by SIGKILL completes after the restart. On the local store
//! and on S3 (moto). The requests table's columns are NOT NULL, and one
//! test erases from a table of every column type, NOT NULL but one.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::s3::S3Server;
use common::{files_containing, scalar, sqlstate, text_rows, Server};

const USER: &str = "erasable-7f3a@example.org";
const OTHER: &str = "second-91c2@example.org";

const SETUP: &str = "
CREATE TABLE models (model TEXT, vendor TEXT) APPEND ONLY;
INSERT INTO models VALUES ('small', 'acme'), ('large', 'globex');
CREATE TABLE requests (user_id TEXT NOT NULL, prompt TEXT NOT NULL, model TEXT, tokens INT NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    WATERMARK FOR at AS at - INTERVAL '1 hour') WITH (partitions = 3);
";

/// The five views and their queries (a view's batch query is its own).
const VIEWS: [(&str, &str); 5] = [
    (
        "per_user",
        "SELECT user_id, count(*) AS n, sum(tokens) AS t FROM requests GROUP BY user_id",
    ),
    (
        "per_vendor",
        "SELECT r.user_id, m.vendor, sum(r.tokens) AS t FROM requests r JOIN models m ON r.model = m.model GROUP BY r.user_id, m.vendor",
    ),
    (
        "top_requests",
        "SELECT user_id, prompt, tokens FROM requests ORDER BY tokens DESC, prompt LIMIT 5",
    ),
    (
        "hourly",
        "SELECT user_id, window_start, count(*) AS n FROM TUMBLE(requests, at, INTERVAL '1 hour') GROUP BY user_id, window_start",
    ),
    (
        "busy_users",
        "SELECT user_id, n FROM per_user WHERE n > 3",
    ),
];

/// Rows `from..to`: 40 users, plus USER (unless `user` is false) and
/// OTHER now and then with the most tokens (so they are in the Top-N).
async fn insert(c: &tokio_postgres::Client, from: i64, to: i64, user: bool) {
    let user = if user { USER } else { "user-0" };
    c.batch_execute(&format!(
        "INSERT INTO requests SELECT
            CASE WHEN i % 37 = 0 THEN '{user}' WHEN i % 41 = 0 THEN '{OTHER}' ELSE 'user-' || (i % 40) END,
            CASE WHEN i % 37 = 0 THEN 'prompt of {user} ' || i ELSE 'prompt ' || i END,
            CASE WHEN i % 2 = 0 THEN 'small' ELSE 'large' END,
            CASE WHEN i % 37 = 0 OR i % 41 = 0 THEN 100000 + i ELSE i % 1000 END,
            TIMESTAMPTZ '2026-01-01 00:00:00+00' + i * INTERVAL '10 seconds'
         FROM generate_series({from}, {}) AS s(i)",
        to - 1
    ))
    .await
    .unwrap();
}

async fn sorted(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut rows = text_rows(c, sql).await;
    rows.sort();
    rows
}

/// Every view equals its query over the table as it is now.
async fn views_equal_their_queries(c: &tokio_postgres::Client) {
    c.batch_execute("FLUSH").await.unwrap();
    for (name, query) in VIEWS {
        let view = sorted(c, &format!("SELECT * FROM {name}")).await;
        let batch = sorted(c, query).await;
        assert_eq!(view, batch, "view {name} equals its query");
    }
}

/// `(partition, offset, prompt)` of every row not of `gone`.
async fn positions(c: &tokio_postgres::Client, gone: &[&str]) -> BTreeSet<String> {
    let not_in = gone
        .iter()
        .map(|u| format!("'{u}'"))
        .collect::<Vec<_>>()
        .join(", ");
    text_rows(
        c,
        &format!("SELECT _partition, _offset, user_id, prompt FROM requests WHERE user_id NOT IN ({not_in})"),
    )
    .await
    .into_iter()
    .collect()
}

/// No file (or object) holds `value` but the erasure ledger.
fn no_file_holds(stored: &impl Fn(&str) -> Vec<String>, value: &str) {
    let found: Vec<String> = stored(value)
        .into_iter()
        .filter(|f| !f.ends_with("erasures.log"))
        .collect();
    assert!(found.is_empty(), "files still holding {value}: {found:?}");
}

async fn erasure_done(c: &tokio_postgres::Client, id: i64) -> bool {
    text_rows(
        c,
        &format!("SELECT DISTINCT status FROM sluice_catalog.erasures WHERE erasure = {id}"),
    )
    .await
        == vec!["done".to_string()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_reaches_segments_views_checkpoints_and_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let data = server.data_dir.clone();
    let exports = dir.path().join("exports");
    std::fs::create_dir_all(&exports).unwrap();
    let at = exports.display().to_string();
    erasure_reaches_every_copy(
        server,
        |needle| files_containing(&data, needle),
        |name| format!("{at}/{name}"),
        |needle| files_containing(&exports, needle),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_reaches_every_copy_in_the_object_store() {
    let s3 = S3Server::start("sluice-append-erasure");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("db");
    let server = Server::start_env(
        dir.path(),
        &["--object-store", &url, "--checkpoint-interval-ms", "200"],
        &s3.env(),
    );
    let data = server.data_dir.clone();
    let bucket = "sluice-append-erasure";
    erasure_reaches_every_copy(
        server,
        |needle| {
            let mut hits = files_containing(&data, needle);
            hits.extend(s3.objects_containing("db", needle));
            hits
        },
        |name| format!("s3://{bucket}/exports/{name}"),
        |needle| s3.objects_containing("exports", needle),
    )
    .await;
}

/// `stored(needle)`: the files (and objects) that hold `needle`;
/// `export_at(name)`: where a `COPY ... TO` writes `name`; `exported(needle)`:
/// the exported files that hold `needle`.
async fn erasure_reaches_every_copy(
    mut server: Server,
    stored: impl Fn(&str) -> Vec<String>,
    export_at: impl Fn(&str) -> String,
    exported: impl Fn(&str) -> Vec<String>,
) {
    let c = server.connect().await;
    c.batch_execute(SETUP).await.unwrap();
    for (name, query) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    insert(&c, 1, 4000, true).await;
    insert(&c, 4000, 8000, true).await;
    c.batch_execute(
        "CREATE SUBSCRIPTION sub FROM requests;
         DECLARE cur SUBSCRIPTION CURSOR FOR sub;
         CREATE CUT before_erasure FOR requests;
         CREATE DATASET evals AS SELECT user_id, prompt, tokens FROM requests WHERE tokens > 500
             AS OF CUT before_erasure;
         CREATE ROLE clerk LOGIN; GRANT SELECT ON requests TO clerk;",
    )
    .await
    .unwrap();
    // The subscription reads part of the log before the erasure.
    let mut fetched: Vec<String> = Vec::new();
    for _ in 0..3 {
        fetched.extend(text_rows(&c, "FETCH 1000 FROM cur").await);
    }
    assert_eq!(fetched.len(), 3000);
    views_equal_their_queries(&c).await;
    // Two Parquet exports the server writes (a query's rows, a dataset
    // version) and one that holds the user's prompts without the user's
    // column.
    c.batch_execute(&format!(
        "COPY (SELECT user_id, prompt, tokens FROM requests WHERE tokens > 500) TO '{}' WITH (FORMAT parquet);
         COPY DATASET evals VERSION 1 TO '{}' WITH (FORMAT parquet);
         COPY (SELECT prompt FROM requests WHERE tokens > 100000) TO '{}' WITH (FORMAT parquet);",
        export_at("big.parquet"),
        export_at("evals.parquet"),
        export_at("prompts.parquet")
    ))
    .await
    .unwrap();
    assert_eq!(exported(USER).len(), 3, "{:?}", exported(USER));
    let held = stored(USER);
    assert!(
        held.iter().any(|f| f.contains("/tables/")) && held.iter().any(|f| f.contains("/views/")),
        "the log and the views' checkpoints hold the user's rows before: {held:?}"
    );
    let before = positions(&c, &[USER]).await;
    let users = scalar(
        &c,
        &format!("SELECT count(*) FROM requests WHERE user_id = '{USER}'"),
    )
    .await;
    assert!(users > 200);
    assert!(
        text_rows(&c, "SELECT user_id FROM top_requests")
            .await
            .contains(&USER.to_string()),
        "the user is in the Top-N before"
    );

    // A role that may read but not delete is refused, with nothing recorded.
    let clerk = {
        let conn = format!("host=127.0.0.1 port={} user=clerk dbname=test", server.port);
        let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    };
    let e = clerk
        .batch_execute(&format!("ERASE FROM requests WHERE user_id = '{USER}'"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e}");
    let e = clerk
        .batch_execute(&format!("DELETE FROM requests WHERE user_id = '{USER}'"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501", "{e}");
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM sluice_catalog.erasures").await,
        0
    );
    // Not in a transaction block; UPDATE stays refused.
    let e = c
        .batch_execute(&format!(
            "BEGIN; DELETE FROM requests WHERE user_id = '{USER}'"
        ))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25001", "{e}");
    c.batch_execute("ROLLBACK").await.unwrap();
    let e = c
        .batch_execute("UPDATE requests SET tokens = 0")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");

    // DELETE on an append-only table is an erasure.
    let deleted = c
        .execute(
            &format!("DELETE FROM requests WHERE user_id = '{USER}'"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(deleted as i64, users);
    assert_eq!(
        scalar(
            &c,
            &format!("SELECT count(*) FROM requests WHERE user_id = '{USER}'")
        )
        .await,
        0
    );
    assert_eq!(
        positions(&c, &[USER]).await,
        before,
        "other rows keep their offsets"
    );
    views_equal_their_queries(&c).await;
    assert!(!text_rows(&c, "SELECT user_id FROM top_requests")
        .await
        .contains(&USER.to_string()));
    let ledger = text_rows(
        &c,
        "SELECT erasure, table_name, predicate, requester, status, rows_removed, files_rewritten > 0, completed_at IS NOT NULL FROM sluice_catalog.erasures",
    )
    .await;
    assert_eq!(
        ledger,
        vec![format!(
            "1|requests|user_id = '{USER}'|test|done|{users}|t|t"
        )]
    );
    // The two exports are rewritten without the user's rows; the third
    // is listed as not reached, and VERIFY finds it.
    assert_eq!(
        exported(USER),
        vec![export_at("prompts.parquet")
            .trim_start_matches("s3://sluice-append-erasure/")
            .to_string()],
    );
    let not_reached = text_rows(
        &c,
        "SELECT not_reached FROM sluice_catalog.erasures WHERE erasure = 1",
    )
    .await;
    assert!(
        not_reached[0]
            .contains("prompts.parquet: holds the condition's values but not all of its columns"),
        "{not_reached:?}"
    );
    let verify = text_rows(&c, "VERIFY ERASURE 1").await;
    assert_eq!(verify.len(), 1, "{verify:?}");
    assert!(
        verify[0].starts_with(&export_at("prompts.parquet")),
        "{verify:?}"
    );
    let rewritten = text_rows(
        &c,
        "SELECT rewritten FROM sluice_catalog.erasures WHERE erasure = 1",
    )
    .await;
    assert!(
        rewritten[0].contains("big.parquet") && rewritten[0].contains("evals.parquet"),
        "{rewritten:?}"
    );
    // The rewritten dataset file is what the version computes now.
    let e = c
        .batch_execute(&format!(
            "COPY DATASET evals VERSION 1 TO '{}' WITH (FORMAT parquet)",
            export_at("evals-again.parquet")
        ))
        .await;
    assert!(e.is_ok(), "{e:?}");
    no_file_holds(&stored, USER);
    // The cut and the dataset version read without the rows.
    assert_eq!(
        scalar(
            &c,
            &format!(
                "SELECT count(*) FROM requests AS OF CUT before_erasure WHERE user_id = '{USER}'"
            )
        )
        .await,
        0
    );
    // The dataset version computes without them, to its new hash.
    let verified = text_rows(&c, "VERIFY DATASET evals VERSION 1").await;
    assert!(verified[0].ends_with("|t"), "{verified:?}");
    assert!(text_rows(
        &c,
        "SELECT rewritten FROM sluice_catalog.erasures WHERE erasure = 1"
    )
    .await[0]
        .contains("dataset version evals@1"));
    // The subscription goes on from where it was, without the rows.
    loop {
        let rows = text_rows(&c, "FETCH 1000 FROM cur").await;
        if rows.is_empty() {
            break;
        }
        fetched.extend(rows);
    }
    assert_eq!(
        fetched.len() as i64,
        3000 + (7999 - 3000) - {
            // The user's rows past the first 3000 fetched are gone.
            scalar(
                &c,
                "SELECT count(*) FROM generate_series(1, 7999) AS s(i) WHERE i % 37 = 0",
            )
            .await
                - fetched
                    .iter()
                    .take(3000)
                    .filter(|r| r.contains(USER))
                    .count() as i64
        }
    );
    assert!(fetched.iter().skip(3000).all(|r| !r.contains(USER)));

    // An erasure in force: the next rows of OTHER are dropped as they come,
    // and an erasure cut short by SIGKILL completes after the restart.
    // Rows written after an erasure that does not suppress are kept: these
    // have none of the user's.
    insert(&c, 8000, 9000, false).await;
    let erase_conn = server.connect().await;
    let erase = tokio::spawn(async move {
        erase_conn
            .batch_execute(&format!(
                "ERASE FROM requests WHERE user_id = '{OTHER}' WITH (suppress = 'forever')"
            ))
            .await
    });
    // The ledger has it (accepted, the rows being found or removed).
    let mut accepted = false;
    for _ in 0..500 {
        if scalar(
            &c,
            "SELECT count(*) FROM sluice_catalog.erasures WHERE erasure = 2",
        )
        .await
            > 0
        {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(accepted, "the erasure was accepted");
    server.kill9();
    let _ = erase.await;
    server.start_again();
    let c = server.connect().await;
    let mut done = false;
    for _ in 0..600 {
        if erasure_done(&c, 2).await {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "the erasure resumed and completed after SIGKILL");
    assert!(
        server.log_text().contains("resuming an erasure"),
        "the kill came before the erasure completed"
    );
    // A late row of OTHER (behind the watermark) and a new one: dropped.
    c.batch_execute(&format!(
        "INSERT INTO requests VALUES ('{OTHER}', 'late', 'small', 5, TIMESTAMPTZ '2026-01-01 00:00:00+00'),
             ('{OTHER}', 'new', 'small', 5, now()), ('user-1', 'kept', 'small', 5, now())"
    ))
    .await
    .unwrap();
    assert_eq!(
        scalar(
            &c,
            &format!("SELECT count(*) FROM requests WHERE user_id IN ('{USER}', '{OTHER}')")
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            &c,
            "SELECT suppressed_rows FROM sluice_catalog.erasures WHERE erasure = 2"
        )
        .await,
        2
    );
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM requests WHERE prompt = 'kept'").await,
        1
    );
    views_equal_their_queries(&c).await;
    let after = positions(&c, &[USER, OTHER]).await;
    assert!(
        before
            .iter()
            .filter(|r| !r.contains(OTHER))
            .all(|r| after.contains(r)),
        "rows other than the erased keep their offsets"
    );
    assert_eq!(text_rows(&c, "VERIFY ERASURE 1").await.len(), 1);
    assert!(text_rows(&c, "VERIFY ERASURE 2").await.is_empty());
    assert!(exported(OTHER).is_empty(), "{:?}", exported(OTHER));
    no_file_holds(&stored, USER);
    no_file_holds(&stored, OTHER);
    let e = c.batch_execute("VERIFY ERASURE 9").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42704");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_from_all_tables_reaches_every_table_with_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&format!(
        "CREATE TABLE clicks (user_id TEXT, url TEXT) APPEND ONLY WITH (partitions = 2);
         CREATE TABLE profiles (user_id TEXT PRIMARY KEY, name TEXT);
         CREATE TABLE notes (author TEXT, body TEXT);
         CREATE TABLE models (model TEXT, vendor TEXT) APPEND ONLY;
         INSERT INTO clicks VALUES ('{USER}', 'a'), ('u2', 'b'), ('{USER}', 'c');
         INSERT INTO profiles VALUES ('{USER}', 'Ann'), ('u2', 'Bob');
         INSERT INTO notes VALUES ('{USER}', 'kept: no user_id column');
         INSERT INTO models VALUES ('small', 'acme');
         CREATE MATERIALIZED VIEW click_counts AS SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id;
         CREATE MATERIALIZED VIEW names AS SELECT user_id, name FROM profiles;"
    ))
    .await
    .unwrap();
    // A subscription to a view the erasure computes again: refused, with
    // nothing recorded, until it is dropped.
    c.batch_execute("CREATE SUBSCRIPTION on_view FROM click_counts")
        .await
        .unwrap();
    let e = c
        .batch_execute(&format!("ERASE FROM clicks WHERE user_id = '{USER}'"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "55006", "{e}");
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM sluice_catalog.erasures").await,
        0
    );
    c.batch_execute("DROP SUBSCRIPTION on_view").await.unwrap();
    // A keyed table's views take rows back: a subscription to one stays.
    c.batch_execute("CREATE SUBSCRIPTION on_names FROM names")
        .await
        .unwrap();
    // A view is not what an erasure names: its rows come from tables.
    for sql in ["ERASE FROM click_counts", "DELETE FROM click_counts"] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(sqlstate(&e), "42809", "{sql}: {e}");
    }
    // A condition over no table's columns is refused.
    let e = c
        .batch_execute("ERASE FROM ALL TABLES WHERE no_such_column = 1")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42703", "{e}");

    c.batch_execute(&format!("ERASE FROM ALL TABLES WHERE user_id = '{USER}'"))
        .await
        .unwrap();
    assert_eq!(
        sorted(
            &c,
            "SELECT table_name, status, all_tables FROM sluice_catalog.erasures"
        )
        .await,
        vec!["clicks|done|t", "profiles|done|t"]
    );
    assert_eq!(
        sorted(&c, "SELECT user_id, url FROM clicks").await,
        vec!["u2|b"]
    );
    assert_eq!(
        sorted(&c, "SELECT user_id, name FROM profiles").await,
        vec!["u2|Bob"]
    );
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(sorted(&c, "SELECT * FROM click_counts").await, vec!["u2|1"]);
    assert_eq!(sorted(&c, "SELECT * FROM names").await, vec!["u2|Bob"]);
    // The keyed table's key stays in its tombstone until delete_retention.
    let not_reached = text_rows(
        &c,
        "SELECT not_reached FROM sluice_catalog.erasures WHERE table_name = 'profiles'",
    )
    .await;
    assert!(
        not_reached[0].contains("tombstones until its delete_retention"),
        "{not_reached:?}"
    );
    assert_eq!(scalar(&c, "SELECT count(*) FROM notes").await, 1);
}

/// Every column type, NOT NULL but one: an erasure whose matching rows sit
/// in later frames of a segment than rows it keeps (the holes made the
/// rewritten frames nullable, the kept ones were not). Before the fix the
/// rewrite failed ("declared as non-nullable but contains null values"),
/// the ledger stayed at "rewriting segments" and the erasure failed again
/// at every start. The table has four partitions, a view and a
/// subscription; the erasure survives a restart and a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_completes_over_not_null_columns_of_every_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (
            id BIGINT NOT NULL, i INT NOT NULL, s SMALLINT NOT NULL, r REAL NOT NULL,
            d DOUBLE PRECISION NOT NULL, n NUMERIC(12,3) NOT NULL, b BOOLEAN NOT NULL,
            who TEXT NOT NULL, v VARCHAR(40) NOT NULL, raw BYTEA NOT NULL, day DATE NOT NULL,
            tm TIME NOT NULL, ts TIMESTAMP NOT NULL, tz TIMESTAMPTZ NOT NULL,
            span INTERVAL NOT NULL, doc JSONB NOT NULL, tags TEXT[] NOT NULL, nums INT[] NOT NULL,
            note TEXT
         ) APPEND ONLY WITH (partitions = 4);
         CREATE MATERIALIZED VIEW per_who AS SELECT who, count(*) AS n, sum(i) AS total FROM t GROUP BY who;
         CREATE SUBSCRIPTION sub FROM t;",
    )
    .await
    .unwrap();
    // Many small statements: each is its own frame, so a segment holds
    // frames with and without the erased user's rows.
    let row = |k: i64, who: &str| {
        format!(
            "({k}, {k}, {}, {k}.5, {k}.25, {k}.125, {}, '{who}', 'v{k}', '\\x{:02x}', DATE '2026-01-01' + {},
              TIME '10:00:00', TIMESTAMP '2026-01-01 00:00:00' + {k} * INTERVAL '1 minute',
              TIMESTAMPTZ '2026-01-01 00:00:00+00' + {k} * INTERVAL '1 minute', INTERVAL '{k} hours',
              '{{\"who\": \"{who}\", \"k\": {k}}}', ARRAY['{who}', 'x'], ARRAY[{k}, 2], {})",
            k % 100,
            k % 2 == 0,
            k % 256,
            k % 30,
            if k % 3 == 0 { "NULL".to_string() } else { format!("'note {k}'") }
        )
    };
    for k in 1..=40i64 {
        let who = if k % 5 == 0 { USER } else { "kept" };
        c.batch_execute(&format!("INSERT INTO t VALUES {}", row(k, who)))
            .await
            .unwrap();
    }
    // The subscription reads part of the log first.
    let fetched = text_rows(
        &c,
        "DECLARE cur SUBSCRIPTION CURSOR FOR sub; FETCH 10 FROM cur",
    )
    .await;
    assert_eq!(fetched.len(), 10);
    c.batch_execute("FLUSH").await.unwrap();
    let kept_before = text_rows(&c, "SELECT * FROM t WHERE who = 'kept' ORDER BY id").await;
    assert_eq!(kept_before.len(), 32);

    c.batch_execute(&format!("DELETE FROM t WHERE who = '{USER}'"))
        .await
        .unwrap();
    let status = text_rows(&c, "SELECT status, error FROM sluice_catalog.erasures").await;
    assert_eq!(
        status,
        vec!["done|NULL".to_string()],
        "the erasure completes"
    );
    assert_eq!(
        scalar(&c, &format!("SELECT count(*) FROM t WHERE who = '{USER}'")).await,
        0
    );
    assert_eq!(
        text_rows(&c, "SELECT * FROM t WHERE who = 'kept' ORDER BY id").await,
        kept_before,
        "the rows kept read back whole, every type"
    );
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM per_who").await,
        vec![format!(
            "kept|32|{}",
            (1..=40).filter(|k| k % 5 != 0).sum::<i64>()
        )]
    );
    assert!(text_rows(&c, "VERIFY ERASURE 1").await.is_empty());

    // More rows after the erasure, then a restart and a SIGKILL: the
    // rewritten segments read back, the erasure stays done.
    for k in 41..=48i64 {
        c.batch_execute(&format!("INSERT INTO t VALUES {}", row(k, "kept")))
            .await
            .unwrap();
    }
    drop(c);
    server.terminate();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    server.kill9();
    server.start_again();
    let c2 = server.connect().await;
    drop(c);
    c2.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c2, "SELECT DISTINCT status FROM sluice_catalog.erasures").await,
        vec!["done".to_string()]
    );
    assert_eq!(
        scalar(&c2, &format!("SELECT count(*) FROM t WHERE who = '{USER}'")).await,
        0
    );
    assert_eq!(
        scalar(&c2, "SELECT count(*) FROM t WHERE who = 'kept'").await,
        40
    );
    assert_eq!(
        text_rows(
            &c2,
            "SELECT * FROM t WHERE who = 'kept' AND id <= 40 ORDER BY id"
        )
        .await,
        kept_before
    );
    let view = text_rows(&c2, "SELECT who, n, total FROM per_who").await;
    let query = text_rows(&c2, "SELECT who, count(*), sum(i) FROM t GROUP BY who").await;
    assert_eq!(view, query);
    // The subscription goes on past the erased rows.
    let rest = text_rows(
        &c2,
        "DECLARE cur SUBSCRIPTION CURSOR FOR sub; FETCH 100 FROM cur",
    )
    .await;
    assert!(rest.iter().all(|r| !r.contains(USER)), "{rest:?}");
    no_file_holds(&|needle| files_containing(&server.data_dir, needle), USER);
}
