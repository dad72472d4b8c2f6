//! How far apart two of this machine's cores are right now: the round trip of one cache line
//! between two threads pinned to the first two CPUs this process may run on.
//!
//! On a VM the host decides where the virtual CPUs run, and it may move them. On the 2-vCPU AMD
//! EPYC VMs this project is measured on, the round trip read 55-70 ns (both vCPUs in one core
//! complex, sharing its L3) or 320-350 ns (in different ones), switching every few seconds to
//! minutes. Whatever hands data from one thread to another pays that: a loader whose worker gathers
//! a ragged-token batch that the consumer then reads ran 36-42 µs a batch in the near placement
//! and 50-66 µs in the far one, while the one-thread gather loop beside it did not move. The
//! harness probes before and after each timed cell so a reader (and the CI gate) can tell the
//! machine's weather from the code's speed, and a timed loop reads it between its blocks
//! ([`Readings`]) so that a placement that changed while it ran shows too.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The first two CPUs this process may run on, or `None` with fewer than two.
fn two_cpus() -> Option<(usize, usize)> {
    // SAFETY: an all-zero `cpu_set_t` is the empty set, a valid value of the plain C struct.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `sched_getaffinity` writes at most `size_of::<cpu_set_t>()` bytes into the set we
    // own; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `CPU_ISSET` reads the set we own, for indices below its capacity.
    let mut cpus = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some((cpus.next()?, cpus.next()?))
}

/// Pins the calling thread to `cpu`; false when the kernel refuses.
fn pin(cpu: usize) -> bool {
    // SAFETY: as in `two_cpus`: the empty set, then one valid index set in it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from this process's own affinity mask, below `CPU_SETSIZE`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set is ours and fully initialized.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 }
}

/// The value the answering thread stops at.
const STOP: u64 = u64::MAX;

