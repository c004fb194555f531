//! The engine's warm-up: before the server listens, the engine thread runs synthetic requests
//! shaped like a first wave of clients, so that the first real requests do not pay what a fresh
//! engine pays on its first work: every kernel variant's pipeline is created on first use
//! (`vkformers_vk::pipeline`), the graph's memory pools grow to the widest forward, the device
//! choosers and the per-row sampler are made with their buffers.
//!
//! Two waves of `max_batch` requests each, run to their end one after the other:
//! 1. the largest prefill forward the engine groups (`max_batch` rows of one prompt length, as
//!    wide as [`MAX_PREFILL_TOKENS`] allows up to `GPU_PROMPT` columns), then two decode steps
//!    with every slot running (both of the lookahead's output sets), every row plain greedy (the
//!    device argmax, as a bench's greedy clients run);
//! 2. prompts of several lengths (several prefill forwards of several sizes), greedy rows beside
//!    device-sampled ones (temperature, top-k, top-p; penalties and log-probabilities on some),
//!    spread over the served models (the base and its adapters), so the per-row sampler's and
//!    the adapters' pipelines are made; after a full-width step the rows finish a few at a time,
//!    so the decode also runs `TAIL_WIDTHS` rows (each of the GEMV's row buckets, 1, ≤ 4, ≤ 8,
//!    ≤ 16, and the small GEMMs where the GEMV stops earlier).
//!
//! It leaves no trace: every request runs to its end (its KV blocks go back to the pools), the
//! tokens go to a sink that drops them, the engine's counters are reset afterwards (`/metrics`
//! never sees the warm-up: the server's counters are written only by the serving loop), the ids
//! are the top of the id space (the server counts up from 0; the engine is idle afterwards
//! anyway), and a request's draws depend only on its own seed, step and row, never on what ran
//! before. On a CPU device (lavapipe: the tests) the prompts are short and a wave takes at most
//! `CPU_ROWS` rows: enough to make the pipelines, without a long start on a real model.

use std::time::Instant;

use vkformers_generate::decode::DecodeError;
use vkformers_generate::engine::{Engine, Finished, Request, RequestOptions, Sink};
use vkformers_generate::prefill_plan::{ALIGN, MAX_PREFILL_TOKENS};
use vkformers_generate::{Penalties, SamplingParams, TokenLogprob};
use vkformers_tensor::Graph;

/// The first wave's prompt length at most on a GPU: the serve bench's prompts (128 ± 64 tokens)
/// prefill at widths up to this.
const GPU_PROMPT: usize = 256;

/// The prompt length on a CPU device: one aligned prefill column block.
const CPU_PROMPT: usize = 8;

/// Rows a wave takes at most on a CPU device: every row costs an aligned prefill of 64 columns
/// there, and the GEMV's largest row bucket (16) is the widest decode variant worth making.
const CPU_ROWS: usize = 16;

/// New tokens of the first wave's requests, and of the second's before its tail.
const NEW_TOKENS: usize = 3;

/// Rows the second wave's last decode steps run, one step each (those below `max_batch`): row r
/// takes one token more for each width above r.
const TAIL_WIDTHS: [usize; 4] = [16, 8, 4, 1];

/// Warm-up request ids count down from here (the server's count up from 0).
const FIRST_ID: u64 = u64::MAX;

/// Whether the server warms up: `--no-warmup` (`asked` false) or `VKFORMERS_SERVE_WARMUP=0`
/// turns it off.
pub fn enabled(asked: bool) -> bool {
    asked && std::env::var("VKFORMERS_SERVE_WARMUP").map_or(true, |v| v != "0")
}

/// The shape of a warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Requests per wave: every slot (at most `CPU_ROWS` on a CPU device).
    pub rows: usize,
    /// The first wave's prompt length (the second's are up to it).
    pub prompt: usize,
    /// The first wave's new tokens.
    pub new_tokens: usize,
}

