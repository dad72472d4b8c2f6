//! What this process has cost the kernel so far: page faults and context switches of all its
//! threads (`getrusage(RUSAGE_SELF)`). Read before and after a timed step and subtract
//! ([`Usage::since`]).

/// Counters of this process so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Minor page faults (served without I/O: first touches, huge-page splits).
    pub minor_faults: i64,
    /// Major page faults (served by reading a file).
    pub major_faults: i64,
    /// Voluntary context switches (waits).
    pub voluntary_switches: i64,
    /// Involuntary context switches (preemptions).
    pub involuntary_switches: i64,
}

impl Usage {
    /// The counters now.
    pub fn now() -> Usage {
        // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `getrusage` writes one `rusage` into the struct we own; RUSAGE_SELF is valid,
        // so the call cannot fail and leaves `ru` fully written.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        Usage {
            minor_faults: ru.ru_minflt,
            major_faults: ru.ru_majflt,
            voluntary_switches: ru.ru_nvcsw,
            involuntary_switches: ru.ru_nivcsw,
        }
    }

    /// `self - earlier`, per counter.
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            minor_faults: self.minor_faults - earlier.minor_faults,
            major_faults: self.major_faults - earlier.major_faults,
            voluntary_switches: self.voluntary_switches - earlier.voluntary_switches,
            involuntary_switches: self.involuntary_switches - earlier.involuntary_switches,
        }
    }

    /// Context switches of both kinds.
    pub fn switches(self) -> i64 {
        self.voluntary_switches + self.involuntary_switches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_fresh_pages_counts_minor_faults() {
        let before = Usage::now();
        // 64 MiB of fresh pages, each written once: at least a fault per 2 MiB even where every
        // page is huge.
        let mut v = vec![0u8; 64 << 20];
        for k in (0..v.len()).step_by(4096) {
            v[k] = 1;
        }
        std::hint::black_box(&v);
        let d = Usage::now().since(before);
        assert!(d.minor_faults >= 32, "{d:?}");
        assert!(d.major_faults >= 0 && d.switches() >= 0);
    }
}