/// The median round trip, in nanoseconds, of a cache line passed between two threads pinned to two
/// different CPUs, over 4 slices of `window`; `None` on one CPU or when the threads cannot be
/// pinned. Only the two probe threads it starts are pinned (the caller's affinity, which child
/// processes inherit, is left alone), and both have ended when it returns.
pub fn round_trip_ns(window: Duration) -> Option<f64> {
    let (a, b) = two_cpus()?;
    let line = Arc::new(AtomicU64::new(0));
    let answerer_pinned = Arc::new(AtomicBool::new(false));
    let answerer = {
        let (line, pinned) = (line.clone(), answerer_pinned.clone());
        std::thread::spawn(move || {
            if !pin(b) {
                return;
            }
            pinned.store(true, Ordering::Release);
            // Answers each odd value with the next even one, until told to stop.
            loop {
                let v = line.load(Ordering::Acquire);
                if v == STOP {
                    return;
                }
                if v % 2 == 1 {
                    line.store(v + 1, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let asker = {
        let line = line.clone();
        std::thread::spawn(move || -> Option<f64> {
            if !pin(a) {
                return None;
            }
            let deadline = Instant::now() + Duration::from_secs(1);
            while !answerer_pinned.load(Ordering::Acquire) {
                // The answerer failed to pin (and returned) or has not started yet.
                if Instant::now() > deadline {
                    return None;
                }
                std::thread::yield_now();
            }
            let slice = window / 4;
            let mut per_slice = Vec::with_capacity(4);
            let mut v = 0u64;
            for _ in 0..4 {
                let (start, mut trips) = (Instant::now(), 0u64);
                // The clock is read every 16 trips: rarely enough not to weigh on a ~50 ns
                // trip, often enough that a slice ends soon after its time even where each trip
                // waits for a CPU shared with others (a throttled container).
                while start.elapsed() < slice {
                    for _ in 0..16 {
                        line.store(v + 1, Ordering::Release);
                        while line.load(Ordering::Acquire) != v + 2 {
                            std::hint::spin_loop();
                        }
                        v += 2;
                    }
                    trips += 16;
                }
                per_slice.push(start.elapsed().as_nanos() as f64 / trips as f64);
            }
            per_slice.sort_by(f64::total_cmp);
            Some((per_slice[1] + per_slice[2]) / 2.0)
        })
    };
    let got = asker.join().ok().flatten();
    line.store(STOP, Ordering::Release);
    let _ = answerer.join();
    got
}

/// The window of each reading [`around`] takes.
pub const PROBE_WINDOW: Duration = Duration::from_millis(20);

/// Every reading this process has taken ([`around`], [`settle`]).
static READINGS: Mutex<Vec<f64>> = Mutex::new(Vec::new());

fn note(reading: Option<f64>) -> Option<f64> {
    if let Some(x) = reading.filter(|x| x.is_finite() && *x > 0.0) {
        READINGS.lock().unwrap_or_else(|e| e.into_inner()).push(x);
    }
    reading
}

/// A run's near level from its readings: their lower decile, so that a few readings far below the
/// rest do not set it on their own; a placement that holds for a tenth of a run or more does
/// ([`FAR_OVER_NEAR`] keeps the two levels that share a cache near each other either way).
pub fn near_level(readings: &[f64]) -> Option<f64> {
    let mut xs: Vec<f64> = readings
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 10).copied()
}

/// The near level ([`near_level`]) of the readings this process has taken so far, to tell a far
/// reading ([`is_far`]) as a run goes.
pub fn near_level_seen() -> Option<f64> {
    near_level(&READINGS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Takes `n` readings (a run's first near level, before its first cell: with 10 or more, one
/// outlier below the rest does not set it).
pub fn settle(n: usize) {
    for _ in 0..n {
        note(round_trip_ns(PROBE_WINDOW));
    }
}

/// Runs `f` between two readings of [`round_trip_ns`] and returns its result with the larger
/// reading: a placement that changed during `f` shows as the far one.
pub fn around<T>(f: impl FnOnce() -> T) -> (T, Option<f64>) {
    let before = note(round_trip_ns(PROBE_WINDOW));
    let out = f();
    let after = note(round_trip_ns(PROBE_WINDOW));
    let worst = match (before, after) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    (out, worst)
}

/// How long a reading waits at most for the timing process's other threads to go quiet.
pub const QUIESCE_LIMIT: Duration = Duration::from_millis(500);

/// Readings a timed loop takes itself, outside its timer: one at [`Readings::take`] (before the
/// first timed block, after the last), and between blocks whenever [`Readings::every`] has passed
/// since the last one ([`Readings::due`]). Taken in the process that times, next to its timed
/// work, they catch a placement that changed while it ran, which readings around a whole child
/// process (its imports and set-up included) can miss.
#[derive(Debug)]
pub struct Readings {
    every: Duration,
    last: Option<Instant>,
    got: Vec<f64>,
}

impl Readings {
    /// How often a timed loop reads the placement between its blocks.
    pub const EVERY: Duration = Duration::from_millis(500);

    /// No readings yet; [`Readings::due`] takes one once `every` has passed since the last.
    pub fn every(every: Duration) -> Readings {
        Readings {
            every,
            last: None,
            got: Vec::new(),
        }
    }

    /// Takes a reading once this process's other threads are quiet ([`quiesce`]).
    pub fn take(&mut self) {
        quiesce(QUIESCE_LIMIT);
        if let Some(x) = note(round_trip_ns(PROBE_WINDOW)) {
            self.got.push(x);
        }
        self.last = Some(Instant::now());
    }

    /// Takes a reading if none was taken yet or `every` has passed since the last.
    pub fn due(&mut self) {
        if self.last.is_none_or(|t| t.elapsed() >= self.every) {
            self.take();
        }
    }

    /// The readings taken, in order.
    pub fn values(&self) -> &[f64] {
        &self.got
    }
}

/// Whether a thread listed under `tasks` (a `/proc/<pid>/task` directory) other than `skip` is
/// running or runnable now (state `R` in its `stat`); false where that cannot be read.
fn running_in(tasks: &str, skip: Option<&str>) -> bool {
    let Ok(dir) = std::fs::read_dir(tasks) else {
        return false;
    };
    dir.flatten()
        .filter(|e| skip.is_none() || e.file_name().to_str() != skip)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        // The state follows the command name, which is in parentheses and may hold anything.
        .any(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        })
}

/// Waits, for at most `limit`, until no thread under `tasks` but `skip` has been running or
/// runnable at 4 checks 1 ms apart.
fn quiesce_tasks(tasks: &str, skip: Option<&str>, limit: Duration) {
    let start = Instant::now();
    let mut quiet = 0;
    while quiet < 4 && start.elapsed() < limit {
        quiet = if running_in(tasks, skip) {
            0
        } else {
            quiet + 1
        };
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits, for at most `limit`, until no other thread of this process has been running or
/// runnable at 4 checks 1 ms apart: a loader's workers refilling its window after the consumer
/// took a block would otherwise hold the CPUs the probe pins its threads to, and the reading would
/// measure them, not the placement. (The process's CPU time cannot tell: the kernel adds a thread
/// running on another CPU to it only at scheduler ticks, which may be 10 ms apart.)
pub fn quiesce(limit: Duration) {
    // SAFETY: `gettid` has no preconditions; it returns the calling thread's id.
    let me = unsafe { libc::gettid() }.to_string();
    quiesce_tasks("/proc/self/task", Some(&me), limit);
}

/// [`quiesce`] for another process, `pid`, every thread of it (its caller waits for this one, so
/// it is not running): what a Python timed loop asks of `harness placement --quiet-pid PID`.
pub fn quiesce_process(pid: u32, limit: Duration) {
    quiesce_tasks(&format!("/proc/{pid}/task"), None, limit);
}

/// Notes readings another process took (a timed child's [`Readings`]) as this process's own, for
/// [`near_level_seen`], and returns their upper decile: the reading at or below which nine tenths
/// of them lie, the farthest one when there are ten or fewer. A row whose timed blocks spread over
/// many readings thereby reads far when a tenth of them or more were far (its timed batches then
/// ran far apart in about that share), not for one stray reading among sixty.
pub fn note_all(readings: &[f64]) -> Option<f64> {
    let mut xs: Vec<f64> = readings
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .filter_map(|x| note(Some(x)))
        .collect();
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    xs.get((9 * n / 10).min(n.saturating_sub(1))).copied()
}

/// Whether a reading is far: more than [`FAR_OVER_NEAR`] times the near level of the same run
/// ([`near_level`]: the machine's own, as no fixed nanosecond threshold fits every CPU). With no
/// reading, or on a machine whose cores never move, nothing is far.
pub fn is_far(reading: Option<f64>, near: Option<f64>) -> bool {
    matches!((reading, near), (Some(r), Some(n)) if n > 0.0 && r > FAR_OVER_NEAR * n)
}

/// The factor over a run's near level above which a reading counts as far. On the EPYC VMs the
/// readings clustered at 34-36 ns (both vCPUs on one core's two hardware threads, for minutes at
/// a time), 51-77 (one core complex), ~110-180, 320-350 and ~690 ns. The first two share a last-level
/// cache and ran alike; at 320-350 the ragged-token loader ran 0.55-0.7x and at ~690 a 2-thread
/// image gather 0.5x their near speed. 2.5x keeps both shared-cache levels near whichever of them
/// sets the run's level (34 x 2.5 = 85 ns), and the 320 ns and farther ones far; the ~130 ns level,
/// which read full speed as often as not, counts as near over a 66 ns level.
pub const FAR_OVER_NEAR: f64 = 2.5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_a_positive_round_trip_on_two_cpus_and_nothing_on_one() {
        let got = round_trip_ns(Duration::from_millis(20));
        match two_cpus() {
            // A round trip is two cache-line transfers: more than a nanosecond. No upper bound:
            // beside other tests on a loaded 2-core machine the answerer may wait whole
            // scheduler slices for its CPU, which only lengthens the reading.
            Some(_) => {
                let ns = got.expect("two CPUs: a reading");
                assert!(ns > 1.0 && ns.is_finite(), "{ns}");
            }
            None => assert_eq!(got, None),
        }
        let mut r = Readings::every(Duration::from_secs(3600));
        r.due();
        r.due();
        r.take();
        // One reading at the first `due`, none at the second (within the hour), one at `take`;
        // each a round trip of two cache-line transfers (the probe may fail on a loaded machine:
        // then there are fewer).
        assert!(r.values().len() <= 2, "{:?}", r.values());
        assert!(r.values().iter().all(|x| x.is_finite() && *x > 1.0));
        assert_eq!(note_all(&[70.0, f64::NAN, 320.0, -1.0]), Some(320.0));
        assert_eq!(note_all(&[]), None);
        // One far reading in twenty does not make a row far; two do.
        let mut xs = vec![70.0; 19];
        xs.push(320.0);
        assert_eq!(note_all(&xs), Some(70.0));
        xs[0] = 330.0;
        assert_eq!(note_all(&xs), Some(320.0));
        let ((), worst) = around(|| ());
        assert_eq!(worst.is_some(), two_cpus().is_some());
        // Every reading is noted.
        if worst.is_some() {
            assert!(near_level_seen().is_some());
        }
    }

    #[test]
    fn a_reading_waits_while_another_thread_runs_and_not_for_a_process_that_is_gone() {
        use std::sync::atomic::AtomicBool;
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        // The spinner is running or runnable at every check: the wait runs to its limit.
        let limit = Duration::from_millis(50);
        let t = Instant::now();
        quiesce(limit);
        assert!(t.elapsed() >= limit, "{:?}", t.elapsed());
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        // No such process: nothing runs there, and four quiet checks end the wait.
        let t = Instant::now();
        quiesce_process(u32::MAX, Duration::from_secs(60));
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }

    #[test]
    fn the_near_level_is_the_lower_decile_so_one_outlier_below_does_not_set_it() {
        let mut run = vec![66.0; 15];
        run.extend([330.0; 5]);
        run.push(34.0);
        assert_eq!(near_level(&run), Some(66.0));
        assert!(is_far(Some(330.0), near_level(&run)));
        assert!(!is_far(Some(70.0), near_level(&run)));
        assert_eq!(near_level(&[]), None);
        assert_eq!(near_level(&[80.0]), Some(80.0));
    }

    #[test]
    fn a_reading_is_far_only_past_its_factor_over_the_near_level() {
        assert!(!is_far(Some(60.0), Some(55.0)));
        assert!(!is_far(Some(77.0), Some(34.0)));
        assert!(!is_far(Some(130.0), Some(66.0)));
        assert!(is_far(Some(320.0), Some(66.0)));
        assert!(is_far(Some(330.0), Some(55.0)));
        assert!(!is_far(None, Some(55.0)));
        assert!(!is_far(Some(330.0), None));
    }
}