impl Plan {
    /// The warm-up of an engine of `max_batch` slots whose cache starts at `capacity` positions a
    /// slot (a request's prompt and new tokens stay within it, so within `--max-model-len`), on a
    /// CPU device or not; None when a slot has no room for a prompt and the second wave's tokens.
    pub fn new(max_batch: usize, capacity: usize, cpu: bool) -> Option<Plan> {
        let rows = if cpu { max_batch.clamp(1, CPU_ROWS) } else { max_batch.max(1) };
        // One forward of every row: `rows` prompts of width w within the engine's cap.
        let fits_cap = (MAX_PREFILL_TOKENS / rows) / ALIGN * ALIGN;
        let longest = if cpu { CPU_PROMPT } else { GPU_PROMPT.min(fits_cap.max(ALIGN)) };
        // Room for the second wave's longest request's new tokens.
        let room = capacity.checked_sub(NEW_TOKENS + TAIL_WIDTHS.len()).filter(|&r| r > 0)?;
        Some(Plan { rows, prompt: longest.min(room), new_tokens: NEW_TOKENS })
    }

    /// The second wave's row `r`'s tokens after the full-width ones: one for each tail step that
    /// runs it (a step of `w` rows runs rows 0..w, only when fewer than every row).
    fn tail(&self, r: usize) -> usize {
        TAIL_WIDTHS.iter().filter(|&&w| w < self.rows && r < w).count()
    }

    /// Both waves' requests for a model of `vocab` ids (every id below it).
    fn waves(&self, vocab: usize) -> [Vec<Request>; 2] {
        let ids =
            |row: usize, len: usize| -> Vec<u32> { (0..len).map(|j| ((row * 31 + j * 7) % vocab) as u32).collect() };
        let id = |wave: usize, row: usize| FIRST_ID - (wave * self.rows + row) as u64;
        let first = (0..self.rows)
            .map(|r| Request {
                id: id(0, r),
                prompt: ids(r, self.prompt),
                opts: options(Kind::Greedy, self.new_tokens, r),
            })
            .collect();
        let second = (0..self.rows)
            .map(|r| {
                // Lengths spread over the first wave's: several prefill widths and groups.
                let len = 1 + (r * 37) % self.prompt;
                let kind = [Kind::Sampled, Kind::Penalised, Kind::Greedy, Kind::Greedy][r % 4];
                let new = self.new_tokens + self.tail(r);
                Request { id: id(1, r), prompt: ids(r, len), opts: options(kind, new, r) }
            })
            .collect();
        [first, second]
    }
}

/// How a warm-up request chooses its tokens.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Plain greedy: the device argmax when a forward's rows all are.
    Greedy,
    /// Temperature, top-k and top-p on the device's per-row sampler.
    Sampled,
    /// Sampled with presence and frequency penalties and log-probabilities.
    Penalised,
}

fn options(kind: Kind, max_new_tokens: usize, row: usize) -> RequestOptions {
    let sampled = SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.9, ..SamplingParams::sampling() };
    let (params, penalties, logprobs) = match kind {
        Kind::Greedy => (SamplingParams::greedy(), Penalties::default(), None),
        Kind::Sampled => (sampled, Penalties::default(), None),
        Kind::Penalised => (sampled, Penalties { presence: 0.5, frequency: 0.5 }, Some(2)),
    };
    // No EOS: every request runs to its `max_new_tokens`.
    RequestOptions { params, penalties, seed: row as u64, row: 0, max_new_tokens, eos: Vec::new(), logprobs }
}

/// What a warm-up ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub requests: usize,
    pub prefill_forwards: usize,
    pub millis: f64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "warm-up: {} requests, {} prefill forwards, {:.0} ms",
            self.requests, self.prefill_forwards, self.millis
        )
    }
}

