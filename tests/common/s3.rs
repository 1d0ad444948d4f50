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

    /// One plain HTTP request: the status and the body, or why it failed.
    fn exchange(&self, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        // moto answers an object GET without credentials with 403; it
        // does not check signatures, so any AWS4 authorization will do.
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\n\
             Connection: close\r\n\r\n",
            self.port
        )
        .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).map_err(|e| e.to_string())?;
        let split = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or("no end of headers")?;
        let head = String::from_utf8_lossy(&out[..split]).to_ascii_lowercase();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or("no status")?;
        let body = out[split + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            return Ok((status, dechunk(&body)?));
        }
        Ok((status, body))
    }

    /// A request that succeeds or fails the test: a busy moto sometimes
    /// drops a connection, which must not read as "no objects".
    fn request_retrying(&self, method: &str, path: &str) -> (u16, Vec<u8>) {
        let mut last = String::new();
        for attempt in 0..8 {
            match self.exchange(method, path) {
                Ok((status, body)) if status < 500 => return (status, body),
                Ok((status, body)) => {
                    last = format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100 << attempt.min(4)));
        }
        panic!("{method} {path} on the test S3 server failed: {last}");
    }

    /// The response text, or None when the server did not answer.
    fn request(&self, method: &str, path: &str) -> Option<String> {
        let (status, body) = self.exchange(method, path).ok()?;
        Some(format!(
            "HTTP/1.1 {status}\r\n\r\n{}",
            String::from_utf8_lossy(&body)
        ))
    }

    /// An object's bytes; None when it does not exist (anymore).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let (status, body) = self.request_retrying("GET", &format!("/{}/{key}", self.bucket));
        match status {
            200 => Some(body),
            404 => None,
            _ => panic!(
                "GET {key}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }

    /// Keys under `prefix` of the objects whose content holds `needle`
    /// (Parquet objects are decoded first). An object replaced between the
    /// listing and its read (a compaction's new generation) means a new
    /// listing, so a scan never misses data that moved.
    pub fn objects_containing(&self, prefix: &str, needle: &str) -> Vec<String> {
        'scan: for _ in 0..20 {
            let mut hits = Vec::new();
            for key in self.keys(prefix) {
                match self.get(&key) {
                    Some(bytes) if super::contains_text(&bytes, needle) => hits.push(key),
                    Some(_) => {}
                    None => continue 'scan,
                }
            }
            return hits;
        }
        panic!("objects under {prefix} kept changing while they were read");
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
        let (status, body) = self.request_retrying(
            "GET",
            &format!("/{}?list-type=2&prefix={prefix}", self.bucket),
        );
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "listing {prefix}: {text}");
        assert!(
            !text.contains("<IsTruncated>true"),
            "listing {prefix} is longer than one page"
        );
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

/// The body of a chunked HTTP response.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk")?;
        let size_text = String::from_utf8_lossy(&body[..line]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {size_text:?}: {e}"))?;
        body = &body[line + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(body.get(..size).ok_or("truncated chunk")?);
        body = body.get(size + 2..).ok_or("truncated chunk")?;
    }
}
