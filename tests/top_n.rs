//! Top-N views: `ROW_NUMBER() OVER (PARTITION BY .. ORDER BY ..)` filtered
//! by `rn <= N` (or `rn = 1`), and `ORDER BY .. LIMIT N`, over an
//! append-only table, a keyed table whose rows are replaced and deleted,
//! and an aggregate. Through random writes, checkpoints and SIGKILL at
//! random moments, each view equals its query run as a batch query; over
//! the append-only table the state holds only the top N of each group.

mod common;

use common::{assert_view_refused, crash_runs_or, scalar, text_rows, Server};
use rand::{Rng, SeedableRng};

const TABLES: &str = "
    CREATE TABLE bids (id BIGINT, cat TEXT, price BIGINT) APPEND ONLY WITH (partitions = 2);
    CREATE TABLE items (id BIGINT PRIMARY KEY, cat TEXT, price BIGINT);
";

const VIEWS: &[(&str, &str)] = &[
    (
        "top3_per_cat",
        "SELECT * FROM (SELECT id, cat, price, ROW_NUMBER() OVER (PARTITION BY cat ORDER BY price DESC, id) AS rn \
         FROM bids) t WHERE rn <= 3",
    ),
    (
        "cheapest5",
        "SELECT id, price FROM bids ORDER BY price, id LIMIT 5",
    ),
    (
        "keyed_top2",
        "SELECT * FROM (SELECT id, cat, price, ROW_NUMBER() OVER (PARTITION BY cat ORDER BY price DESC, id) AS rn \
         FROM items) t WHERE rn <= 2",
    ),
    (
        "keyed_first",
        "SELECT cat, id FROM (SELECT id, cat, ROW_NUMBER() OVER (PARTITION BY cat ORDER BY price NULLS LAST, id) AS rn \
         FROM items WHERE price IS NOT NULL OR id % 2 = 0) t WHERE rn = 1",
    ),
    (
        "keyed_limit4",
        "SELECT id, price FROM items ORDER BY price DESC NULLS LAST, id LIMIT 4",
    ),
    (
        "top_cats",
        "SELECT cat, total FROM (SELECT cat, sum(price) AS total, count(*) AS n FROM bids GROUP BY cat) s \
         ORDER BY total DESC NULLS LAST, cat LIMIT 2",
    ),
];

type Rand = rand::rngs::StdRng;

fn cat(rng: &mut Rand) -> String {
    match rng.random_range(0..8) {
        0 => "NULL".to_string(),
        c => format!("'c{c}'"),
    }
}

fn price(rng: &mut Rand) -> String {
    match rng.random_range(0..12) {
        0 => "NULL".to_string(),
        _ => rng.random_range(0..100).to_string(),
    }
}

/// A round of writes: bids appended, items replaced, updated and deleted.
fn writes(rng: &mut Rand, next_id: &mut i64) -> Vec<String> {
    let mut out = Vec::new();
    let mut bids = Vec::new();
    for _ in 0..rng.random_range(1..12) {
        *next_id += 1;
        bids.push(format!("({next_id}, {}, {})", cat(rng), price(rng)));
    }
    out.push(format!("INSERT INTO bids VALUES {}", bids.join(", ")));
    let mut items = Vec::new();
    for _ in 0..rng.random_range(1..6) {
        items.push(format!(
            "({}, {}, {})",
            rng.random_range(0..40),
            cat(rng),
            price(rng)
        ));
    }
    items.sort();
    items.dedup_by(|a, b| a.split(',').next() == b.split(',').next());
    out.push(format!("INSERT INTO items VALUES {}", items.join(", ")));
    match rng.random_range(0..4) {
        0 => out.push(format!(
            "DELETE FROM items WHERE id % 7 = {}",
            rng.random_range(0..7)
        )),
        1 => out.push(format!(
            "UPDATE items SET price = {} WHERE id = {}",
            price(rng),
            rng.random_range(0..40)
        )),
        _ => {}
    }
    out
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

async fn check_views(c: &tokio_postgres::Client, when: &str) {
    c.batch_execute("FLUSH").await.unwrap();
    let mut sizes = Vec::new();
    for (name, query) in VIEWS {
        let view = sorted(text_rows(c, &format!("SELECT * FROM {name}")).await);
        let batch = sorted(text_rows(c, query).await);
        assert_eq!(view, batch, "{name} {when}");
        sizes.push(format!("{name}={}", view.len()));
    }
    // Over the append-only table a group keeps its top 3 alone: 7
    // categories and NULL.
    let held = scalar(
        c,
        "SELECT state_rows FROM sluice_catalog.view_operators \
         WHERE view_name = 'top3_per_cat' AND kind = 'top-n'",
    )
    .await;
    assert!(held <= 3 * 8, "top3_per_cat holds {held} rows {when}");
    let held_limit = scalar(
        c,
        "SELECT state_rows FROM sluice_catalog.view_operators \
         WHERE view_name = 'cheapest5' AND kind = 'top-n'",
    )
    .await;
    assert!(held_limit <= 5, "cheapest5 holds {held_limit} rows {when}");
    eprintln!("{when}: {}", sizes.join(" "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_n_views_equal_batch_queries_through_retractions_and_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(dir.path(), &["--checkpoint-interval-ms", "200"]);
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    let seed = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(14);
    let mut rng = Rand::seed_from_u64(seed);
    let mut next_id = 0;
    // Some rows before the views: they backfill.
    for _ in 0..5 {
        for w in writes(&mut rng, &mut next_id) {
            c.batch_execute(&w).await.unwrap();
        }
    }
    for (name, query) in VIEWS {
        c.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}"))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    check_views(&c, "after backfill").await;
    for round in 0..4 {
        for _ in 0..10 {
            for w in writes(&mut rng, &mut next_id) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        check_views(&c, &format!("after round {round}")).await;
    }
    drop(c);

    for kill in 0..crash_runs_or(3) {
        let c = server.connect().await;
        for _ in 0..rng.random_range(3..15) {
            for w in writes(&mut rng, &mut next_id) {
                c.batch_execute(&w).await.unwrap();
            }
        }
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(rng.random_range(0..400))).await;
        server.kill9();
        server.restart();
        let c = server.connect().await;
        check_views(&c, &format!("after kill {kill}")).await;
    }
}

/// What is not a Top-N is refused with 0A000, saying what would be; the
/// Top-N's EXPLAIN says what it keeps.
#[tokio::test]
async fn limits_without_an_order_and_ties_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(TABLES).await.unwrap();
    for (query, says) in [
        ("SELECT id FROM bids LIMIT 3", "need ORDER BY"),
        ("SELECT id FROM bids OFFSET 3", "need ORDER BY"),
        ("SELECT id FROM bids FETCH FIRST 3 ROWS WITH TIES", "FETCH"),
        (
            "SELECT id FROM bids ORDER BY price + 1",
            "add the ORDER BY expressions to the select list",
        ),
    ] {
        assert_view_refused(&c, query, says).await;
    }
    c.batch_execute(&format!(
        "CREATE MATERIALIZED VIEW explained AS {}",
        VIEWS[0].1
    ))
    .await
    .unwrap();
    let plan = text_rows(&c, "EXPLAIN MATERIALIZED VIEW explained")
        .await
        .join("\n");
    assert!(
        plan.contains("top-n") && plan.contains("first 3 by"),
        "{plan}"
    );
}
