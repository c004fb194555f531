//! Dispatch chains: dependent dispatches ordered by counters on the device instead of pipeline
//! barriers. A barrier drains the GPU before the next dispatch starts; a chained dispatch starts
//! at once, loads what no earlier dispatch writes (weights), and only then waits until every
//! workgroup of the chain's previous dispatch has counted itself done (a spin on one counter
//! in device memory), so its launch and its first trips to memory overlap the previous
//! dispatch's tail. A decode step's products are short (a few µs of streaming each), so that
//! overlap is a large share of their time.
//!
//! The rule, as pure code ([`ChainRule`]): a chained dispatch may go without a barrier only
//! when every dispatch since the last barrier is a chained one, each waiting on the one before
//! it: then "the previous link is done" means every earlier dispatch of the batch is done
//! (each link counts itself done only after its own wait), so no read-after-write,
//! write-after-write or write-after-read hazard remains, provided a link writes nothing and
//! reads nothing that an earlier dispatch writes before its wait. Any other dispatch (or copy,
//! or host write) breaks the chain: the next link falls back to the hazard tracker's barriers
//! and waits on nothing.
//!
//! Forward progress: a waiting workgroup holds its multiprocessor slot while it spins, so the
//! previous link's workgroups must all be resident or issued before any of the next link's:
//! GPUs that issue a queue's workgroups in dispatch order (NVIDIA's) give that. On CPU devices
//! dispatches run one after another, so every wait finds its count reached.
//!
//! Off unless asked for (`VKFORMERS_CHAIN=1`): on an H100 the chained decode step (60 of 114
//! barriers a token gone) ran batch 1 at 487-489 tokens/s against 519-527 behind barriers, and
//! spacing the polls made it slower still (`VKFORMERS_CHAIN_BACKOFF` 256: 474, 4096: 428;
//! `docs/bench/h100-2026-12-05-i`, `-j`): there a barrier between short dependent dispatches
//! costs less than a link's wait, signal and coherent input loads. Kept, tested bit for bit
//! (`tests/gemv_chain.rs` in vkformers-kernels, on lavapipe and the H100), for devices where
//! barriers cost more.

/// Counter slots of a chain buffer: 4-byte counters, zeroed before the batch's first link and
/// again when a batch has used them all.
pub const CHAIN_SLOTS: u32 = 1024;

/// Whether graphs' batches record chains: `VKFORMERS_CHAIN=1` asks for them on every device
/// (off by default: see the module for the H100's figures).
pub fn chains_on() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| std::env::var("VKFORMERS_CHAIN").is_ok_and(|v| v.trim() == "1"))
}

/// Dependent FMAs a waiting link runs between two polls of its counter (`VKFORMERS_CHAIN_BACKOFF`,
/// default 0: back to back, the fastest on the H100; 256 is ~0.5 µs at 2 GHz).
pub fn backoff() -> u32 {
    static ENV: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| std::env::var("VKFORMERS_CHAIN_BACKOFF").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// Whether a link fences memory after its wait (default on, as timed on the H100;
/// `VKFORMERS_CHAIN_FENCE=0` leaves it out: see gemv.comp's chain_wait; untimed).
pub fn fence() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| std::env::var("VKFORMERS_CHAIN_FENCE").map_or(true, |v| v.trim() != "0"))
}

/// What a chained dispatch is told (its push constants): wait until counter `wait_slot` reaches
/// `wait_count` (0: wait on nothing), then count itself done on counter `signal_slot`, one per
/// workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLink {
    pub wait_slot: u32,
    pub wait_count: u32,
    pub signal_slot: u32,
}

/// Where a batch's chain stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainRule {
    /// The last link's (slot, workgroups) while the chain holds (see the module); None once a
    /// non-chained command or a barrier broke it.
    tail: Option<(u32, u32)>,
    /// Every command since the last barrier is a link (or there is none).
    pure: bool,
    /// Next free counter slot; `CHAIN_SLOTS` when the counters need zeroing (first use too).
    next: u32,
}

impl Default for ChainRule {
    fn default() -> Self {
        ChainRule { tail: None, pure: true, next: CHAIN_SLOTS }
    }
}

impl ChainRule {
    /// Whether the counters must be zeroed (behind barriers) before the next link.
    pub fn needs_zeroing(&self) -> bool {
        self.next >= CHAIN_SLOTS
    }

    /// The counters were zeroed: slots count from 0 again.
    pub fn zeroed(&mut self) {
        self.next = 0;
    }

    /// The next link's wait and signal (slots must be available: [`ChainRule::needs_zeroing`]).
    pub fn next_link(&self) -> ChainLink {
        let (wait_slot, wait_count) = self.tail.unwrap_or((0, 0));
        ChainLink { wait_slot, wait_count, signal_slot: self.next }
    }

    /// Whether a link may go without the hazard tracker's barrier: it waits on a previous link.
    pub fn skips_barrier(link: &ChainLink) -> bool {
        link.wait_count > 0
    }

    /// A link of `groups` workgroups was recorded (after its barrier, if it needed one).
    pub fn linked(&mut self, link: &ChainLink, groups: u32) {
        self.next = link.signal_slot + 1;
        self.tail = self.pure.then_some((link.signal_slot, groups));
    }

    /// A command that is not a link was recorded: the chain is broken.
    pub fn other(&mut self) {
        self.tail = None;
        self.pure = false;
    }

    /// A barrier was recorded: nothing before it runs alongside what follows.
    pub fn barrier(&mut self) {
        self.tail = None;
        self.pure = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> ChainRule {
        let mut r = ChainRule::default();
        assert!(r.needs_zeroing());
        r.zeroed();
        r
    }

    #[test]
    fn links_after_a_barrier_wait_on_each_other() {
        let mut r = fresh();
        let a = r.next_link();
        assert_eq!(a, ChainLink { wait_slot: 0, wait_count: 0, signal_slot: 0 });
        assert!(!ChainRule::skips_barrier(&a));
        r.linked(&a, 528);
        let b = r.next_link();
        assert_eq!(b, ChainLink { wait_slot: 0, wait_count: 528, signal_slot: 1 });
        assert!(ChainRule::skips_barrier(&b));
        r.linked(&b, 64);
        assert_eq!(r.next_link(), ChainLink { wait_slot: 1, wait_count: 64, signal_slot: 2 });
    }

    #[test]
    fn another_command_breaks_the_chain_until_a_barrier() {
        let mut r = fresh();
        r.other();
        let a = r.next_link();
        assert_eq!(a.wait_count, 0);
        r.linked(&a, 8);
        // The segment holds a command that is not a link: a's being done says nothing of it.
        assert_eq!(r.next_link().wait_count, 0);
        r.barrier();
        let b = r.next_link();
        r.linked(&b, 8);
        assert_eq!(r.next_link().wait_count, 8);
        r.other();
        assert_eq!(r.next_link().wait_count, 0);
    }

    #[test]
    fn slots_run_out_and_are_zeroed_again() {
        let mut r = fresh();
        for _ in 0..CHAIN_SLOTS {
            assert!(!r.needs_zeroing());
            let l = r.next_link();
            r.linked(&l, 1);
        }
        assert!(r.needs_zeroing());
        r.barrier();
        r.zeroed();
        assert_eq!(r.next_link(), ChainLink { wait_slot: 0, wait_count: 0, signal_slot: 0 });
    }
}
