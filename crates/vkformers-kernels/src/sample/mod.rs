//! Choosing the next token on the device, so that a generation step reads back only the chosen
//! ids `[B]` (4 bytes per row) instead of the logits `[B, V]`.
//! - [`argmax_last`]: greedy, the largest logit of each row's last column.
//! - [`draw_last`]: sampling, transformers' processors then a seeded multinomial draw.

pub mod reference;
pub mod rows;

use vkformers_vk::{read, read_write, write, BufferView, Recorder, Result};

use crate::code;
use crate::code::{SampleArgmaxPush, SampleDrawPush};
use crate::dtype::DType;
use crate::launch::{count, dispatch, err, expect_len, groups_per_item};

/// What [`argmax_last`] writes for a row whose logits are all NaN.
pub const NO_TOKEN: u32 = u32::MAX;

/// `ids[b] = argmax(logits[b t + t - 1, :])` for b < rows: logits f32 `[rows * t, v]`, ids u32
/// `[rows]`. The first index on ties, NaN skipped (as `vkformers_generate::argmax`); [`NO_TOKEN`]
/// for a row of only NaN.
pub fn argmax_last(
    rec: &mut Recorder,
    logits: BufferView<'_>,
    ids: BufferView<'_>,
    rows: usize,
    t: usize,
    v: usize,
) -> Result<()> {
    let k = &code::SAMPLE_ARGMAX;
    if t == 0 || v == 0 {
        return Err(err(k, format!("argmax over logits [{rows} x {t}, {v}]: t and v must be at least 1")));
    }
    let n = count(k, &[rows, t, v])?;
    expect_len(k, "logits", &logits, n.into(), DType::F32)?;
    expect_len(k, "ids", &ids, rows as u64, DType::F32)?;
    let p = SampleArgmaxPush { rows: rows as u32, t: t as u32, v: v as u32 };
    dispatch(rec, k, &[], &[read(logits), write(ids)], &p, groups_per_item(rows as u64))
}

/// The processors and draw of [`draw_last`], in the order transformers' `generate` applies them.
/// Each filter is off when its field is `None`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Processors {
    /// Repetition penalty (`> 0`) over the ids marked in `presence`.
    pub penalty: Option<f32>,
    /// Temperature (`> 0`): scores are divided by it.
    pub temperature: Option<f32>,
    /// Top-k (`>= 1`; raised to `keep`).
    pub top_k: Option<usize>,
    /// Top-p in `[0, 1]`.
    pub top_p: Option<f64>,
    /// Min-p in `[0, 1]`.
    pub min_p: Option<f32>,
    /// transformers' `min_tokens_to_keep` (`>= 1`) of top-k, top-p and min-p.
    pub keep: usize,
    /// Greedy decoding: the argmax of the penalised scores (first index on ties, NaN logits
    /// skipped) instead of the warpers and the draw (transformers runs no warper when greedy).
    pub greedy: bool,
}

/// Which draw of a seeded run: the uniform variate of row b is Philox4x32-10 of counter
/// `(lo step, hi step, b, 0)` under key `(lo seed, hi seed)`, as `vkformers_generate::uniform_f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    pub seed: u64,
    pub step: u64,
}

/// The words both sampling kernels read in this order: flags (bit 0 penalty, 1 temperature,
/// 2 top-k, 3 top-p, 4 min-p, 5 greedy, or'ed with `more_flags`), penalty, temperature, top_k
/// (raised to keep; its flag off when it keeps all `v`), f32(1 - top_p), min_p, keep (<= v),
/// then the draw's seed and step (lo, hi each).
fn processor_words(p: &Processors, d: Draw, v: usize, more_flags: u32) -> [u32; 11] {
    let top_k = p.top_k.map(|k| k.max(p.keep)).filter(|&k| k < v);
    let flags = u32::from(p.penalty.is_some())
        | u32::from(p.temperature.is_some()) << 1
        | u32::from(top_k.is_some()) << 2
        | u32::from(p.top_p.is_some()) << 3
        | u32::from(p.min_p.is_some()) << 4
        | u32::from(p.greedy) << 5
        | more_flags;
    [
        flags,
        p.penalty.unwrap_or(1.0).to_bits(),
        p.temperature.unwrap_or(1.0).to_bits(),
        top_k.unwrap_or(1) as u32,
        // torch compares the f32 running sum with the Python float `1 - top_p` cast to f32.
        ((1.0 - p.top_p.unwrap_or(1.0)) as f32).to_bits(),
        p.min_p.unwrap_or(0.0).to_bits(),
        p.keep.min(v) as u32,
        d.seed as u32,
        (d.seed >> 32) as u32,
        d.step as u32,
        (d.step >> 32) as u32,
    ]
}

