//! Privileges: for each kind of statement, a role without the grant is
//! refused with 42501, with it is allowed, and after REVOKE is refused
//! again; owners alone alter and drop; grants survive SIGKILL.

mod common;

use common::{sqlstate, Server};

async fn connect(port: u16, user: &str, password: &str) -> tokio_postgres::Client {
    let conn = format!("host=127.0.0.1 port={port} user={user} password={password} dbname=sluice");
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A server whose superuser `sluice` has the password `root`.
fn start_with_password(dir: &std::path::Path) -> Server {
    Server::start_env(
        dir,
        &[],
        &[("SLUICE_PASSWORD".to_string(), "root".to_string())],
    )
}

/// Runs `sql` as `c`: Ok, or the SQLSTATE and message.
async fn run(c: &tokio_postgres::Client, sql: &str) -> Result<(), (String, String)> {
    c.batch_execute(sql).await.map_err(|e| {
        (
            sqlstate(&e),
            e.as_db_error()
                .map(|d| d.message().to_string())
                .unwrap_or_default(),
        )
    })
}

async fn denied(c: &tokio_postgres::Client, sql: &str, message: &str) {
    match run(c, sql).await {
        Err((code, m)) => {
            assert_eq!(code, "42501", "{sql}: {m}");
            assert_eq!(m, message, "{sql}");
        }
        Ok(()) => panic!("{sql} was allowed"),
    }
}

async fn allowed(c: &tokio_postgres::Client, sql: &str) {
    if let Err((code, m)) = run(c, sql).await {
        panic!("{sql} was refused: {code} {m}");
    }
}

async fn copy_in(c: &tokio_postgres::Client, sql: &str, data: &str) -> Result<u64, String> {
    use futures::SinkExt;
    let sink = c.copy_in(sql).await.map_err(|e| sqlstate(&e))?;
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data.to_string()))
        .await
        .map_err(|e| sqlstate(&e))?;
    sink.finish().await.map_err(|e| sqlstate(&e))
}

