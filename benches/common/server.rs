//! A release `sluice` server for the load benchmarks, and what they read
//! of it: its CPU time and resident memory from /proc.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};

/// Clock ticks per second of /proc/<pid>/stat (Linux's USER_HZ).
const TICKS_PER_SECOND: f64 = 100.0;

pub struct Sluice {
    pub child: Child,
    pub port: u16,
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(dir: &std::path::Path) -> Sluice {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let log = std::fs::File::create(dir.join("sluice.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--http-listen", "off", "--data-dir"])
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start sluice");
    Sluice { child, port }
}

/// The server's CPU time so far, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the
    // 12th, stime the 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / TICKS_PER_SECOND
}

/// The server's resident memory now, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

pub async fn scalar(c: &tokio_postgres::Client, sql: &str) -> i64 {
    try_scalar(c, sql)
        .await
        .unwrap_or_else(|why| panic!("{sql}: {why}"))
}

/// The one value of `sql`, or its SQLSTATE and message.
pub async fn try_scalar(c: &tokio_postgres::Client, sql: &str) -> Result<i64, String> {
    match c.query_one(sql, &[]).await {
        Ok(row) => Ok(row.get(0)),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| format!("{}: {}", d.code().code(), d.message()))
            .unwrap_or_else(|| e.to_string())),
    }
}
