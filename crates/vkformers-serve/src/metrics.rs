//! The server's gauges and counters, shared by the engine thread (which writes them after every
//! step) and the handlers, and their Prometheus text exposition (`GET /metrics`).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bounds (seconds) of the time-to-first-token histogram's buckets.
const TTFT_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Tokens per second are measured over this window.
const RATE_WINDOW: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Histogram {
    /// Per bucket of `TTFT_BUCKETS` (not cumulative), then the +Inf bucket.
    counts: [u64; TTFT_BUCKETS.len() + 1],
    sum: f64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests waiting for a slot of the engine.
    pub queue_depth: AtomicUsize,
    /// Requests holding a slot.
    pub running: AtomicUsize,
    /// KV cache blocks in use, and the pools' blocks.
    pub kv_blocks_in_use: AtomicUsize,
    pub kv_blocks_total: AtomicUsize,
    pub generated_tokens: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub requests_finished: AtomicU64,
    pub requests_cancelled: AtomicU64,
    /// Prefill forwards run (several requests admitted together share one: fewer than requests).
    pub prefill_forwards: AtomicU64,
    /// Rows whose logits were read back for a host-side choice (0 while every token is chosen on
    /// the device: only ids, and logprobs when asked, come back).
    pub host_sampled_rows: AtomicU64,
    /// Bytes of the served models' distinct weight tensors (a base shared by adapters counted
    /// once), and the device memory held once they were loaded.
    pub weight_bytes: AtomicU64,
    pub device_memory_bytes: AtomicU64,
    /// Milliseconds the engine warmed up before the server listened (0: no warm-up).
    pub warmup_millis: AtomicU64,
    /// Requests accepted and not yet finished or cancelled (queued or running): the handlers
    /// admit a request only while this stays within `max_batch + max_queue`.
    pub outstanding: AtomicUsize,
    /// The engine thread's steps and where their time went (nanoseconds): the whole steps, the
    /// sink inside them (detokenizing, stop strings, sending each token), and the lookahead's
    /// recording, submissions and waits for the device (`engine::StepTimes`).
    pub engine_steps: AtomicU64,
    pub engine_step_nanos: AtomicU64,
    pub engine_sink_nanos: AtomicU64,
    pub engine_record_nanos: AtomicU64,
    pub engine_submit_nanos: AtomicU64,
    pub engine_wait_nanos: AtomicU64,
    ttft: Mutex<Histogram>,
    /// `(when, generated_tokens)` samples of the last `RATE_WINDOW`.
    rate: Mutex<VecDeque<(Instant, u64)>>,
}

impl Metrics {
    /// Records a time to first token.
    pub fn observe_ttft(&self, secs: f64) {
        let Ok(mut h) = self.ttft.lock() else { return };
        let at = TTFT_BUCKETS.iter().position(|&b| secs <= b).unwrap_or(TTFT_BUCKETS.len());
        h.counts[at] += 1;
        h.sum += secs;
    }