#[tokio::test]
async fn each_statement_needs_its_privilege() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start_with_password(dir.path());
    let port = server.port;
    let admin = connect(port, "sluice", "root").await;
    allowed(
        &admin,
        "CREATE USER owner PASSWORD 'o'; CREATE USER other PASSWORD 'x'",
    )
    .await;
    let owner = connect(port, "owner", "o").await;
    allowed(
        &owner,
        "CREATE TABLE t (k BIGINT, v BIGINT); \
         CREATE TABLE kt (k BIGINT PRIMARY KEY, v BIGINT); \
         INSERT INTO t VALUES (1, 10), (2, 20); \
         INSERT INTO kt VALUES (1, 1), (2, 2); \
         CREATE MATERIALIZED VIEW v AS SELECT k, sum(v) AS total FROM t GROUP BY k; \
         CREATE SUBSCRIPTION s FROM t WITH (start = 'earliest'); \
         FLUSH",
    )
    .await;
    let other = connect(port, "other", "x").await;

    // (statement, the privilege it needs, on what, the refusal's text)
    let matrix: Vec<(&str, &str, &str, &str)> =
        vec![
        ("SELECT * FROM t", "SELECT", "TABLE t", "permission denied for table t"),
        (
            "SELECT * FROM t WHERE k IN (SELECT k FROM kt)",
            "SELECT",
            "TABLE t, kt",
            "permission denied for table t",
        ),
        (
            "INSERT INTO t VALUES (3, 30)",
            "INSERT",
            "TABLE t",
            "permission denied for table t",
        ),
        (
            "INSERT INTO t SELECT k + 10, v FROM kt",
            "INSERT, SELECT",
            "TABLE t, kt",
            "permission denied for table kt",
        ),
        (
            "UPDATE kt SET v = 5 WHERE k = 1",
            "UPDATE, SELECT",
            "TABLE kt",
            "permission denied for table kt",
        ),
        (
            "DELETE FROM kt WHERE k = 2",
            "DELETE, SELECT",
            "TABLE kt",
            "permission denied for table kt",
        ),
        (
            "SELECT * FROM changelog(kt)",
            "SELECT",
            "TABLE kt",
            "permission denied for table kt",
        ),
        (
            "SELECT * FROM v",
            "SELECT",
            "MATERIALIZED VIEW v",
            "permission denied for materialized view v",
        ),
        (
            "CREATE MATERIALIZED VIEW ov AS SELECT count(*) AS n FROM t; DROP MATERIALIZED VIEW ov",
            "SELECT",
            "TABLE t",
            "permission denied for table t",
        ),
        (
            "DECLARE c SUBSCRIPTION CURSOR FOR s; CLOSE c",
            "USAGE",
            "SUBSCRIPTION s",
            "permission denied for subscription s",
        ),
    ];
    for (sql, privileges, on, refusal) in &matrix {
        denied(&other, sql, refusal).await;
        allowed(&admin, &format!("GRANT {privileges} ON {on} TO other")).await;
        allowed(&other, sql).await;
        allowed(&owner, &format!("REVOKE {privileges} ON {on} FROM other")).await;
        denied(&other, sql, refusal).await;
    }

    // A view is read with its own grant, not its sources'.
    allowed(&owner, "GRANT SELECT ON MATERIALIZED VIEW v TO other").await;
    allowed(&other, "SELECT * FROM v").await;
    denied(&other, "SELECT * FROM t", "permission denied for table t").await;
    // has_table_privilege tells the truth, for the session's role and
    // for any other.
    let row = other
        .query_one(
            "SELECT has_table_privilege('v', 'SELECT'), has_table_privilege('t', 'SELECT'), \
             has_table_privilege('owner', 't', 'INSERT'), has_table_privilege('other', 'v', 'DELETE, SELECT')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, bool>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2),
            row.get::<_, bool>(3)
        ),
        (true, false, true, true)
    );

    // COPY: FROM STDIN needs INSERT, TO STDOUT needs SELECT, TO a file
    // only superusers.
    assert_eq!(
        copy_in(&other, "COPY t FROM STDIN", "7\t70\n").await,
        Err("42501".to_string())
    );
    // (tokio-postgres closes a connection whose COPY failed to start, with
    // PostgreSQL 15 as with Sluice: tried side by side. So another.)
    let other = connect(port, "other", "x").await;
    allowed(&owner, "GRANT INSERT, SELECT ON t TO other").await;
    assert_eq!(copy_in(&other, "COPY t FROM STDIN", "7\t70\n").await, Ok(1));
    {
        use futures::TryStreamExt;
        let out = other.copy_out("COPY t TO STDOUT").await.unwrap();
        futures::pin_mut!(out);
        let mut text = Vec::new();
        while let Some(chunk) = out.try_next().await.unwrap() {
            text.extend_from_slice(&chunk);
        }
        assert!(String::from_utf8_lossy(&text).contains("7\t70"));
    }
    let file = dir.path().join("out.parquet");
    denied(
        &other,
        &format!("COPY (SELECT * FROM t) TO '{}' WITH (FORMAT parquet)", file.display()),
        "permission denied to COPY to a file: only superusers may COPY to a file or an object store; COPY ... TO STDOUT (psql's \\copy) works for everyone",
    )
    .await;
    allowed(
        &admin,
        &format!(
            "COPY (SELECT * FROM t) TO '{}' WITH (FORMAT parquet)",
            file.display()
        ),
    )
    .await;

    // A REVOKE reaches statements prepared before it.
    let select = other.prepare("SELECT v FROM t WHERE k = $1").await.unwrap();
    let insert = other
        .prepare("INSERT INTO t VALUES ($1, $2)")
        .await
        .unwrap();
    other.query(&select, &[&1i64]).await.unwrap();
    other.execute(&insert, &[&8i64, &80i64]).await.unwrap();
    allowed(&owner, "REVOKE ALL ON t FROM other").await;
    assert_eq!(
        sqlstate(&other.query(&select, &[&1i64]).await.unwrap_err()),
        "42501"
    );
    assert_eq!(
        sqlstate(&other.execute(&insert, &[&9i64, &90i64]).await.unwrap_err()),
        "42501"
    );

    // Only the owner (or a superuser) alters, drops, rebuilds, compacts,
    // grants.
    allowed(&owner, "GRANT ALL ON ALL TABLES IN SCHEMA public TO other").await;
    for (sql, message) in [
        ("DROP TABLE t", "must be owner of table t"),
        (
            "DROP MATERIALIZED VIEW v",
            "must be owner of materialized view v",
        ),
        (
            "ALTER MATERIALIZED VIEW v REBUILD",
            "must be owner of materialized view v",
        ),
        ("VACUUM kt", "must be owner of table kt"),
        ("GRANT SELECT ON t TO other", "must be owner of table t"),
        ("DROP SUBSCRIPTION s", "must be owner of subscription s"),
        (
            "ALTER SUBSCRIPTION s RESET TO EARLIEST",
            "must be owner of subscription s",
        ),
    ] {
        denied(&other, sql, message).await;
    }
    allowed(&other, "SELECT * FROM t; SELECT * FROM v; SELECT * FROM kt").await;
    allowed(&owner, "VACUUM kt; ALTER MATERIALIZED VIEW v REBUILD").await;

    // What the grants are survives SIGKILL.
    allowed(&owner, "REVOKE ALL ON kt FROM other").await;
    server.restart();
    let port = server.port;
    let other = connect(port, "other", "x").await;
    let owner = connect(port, "owner", "o").await;
    let admin = connect(port, "sluice", "root").await;
    allowed(&other, "SELECT * FROM t; SELECT * FROM v").await;
    denied(&other, "SELECT * FROM kt", "permission denied for table kt").await;
    denied(&other, "DROP TABLE t", "must be owner of table t").await;

    // A role that owns objects cannot be dropped; its grants go with it.
    let e = run(&admin, "DROP ROLE owner").await.unwrap_err();
    assert_eq!(e.0, "2BP01", "{}", e.1);
    allowed(&admin, "DROP ROLE other").await;
    allowed(&owner, "DROP MATERIALIZED VIEW v").await;
    // A table dropped and made again starts with no grants.
    allowed(
        &owner,
        "DROP SUBSCRIPTION s; DROP TABLE t; CREATE TABLE t (k BIGINT)",
    )
    .await;
    allowed(&admin, "CREATE USER other PASSWORD 'x'").await;
    let other = connect(port, "other", "x").await;
    denied(&other, "SELECT * FROM t", "permission denied for table t").await;
    // Grants name roles that exist.
    let e = run(&owner, "GRANT SELECT ON t TO ghost").await.unwrap_err();
    assert_eq!(e.0, "42704");
    let e = run(&owner, "GRANT SELECT ON nothing TO other")
        .await
        .unwrap_err();
    assert_eq!(e.0, "42P01");
}