/// Samples `ids[b]` from the last column of every row of logits f32 `[rows * t, v]` after the
/// processors `p`, and marks `presence[b, ids[b]] = 1` (u32 `[rows, v]`, nonzero = the id occurs in
/// row b's history, read by the repetition penalty). [`NO_TOKEN`] for a row with nothing to draw
/// (every score -inf or NaN). See `shaders/sample/draw.comp` for the rules and where the choice
/// can differ from the host's f64 pipeline (rounding at a cut, ties straddling a cut).
#[allow(clippy::too_many_arguments)]
pub fn draw_last(
    rec: &mut Recorder,
    logits: BufferView<'_>,
    presence: BufferView<'_>,
    ids: BufferView<'_>,
    (rows, t, v): (usize, usize, usize),
    p: &Processors,
    d: Draw,
) -> Result<()> {
    draw(rec, (logits, presence, ids), None, (rows, t, v), p, d)
}

/// Step-counting steps (`DRAW_COUNTED`) of a draw: its step number is `d.step` plus `runs[0]`.
const DRAW_COUNTED: u32 = 64;

/// [`draw_last`] whose draw is step `d.step + runs[0]` (`runs` u32 `[1]`): a decode step recorded
/// once and replayed counts its runs on the device, so each run draws its own step.
#[allow(clippy::too_many_arguments)]
pub fn draw_last_counted(
    rec: &mut Recorder,
    logits: BufferView<'_>,
    presence: BufferView<'_>,
    (ids, runs): (BufferView<'_>, BufferView<'_>),
    (rows, t, v): (usize, usize, usize),
    p: &Processors,
    d: Draw,
) -> Result<()> {
    expect_len(&code::SAMPLE_DRAW, "runs", &runs, 1, DType::F32)?;
    draw(rec, (logits, presence, ids), Some(runs), (rows, t, v), p, d)
}

/// The draw kernel over `(logits, presence, ids)`, counting steps by `runs` when given.
fn draw(
    rec: &mut Recorder,
    (logits, presence, ids): (BufferView<'_>, BufferView<'_>, BufferView<'_>),
    runs: Option<BufferView<'_>>,
    (rows, t, v): (usize, usize, usize),
    p: &Processors,
    d: Draw,
) -> Result<()> {
    let k = &code::SAMPLE_DRAW;
    if t == 0 || v == 0 {
        return Err(err(k, format!("sampling from logits [{rows} x {t}, {v}]: t and v must be at least 1")));
    }
    if p.keep == 0 {
        return Err(err(k, "min_tokens_to_keep must be at least 1".into()));
    }
    let n = count(k, &[rows, t, v])?;
    expect_len(k, "logits", &logits, n.into(), DType::F32)?;
    expect_len(k, "presence", &presence, count(k, &[rows, v])?.into(), DType::F32)?;
    expect_len(k, "ids", &ids, rows as u64, DType::F32)?;
    // The processor words are also draw_rows' per-row table (row_params); here they are push
    // members, named.
    let counted = if runs.is_some() { DRAW_COUNTED } else { 0 };
    let [flags, penalty, temperature, top_k, top_p_cut, min_p, keep, seed_lo, seed_hi, step_lo, step_hi] =
        processor_words(p, d, v, counted);
    let push = SampleDrawPush {
        rows: rows as u32,
        t: t as u32,
        v: v as u32,
        flags,
        penalty: f32::from_bits(penalty),
        temperature: f32::from_bits(temperature),
        top_k,
        top_p_cut: f32::from_bits(top_p_cut),
        min_p: f32::from_bits(min_p),
        keep,
        seed_lo,
        seed_hi,
        step_lo,
        step_hi,
    };
    // Without a count the kernel never reads `runs`: the logits stand in for its address.
    let args = [read(logits), read_write(presence), write(ids), read(runs.unwrap_or(logits))];
    dispatch(rec, k, &[], &args, &push, groups_per_item(rows as u64))
}
