//! Logins: SCRAM-SHA-256 passwords, TLS (with channel binding), roles,
//! and the refusals PostgreSQL's clients expect, through tokio-postgres
//! over rustls, psql and psycopg.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{http_get, python_has, run_client, sample, Server};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::CertificateDer;

/// A CA and a server certificate it signed (for localhost and 127.0.0.1),
/// written as PEM files into `dir`; the CA's certificate in DER.
fn make_certificates(dir: &Path) -> CertificateDer<'static> {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Sluice test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    ca.der().clone()
}

fn tls_connector(ca: &CertificateDer<'static>) -> tokio_postgres_rustls::MakeRustlsConnect {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

async fn connect_tls(
    port: u16,
    user: &str,
    password: &str,
    ca: &CertificateDer<'static>,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let conn = format!(
        "host=localhost port={port} user={user} password='{password}' dbname=sluice sslmode=require channel_binding=require"
    );
    let (client, connection) = tokio_postgres::connect(&conn, tls_connector(ca)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn connect_plain(
    port: u16,
    user: &str,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let conn =
        format!("host=127.0.0.1 port={port} user={user} password='{password}' dbname=sluice");
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The SQLSTATE and message of a refused connection.
fn refusal(e: tokio_postgres::Error) -> (String, String) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string())
}

/// psql with `conninfo` and `PGPASSWORD`, never prompting; (ok, stdout,
/// stderr).
fn psql(conninfo: &str, password: Option<&str>, sql: &str) -> (bool, String, String) {
    let mut cmd = Command::new("psql");
    cmd.args([conninfo, "-w", "-X", "-A", "-t", "-c", sql]);
    match password {
        Some(p) => cmd.env("PGPASSWORD", p),
        None => cmd.env_remove("PGPASSWORD"),
    };
    let out = cmd.output().expect("psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

async fn current_user(c: &tokio_postgres::Client) -> String {
    c.query_one("SELECT current_user", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
}

fn password_env(p: &str) -> Vec<(String, String)> {
    vec![("SLUICE_PASSWORD".to_string(), p.to_string())]
}

#[tokio::test]
async fn passwords_roles_and_tls_as_postgres_clients_expect() {
    let dir = tempfile::tempdir().unwrap();
    let ca = make_certificates(dir.path());
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server.key");
    let mut server = Server::start_env(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &password_env("s3cret"),
    );
    let port = server.port;

    // The bootstrap superuser, over TLS with channel binding.
    let admin = connect_tls(port, "sluice", "s3cret", &ca).await.unwrap();
    assert_eq!(current_user(&admin).await, "sluice");
    admin
        .batch_execute(
            "CREATE USER alice WITH PASSWORD 'wonder land'; \
             CREATE ROLE nologin PASSWORD 'pw'; \
             CREATE ROLE helper CREATEROLE LOGIN PASSWORD 'pw'",
        )
        .await
        .unwrap();
    let roles: Vec<(String, bool, bool)> = admin
        .query(
            "SELECT rolname, rolsuper, rolcanlogin FROM pg_roles ORDER BY rolname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("alice".to_string(), false, true),
            ("helper".to_string(), false, true),
            ("nologin".to_string(), false, false),
            ("sluice".to_string(), true, true),
        ]
    );

    // psql verifying the certificate and binding the channel.
    let verified = format!(
        "host=127.0.0.1 port={port} user=alice dbname=sluice sslmode=verify-full sslrootcert={} channel_binding=require",
        dir.path().join("ca.pem").display()
    );
    let (ok, out, err) = psql(
        &verified,
        Some("wonder land"),
        "SELECT current_user, session_user",
    );
    assert!(ok, "{err}");
    assert_eq!(out, "alice|alice");
    let (ok, out, err) = psql(
        &verified,
        Some("wonder land"),
        "SELECT ssl FROM (SELECT true AS ssl)",
    );
    assert!(ok && out == "t", "{out} {err}");

    // Refusals, worded as PostgreSQL words them.
    let wrong = refusal(connect_plain(port, "alice", "nope").await.unwrap_err());
    assert_eq!(
        wrong,
        (
            "28P01".to_string(),
            "password authentication failed for user \"alice\"".to_string()
        )
    );
    // An unknown role fails the same way as a wrong password.
    let unknown = refusal(connect_plain(port, "nobody", "nope").await.unwrap_err());
    assert_eq!(
        unknown,
        (
            "28P01".to_string(),
            "password authentication failed for user \"nobody\"".to_string()
        )
    );
    let no_login = refusal(connect_plain(port, "nologin", "pw").await.unwrap_err());
    assert_eq!(
        no_login,
        (
            "28000".to_string(),
            "role \"nologin\" is not permitted to log in".to_string()
        )
    );
    let plain = format!("host=127.0.0.1 port={port} user=alice dbname=sluice sslmode=disable");
    let (ok, _, err) = psql(&plain, None, "SELECT 1");
    assert!(!ok);
    assert!(err.contains("no password supplied"), "{err}");
    let (ok, _, err) = psql(&plain, Some("nope"), "SELECT 1");
    assert!(!ok);
    assert!(
        err.contains("FATAL:  password authentication failed for user \"alice\""),
        "{err}"
    );
    // Channel binding is offered only over TLS: a plain connection that
    // requires it is refused by the client.
    let (ok, _, err) = psql(
        &format!("{plain} channel_binding=require"),
        Some("wonder land"),
        "SELECT 1",
    );
    assert!(!ok, "channel binding over a plain connection");
    assert!(err.contains("channel binding"), "{err}");
    // Without it, SCRAM over plain TCP works.
    let (ok, out, err) = psql(&plain, Some("wonder land"), "SELECT current_user");
    assert!(ok && out == "alice", "{out} {err}");

    let (_, metrics) = http_get(server.http_port, "/metrics").await;
    assert!(sample(&metrics, "sluice_auth_failures_total{reason=\"password\"}") >= 3.0);
    assert!(sample(&metrics, "sluice_auth_failures_total{reason=\"no_login\"}") >= 1.0);

    // Role statements need the right attributes.
    let alice = connect_plain(port, "alice", "wonder land").await.unwrap();
    let e = alice
        .batch_execute("CREATE ROLE mallory")
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "42501");
    assert_eq!(
        e.as_db_error().unwrap().message(),
        "permission denied to create role"
    );
    let e = alice
        .batch_execute("ALTER ROLE alice SUPERUSER")
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "42501");
    alice
        .batch_execute("ALTER ROLE alice PASSWORD 'changed'")
        .await
        .unwrap();
    let helper = connect_plain(port, "helper", "pw").await.unwrap();
    helper
        .batch_execute("CREATE USER bob PASSWORD 'b'")
        .await
        .unwrap();
    let e = helper
        .batch_execute("CREATE ROLE boss SUPERUSER")
        .await
        .unwrap_err();
    assert_eq!(common::sqlstate(&e), "42501");
    let e = helper.batch_execute("DROP ROLE sluice").await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "55006");
    let e = admin.batch_execute("CREATE ROLE bob").await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "42710");
    let e = admin.batch_execute("DROP ROLE ghost").await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "42704");
    admin
        .batch_execute("DROP ROLE IF EXISTS ghost, helper")
        .await
        .unwrap();

    // The password never reaches the logs or the sessions table.
    assert!(!server.log_text().contains("wonder land"));
    assert!(!server.log_text().contains("s3cret"));
    let roles_file = std::fs::read_to_string(server.data_dir.join("roles.json")).unwrap();
    assert!(!roles_file.contains("changed") && !roles_file.contains("wonder"));

    // psycopg over TLS, negotiated and direct (libpq 17 and later).
    let ca_pem = dir.path().join("ca.pem").display().to_string();
    if python_has("psycopg") {
        run_client(
            "psycopg with sslmode=require",
            Command::new("python3").args([
                "-c",
                &format!(
                    "import psycopg\n\
                     c = psycopg.connect('host=127.0.0.1 port={port} user=bob password=b dbname=sluice sslmode=require')\n\
                     assert c.info.pgconn.ssl_in_use\n\
                     assert c.execute('SELECT current_user').fetchone()[0] == 'bob'\n\
                     d = psycopg.connect('host=localhost port={port} user=bob password=b dbname=sluice sslmode=verify-full sslrootcert={ca_pem} sslnegotiation=direct channel_binding=require')\n\
                     assert d.info.pgconn.ssl_in_use\n\
                     try:\n    psycopg.connect('host=127.0.0.1 port={port} user=bob password=x dbname=sluice sslmode=require')\n    raise SystemExit('a wrong password connected')\n\
                     except psycopg.OperationalError as e:\n    assert 'password authentication failed for user \"bob\"' in str(e), e\n"
                ),
            ]),
        );
    }

    // Roles and passwords survive SIGKILL.
    server.restart();
    let port = server.port;
    let alice = connect_tls(port, "alice", "changed", &ca).await.unwrap();
    assert_eq!(current_user(&alice).await, "alice");
    assert_eq!(
        refusal(
            connect_plain(port, "alice", "wonder land")
                .await
                .unwrap_err()
        )
        .0,
        "28P01"
    );
    assert_eq!(
        refusal(connect_plain(port, "helper", "pw").await.unwrap_err()).0,
        "28P01"
    );
    connect_plain(port, "bob", "b").await.unwrap();
}

