//! A throwaway PostgreSQL server on 127.0.0.1 for sink tests, from the
//! Debian package `.ci/run` installs. As root it runs as user `postgres`,
//! since PostgreSQL refuses to run as root.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Postgres {
    pub port: u16,
    bin: PathBuf,
    data: PathBuf,
    as_postgres: bool,
}

fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("initdb").exists());
    dirs.sort();
    dirs.pop().expect(
        "the PostgreSQL server is not installed (/usr/lib/postgresql/*/bin/initdb); .ci/run installs it",
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Postgres {
    /// initdb in `dir` and start on a free port, listening on 127.0.0.1 only.
    pub fn start(dir: &Path) -> Postgres {
        let bin = bin_dir();
        let as_postgres = is_root();
        let data = dir.join("pg");
        std::fs::create_dir_all(&data).unwrap();
        if as_postgres {
            for p in [dir, data.as_path()] {
                assert!(Command::new("chown")
                    .arg("postgres")
                    .arg(p)
                    .status()
                    .unwrap()
                    .success());
            }
        }
        let free_port = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let mut pg = Postgres {
            port: free_port(),
            bin,
            data,
            as_postgres,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                pg.data_str(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
        );
        // The free port found may be taken by another test's server before
        // PostgreSQL binds it: then another port.
        let log = format!("{}/server.log", pg.data_str());
        for attempt in 1.. {
            let options = format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on",
                pg.port,
                pg.data_str()
            );
            let started = pg
                .tool("pg_ctl")
                .args([
                    "-D",
                    pg.data_str(),
                    "-o",
                    &options,
                    "-l",
                    &log,
                    "-w",
                    "start",
                ])
                .status()
                .is_ok_and(|s| s.success());
            if started {
                break;
            }
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(attempt < 3, "pg_ctl failed:\n{tail}");
            eprintln!(
                "PostgreSQL did not start on port {}, trying another:\n{tail}",
                pg.port
            );
            pg.port = free_port();
        }
        let port = pg.port;
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        pg
    }

    fn data_str(&self) -> &str {
        self.data.to_str().expect("utf-8 path")
    }

    /// A PostgreSQL tool, run as user `postgres` when we are root.
    fn tool(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.stdout(std::process::Stdio::null());
        cmd
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let status = self.tool(tool).args(args).status();
        assert!(status.expect(tool).success(), "{tool} failed");
    }

    pub fn conn_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_string(), tokio_postgres::NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        client
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data_str().to_string();
        let _ = self
            .tool("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .status();
    }
}
