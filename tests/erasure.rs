//! Erasure that finishes: after `DELETE` and `VACUUM`, with the server's
//! default segment size (so the deleted rows sit in the active segment),
//! no file of the data directory holds the deleted values: not the log,
//! not the commit log, not the views' checkpoints. Other rows keep their
//! offsets and every view still equals its query run as a batch.

mod common;

use common::s3::S3Server;
use common::{files_containing, scalar, text_rows as rows, Server};

const TABLE: &str =
    "CREATE TABLE requests (request_id TEXT PRIMARY KEY, user_id TEXT, prompt TEXT, score INT)
    WITH (partitions = 2)";

/// The same table without a key: its rows are known by their position,
/// and its tombstones hold the deleted rows' values until compaction.
const TABLE_WITHOUT_KEY: &str =
    "CREATE TABLE requests (request_id TEXT, user_id TEXT, prompt TEXT, score INT)
    WITH (partitions = 2)";

/// Each view, and the same query to run as a batch: aggregates that
/// retract, a filter, a Top-N, a join, and a view over a view.
const VIEWS: [(&str, &str); 7] = [
    (
        "per_user",
        "SELECT user_id, COUNT(*) AS n, SUM(score) AS total FROM requests GROUP BY user_id",
    ),
    (
        "good_prompts",
        "SELECT request_id, user_id, prompt FROM requests WHERE score > 2",
    ),
    (
        "longest_prompt",
        "SELECT user_id, MAX(prompt) AS longest FROM requests GROUP BY user_id",
    ),
    (
        "all_prompts",
        "SELECT request_id, user_id, prompt, score FROM requests",
    ),
    (
        "top_two",
        "SELECT user_id, request_id, prompt FROM (SELECT user_id, request_id, prompt, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY score DESC, request_id) AS rn FROM requests) AS ranked WHERE rn <= 2",
    ),
    (
        "with_plan",
        "SELECT r.request_id, r.prompt, p.plan FROM requests r JOIN plans p ON r.score = p.score",
    ),
    ("busy_users", "SELECT user_id, n FROM per_user WHERE n > 5"),
];

async fn load(c: &tokio_postgres::Client, users: std::ops::Range<u32>, tag: &str) {
    for u in users {
        let values: Vec<String> = (0..10)
            .map(|i| {
                let prompt = if u == 42 {
                    format!("PRIVATE-u42-{tag}-{i}")
                } else {
                    format!("prompt {u}-{tag}-{i}")
                };
                format!("('req-{tag}-{u}-{i}', 'user-{u}', '{prompt}', {})", i % 5)
            })
            .collect();
        c.batch_execute(&format!(
            "INSERT INTO requests VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    }
}

/// Every view equals its query run as a batch.
async fn assert_views_exact(c: &tokio_postgres::Client) {
    for (name, query) in VIEWS {
        let ordered = |sql: &str| format!("SELECT * FROM ({sql}) AS q ORDER BY 1, 2");
        assert_eq!(
            rows(c, &ordered(&format!("SELECT * FROM {name}"))).await,
            rows(c, &ordered(query)).await,
            "view {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_vacuum_leave_no_local_copy_with_the_default_segment_size() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let data = server.data_dir.clone();
    erasure_finishes(server, TABLE, |needle| files_containing(&data, needle)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_vacuum_on_a_table_without_a_key_leave_no_local_copy() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let data = server.data_dir.clone();
    erasure_finishes(server, TABLE_WITHOUT_KEY, |needle| {
        files_containing(&data, needle)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_vacuum_leave_no_copy_in_the_object_store() {
    let s3 = S3Server::start("sluice-erasure");
    let dir = tempfile::tempdir().unwrap();
    let url = s3.url("db");
    let server = Server::start_env(dir.path(), &["--object-store", &url], &s3.env());
    let data = server.data_dir.clone();
    erasure_finishes(server, TABLE, |needle| {
        let mut hits = files_containing(&data, needle);
        hits.extend(s3.objects_containing("db", needle));
        hits
    })
    .await;
}

/// `stored(needle)`: the files (and objects) that hold `needle`.
async fn erasure_finishes(mut server: Server, table: &str, stored: impl Fn(&str) -> Vec<String>) {
    let c = server.connect().await;
    c.batch_execute(table).await.unwrap();
    c.batch_execute(
        "CREATE TABLE plans (score INT PRIMARY KEY, plan TEXT);
         INSERT INTO plans VALUES (0, 'free'), (1, 'basic'), (2, 'pro'), (3, 'team'), (4, 'max');",
    )
    .await
    .unwrap();
    for (name, query) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap();
    }
    load(&c, 0..50, "a").await;
    // The views' checkpoints hold u42's rows too before the delete.
    c.batch_execute("FLUSH").await.unwrap();
    // An update writes a second version of some of u42's rows.
    c.batch_execute(
        "UPDATE requests SET score = score + 1 WHERE user_id = 'user-42' AND score < 2",
    )
    .await
    .unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    let before_delete = stored("PRIVATE-u42");
    assert!(
        before_delete.iter().any(|f| f.contains("/tables/"))
            && before_delete.iter().any(|f| f.contains("/views/")),
        "the table and the views' checkpoints hold the values before the delete: {before_delete:?}"
    );
    let before = rows(&c, "SELECT request_id, _partition, _offset FROM requests WHERE user_id <> 'user-42' ORDER BY request_id").await;

    assert_eq!(
        c.execute("DELETE FROM requests WHERE user_id = 'user-42'", &[])
            .await
            .unwrap(),
        10
    );
    c.batch_execute("VACUUM requests").await.unwrap();
    let left = stored("PRIVATE-u42");
    assert!(
        left.is_empty(),
        "files still holding u42's prompts: {left:?}"
    );
    let left = stored("user-42");
    assert!(left.is_empty(), "files still holding u42's id: {left:?}");

    assert_eq!(
        rows(&c, "SELECT request_id, _partition, _offset FROM requests WHERE user_id <> 'user-42' ORDER BY request_id").await,
        before,
        "other rows keep their offsets"
    );
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM requests").await, 490);
    assert_views_exact(&c).await;

    // Writes go on after VACUUM, into a new active segment, and views follow.
    load(&c, 0..5, "b").await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_views_exact(&c).await;

    // After SIGKILL the server recovers from what VACUUM left: the same
    // rows, views still exact, and still no copy of the deleted values.
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    assert_eq!(scalar(&c, "SELECT COUNT(*) FROM requests").await, 540);
    c.batch_execute("FLUSH").await.unwrap();
    assert_views_exact(&c).await;
    let left = stored("PRIVATE-u42");
    assert!(left.is_empty(), "after restart: {left:?}");
}
