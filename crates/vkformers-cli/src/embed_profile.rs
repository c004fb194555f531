//! `embed --profile`: where a batch's time goes, over the batches after the first (which
//! creates the pipelines and the buffers): the device's per-kernel table (`Graph`'s profile,
//! as `generate --profile` and `train --profile` print it) and the host's share of a batch.
//!
//! The host and the device overlap (the tokenizer runs on a worker thread two batches ahead;
//! the host records batch i+1 while the device runs batch i), so the host's parts do not add up
//! to the wall time: `wait for the device` is the device time the host did not hide.

use std::time::Instant;

use vkformers_tensor::Graph;

/// Host seconds summed over the profiled batches.
#[derive(Debug, Default)]
pub struct HostTimes {
    /// When the profiled batches started (after the first batch finished).
    pub started: Option<Instant>,
    /// Wall seconds from `started` to the last vector read.
    pub wall: f64,
    pub batches: u64,
    /// Tokenizing on the worker thread (overlapped with the device loop).
    pub tokenize: f64,
    /// The device loop waiting for the tokenizer.
    pub tokenize_wait: f64,
    /// Building the batch's ops (ids and masks up, allocating, recording the dispatches).
    pub record: f64,
    /// Recording the read-back copy and submitting the command buffers.
    pub submit: f64,
    /// Waiting for the device to finish a batch the host wanted to read.
    pub device_wait: f64,
    /// Copying the vectors out of the mapped buffer, pooling on the host, normalising.
    pub readback: f64,
}

impl HostTimes {
    /// Fresh totals, the clock started now.
    pub fn starting() -> Self {
        HostTimes { started: Some(Instant::now()), ..HostTimes::default() }
    }

    /// One line: each part in ms per batch.
    pub fn line(&self) -> String {
        let per = |s: f64| 1e3 * s / self.batches.max(1) as f64;
        format!(
            "host per batch: tokenize {:.3} ms (worker thread; the device loop waited {:.3} ms), record {:.3} ms, \
             submit {:.3} ms, wait for the device {:.3} ms, read back {:.3} ms; wall {:.3} ms/batch",
            per(self.tokenize),
            per(self.tokenize_wait),
            per(self.record),
            per(self.submit),
            per(self.device_wait),
            per(self.readback),
            per(self.wall)
        )
    }
}

/// Prints the device's table and the host's line to standard error (nothing was timed when
/// there was one batch only: it says so).
pub fn report(g: &Graph<'_>, host: Option<&HostTimes>) -> anyhow::Result<()> {
    let Some(host) = host else {
        eprintln!("\nprofile: one batch only, nothing timed (the first batch is not profiled: give more texts)");
        return Ok(());
    };
    let p = g.take_profile()?.unwrap_or_default();
    let unit = "batch";
    let batches = crate::precision::plural(host.batches, unit);
    eprintln!("\nprofile ({} on {batches}, after the first):\n{}", g.ctx().caps().name, p.table(host.batches, unit));
    eprintln!("{}", host.line());
    Ok(())
}
