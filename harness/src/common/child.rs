//! The harness's child processes under one time limit ([`limit`]): a peer's Python process (a
//! loader-table arm, a remote peer row) that hangs is killed at the limit and its row fails,
//! instead of stalling the whole run.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use crate::error::{HarnessError, Result};

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

/// Process-tree PSS in bytes (the process and all its descendants).
fn tree_pss(root: u32) -> u64 {
    let mut children: Vec<(u32, u32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                && let Some(rest) = stat.rsplit(')').next()
                && let Some(ppid) = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse::<u32>().ok())
            {
                children.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut k = 0;
    while k < tree.len() {
        let p = tree[k];
        tree.extend(children.iter().filter(|c| c.1 == p).map(|c| c.0));
        k += 1;
    }
    tree.iter()
        .filter_map(|p| proc_bytes(&format!("/proc/{p}/smaps_rollup"), "Pss:"))
        .sum()
}

/// The `key` field (`Pss:`, `VmHWM:`) of the `/proc` file at `path`, in bytes (it is in kB).
pub fn proc_bytes(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Runs a command for at most the peer limit ([`limit`]), sampling its tree PSS every
/// 20 ms when `sample` is set; returns (stdout, peak PSS bytes, 0 when not sampled).
pub fn run_sampled(mut cmd: Command, sample: bool) -> Result<(String, u64)> {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(HarnessError::io("start", cmd.get_program()))?;
    let pid = child.id();
    let peak = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while sample && !stop.load(Ordering::Relaxed) {
                peak.fetch_max(tree_pss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let (out, killed) =
        output_within(child, limit()).map_err(HarnessError::io("start", cmd.get_program()))?;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if killed || !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(HarnessError::Cell {
            code: out.status.code(),
            last_line: why(killed, last_line(&err)),
        });
    }
    Ok((
        String::from_utf8_lossy(&out.stdout).to_string(),
        peak.load(Ordering::Relaxed),
    ))
}

/// Runs `cmd`, a script told to write its JSON result into `out`, and reads that back; a script
/// that wrote none fails with the last line of its standard error.
pub fn script_json<T: DeserializeOwned>(cmd: &mut Command, out: &Path) -> Result<T> {
    let _ = std::fs::remove_file(out);
    let program = cmd.get_program().to_string_lossy().into_owned();
    let o = cmd.output().map_err(HarnessError::io("start", &program))?;
    let parsed = std::fs::read(out).ok();
    parsed
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            let err = String::from_utf8_lossy(&o.stderr);
            HarnessError::Other(format!("{program} wrote no result: {}", last_line(&err)))
        })
}

/// The last non-empty line of an error (a Python traceback ends with the exception).
pub fn last_line(e: &str) -> &str {
    e.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(e)
        .trim()
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
