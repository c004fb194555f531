//! Per-row sampling for a serving engine's batch (`shaders/sample/draw_rows.comp`): every row of
//! the logits is a request of its own, with its own processors, penalties, seed, step and draw
//! row, and its own slot of a persistent state `[slots, v]` (the history bit of the repetition
//! penalty and the count of generated ids of OpenAI's penalties), which the kernel keeps up to
//! date with its choices. Optionally each row's raw log-probabilities (the chosen token's and up
//! to [`TOP_MAX`] most likely) come back, so a step never reads the logits `[rows, v]`.

use vkformers_vk::{read, read_write, write, BufferView, Recorder, Result};

use super::{Draw, Processors};
use crate::code;
use crate::code::SampleDrawRowsPush;
use crate::dtype::DType;
use crate::launch::{count, dispatch, err, expect_len, groups_per_item};

/// u32 words of one row's parameters (`PARAM_WORDS` of draw_rows.comp).
pub const PARAM_WORDS: usize = code::defines::sample_draw_rows::PARAM_WORDS as usize;
/// Alternatives a row's log-probabilities report at most (OpenAI's `top_logprobs` limit;
/// `TOP_MAX` of draw_rows.comp).
pub const TOP_MAX: usize = code::defines::sample_draw_rows::TOP_MAX as usize;
/// f32 words of one row's log-probabilities: the chosen token's, then (id bits, logprob) pairs.
pub const LOGPROB_WORDS: usize = 1 + 2 * TOP_MAX;
/// The state bit of an id in the slot's history (prompt + generated); the bits below count how
/// often it was generated.
pub const HIST: u32 = code::defines::sample_draw_rows::HIST;

/// One row's request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowDraw {
    /// Its row of the state.
    pub slot: usize,
    /// Its processors (`greedy` for an argmax of the penalised scores).
    pub p: Processors,
    /// Seed and step of its draw.
    pub draw: Draw,
    /// The Philox counter's third word (a request's choice index).
    pub draw_row: u32,
    /// OpenAI's presence and frequency penalties (0 and 0: off).
    pub presence: f32,
    pub frequency: f32,
    /// Report log-probabilities with this many alternatives (at most [`TOP_MAX`]).
    pub top_logprobs: Option<usize>,
}

impl RowDraw {
    /// Whether the row's choice reads its slot's state (the repetition or OpenAI penalties).
    pub fn reads_state(&self) -> bool {
        self.p.penalty.is_some() || self.presence != 0.0 || self.frequency != 0.0
    }
}

/// The state row `[v]` of a slot whose history is `history` (prompt then generated ids) of which
/// the last `generated` were generated: [`HIST`] on every id of it, plus each generated id's count.
pub fn state_row(history: &[u32], generated: usize, v: usize) -> Vec<u32> {
    let mut row = vec![0u32; v];
    let from = history.len().saturating_sub(generated);
    for (i, &id) in history.iter().enumerate().filter(|(_, &id)| (id as usize) < v) {
        row[id as usize] |= HIST;
        if i >= from {
            row[id as usize] += 1;
        }
    }
    row
}

/// The parameter words `[rows, PARAM_WORDS]` of `rows` for vocabulary `v` and `slots` state rows,
/// checked (slot in range, keep >= 1, top logprobs <= TOP_MAX).
pub fn row_params(rows: &[RowDraw], v: usize, slots: usize) -> Result<Vec<u32>> {
    let k = &code::SAMPLE_DRAW_ROWS;
    let mut words = Vec::with_capacity(rows.len() * PARAM_WORDS);
    for r in rows {
        let p = &r.p;
        if r.slot >= slots || p.keep == 0 || r.top_logprobs.is_some_and(|n| n > TOP_MAX) {
            return Err(err(k, format!("row {r:?}: slot beyond {slots}, keep 0, or more than {TOP_MAX} logprobs")));
        }
        // Flag 6: OpenAI's presence/frequency penalties.
        let penalised = r.presence != 0.0 || r.frequency != 0.0;
        words.push(r.slot as u32);
        words.extend(super::processor_words(p, r.draw, v, u32::from(penalised) << 6));
        words.extend([
            r.draw_row,
            r.presence.to_bits(),
            r.frequency.to_bits(),
            r.top_logprobs.map_or(u32::MAX, |n| n as u32),
        ]);
    }
    Ok(words)
}

/// Buffers of [`draw_rows`]: logits f32 `[rows * t, v]`, params u32 `[rows, PARAM_WORDS]` (from
/// [`row_params`]), state u32 `[slots, v]`, ids u32 `[rows]`, logprobs f32 `[rows, LOGPROB_WORDS]`.
pub struct RowBuffers<'a> {
    pub logits: BufferView<'a>,
    pub params: BufferView<'a>,
    pub state: BufferView<'a>,
    pub ids: BufferView<'a>,
    pub logprobs: BufferView<'a>,
}

/// Chooses `ids[b]` from the last column of row b of the logits under row b's parameters, records
/// the choice in the state, and writes the row's log-probabilities when it asks for them
/// ([`super::NO_TOKEN`] for a row with nothing to draw).
pub fn draw_rows(
    rec: &mut Recorder,
    b: RowBuffers<'_>,
    (rows, t, v, slots): (usize, usize, usize, usize),
) -> Result<()> {
    let k = &code::SAMPLE_DRAW_ROWS;
    if t == 0 || v == 0 {
        return Err(err(k, format!("sampling from logits [{rows} x {t}, {v}]: t and v must be at least 1")));
    }
    expect_len(k, "logits", &b.logits, count(k, &[rows, t, v])?.into(), DType::F32)?;
    expect_len(k, "params", &b.params, count(k, &[rows, PARAM_WORDS])?.into(), DType::F32)?;
    expect_len(k, "state", &b.state, count(k, &[slots, v])?.into(), DType::F32)?;
    expect_len(k, "ids", &b.ids, rows as u64, DType::F32)?;
    expect_len(k, "logprobs", &b.logprobs, count(k, &[rows, LOGPROB_WORDS])?.into(), DType::F32)?;
    let args = [read(b.logits), read(b.params), read_write(b.state), write(b.ids), write(b.logprobs)];
    let push = SampleDrawRowsPush { rows: rows as u32, t: t as u32, v: v as u32 };
    dispatch(rec, k, &[], &args, &push, groups_per_item(rows as u64))
}
