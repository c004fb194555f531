//! Where barriers go. Between two barriers the GPU may run dispatches in any order and
//! overlapped, so a dispatch needs a barrier before it when it touches bytes that an earlier
//! dispatch of the same segment wrote (read-after-write, write-after-write) or writes bytes an
//! earlier one read (write-after-read). Everything else runs without one.

/// How a dispatch uses a byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
    /// Read and written by the same dispatch (in-place update).
    ReadWrite,
}

impl AccessKind {
    fn reads(self) -> bool {
        matches!(self, AccessKind::Read | AccessKind::ReadWrite)
    }
    fn writes(self) -> bool {
        matches!(self, AccessKind::Write | AccessKind::ReadWrite)
    }
}

/// A byte range `[start, end)` of buffer `buffer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub buffer: u64,
    pub start: u64,
    pub end: u64,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.buffer == other.buffer && self.start < other.end && other.start < self.end
    }
}

/// Tracks the ranges read and written since the last barrier.
#[derive(Default, Debug)]
pub struct HazardTracker {
    written: Vec<Span>,
    read: Vec<Span>,
}

impl HazardTracker {
    /// True when a dispatch with these accesses must wait for the ones recorded so far.
    pub fn needs_barrier(&self, accesses: &[(Span, AccessKind)]) -> bool {
        accesses.iter().any(|(span, kind)| {
            self.written.iter().any(|w| w.overlaps(span))
                || (kind.writes() && self.read.iter().any(|r| r.overlaps(span)))
        })
    }

    /// Notes a barrier: nothing before it can race with anything after it.
    pub fn barrier(&mut self) {
        self.written.clear();
        self.read.clear();
    }

    /// Records a dispatch's accesses in the current segment.
    pub fn record(&mut self, accesses: &[(Span, AccessKind)]) {
        for (span, kind) in accesses {
            if kind.writes() {
                self.written.push(*span);
            }
            if kind.reads() {
                self.read.push(*span);
            }
        }
    }

    /// Records a dispatch, placing a barrier first when needed; returns whether it did.
    pub fn add(&mut self, accesses: &[(Span, AccessKind)]) -> bool {
        let barrier = self.needs_barrier(accesses);
        if barrier {
            self.barrier();
        }
        self.record(accesses);
        barrier
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(buffer: u64, start: u64, end: u64) -> Span {
        Span { buffer, start, end }
    }

    #[test]
    fn independent_dispatches_need_no_barrier() {
        let mut t = HazardTracker::default();
        assert!(!t.add(&[(span(1, 0, 16), AccessKind::Read), (span(2, 0, 16), AccessKind::Write)]));
        assert!(!t.add(&[(span(1, 0, 16), AccessKind::Read), (span(3, 0, 16), AccessKind::Write)]));
        // Disjoint ranges of the same buffer do not conflict.
        assert!(!t.add(&[(span(2, 16, 32), AccessKind::Write)]));
    }

    #[test]
    fn read_after_write_needs_barrier() {
        let mut t = HazardTracker::default();
        assert!(!t.add(&[(span(1, 0, 16), AccessKind::Write)]));
        assert!(t.add(&[(span(1, 8, 12), AccessKind::Read), (span(2, 0, 4), AccessKind::Write)]));
        // After the barrier only buffer 2 is pending.
        assert!(!t.add(&[(span(1, 0, 16), AccessKind::Read)]));
        assert!(t.add(&[(span(2, 0, 4), AccessKind::Read)]));
    }

    #[test]
    fn write_after_write_and_write_after_read_need_barrier() {
        let mut t = HazardTracker::default();
        t.add(&[(span(1, 0, 16), AccessKind::Write)]);
        assert!(t.add(&[(span(1, 0, 16), AccessKind::Write)]));
        let mut t = HazardTracker::default();
        t.add(&[(span(1, 0, 16), AccessKind::Read)]);
        assert!(!t.add(&[(span(1, 0, 16), AccessKind::Read)]));
        assert!(t.add(&[(span(1, 4, 8), AccessKind::ReadWrite)]));
    }

    #[test]
    fn adjacent_ranges_do_not_overlap() {
        let mut t = HazardTracker::default();
        t.add(&[(span(1, 0, 16), AccessKind::Write)]);
        assert!(!t.add(&[(span(1, 16, 32), AccessKind::Read)]));
    }
}
