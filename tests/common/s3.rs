//! A local S3-compatible server (moto) on 127.0.0.1 for the object-store
//! tests. `.ci/run` installs it (`pip install 'moto[server]'`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct S3Server {
    pub port: u16,
    pub bucket: String,
    child: Child,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl S3Server {
    /// Starts moto on a free loopback port and creates a bucket.
    pub fn start(bucket: &str) -> S3Server {
        let has_moto = Command::new("python3")
            .args(["-c", "import moto.server"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            has_moto,
            "the S3 tests need moto: pip install 'moto[server]' (.ci/run installs it)"
        );
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new("python3")
                .args([
                    "-m",
                    "moto.server",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start moto");
            let mut server = S3Server {
                port,
                bucket: bucket.to_string(),
                child,
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = server.child.try_wait() {
                    break;
                }
                if server
                    .request("PUT", &format!("/{bucket}"))
                    .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
                {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = server.child.kill();
        }
        panic!("moto did not start");
    }

    /// One plain HTTP request; the response text.
    fn request(&self, method: &str, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    }

    /// An object's bytes.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET /{}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.bucket, self.port
        )
        .ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).ok()?;
        let body = out.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        Some(out[body..].to_vec())
    }

    /// Keys under `prefix` of the objects whose content holds `needle`
    /// (Parquet objects are decoded first).
    pub fn objects_containing(&self, prefix: &str, needle: &str) -> Vec<String> {
        self.keys(prefix)
            .into_iter()
            .filter(|k| {
                self.get(k)
                    .is_some_and(|b| super::contains_text(&b, needle))
            })
            .collect()
    }

    /// `--object-store` for a server under `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The environment a server needs to reach this store.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Keys under a prefix of the bucket.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let text = self
            .request(
                "GET",
                &format!("/{}?list-type=2&prefix={prefix}", self.bucket),
            )
            .unwrap_or_default();
        text.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(|s| s.to_string())
            .collect()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} moto");
    }

    /// Makes the store unavailable: the process stops answering.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