/// Names in the first column of `sql`'s rows, sorted.
async fn names(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = c
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `sluice_catalog` shows each role the tables, views and subscriptions it
/// owns or holds a privilege on; superusers see all; sessions of other
/// roles show without their query text, as `pg_stat_activity` does.
#[tokio::test]
async fn the_system_tables_show_each_role_what_it_may_see() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_password(dir.path());
    let port = server.port;
    let admin = connect(port, "sluice", "root").await;
    allowed(
        &admin,
        "CREATE USER alice PASSWORD 'a'; CREATE USER bob PASSWORD 'b';
         CREATE TABLE secret (k BIGINT, v BIGINT);
         CREATE TABLE shared (k BIGINT, v BIGINT);
         INSERT INTO secret VALUES (1, 2); INSERT INTO shared VALUES (1, 2);
         CREATE MATERIALIZED VIEW secret_totals AS SELECT k, sum(v) AS total FROM secret GROUP BY k;
         CREATE MATERIALIZED VIEW shared_totals AS SELECT k, sum(v) AS total FROM shared GROUP BY k;
         CREATE SUBSCRIPTION secret_feed FROM secret;
         GRANT SELECT ON TABLE shared TO bob;
         GRANT SELECT ON MATERIALIZED VIEW shared_totals TO bob;",
    )
    .await;
    let alice = connect(port, "alice", "a").await;
    allowed(
        &alice,
        "CREATE TABLE mine (k BIGINT); CREATE SUBSCRIPTION my_feed FROM mine",
    )
    .await;
    let bob = connect(port, "bob", "b").await;
    admin.batch_execute("FLUSH").await.unwrap();

    let tables = "SELECT table_name FROM sluice_catalog.tables";
    let partitions = "SELECT table_name FROM sluice_catalog.partitions";
    let views = "SELECT view_name FROM sluice_catalog.views";
    let checkpoints = "SELECT view_name FROM sluice_catalog.checkpoints";
    let subscriptions = "SELECT subscription_name FROM sluice_catalog.subscriptions";
    let lag = "SELECT consumer FROM sluice_catalog.lag";
    assert_eq!(names(&admin, tables).await, ["mine", "secret", "shared"]);
    assert_eq!(names(&alice, tables).await, ["mine"]);
    assert_eq!(names(&bob, tables).await, ["shared"]);
    assert_eq!(names(&bob, partitions).await, ["shared"]);
    assert_eq!(
        names(&admin, views).await,
        ["secret_totals", "shared_totals"]
    );
    assert!(names(&alice, views).await.is_empty());
    assert_eq!(names(&bob, views).await, ["shared_totals"]);
    assert_eq!(names(&bob, checkpoints).await, ["shared_totals"]);
    assert_eq!(names(&alice, subscriptions).await, ["my_feed"]);
    assert!(names(&bob, subscriptions).await.is_empty());
    assert_eq!(
        names(&admin, subscriptions).await,
        ["my_feed", "secret_feed"]
    );
    assert_eq!(names(&bob, lag).await, ["shared_totals"]);
    assert_eq!(names(&alice, lag).await, ["my_feed"]);
    // Prepared, then granted: each execution sees the grants as they are.
    let prepared = bob.prepare(views).await.unwrap();
    allowed(
        &admin,
        "GRANT SELECT ON MATERIALIZED VIEW secret_totals TO bob",
    )
    .await;
    let rows = bob.query(&prepared, &[]).await.unwrap();
    assert_eq!(rows.len(), 2, "after the grant bob sees both views");

    // Sessions: all of them, another role's query text hidden.
    let sessions = bob
        .query("SELECT user_name, query FROM sluice_catalog.sessions", &[])
        .await
        .unwrap();
    let users: Vec<String> = sessions.iter().map(|r| r.get(0)).collect();
    assert!(users.iter().any(|u| u == "sluice") && users.iter().any(|u| u == "alice"));
    for r in &sessions {
        let (user, query): (String, String) = (r.get(0), r.get(1));
        if user == "bob" {
            assert!(query.contains("sluice_catalog.sessions"), "{query}");
        } else {
            assert_eq!(query, "<insufficient privilege>", "{user}");
        }
    }
    let admin_sees = admin
        .query(
            "SELECT query FROM sluice_catalog.sessions WHERE user_name = 'bob'",
            &[],
        )
        .await
        .unwrap();
    assert_ne!(
        admin_sees[0].get::<_, String>(0),
        "<insufficient privilege>"
    );
}

