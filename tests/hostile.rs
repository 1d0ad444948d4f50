//! Hostile input never takes the server down: deep and huge statements are
//! answered or refused with 54001/54000, random SQL either answers or
//! fails with a SQLSTATE (the differential suite checks its answers against
//! PostgreSQL's), and malformed protocol messages close only their own
//! connection.
//!
//! The random-query and wire-fuzz tests run for `SLUICE_FUZZ_SECS` seconds
//! each (60 by default, as in CI), with a fixed seed (`SLUICE_FUZZ_SEED`).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{sqlstate, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn fuzz_secs() -> u64 {
    std::env::var("SLUICE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

fn pick<T: Clone>(rng: &mut StdRng, choices: &[T]) -> T {
    choices[rng.random_range(0..choices.len())].clone()
}

fn alive(server: &Server) -> bool {
    std::path::Path::new(&format!("/proc/{}", server.pid())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", server.pid()))
            .unwrap_or_default()
            .contains(") Z ")
}

fn rss_kib(server: &Server) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The statement's outcome: Ok, or the SQLSTATE it failed with.
async fn outcome(c: &tokio_postgres::Client, sql: &str) -> Result<(), String> {
    c.simple_query(sql)
        .await
        .map(|_| ())
        .map_err(|e| sqlstate(&e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_and_huge_statements_are_answered_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute("CREATE TABLE t (x INT)").await.unwrap();

    let chain = |n: usize| format!("SELECT 1 WHERE {}", vec!["1=1"; n].join(" AND "));
    // 2,000 terms: a query builder's filter; PostgreSQL answers it.
    let rows = c
        .simple_query(&chain(2_000))
        .await
        .expect("2,000-term AND chain");
    let answered = rows
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(answered, 1, "one row");
    let or_chain = format!(
        "SELECT count(*) FROM t WHERE {}",
        (0..2_000)
            .map(|i| format!("x = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    );
    c.simple_query(&or_chain)
        .await
        .expect("2,000-term OR chain");
    assert_eq!(outcome(&c, &chain(100_000)).await, Err("54001".into()));
    // The same through the extended protocol.
    let e = c.prepare(&chain(100_000)).await.unwrap_err();
    assert_eq!(sqlstate(&e), "54001");

    let nested = |depth: usize| {
        format!(
            "SELECT * FROM {}(SELECT 1 AS x){}",
            "(SELECT * FROM ".repeat(depth),
            ") AS s".repeat(depth)
        )
    };
    // A generated query nests subqueries a hundred deep; PostgreSQL answers.
    assert_eq!(
        common::scalar(
            &c,
            &format!("SELECT CAST(x AS BIGINT) FROM ({}) AS top", nested(100))
        )
        .await,
        1
    );
    let nested = nested(1_000);
    let r = outcome(&c, &nested).await;
    assert!(
        r.is_ok() || r == Err("54001".into()),
        "1,000 nested subqueries: {r:?}"
    );
    let deep_parens = format!("SELECT {}1{}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(outcome(&c, &deep_parens).await, Err("54001".into()));

    let in_list = format!(
        "SELECT count(*) FROM t WHERE x IN ({})",
        (0..100_000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let r = outcome(&c, &in_list).await;
    assert!(
        r.is_ok() || r == Err("54001".into()),
        "100,000-element IN list: {r:?}"
    );

    let literal = format!("SELECT length('{}')", "x".repeat(100 << 20));
    assert_eq!(outcome(&c, &literal).await, Err("54000".into()));

    // A view over a deep query is refused the same way.
    let view = format!(
        "CREATE MATERIALIZED VIEW deep AS SELECT x FROM t WHERE {}",
        vec!["x = 1"; 100_000].join(" OR ")
    );
    assert_eq!(outcome(&c, &view).await, Err("54001".into()));

    // The connection and the server go on.
    assert_eq!(common::scalar(&c, "SELECT count(*) FROM t").await, 0);
    assert!(alive(&server));
    assert!(!server.log_text().contains("overflowed its stack"));
}

/// Functions asked for gigabytes fail with 54000 before allocating, and a
/// call that does not fit beside `--query-memory` with 53200: the server
/// stays within its memory and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_asked_for_gigabytes_fail_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), &["--query-memory", "536870912"]);
    let c = server.connect().await;
    let before = rss_kib(&server);
    for (sql, state) in [
        ("SELECT cardinality(array_repeat(1, 2147483647))", "54000"),
        ("SELECT cardinality(range(1, 2000000000))", "54000"),
        (
            "SELECT cardinality(array_resize(ARRAY[1], 1000000000))",
            "54000",
        ),
        ("SELECT length(repeat('ab', 1000000000))", "54000"),
        ("SELECT length(lpad('a', 2147483647, 'x'))", "54000"),
        (
            "SELECT length(replace(repeat('a', 10000000), 'a', repeat('b', 200)))",
            "54000",
        ),
        // Each value fits; together the rows of one call do not.
        (
            "SELECT length(repeat('x', n)) FROM (VALUES (900000000), (900000000), \
             (900000000)) t(n)",
            "54000",
        ),
        // 700 MB fits PostgreSQL's limit but not the 512 MB for queries.
        ("SELECT length(repeat('x', 700000000))", "53200"),
        (
            "SELECT length(string_agg(repeat('x', 1000000), ',')) \
             FROM generate_series(1, 1100)",
            "54000",
        ),
        (
            "SELECT length(string_agg(repeat('x', 1000000), ',')) \
             FROM generate_series(1, 5000)",
            "54000",
        ),
    ] {
        assert_eq!(outcome(&c, sql).await, Err(state.into()), "{sql}");
        let rss = rss_kib(&server);
        assert!(
            rss < before + 2 * 1024 * 1024,
            "{sql}: RSS grew from {before} KiB to {rss} KiB"
        );
    }
    // What fits still runs, with PostgreSQL's answers.
    let row = c
        .query_one(
            "SELECT cardinality(array_repeat('x', 3)), cardinality(range(1, 10)), \
             replace('abcabc', 'b', 'XY'), cardinality(array_resize(ARRAY[1, 2], 5)), \
             lpad('a', -1), repeat('ab', 3), length(repeat('x', 100000000))",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 3);
    assert_eq!(row.get::<_, i32>(1), 9);
    assert_eq!(row.get::<_, String>(2), "aXYcaXYc");
    assert_eq!(row.get::<_, String>(4), "");
    assert_eq!(row.get::<_, String>(5), "ababab");
    assert_eq!(row.get::<_, i32>(6), 100_000_000);
    assert!(alive(&server));
    // One case is caught rather than prevented: a 1 MB constant repeated
    // over a batch of 5,000 rows overflows Arrow's offsets inside
    // DataFusion, whose constructor panics; the statement gets 54000.
    let log = server.log_text();
    let panics: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" panic ") && !l.contains("offset overflow"))
        .collect();
    assert!(panics.is_empty(), "functions panicked: {panics:?}");
}

/// A query's answer as sorted rows of text.
async fn server_rows(c: &tokio_postgres::Client, sql: &str) -> Result<Vec<String>, String> {
    let mut rows = common::rows_of(c.simple_query(sql).await.map_err(|e| sqlstate(&e))?);
    rows.sort();
    Ok(rows)
}

/// Random queries (the differential suite's generator, whose answers
/// that suite compares with PostgreSQL's) for `SLUICE_FUZZ_SECS`: the
/// server answers or fails with a SQLSTATE, never dies, and a query that
/// the engine takes as a view gives the view the query's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_queries_never_take_the_server_down() {
    use common::query_gen::{insert_rows, rng, QueryGen, FUZZ_TABLE};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let c = server.connect().await;
    c.batch_execute(&format!("{FUZZ_TABLE} WITH (partitions = 3)"))
        .await
        .unwrap();
    let mut rng = rng();
    let mut rows = 60;
    c.batch_execute(&insert_rows(&mut rng, 60)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(fuzz_secs());
    let (mut tried, mut answered, mut views) = (0u64, 0u64, 0u64);
    let mut states: BTreeMap<String, u64> = BTreeMap::new();
    while Instant::now() < deadline {
        tried += 1;
        if tried % 200 == 0 {
            c.batch_execute(&insert_rows(&mut rng, 20)).await.unwrap();
            rows += 20;
        }
        let query = QueryGen::new(&mut rng).query();
        if tried % 50 == 0 {
            // The same query as a view, when the engine takes it.
            let name = format!("fz{views}");
            match outcome(&c, &format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await {
                Ok(()) => {
                    views += 1;
                    let batch = server_rows(&c, &query).await;
                    match c.batch_execute("FLUSH").await {
                        Ok(()) => {
                            let view = server_rows(&c, &format!("SELECT * FROM {name}")).await;
                            assert_eq!(view, batch, "view {name} differs from its query: {query}");
                        }
                        // The view failed on the rows: so must its query.
                        Err(e) => assert!(
                            batch.is_err(),
                            "view {name} failed ({e}) but its query answers: {query}"
                        ),
                    }
                    c.batch_execute(&format!("DROP MATERIALIZED VIEW {name}"))
                        .await
                        .unwrap();
                }
                Err(state) => *states.entry(state).or_insert(0) += 1,
            }
            continue;
        }
        match server_rows(&c, &query).await {
            Ok(_) => answered += 1,
            Err(state) => *states.entry(state).or_insert(0) += 1,
        }
        assert!(alive(&server), "the server died on: {query}");
    }
    eprintln!(
        "random queries: {tried} tried, {answered} answered, {views} views; \
         SQLSTATEs seen ({}): {states:?}",
        states.len()
    );
    assert!(
        !states.contains_key("XX000"),
        "internal errors on random queries: {states:?}"
    );
    let log = server.log_text();
    let panics: Vec<&str> = log.lines().filter(|l| l.contains(" panic ")).collect();
    assert!(panics.is_empty(), "random queries panicked: {panics:#?}");
    assert!(alive(&server), "server restarts: 1");
    assert_eq!(common::scalar(&c, "SELECT count(*) FROM f").await, rows);
}

/// A startup message for user `fuzz`, database `fuzz`.
fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608u32.to_be_bytes());
    for s in ["user", "fuzz", "database", "fuzz"] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The SQLSTATEs of the ErrorResponse messages in what the server sent
/// (best effort: a response split across reads may be missed).
fn error_states(bytes: &[u8], seen: &mut BTreeMap<String, u64>) {
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let tag = bytes[at];
        let len = u32::from_be_bytes([bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4]])
            as usize;
        let end = (at + 1 + len).min(bytes.len());
        if tag == b'E' && len >= 4 {
            let mut fields = bytes[at + 5..end].split(|b| *b == 0);
            for f in fields.by_ref() {
                if let Some(code) = f.strip_prefix(b"C") {
                    *seen
                        .entry(String::from_utf8_lossy(code).into_owned())
                        .or_insert(0) += 1;
                }
            }
        }
        if len < 4 {
            break;
        }
        at = end;
    }
}

/// A valid message of the extended or simple protocol, or COPY data.
fn valid_message(rng: &mut StdRng) -> Vec<u8> {
    let cstr = |s: &str| {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        v
    };
    match rng.random_range(0..7) {
        0 => message(
            b'Q',
            &cstr(pick(
                rng,
                &[
                    "SELECT 1",
                    "SELECT * FROM t",
                    "COPY t FROM STDIN",
                    "BEGIN",
                    "FLUSH",
                ],
            )),
        ),
        1 => {
            let mut b = cstr("");
            b.extend(cstr("SELECT $1::int + 1"));
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&23u32.to_be_bytes());
            message(b'P', &b)
        }
        2 => {
            let mut b = cstr("");
            b.extend(cstr(""));
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&0u16.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&1u32.to_be_bytes());
            b.push(b'5');
            b.extend_from_slice(&0u16.to_be_bytes());
            message(b'B', &b)
        }
        3 => {
            let mut b = cstr("");
            b.extend_from_slice(&0u32.to_be_bytes());
            message(b'E', &b)
        }
        4 => message(b'S', &[]),
        5 => message(b'd', b"1\n2\n"),
        _ => {
            let mut b = vec![b'S'];
            b.extend(cstr(""));
            message(b'D', &b)
        }
    }
}

/// A valid message, mutated: bytes flipped, cut short, a wrong or huge
/// declared length, or random bytes.
fn mutated_message(rng: &mut StdRng) -> Vec<u8> {
    let mut m = valid_message(rng);
    match rng.random_range(0..6) {
        0 => {
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..m.len());
                m[i] = rng.random();
            }
        }
        1 => m.truncate(rng.random_range(1..m.len().max(2))),
        2 if m.len() >= 5 => {
            let len = pick(
                rng,
                &[0u32, 1, 3, 4, 5, 0x7fff_ffff, 0xffff_ffff, 0x3fff_0000],
            );
            m[1..5].copy_from_slice(&len.to_be_bytes());
        }
        3 if m.len() >= 5 => {
            // Claim less than the body holds: the rest reads as the next message.
            let len = rng.random_range(4..(m.len() as u32));
            m[1..5].copy_from_slice(&len.to_be_bytes());
        }
        4 => m = (0..rng.random_range(1..64)).map(|_| rng.random()).collect(),
        _ => {}
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_wire_messages_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    let canary = server.connect().await;
    canary
        .batch_execute("CREATE TABLE t (x INT); INSERT INTO t VALUES (1), (2)")
        .await
        .unwrap();
    let port = server.port;
    let rss_before = rss_kib(&server);
    let secs = fuzz_secs();
    let seed = common::query_gen::fuzz_seed();
    // The fuzzer runs on its own thread with blocking sockets.
    let fuzzer = std::thread::spawn(move || {
        let mut rng = StdRng::seed_from_u64(seed);
        let deadline = Instant::now() + Duration::from_secs(secs);
        let (mut connections, mut messages) = (0u64, 0u64);
        let mut states = BTreeMap::new();
        while Instant::now() < deadline {
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            connections += 1;
            let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
            if rng.random_range(0..10) > 0 {
                let _ = s.write_all(&startup());
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
            } else {
                let m = mutated_message(&mut rng);
                let _ = s.write_all(&m);
            }
            for _ in 0..rng.random_range(1..30) {
                let m = if rng.random_range(0..3) == 0 {
                    valid_message(&mut rng)
                } else {
                    mutated_message(&mut rng)
                };
                messages += 1;
                if s.write_all(&m).is_err() {
                    break;
                }
                let mut buf = [0u8; 8192];
                if let Ok(n) = s.read(&mut buf) {
                    error_states(&buf[..n], &mut states);
                }
            }
        }
        (connections, messages, states)
    });
    // Other connections are served all along.
    let mut canary_checks = 0;
    while !fuzzer.is_finished() {
        let n = common::scalar(&canary, "SELECT count(*) FROM t").await;
        assert_eq!(n, 2);
        let fresh = server.connect().await;
        assert_eq!(common::scalar(&fresh, "SELECT 1::BIGINT").await, 1);
        canary_checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (connections, messages, states) = fuzzer.join().unwrap();
    let rss_after = rss_kib(&server);
    let log = server.log_text();
    eprintln!(
        "wire fuzz: {connections} connections, {messages} messages, {canary_checks} canary checks; \
         SQLSTATEs answered ({}): {states:?}; RSS {rss_before} KiB -> {rss_after} KiB; \
         {} panics logged",
        states.len(),
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains(" panic "))
            .count()
    );
    let mut kinds: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains(" panic "))
        .filter_map(|l| l.split(" panic ").nth(1))
        .collect();
    kinds.sort();
    kinds.dedup();
    for k in &kinds {
        eprintln!("panic: {k}");
    }
    assert!(alive(&server), "server restarts: 1");
    assert!(
        !log.contains("stack backtrace") && !log.contains("backtrace="),
        "a panic printed a backtrace"
    );
    let panics = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains(" panic "))
        .count();
    assert_eq!(panics, 0, "malformed frames panicked: {kinds:?}");
    assert!(
        states.get("08P01").copied().unwrap_or(0) > 0,
        "malformed frames are answered with 08P01: {states:?}"
    );
    assert!(
        rss_after < rss_before + 512 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert_eq!(common::scalar(&canary, "SELECT count(*) FROM t").await, 2);
}
