//! Starts a real `sluice` server process on an ephemeral port for a test.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod differential;
pub mod postgres;
pub mod query_gen;
pub mod raw_client;
pub mod s3;

pub struct Server {
    pub port: u16,
    /// The HTTP endpoint's port (0 when the server runs without one).
    pub http_port: u16,
    pub data_dir: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    /// Flags and environment every (re)start gets.
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts a server on a fresh data directory.
    pub fn start(dir: &Path) -> Server {
        Server::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Server {
        Server::start_env(dir, extra, &[])
    }

    /// Starts a server with extra flags and environment variables, which
    /// restarts keep.
    pub fn start_env(dir: &Path, extra: &[&str], env: &[(String, String)]) -> Server {
        let mut s = Server {
            port: 0,
            http_port: 0,
            data_dir: dir.join("data"),
            child: None,
            log: dir.join("server.log"),
            args: extra.iter().map(|s| s.to_string()).collect(),
            env: env.to_vec(),
        };
        s.spawn();
        s
    }

    /// Starts the server on a port it picks itself (`127.0.0.1:0`) and reads
    /// the port from its start-up line, so that parallel tests can never
    /// race for the same port.
    fn spawn(&mut self) {
        let ready_before = self.launch();
        self.wait_ready(ready_before);
    }

    /// Starts the process and returns once its HTTP endpoint is up, which
    /// is before recovery; [`Server::wait_ready`] then waits for the
    /// PostgreSQL port. Returns what `wait_ready` takes.
    pub fn start_again_until_http(&mut self) -> usize {
        assert!(self.child.is_none(), "the server is still running");
        let ready_before = self.launch();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.log_text();
            let up = text
                .lines()
                .filter(|l| l.contains("HTTP endpoint is up"))
                .nth(ready_before);
            if let Some(line) = up {
                self.http_port = http_port_of(line);
                return ready_before;
            }
            assert!(Instant::now() < deadline, "no HTTP endpoint; log:\n{text}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the process; how many times it had been ready before.
    fn launch(&mut self) -> usize {
        let ready_before = self.log_text().matches("sluice is ready").count();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("server log");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--http-listen")
            .arg("127.0.0.1:0")
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sluice");
        self.child = Some(child);
        ready_before
    }

    /// Waits for the start-up line of the `ready_before`-th start and reads
    /// the ports from the log.
    pub fn wait_ready(&mut self, ready_before: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let text = self.log_text();
            let ready = text
                .lines()
                .filter(|l| l.contains("sluice is ready"))
                .nth(ready_before);
            if let Some(line) = ready {
                let port = line
                    .split("listen=127.0.0.1:")
                    .nth(1)
                    .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|p| p.parse().ok());
                self.port = port.unwrap_or_else(|| panic!("no port in start-up line: {line}"));
                self.http_port = text
                    .lines()
                    .filter(|l| l.contains("HTTP endpoint is up"))
                    .nth(ready_before)
                    .map(http_port_of)
                    .unwrap_or(0);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "server did not start; log:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The server's peak resident memory so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the server's /proc status");
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in the server's status");
        kb * 1024
    }

    /// SIGKILL by pid, then wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let status = Command::new("kill")
                .arg("-9")
                .arg(c.id().to_string())
                .status()
                .expect("kill -9");
            assert!(status.success());
            let _ = c.wait();
        }
    }

    /// SIGTERM by pid, then waits for the process to exit (a clean
    /// shutdown); its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("a running server");
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        c.wait().expect("wait for the server")
    }

    /// Starts the server again after it stopped (see `terminate`).
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        self.spawn();
    }

    /// Kills the server and starts it again on the same data directory.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn conn_string(&self) -> String {
        format!("host=127.0.0.1 port={} user=test dbname=test", self.port)
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_string(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }

    /// Runs psql with the given script on stdin, quietly, stopping at the
    /// first error; returns (success, stdout, stderr).
    pub fn psql(&self, script: &str) -> (bool, String, String) {
        self.run_psql(
            script,
            &["-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"],
        )
    }

    /// Runs psql as a user at a terminal would: command tags printed, and
    /// going on after an error.
    pub fn psql_on_errors_continue(&self, script: &str) -> (bool, String, String) {
        self.run_psql(script, &[])
    }

    fn run_psql(&self, script: &str, flags: &[&str]) -> (bool, String, String) {
        use std::io::Write;
        let port = self.port.to_string();
        let mut child = Command::new("psql")
            .args([
                "-X",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "test",
                "-d",
                "test",
            ])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql is installed");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write script");
        let out = child.wait_with_output().expect("psql output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// True when a file's bytes hold `needle`: as raw bytes, or in any text
/// value of a Parquet file (whose pages are compressed).
pub fn contains_text(bytes: &[u8], needle: &str) -> bool {
    if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
        return true;
    }
    if !bytes.starts_with(b"PAR1") {
        return false;
    }
    let Ok(reader) = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        bytes::Bytes::copy_from_slice(bytes),
    )
    .and_then(|b| b.build()) else {
        return true; // unreadable: count it as a hit rather than miss one
    };
    for batch in reader.flatten() {
        for col in batch.columns() {
            // Text of any layout (Utf8, LargeUtf8, Utf8View, dictionaries).
            use arrow::datatypes::DataType;
            if matches!(
                col.data_type(),
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            ) {
                let Ok(bin) = arrow::compute::cast(col, &DataType::LargeBinary) else {
                    return true;
                };
                let bin = bin
                    .as_any()
                    .downcast_ref::<arrow::array::LargeBinaryArray>()
                    .expect("cast to LargeBinary");
                if bin
                    .iter()
                    .flatten()
                    .any(|v| v.windows(needle.len()).any(|w| w == needle.as_bytes()))
                {
                    return true;
                }
                continue;
            }
            let text = match col.data_type() {
                arrow::datatypes::DataType::Utf8 => col.clone(),
                t if arrow::compute::can_cast_types(t, &arrow::datatypes::DataType::Utf8)
                    && !t.is_numeric()
                    && !t.is_temporal() =>
                {
                    match arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8) {
                        Ok(c) => c,
                        Err(_) => return true,
                    }
                }
                _ => continue,
            };
            if let Some(s) = text.as_any().downcast_ref::<arrow::array::StringArray>() {
                if s.iter().flatten().any(|v| v.contains(needle)) {
                    return true;
                }
            }
        }
    }
    false
}

