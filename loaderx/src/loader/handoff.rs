//! The hand-over to the consumer: receiving from the bounded output queue, polling briefly before
//! blocking while recent waits were short.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

/// Waits shorter than this on average are worth spinning for.
const SPIN_BELOW: Duration = Duration::from_micros(100);

/// Receives the next message. When the queue is empty, `may_poll` is set (the gathers run on one
/// thread, so a core is free) and recent waits averaged under [`SPIN_BELOW`], the consumer first
/// polls for up to twice that average, yielding its core between polls, and only then blocks: a
/// worker that finds the consumer awake hands its batch over without a futex wake (an
/// inter-processor interrupt, several µs on a VM, on the worker's critical path). Measured on the
/// 2-core VM: 27 µs token batches went from 35 to 30 µs per batch with one worker. Next to gathers
/// split across both cores (1 MiB batches) polling made the rate bimodal (0.66x–1.1x of a bare
/// gather from round to round), hence `may_poll`; polling with `pause` instead of yielding starved
/// those gathers outright (49 → 90 µs).
pub(super) fn recv_spinning<M>(
    rx: &Receiver<M>,
    wait_ns: &mut Option<u64>,
    may_poll: bool,
) -> std::result::Result<M, crossbeam_channel::RecvError> {
    match rx.try_recv() {
        Ok(m) => return Ok(m),
        Err(crossbeam_channel::TryRecvError::Disconnected) => {
            return Err(crossbeam_channel::RecvError);
        }
        Err(crossbeam_channel::TryRecvError::Empty) => {}
    }
    let start = Instant::now();
    let budget = match *wait_ns {
        Some(avg) if may_poll && avg < SPIN_BELOW.as_nanos() as u64 => {
            Duration::from_nanos(2 * avg)
        }
        _ => Duration::ZERO,
    };
    let mut got = None;
    while start.elapsed() < budget {
        std::thread::yield_now();
        match rx.try_recv() {
            Ok(m) => {
                got = Some(Ok(m));
                break;
            }
            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                got = Some(Err(crossbeam_channel::RecvError));
                break;
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
    }
    let got = got.unwrap_or_else(|| rx.recv());
    let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    *wait_ns = Some(match *wait_ns {
        None => waited,
        Some(a) => a - a / 8 + waited.min(1 << 40) / 8,
    });
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumer_receives_in_order_whether_it_polls_or_blocks_and_sees_disconnection() {
        for avg in [None, Some(1_000), Some(50_000), Some(10_000_000)] {
            // The sender's pauses (a slow producer: the workload, not a synchronization) make the
            // consumer wait, polling or blocking depending on `avg`; the order and disconnection
            // checks hold either way. A round in which the consumer never had to wait records no
            // sample, so rounds repeat until one did, for at most 10 s.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let (tx, rx) = crossbeam_channel::bounded::<u32>(4);
                let mut wait_ns = avg;
                tx.send(1).unwrap();
                assert_eq!(recv_spinning(&rx, &mut wait_ns, true), Ok(1));
                assert_eq!(wait_ns, avg, "no wait, no sample");
                let sender = std::thread::spawn(move || {
                    for k in 2..6 {
                        std::thread::sleep(Duration::from_micros(30 * u64::from(k)));
                        tx.send(k).unwrap();
                    }
                });
                for k in 2..6 {
                    assert_eq!(recv_spinning(&rx, &mut wait_ns, true), Ok(k), "{avg:?}");
                }
                let sampled = wait_ns.is_some_and(|w| w > 0);
                sender.join().unwrap();
                assert!(recv_spinning(&rx, &mut wait_ns, true).is_err(), "{avg:?}");
                if sampled {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{avg:?}: the consumer never had to wait"
                );
            }
        }
    }
}
