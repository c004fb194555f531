//! Decoding with the host one step behind the device: step s + 1's forward is recorded and
//! submitted before step s's ids are read back, its embedding reading step s's choice from a
//! device buffer ([`Lookahead`]: the argmax, or the device processors and seeded draw). The
//! device then runs decode steps back to back while the host records the next one and reports
//! the last one's tokens, instead of idling through every step's recording, submission and
//! read-back (at batch 1 on an H200 the host's share of a step is a millisecond against a few of
//! kernels).
//!
//! Same tokens and the same cache as the synchronous loop (`generation::run`), so a chat's next
//! turn can continue the cache: a running row's input is the id it chose, as there; a row the
//! host knows has finished is fed the pad id, as there (copied around it on the device); a draw
//! counts its step as there, and its presence buffer sees the same choices in the same order.
//! When every row has finished, the step recorded ahead is not needed: its column is forgotten
//! ([`KvCache::forget_last_column`]) and the cache holds what the synchronous loop leaves.

use std::time::Instant;

use vkformers_models::decoder::KvCache;
use vkformers_models::model::Model;
use vkformers_models::ModelSpec;
use vkformers_tensor::Graph;

use crate::decode::DecodeError;
use crate::device_choice::{required, AheadChoice, Lookahead};
use crate::generation::{feed, finished, record, report_step, Context, GenerateOptions, Generation, Rows, Timings};
use crate::replay::{IdsAt, Replayer};

/// Steps between full synchronisations: only then may the buffers dropped meanwhile take host
/// uploads again (`Context::reclaim_buffers`), so the pool does not grow over a long generation.
const SYNC_EVERY: usize = 64;

/// Whether a generation may run ahead: no LongRoPE (whose context switch runs a whole history
/// again on the host's ids) and not switched off with `VKFORMERS_DECODE_LOOKAHEAD=0` (for
/// comparison). The caller also needs the choice made on the device.
pub(crate) fn applies(spec: &ModelSpec) -> bool {
    let longrope = spec.layers.iter().any(|l| l.attn.rope.as_ref().is_some_and(|r| r.long.is_some()));
    !longrope && enabled()
}

pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_DECODE_LOOKAHEAD").map_or(true, |v| v != "0"))
}

/// The generation of [`crate::generation::generate_cached`] run ahead (see the module), each
/// step's ids chosen on the device as `how` says.
pub(crate) fn run(
    g: &Graph<'_>,
    model: &Model,
    cache: &mut KvCache,
    ctx: Context,
    opts: &GenerateOptions,
    how: AheadChoice,
    on_token: &mut dyn FnMut(usize, &[u32]) -> bool,
) -> Result<Generation, DecodeError> {
    let b = ctx.history.len();
    let start = Instant::now();
    let prompt_tokens: Vec<usize> =
        ctx.masks.iter().map(|m| m[cache.len()..].iter().filter(|&&v| v != 0).count()).collect();
    let mut timings = Timings { prefill_tokens: prompt_tokens.iter().sum(), ..Timings::default() };
    let mut rows = Rows { history: ctx.history, new: vec![Vec::new(); b], finish: vec![None; b] };
    let mut ended = vec![None; b];
    let mut device = Lookahead::new(g, b, how)?;
    let max = opts.max_new_tokens;
    let out = g.no_grad(|| -> Result<usize, DecodeError> {
        let logits = feed(g, model, cache, &rows.history, &ctx.masks, max)?;
        let first = device.record(g, (&logits.all, logits.t), &rows.history, 0)?;
        let mut replayer = Replayer::new(first);
        let mut which = IdsAt::Pair(first);
        let mut ticket = g.flush_ticket()?;
        let mut decode_start = None;
        for step in 0..max {
            // Step + 1 goes to the device before step's ids come back.
            let ahead = if step + 1 < max {
                let pads: Vec<Option<u32>> = rows.finish.iter().map(|f| f.map(|_| opts.pad)).collect();
                let run = (model, &*cache);
                Some(replayer.step(g, run, &mut device, (step + 1, max), (&pads, &rows.history))?)
            } else {
                None
            };
            g.wait_submitted(ticket)?;
            let got = match which {
                IdsAt::Pair(p) => device.read(p)?,
                IdsAt::Run(k) => device.read_run(k)?,
            };
            let chosen = got
                .into_iter()
                .enumerate()
                .map(|(row, id)| rows.finish[row].is_none().then(|| required(id)).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            record(&mut rows, &chosen, opts);
            if step == 0 {
                timings.prefill_secs = start.elapsed().as_secs_f64();
                decode_start = Some(Instant::now());
            }
            report_step(&mut rows, &mut ended, decode_start, opts, on_token);
            let Some((next, next_ticket)) = ahead else { break };
            if rows.finish.iter().all(Option::is_some) {
                // Step + 1 ran for nothing: the cache forgets its column.
                cache.forget_last_column();
                break;
            }
            (which, ticket) = (next, next_ticket);
            if (step + 1) % SYNC_EVERY == 0 {
                g.sync()?;
            }
        }
        // Nothing of this generation stays in flight (a step recorded ahead and not needed).
        g.sync()?;
        timings.decode_secs = decode_start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        Ok(replayer.replayed)
    });
    // Blocks held for replays beyond what the rows hold go back (also after an error).
    cache.release_ahead();
    timings.replayed_steps = out?;
    Ok(finished(rows, timings, &prompt_tokens, &ended))
}