/// Point reads sent as text keep their plan between queries with other
/// keys; a REVOKE (or a GRANT, a DROP) empties what is kept, so a read
/// allowed a moment ago is refused at once.
#[tokio::test]
async fn a_kept_point_read_plan_follows_grants_and_revokes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_password(dir.path());
    let port = server.port;
    let admin = connect(port, "sluice", "root").await;
    allowed(
        &admin,
        "CREATE USER reader PASSWORD 'r'; \
         CREATE TABLE t (k BIGINT, v BIGINT); \
         CREATE TABLE kt (k BIGINT PRIMARY KEY, v BIGINT); \
         INSERT INTO t VALUES (1, 10), (2, 20); INSERT INTO kt VALUES (1, 1), (2, 2); \
         CREATE MATERIALIZED VIEW v AS SELECT k, sum(v) AS total FROM t GROUP BY k; FLUSH; \
         GRANT SELECT ON v, kt TO reader",
    )
    .await;
    let reader = connect(port, "reader", "r").await;
    for (sql, refusal) in [
        (
            "SELECT total FROM v WHERE k = {}",
            "permission denied for materialized view v",
        ),
        (
            "SELECT v FROM kt WHERE k = {}",
            "permission denied for table kt",
        ),
    ] {
        for key in 1..=2 {
            let got = common::text_rows(&reader, &sql.replace("{}", &key.to_string())).await;
            assert_eq!(got.len(), 1, "{sql} {key}");
        }
        allowed(&admin, "REVOKE SELECT ON v, kt FROM reader").await;
        denied(&reader, &sql.replace("{}", "1"), refusal).await;
        allowed(&admin, "GRANT SELECT ON v, kt TO reader").await;
        assert_eq!(
            common::text_rows(&reader, &sql.replace("{}", "2"))
                .await
                .len(),
            1
        );
    }
}
