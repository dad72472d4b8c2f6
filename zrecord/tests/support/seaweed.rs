//! A real SeaweedFS server on loopback for the object-storage tests (feature `remote`): the
//! workspace's one launcher (`benchkit::seaweed`, which the harness's remote tables start too),
//! with this suite's credentials, panicking where a test should fail; a test deadline; and a
//! fault-injecting loopback proxy in front of the real server. Requests must be signed with
//! [`KEY`] / [`SECRET`].

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::{Deref, DerefMut};
use std::time::Duration;

pub use benchkit::seaweed::http;

pub const KEY: &str = "zrecord-test";
pub const SECRET: &str = "zrecord-test-secret";

/// A running server; dropping it stops every process it started.
pub struct Seaweed(benchkit::seaweed::Seaweed);

impl Deref for Seaweed {
    type Target = benchkit::seaweed::Seaweed;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Seaweed {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Seaweed {
    /// One `weed server` (master, one volume server, filer, S3), ready to serve.
    pub fn start() -> Seaweed {
        Self::start_with(1, "000")
    }

    /// One `weed server` and `volumes - 1` more volume servers joined to its master, each a
    /// process of its own, ready to serve; new volumes are placed with SeaweedFS replication
    /// `replication` ("000": one copy; "001": two copies on two servers of one rack).
    pub fn start_with(volumes: usize, replication: &str) -> Seaweed {
        let mut c = benchkit::seaweed::Config::new(KEY, SECRET);
        c.volumes = volumes;
        c.replication = replication.into();
        Seaweed(benchkit::seaweed::Seaweed::start(&c).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Creates bucket `name` (through the filer).
    pub fn bucket(&self, name: &str) {
        self.0.bucket(name).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Kills the last extra volume server (not the `weed server`) at once.
    pub fn kill_volume(&mut self) {
        assert!(self.0.kill_volume(), "no extra volume server to kill");
    }
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
    /// Answers `503 Slow Down` with `Retry-After` of this many seconds, and closes.
    SlowDown(u64),
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
                            Fault::SlowDown(secs) => {
                                read_head(&mut client);
                                let _ = client.write_all(
                                    format!(
                                        "HTTP/1.1 503 Slow Down\r\nRetry-After: {secs}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                                    )
                                    .as_bytes(),
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
                    forward(client, upstream);
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

/// Copies bytes both ways between `client` and a new connection to `upstream` until either closes.
fn forward(client: TcpStream, upstream: u16) {
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
}

/// A loopback proxy in front of the S3 gateway that can go down (its port refuses connections and
/// every connection it forwarded is cut, as when a server restarts) and come back on the same port.
pub struct Outage {
    pub port: u16,
    upstream: u16,
    /// Connections accepted since the proxy (re)started.
    pub accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    serving: Option<std::thread::JoinHandle<()>>,
}

impl Outage {
    pub fn start(upstream: u16) -> Outage {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut o = Outage {
            port: l.local_addr().unwrap().port(),
            upstream,
            accepted: Default::default(),
            stop: Default::default(),
            open: Default::default(),
            serving: None,
        };
        o.serve(l);
        o
    }

    fn serve(&mut self, l: TcpListener) {
        use std::sync::atomic::Ordering;
        l.set_nonblocking(true).unwrap();
        self.stop.store(false, Ordering::SeqCst);
        self.accepted.store(0, Ordering::SeqCst);
        let (stop, seen, open, up) = (
            self.stop.clone(),
            self.accepted.clone(),
            self.open.clone(),
            self.upstream,
        );
        self.serving = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        seen.fetch_add(1, Ordering::SeqCst);
                        open.lock().unwrap().push(c.try_clone().unwrap());
                        std::thread::spawn(move || forward(c, up));
                    }
                    // The listener polls so that `down` can close it.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => return,
                }
            }
        }));
    }

    /// Takes the proxy down: its listener closed, every forwarded connection cut.
    pub fn down(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(h) = self.serving.take() {
            h.join().unwrap();
        }
        for c in self.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Brings the proxy back on its port.
    pub fn up(&mut self) {
        let mut tries = 0;
        let l = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("port {} could not be bound again: {e}", self.port),
            }
        };
        self.serve(l);
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