#[tokio::test]
async fn tls_required_refuses_plain_connections() {
    let dir = tempfile::tempdir().unwrap();
    let ca = make_certificates(dir.path());
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server.key");
    let server = Server::start_env(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-required",
        ],
        &password_env("pw"),
    );
    let (code, message) = refusal(
        connect_plain(server.port, "sluice", "pw")
            .await
            .unwrap_err(),
    );
    assert_eq!(code, "28000");
    assert!(message.ends_with("no encryption"), "{message}");
    let (ok, _, err) = psql(
        &format!(
            "host=127.0.0.1 port={} user=sluice dbname=sluice sslmode=disable",
            server.port
        ),
        Some("pw"),
        "SELECT 1",
    );
    assert!(!ok);
    assert!(err.contains("no pg_hba.conf entry"), "{err}");
    let c = connect_tls(server.port, "sluice", "pw", &ca).await.unwrap();
    assert_eq!(current_user(&c).await, "sluice");
}

/// `sluice serve` with `args` on a fresh data directory must exit at once
/// with an error that says `says`.
fn refuses_to_start(args: &[&str], env: &[(&str, &str)], says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--http-listen", "off", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("SLUICE_PASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with {args:?}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn an_open_address_without_passwords_refuses_to_start() {
    refuses_to_start(
        &["--listen", "0.0.0.0:0", "--auth", "trust"],
        &[],
        "refusing to listen on 0.0.0.0:0 with trust authentication",
    );
    refuses_to_start(
        &["--listen", "0.0.0.0:0"],
        &[],
        "refusing to listen on 0.0.0.0:0 with trust authentication",
    );
    refuses_to_start(
        &["--listen", "0.0.0.0:0", "--auth", "scram"],
        &[],
        "has no password",
    );
    refuses_to_start(
        &["--listen", "127.0.0.1:0", "--tls-required"],
        &[],
        "--tls-required needs --tls-cert and --tls-key",
    );
}

#[tokio::test]
async fn trust_on_loopback_takes_any_name_and_roles_still_apply() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    assert!(server.log_text().contains("trust authentication"));
    // Any name connects, as before roles: a superuser of that name.
    let anyone = connect_plain(server.port, "whoever", "").await.unwrap();
    assert_eq!(current_user(&anyone).await, "whoever");
    anyone
        .batch_execute("CREATE ROLE reader LOGIN; CREATE ROLE locked NOLOGIN")
        .await
        .unwrap();
    // A name that is a role has that role's rights, and its LOGIN.
    let reader = connect_plain(server.port, "reader", "").await.unwrap();
    let e = reader.batch_execute("CREATE ROLE x").await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "42501");
    assert_eq!(
        refusal(connect_plain(server.port, "locked", "").await.unwrap_err()).0,
        "28000"
    );
    // psql's \du lists them.
    let (ok, out, err) = server.psql("\\du");
    assert!(ok, "{err}");
    assert!(out.contains("reader") && out.contains("Superuser"), "{out}");
}
