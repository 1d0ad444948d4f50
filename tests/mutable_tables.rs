//! Tables without a primary key take UPDATE and DELETE: rows are known by
//! their position, a view over the table takes rows back, concurrent
//! statements on one row never leave two new rows or lose an update, and
//! all of it holds across SIGKILL.

mod common;

use common::{scalar, sqlstate, text_rows, Server};

/// Clients that each add 1 to one row's counter, retrying on 40001: the row
/// stays one row, and its counter counts every acknowledged UPDATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_of_one_row_leave_one_row_and_lose_none() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE counters (name TEXT, n BIGINT) WITH (partitions = 3);
         INSERT INTO counters VALUES ('a', 0), ('b', 0);
         CREATE MATERIALIZED VIEW totals AS SELECT name, count(*) AS copies, sum(n) AS n FROM counters GROUP BY name;",
    )
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = server.connect().await;
        tasks.push(tokio::spawn(async move {
            let (mut done, mut retried) = (0i64, 0i64);
            while done < 15 {
                match c
                    .execute("UPDATE counters SET n = n + 1 WHERE name = 'a'", &[])
                    .await
                {
                    Ok(1) => done += 1,
                    Ok(other) => panic!("UPDATE changed {other} rows"),
                    Err(e) if sqlstate(&e) == "40001" => retried += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            (done, retried)
        }));
    }
    let mut updates = 0;
    for t in tasks {
        updates += t.await.unwrap().0;
    }
    assert_eq!(updates, 60);
    assert_eq!(
        text_rows(&c, "SELECT name, n FROM counters ORDER BY name").await,
        ["a|60", "b|0"]
    );
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c, "SELECT name, copies, n FROM totals ORDER BY name").await,
        ["a|1|60", "b|1|0"]
    );
}

/// Updates and deletes, then SIGKILL: the table, a view over it and a
/// second view over that one come back as they were, and go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_deletes_survive_sigkill_in_the_table_and_its_views() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE orders (id INT, customer TEXT, amount INT) WITH (partitions = 2);
         CREATE MATERIALIZED VIEW spend AS SELECT customer, count(*) AS orders, sum(amount) AS total, max(amount) AS biggest FROM orders GROUP BY customer;
         CREATE MATERIALIZED VIEW big_spenders AS SELECT customer FROM spend WHERE total > 100;",
    )
    .await
    .unwrap();
    let values: Vec<String> = (0..60)
        .map(|i| format!("({i}, 'c{}', {})", i % 6, (i * 7) % 50))
        .collect();
    c.batch_execute(&format!("INSERT INTO orders VALUES {}", values.join(", ")))
        .await
        .unwrap();
    c.batch_execute("FLUSH").await.unwrap();
    c.batch_execute(
        "UPDATE orders SET amount = amount * 3 WHERE customer = 'c1';
         DELETE FROM orders WHERE customer = 'c2' OR amount > 40;
         UPDATE orders SET customer = 'c9' WHERE id % 10 = 0;",
    )
    .await
    .unwrap();
    let spend = "SELECT customer, count(*), sum(amount), max(amount) FROM orders GROUP BY customer ORDER BY customer";
    let expected = text_rows(&c, spend).await;
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM orders WHERE customer = 'c2'").await,
        0
    );
    server.kill9();
    server.start_again();
    let c = server.connect().await;
    c.batch_execute("FLUSH").await.unwrap();
    assert_eq!(
        text_rows(&c, spend).await,
        expected,
        "the table after SIGKILL"
    );
    assert_eq!(
        text_rows(&c, "SELECT * FROM spend ORDER BY customer").await,
        expected,
        "the view after SIGKILL"
    );
    // The view goes on from where it was.
    c.batch_execute("DELETE FROM orders WHERE customer = 'c9'; FLUSH;")
        .await
        .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM spend ORDER BY customer").await,
        text_rows(&c, spend).await
    );
    assert_eq!(
        text_rows(&c, "SELECT customer FROM big_spenders ORDER BY customer").await,
        text_rows(
            &c,
            "SELECT customer FROM orders GROUP BY customer HAVING sum(amount) > 100 ORDER BY customer"
        )
        .await
    );
}

/// After DELETE and VACUUM the deleted rows are holes and their tombstones
/// stay (until `delete_retention`): a view created afterwards, or rebuilt,
/// reads a tombstone whose row it never saw and takes nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_created_after_vacuum_counts_what_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE items (id INT, tag TEXT) WITH (partitions = 2);
         INSERT INTO items SELECT g, 't' || (g % 3) FROM generate_series(1, 30) AS g;
         DELETE FROM items WHERE id % 3 = 0;
         UPDATE items SET tag = 'moved' WHERE id % 5 = 0;
         VACUUM items;
         CREATE MATERIALIZED VIEW per_tag AS SELECT tag, count(*) AS n FROM items GROUP BY tag;
         FLUSH;",
    )
    .await
    .unwrap();
    let batch = "SELECT tag, count(*) FROM items GROUP BY tag ORDER BY tag";
    assert_eq!(scalar(&c, "SELECT count(*) FROM items").await, 20);
    assert_eq!(
        text_rows(&c, "SELECT * FROM per_tag ORDER BY tag").await,
        text_rows(&c, batch).await
    );
    c.batch_execute("ALTER MATERIALIZED VIEW per_tag REBUILD; FLUSH;")
        .await
        .unwrap();
    assert_eq!(
        text_rows(&c, "SELECT * FROM per_tag ORDER BY tag").await,
        text_rows(&c, batch).await
    );
}
