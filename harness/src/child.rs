//! The harness's child processes under one time limit ([`limit`]): a peer's Python process (a
//! loader-table arm, a remote peer row) that hangs is killed at the limit and its row fails,
//! instead of stalling the whole run.

use std::io::Read;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// The most a peer process may run: `LOADERX_PEER_LIMIT_S` seconds, default 1800. The slowest
/// peer rows of a full-size run take a few minutes (and each batch is already bounded by the
/// peers' `DataLoader(timeout=120)`), so the limit only catches a process that stopped.
pub fn limit() -> Duration {
    let secs = std::env::var("LOADERX_PEER_LIMIT_S")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1800);
    Duration::from_secs(secs)
}

/// What ended a failed child: `last` (the last line of its standard error), prefixed, when it was
/// `killed` at the limit, with that.
pub fn why(killed: bool, last: &str) -> String {
    if killed {
        format!(
            "killed after {} s (LOADERX_PEER_LIMIT_S); its last line: {last}",
            limit().as_secs()
        )
    } else {
        last.to_string()
    }
}

/// How often [`output_within`] looks at its child.
const POLL: Duration = Duration::from_millis(50);

/// Waits for `child` (its standard output and error piped, read to the end meanwhile) for at most
/// `limit`: its output, and whether it was killed at the limit (`SIGKILL`; its own children, such
/// as `DataLoader` workers, see their parent go and exit, which closes the pipes).
pub fn output_within(mut child: Child, limit: Duration) -> std::io::Result<(Output, bool)> {
    fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = Instant::now();
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() >= limit {
            let _ = child.kill();
            killed = true;
            break child.wait()?;
        }
        std::thread::sleep(POLL);
    };
    let output = Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    Ok((output, killed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn piped(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh")
    }

    #[test]
    fn a_process_that_ends_gives_its_output() {
        let (out, killed) = output_within(piped("echo out; echo err >&2"), limit()).unwrap();
        assert!(!killed && out.status.success());
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
    }

    #[test]
    fn a_process_past_the_limit_is_killed() {
        let (out, killed) = output_within(piped("exec sleep 600"), Duration::ZERO).unwrap();
        assert!(killed && !out.status.success());
    }
}