/// Files under `dir` whose content holds `needle` (see [`contains_text`]).
pub fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p).is_ok_and(|b| contains_text(&b, needle)) {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// A connection to the server on `port`, or None when it is down (a
/// writer racing a SIGKILL stops there).
pub async fn try_connect(port: u16) -> Option<tokio_postgres::Client> {
    let conn = format!("host=127.0.0.1 port={port} user=test dbname=test");
    let (client, conn) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .ok()?;
    tokio::spawn(conn);
    Some(client)
}

/// A query's rows as text (`a|b|NULL`), through the simple protocol.
pub async fn text_rows(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    rows_of(
        c.simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {}", error_text(&e))),
    )
}

/// True when Python can import the modules; in CI (`CI` set) their
/// absence fails the test, elsewhere the caller says SKIPPED.
pub fn python_has(modules: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "{modules} must be installed in CI"
        );
        eprintln!("{modules} not installed; SKIPPED");
    }
    ok
}

/// Runs a client program and fails the test with its output unless it
/// succeeds.
pub fn run_client(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rows of a simple query's answer as text (`a|b|NULL`).
pub fn rows_of(messages: Vec<tokio_postgres::SimpleQueryMessage>) -> Vec<String> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect()
}

/// Into a `requests (request_id, user_id, prompt, response, created_at)`
/// table: ten requests each of users u0..u49; u42's prompts carry the
/// marker `PRIVATE-u42`.
pub async fn load_requests(c: &tokio_postgres::Client) {
    for u in 0..50 {
        let values: Vec<String> = (0..10)
            .map(|i| {
                let prompt = if u == 42 {
                    format!("PRIVATE-u42-{i}")
                } else {
                    format!("prompt {u}-{i}")
                };
                format!("('req-{u}-{i}', 'u{u}', '{prompt}', 'a response long enough', TIMESTAMP '2026-11-29 10:00:00' + INTERVAL '{i} minutes')")
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

/// 300 more requests of user u7 (ids `later-{tag}-...`), so that earlier
/// records end up in closed segments (compaction rewrites closed
/// segments; the active one closes by size or age).
pub async fn more_requests(c: &tokio_postgres::Client, tag: &str) {
    for round in 0..3 {
        let values: Vec<String> = (0..100)
            .map(|i| {
                format!("('later-{tag}-{round}-{i}', 'u7', 'later', 'a response long enough', TIMESTAMP '2026-11-29 11:00:00')")
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

/// How many times a crash test kills the server: `SLUICE_CRASH_RUNS`, or
/// the test's short default for CI.
pub fn crash_runs_or(default: usize) -> usize {
    std::env::var("SLUICE_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no code: {e}"))
}

/// `CREATE MATERIALIZED VIEW v AS query` is refused with 0A000 and a
/// message that says `says`.
pub async fn assert_view_refused(c: &tokio_postgres::Client, query: &str, says: &str) {
    let e = c
        .batch_execute(&format!("CREATE MATERIALIZED VIEW v AS {query}"))
        .await
        .expect_err(query);
    assert_eq!(sqlstate(&e), "0A000", "{query}: {e}");
    let message = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(message.contains(says), "{query}: {message}");
}

/// The single integer (BIGINT, or INTEGER as `41 + 1` is) a query returns.
pub async fn scalar(c: &tokio_postgres::Client, sql: &str) -> i64 {
    let row = c
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    row.try_get::<_, i64>(0)
        .or_else(|_| row.try_get::<_, i32>(0).map(i64::from))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The port in an "HTTP endpoint is up" log line.
fn http_port_of(line: &str) -> u16 {
    line.split("http_listen=127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// GET `path` from the server's HTTP endpoint: (status, body).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the HTTP endpoint");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // Chunked bodies: keep the chunks' data only.
    let chunked = text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        body.to_string()
    };
    (status, body)
}

/// The value of the sample `name{labels}` in a metrics text.
pub fn sample(metrics: &str, name_and_labels: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap()
}

/// Runs `test` on a thread of its own with a 64 MB stack and a runtime of
/// two workers: some tests' futures, unoptimized, take more than a test
/// thread's 2 MB. A panic of the test is the caller's.
pub fn on_large_stack<F>(test: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()>,
{
    let thread = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(test())
        })
        .expect("a thread for the test");
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

/// An error as a test failure should print it: the server's SQLSTATE and
/// message when it sent one, the client's error otherwise.
pub fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}