/// Runs `plan`'s waves on `engine` (idle) to their end, then resets its counters: the first
/// wave on the base (model 0), the second's requests spread over the engine's `models` (the base
/// and its adapters, whose forwards run the LoRA kernels). Fails if a request is refused, a step
/// fails, or a KV block is left in use.
pub fn run(
    g: &Graph<'_>,
    engine: &mut Engine<'_>,
    (vocab, models): (usize, usize),
    plan: &Plan,
) -> Result<Summary, DecodeError> {
    let start = Instant::now();
    let mut requests = 0;
    for (w, wave) in plan.waves(vocab).into_iter().enumerate() {
        requests += wave.len();
        for (r, req) in wave.into_iter().enumerate() {
            let model = if w == 0 { 0 } else { r % models.max(1) };
            engine.submit_to(model, req).map_err(|e| DecodeError::Request(format!("warm-up request: {e}")))?;
        }
        while !engine.is_idle() {
            engine.step(g, &mut Discard)?;
        }
    }
    let (used, _) = engine.blocks_in_use();
    if used > 0 {
        return Err(DecodeError::Request(format!("the warm-up left {used} KV blocks in use")));
    }
    let prefill_forwards = engine.prefill_forwards();
    engine.reset_counters();
    Ok(Summary { requests, prefill_forwards, millis: start.elapsed().as_secs_f64() * 1e3 })
}

/// A sink that drops every token.
struct Discard;

impl Sink for Discard {
    fn token(&mut self, _: u64, _: &[u32], _: Option<&TokenLogprob>) -> bool {
        false
    }

    fn finished(&mut self, _: u64, _: Finished) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_wave_fills_the_prefill_cap_up_to_a_modest_prompt() {
        // 64 slots: 64 rows of 256 columns, 16384 tokens, the engine's cap.
        assert_eq!(Plan::new(64, 1024, false), Some(Plan { rows: 64, prompt: 256, new_tokens: 3 }));
        // 128 slots: the cap leaves 128 columns a row.
        assert_eq!(Plan::new(128, 1024, false).unwrap().prompt, 128);
        // A short --max-model-len bounds prompt and new tokens.
        assert_eq!(Plan::new(8, 100, false).unwrap().prompt, 93);
        assert_eq!(Plan::new(8, 1024, true).unwrap().prompt, CPU_PROMPT);
        assert_eq!(Plan::new(64, 1024, true).unwrap().rows, CPU_ROWS);
        assert_eq!(Plan::new(4, 8, true).unwrap().prompt, 1);
        assert_eq!(Plan::new(4, 7, true), None);
    }

    #[test]
    fn requests_use_known_ids_and_fit_the_capacity() {
        let plan = Plan::new(16, 64, false).unwrap();
        let waves = plan.waves(50);
        for (w, wave) in waves.iter().enumerate() {
            assert_eq!(wave.len(), 16);
            for r in wave {
                assert!(r.prompt.iter().all(|&t| t < 50) && !r.prompt.is_empty());
                assert!(r.prompt.len() + r.opts.max_new_tokens <= 64, "wave {w}");
                assert!(r.id > u64::MAX - 32);
            }
        }
        assert!(waves[1].iter().any(|r| r.opts.params.do_sample) && waves[1].iter().any(|r| !r.opts.params.do_sample));
    }

    #[test]
    fn the_second_wave_ends_on_every_tail_width() {
        let plan = Plan::new(64, 1024, false).unwrap();
        let tokens: Vec<usize> = plan.waves(100)[1].iter().map(|r| r.opts.max_new_tokens).collect();
        // Rows still running at each step after the full-width ones.
        let running = |step: usize| tokens.iter().filter(|&&t| t > NEW_TOKENS + step).count();
        assert_eq!((0..5).map(running).collect::<Vec<_>>(), [16, 8, 4, 1, 0]);
        // Four slots: the tail runs 1 row after the four.
        let plan = Plan::new(4, 1024, true).unwrap();
        let tokens: Vec<usize> = plan.waves(100)[1].iter().map(|r| r.opts.max_new_tokens).collect();
        assert_eq!(tokens, [NEW_TOKENS + 1, NEW_TOKENS, NEW_TOKENS, NEW_TOKENS]);
    }
}
