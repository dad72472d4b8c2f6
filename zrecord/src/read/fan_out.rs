//! Whether a gather may spread over threads: the size from which the engines split one
//! ([`PARALLEL_BYTES`]), the per-thread switch that keeps a caller's gathers on its own thread
//! ([`sequential_gathers`]) and the count of gathers that did spread ([`gather_fan_outs`]). An
//! engine that splits a gather over the rayon pool asks [`sequential`] first and calls
//! [`count_fan_out`] when it splits.

/// Gathers of fewer output bytes than this (of raw records) stay on the calling thread; larger
/// ones, and any of compressed records, are split over the rayon pool.
pub(super) const PARALLEL_BYTES: usize = 1 << 20;

thread_local! {
    static SEQUENTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FAN_OUTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Whether the calling thread is inside [`sequential_gathers`].
#[inline]
pub(super) fn sequential() -> bool {
    SEQUENTIAL.get()
}

/// Counts one gather split across the pool, for [`gather_fan_outs`].
#[inline]
pub(super) fn count_fan_out() {
    FAN_OUTS.set(FAN_OUTS.get().wrapping_add(1));
}

/// How many gathers made on the calling thread so far were split across the rayon pool (a
/// wrapping count; compare two readings). A loader uses it to tell whether its gathers keep every
/// core busy.
pub fn gather_fan_outs() -> u64 {
    FAN_OUTS.get()
}

/// Runs `f` with every gather it makes on the calling thread done on that thread alone, instead of
/// being split across the rayon pool (what a gather of 1 MiB or more, or of compressed records,
/// otherwise does). For callers that already run one gather per thread, e.g. loader workers: there
/// the parallelism is across batches, and fanning each batch out again only adds contention.
pub fn sequential_gathers<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SEQUENTIAL.set(self.0);
        }
    }
    let _restore = Restore(SEQUENTIAL.replace(true));
    f()
}

#[cfg(test)]
mod tests {
    use super::{SEQUENTIAL, sequential_gathers};

    #[test]
    fn sequential_gathers_is_scoped_nests_and_survives_unwinding() {
        assert!(!SEQUENTIAL.get());
        let inner = sequential_gathers(|| {
            let nested = sequential_gathers(|| SEQUENTIAL.get());
            (nested, SEQUENTIAL.get())
        });
        assert_eq!(
            inner,
            (true, true),
            "on inside, still on after a nested scope"
        );
        assert!(!SEQUENTIAL.get(), "off again after the scope");
        let unwound = std::panic::catch_unwind(|| sequential_gathers(|| panic!("inside")));
        assert!(unwound.is_err());
        assert!(!SEQUENTIAL.get(), "restored when the closure unwinds");
        // Another thread is not affected.
        sequential_gathers(|| {
            let other = std::thread::spawn(|| SEQUENTIAL.get()).join().unwrap();
            assert!(!other);
        });
    }
}