    /// Samples the generated-token counter for the tokens/s gauge.
    pub fn sample_rate(&self, now: Instant) {
        let Ok(mut r) = self.rate.lock() else { return };
        r.push_back((now, self.generated_tokens.load(Ordering::Relaxed)));
        while r.len() > 2 && r.front().is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW) {
            r.pop_front();
        }
    }

    /// Generated tokens per second over the last window (0 when idle).
    pub fn tokens_per_second(&self) -> f64 {
        let Ok(r) = self.rate.lock() else { return 0.0 };
        let (Some(first), Some(_)) = (r.front(), r.back()) else { return 0.0 };
        let now = Instant::now();
        let secs = now.duration_since(first.0).as_secs_f64();
        let tokens = self.generated_tokens.load(Ordering::Relaxed) - first.1;
        if secs > 0.0 {
            tokens as f64 / secs
        } else {
            0.0
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed) as f64;
        let gauges = [
            ("vkformers_queue_depth", "Requests waiting for a slot.", load(&self.queue_depth)),
            ("vkformers_running_requests", "Requests in the running batch.", load(&self.running)),
            ("vkformers_kv_blocks_in_use", "KV cache blocks held by running requests.", load(&self.kv_blocks_in_use)),
            ("vkformers_kv_blocks_total", "KV cache blocks in the pools.", load(&self.kv_blocks_total)),
            (
                "vkformers_tokens_per_second",
                "Generated tokens per second over the last 10 s.",
                self.tokens_per_second(),
            ),
        ];
        let load64 = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let memory = [
            (
                "vkformers_weight_bytes",
                "Bytes of the served models' distinct weights (a shared base once).",
                load64(&self.weight_bytes),
            ),
            (
                "vkformers_device_memory_bytes",
                "Device memory held once the models were loaded.",
                load64(&self.device_memory_bytes),
            ),
        ];
        let warmup = (
            "vkformers_warmup_seconds",
            "Seconds the engine warmed up before listening (0: none).",
            load64(&self.warmup_millis) * 1e-3,
        );
        for (name, help, v) in gauges.into_iter().chain(memory).chain([warmup]) {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let counters = [
            ("vkformers_generated_tokens_total", "Tokens generated.", &self.generated_tokens),
            ("vkformers_prompt_tokens_total", "Prompt tokens prefilled.", &self.prompt_tokens),
            ("vkformers_requests_finished_total", "Requests that finished.", &self.requests_finished),
            ("vkformers_requests_cancelled_total", "Requests cancelled (client gone).", &self.requests_cancelled),
            (
                "vkformers_prefill_forwards_total",
                "Prefill forwards (requests admitted together share one).",
                &self.prefill_forwards,
            ),
            (
                "vkformers_host_sampled_rows_total",
                "Rows whose logits were read back to choose on the host.",
                &self.host_sampled_rows,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        }
        self.render_engine_time(&mut out);
        self.render_ttft(&mut out);
        out
    }

    fn render_engine_time(&self, out: &mut String) {
        let steps = "vkformers_engine_steps_total";
        let n = self.engine_steps.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP {steps} Engine steps run.\n# TYPE {steps} counter\n{steps} {n}");
        let seconds = [
            ("vkformers_engine_step_seconds_total", "Seconds in engine steps.", &self.engine_step_nanos),
            (
                "vkformers_engine_sink_seconds_total",
                "Seconds of engine steps spent detokenizing, searching stop strings and sending tokens.",
                &self.engine_sink_nanos,
            ),
            (
                "vkformers_engine_record_seconds_total",
                "Seconds of engine steps spent recording forwards and choices.",
                &self.engine_record_nanos,
            ),
            (
                "vkformers_engine_submit_seconds_total",
                "Seconds of engine steps spent in the driver's submission.",
                &self.engine_submit_nanos,
            ),
            (
                "vkformers_engine_device_wait_seconds_total",
                "Seconds of engine steps spent waiting for the device.",
                &self.engine_wait_nanos,
            ),
        ];
        for (name, help, v) in seconds {
            let secs = v.load(Ordering::Relaxed) as f64 * 1e-9;
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {secs}");
        }
    }

    fn render_ttft(&self, out: &mut String) {
        let Ok(h) = self.ttft.lock() else { return };
        let name = "vkformers_time_to_first_token_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Seconds from a request's arrival to its first token.\n# TYPE {name} histogram"
        );
        let mut cum = 0;
        for (i, b) in TTFT_BUCKETS.iter().enumerate() {
            cum += h.counts[i];
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += h.counts[TTFT_BUCKETS.len()];
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cum}\n{name}_sum {}\n{name}_count {cum}", h.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_series() {
        let m = Metrics::default();
        m.observe_ttft(0.03);
        m.observe_ttft(100.0);
        m.kv_blocks_in_use.store(3, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("vkformers_kv_blocks_in_use 3\n"), "{text}");
        assert!(text.contains("vkformers_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"), "{text}");
        assert!(text.contains("vkformers_time_to_first_token_seconds_count 2\n"), "{text}");
        m.engine_step_nanos.store(1_500_000_000, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("vkformers_engine_step_seconds_total 1.5\n"), "{text}");
        for name in ["vkformers_queue_depth", "vkformers_running_requests", "vkformers_tokens_per_second"] {
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{name}");
        }
    }
}
