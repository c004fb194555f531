//! `--profile`: device time per kernel, gathered from the recorder's timestamps over any number
//! of batches, and printed as a table (calls, total ms, share of the timed work, mean µs, the
//! GB/s of the views each dispatch was given — what it may touch, each byte once — and the
//! GFLOP/s of the operations its launcher declared, for the products).
//!
//! Dispatches that ran overlapped (no barrier between them) share their time, so shares are
//! of the summed kernel times, which can exceed the wall time of a step.

use std::collections::HashMap;
use std::fmt::Write as _;

use vkformers_vk::BatchReport;

/// Totals of one kernel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelTime {
    pub calls: u64,
    pub nanos: f64,
    /// Bytes of the views the dispatches were given (what they may touch, each once).
    pub bytes: f64,
    /// Floating-point operations their launchers declared (GEMMs; 0 for the others).
    pub flops: f64,
}

/// Per-kernel totals over the batches added.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub kernels: HashMap<&'static str, KernelTime>,
    pub batches: u64,
    pub dispatches: u64,
    pub barriers: u64,
    /// Host time spent recording (inside `Graph::record`), and in submitting and waiting.
    pub host_record_ns: f64,
    pub submit_wait_ns: f64,
    /// Host time allocating op outputs.
    pub alloc_ns: f64,
}

impl Profile {
    /// Adds one submitted batch's timings.
    pub fn add_batch(&mut self, report: &BatchReport) {
        self.batches += 1;
        self.dispatches += report.dispatches as u64;
        self.barriers += report.barriers as u64;
        for (i, (name, ns)) in report.timings.iter().enumerate() {
            let (bytes, flops) = report.work.get(i).copied().unwrap_or((0, 0.0));
            let k = self.kernels.entry(name).or_default();
            k.calls += 1;
            k.nanos += ns;
            k.bytes += bytes as f64;
            k.flops += flops;
        }
    }

    /// Adds another profile's totals (e.g. one per step).
    pub fn merge(&mut self, other: &Profile) {
        self.batches += other.batches;
        self.dispatches += other.dispatches;
        self.barriers += other.barriers;
        self.host_record_ns += other.host_record_ns;
        self.submit_wait_ns += other.submit_wait_ns;
        self.alloc_ns += other.alloc_ns;
        for (name, t) in &other.kernels {
            let k = self.kernels.entry(name).or_default();
            k.calls += t.calls;
            k.nanos += t.nanos;
            k.bytes += t.bytes;
            k.flops += t.flops;
        }
    }

    /// Calls of the kernels whose names start with `prefix` (e.g. `"cast/"`: every cast).
    pub fn calls_of(&self, prefix: &str) -> u64 {
        self.kernels.iter().filter(|(name, _)| name.starts_with(prefix)).map(|(_, k)| k.calls).sum()
    }

    /// Sum of every kernel's time, in milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.kernels.values().map(|k| k.nanos).sum::<f64>() / 1e6
    }

    /// Kernels by descending total time.
    pub fn sorted(&self) -> Vec<(&'static str, KernelTime)> {
        let mut v: Vec<_> = self.kernels.iter().map(|(n, t)| (*n, t.clone())).collect();
        v.sort_by(|a, b| b.1.nanos.total_cmp(&a.1.nanos).then(a.0.cmp(b.0)));
        v
    }

    /// The table, `per` dividing the totals (e.g. the number of steps profiled).
    pub fn table(&self, per: u64, unit: &str) -> String {
        let per = per.max(1) as f64;
        let total = self.total_ms();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<44} {:>9} {:>11} {:>7} {:>10} {:>8} {:>9}",
            "kernel",
            format!("calls/{unit}"),
            format!("ms/{unit}"),
            "share",
            "mean µs",
            "GB/s",
            "GFLOP/s"
        );
        for (name, t) in self.sorted() {
            let ms = t.nanos / 1e6;
            let rate = |x: f64| if t.nanos > 0.0 && x > 0.0 { format!("{:.2}", x / t.nanos) } else { "-".into() };
            let _ = writeln!(
                s,
                "{:<44} {:>9.1} {:>11.3} {:>6.1}% {:>10.1} {:>8} {:>9}",
                name,
                t.calls as f64 / per,
                ms / per,
                if total > 0.0 { 100.0 * ms / total } else { 0.0 },
                t.nanos / 1e3 / t.calls.max(1) as f64,
                rate(t.bytes),
                rate(t.flops)
            );
        }
        let _ = writeln!(
            s,
            "{:<44} {:>9.1} {:>11.3}   (dispatches {:.0}, barriers {:.0}, submissions {:.1} per {unit})",
            "total",
            self.kernels.values().map(|k| k.calls).sum::<u64>() as f64 / per,
            total / per,
            self.dispatches as f64 / per,
            self.barriers as f64 / per,
            self.batches as f64 / per
        );
        let _ = writeln!(
            s,
            "host: recording {:.3} ms/{unit}, allocating {:.3} ms/{unit}, submit + wait {:.3} ms/{unit}",
            self.host_record_ns / 1e6 / per,
            self.alloc_ns / 1e6 / per,
            self.submit_wait_ns / 1e6 / per
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_add_up_by_kernel_and_sort_by_time() {
        let mut p = Profile::default();
        let timings = vec![("a", 1e6), ("b", 3e6), ("a", 1e6)];
        let work = vec![(1000, 0.0), (3000, 6e9), (1000, 0.0)];
        p.add_batch(&BatchReport { dispatches: 3, barriers: 1, timings, work });
        p.add_batch(&BatchReport { dispatches: 1, barriers: 0, timings: vec![("b", 1e6)], work: vec![(1000, 2e9)] });
        assert_eq!(p.kernels["a"], KernelTime { calls: 2, nanos: 2e6, bytes: 2000.0, flops: 0.0 });
        assert_eq!(p.kernels["b"], KernelTime { calls: 2, nanos: 4e6, bytes: 4000.0, flops: 8e9 });
        assert_eq!(p.sorted()[0].0, "b");
        assert!((p.total_ms() - 6.0).abs() < 1e-12);
        let table = p.table(2, "step");
        assert!(table.contains("66.7%"), "{table}");
        // b: 8e9 flops in 4 ms = 2000 GFLOP/s (bytes and flops per ns are GB/s and GFLOP/s).
        assert!(table.lines().any(|l| l.starts_with('b') && l.trim_end().ends_with("2000.00")), "{table}");
        assert!(table.lines().any(|l| l.starts_with("total")), "{table}");
    }
}
