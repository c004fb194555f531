//! Choosing the next token of every row on the device (`vkformers_kernels::sample`), so that a
//! decode step reads back only the chosen ids `[B]` (4 bytes per row), not the logits `[B, V]`.

use vkformers_kernels::sample::{self, Draw, Processors, NO_TOKEN};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::{Buffer, BufferKind, BufferView};

use crate::decode::DecodeError;
use crate::error::GenerateError;
use crate::processors::{LogitsProcessor, Pipeline};

/// Device state of the choice: the ids buffer `[B]` u32 the kernels write and the host reads, and
/// for sampling the presence buffer `[B, V]` u32 of the repetition penalty (1 where the id occurs
/// in the row's history), made from the first step's history and then kept up to date by the
/// kernel, which marks each id it chooses.
pub struct DeviceChooser {
    ids: Buffer,
    rows: usize,
    presence: Option<Buffer>,
}

impl DeviceChooser {
    /// A chooser for `rows` rows.
    pub fn new(g: &Graph<'_>, rows: usize) -> Result<Self, DecodeError> {
        Ok(Self { ids: g.ctx().buffer((rows.max(1) * 4) as u64, "chosen ids")?, rows, presence: None })
    }

    fn ids(&self) -> BufferView<'_> {
        self.ids.slice(0, self.rows as u64 * 4)
    }

    /// Submits what is recorded (the forward and the choice) and reads the ids back.
    fn read_ids(&self, g: &Graph<'_>) -> Result<Vec<Option<u32>>, DecodeError> {
        g.sync()?;
        let got: Vec<u32> = g.ctx().read_vec(self.ids())?;
        Ok(got.into_iter().map(|id| (id != NO_TOKEN).then_some(id)).collect())
    }

    /// Greedy: the argmax (first index on ties, NaN skipped) of the last column of every row of
    /// `logits [B·T, V]`, read back as `[B]`. Submits the pending forward with the choice.
    pub fn greedy(&self, g: &Graph<'_>, logits: &Tensor, t: usize) -> Result<Vec<Option<u32>>, DecodeError> {
        g.record(|rec| sample::argmax_last(rec, logits.view(), self.ids(), self.rows, t, logits.last_dim()))?;
        self.read_ids(g)
    }

    /// Sampling: processors `p` then draw `d` from the last column of every row of `logits [B·T, V]`,
    /// read back as `[B]`. `history[b]` (ids so far, padding included) seeds the presence buffer on
    /// the first call; later calls rely on the kernel having marked its choices, so every id the
    /// caller appends to a running row's history must be the one chosen here.
    pub fn sample(
        &mut self,
        g: &Graph<'_>,
        (logits, t): (&Tensor, usize),
        history: &[Vec<u32>],
        p: &Processors,
        d: Draw,
    ) -> Result<Vec<Option<u32>>, DecodeError> {
        let v = logits.last_dim();
        if self.presence.is_none() {
            self.presence = Some(g.ctx().buffer_from(&presence(history, v), "presence")?);
        }
        let presence = self.presence.as_ref().map(Buffer::view).ok_or(GenerateError::NothingToSample)?;
        let ids = self.ids();
        g.record(|rec| sample::draw_last(rec, logits.view(), presence, ids, (self.rows, t, v), p, d))?;
        self.read_ids(g)
    }
}

/// How [`Lookahead`] chooses: the argmax, or the device processors then a draw of this seed
/// (greedy with a penalty: the draw kernel with `greedy` set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AheadChoice {
    Argmax,
    Draw(Processors, u64),
}

/// The choice of a decode loop that records step s + 1 before step s's ids come back: step s's
/// ids go to device buffer `s % 2`, which step s + 1's embedding reads, and to its host-visible
/// copy, which the host reads once step s's batch has completed (`Graph::wait_submitted`). Two
/// pairs, because step s + 1's choice is recorded before step s's copy is read. A draw's presence
/// buffer is kept by the kernel as in [`DeviceChooser`].
pub struct Lookahead {
    device: [Buffer; 2],
    host: [Buffer; 2],
    rows: usize,
    next: usize,
    how: AheadChoice,
    presence: Option<Buffer>,
    /// A replayed step's ids: the host-visible ring `[RING, B]` the step writes run k's ids
    /// into (slot k % RING), and the device count of runs it picks the slot by.
    ring: Buffer,
    runs: Buffer,
}

/// Slots of the ring of replayed steps' ids: the host reads run k while run k + 1 may be
/// running, so two would do.
const RING: usize = 4;

impl Lookahead {
    /// Buffers for `rows` rows choosing as `how` says.
    pub fn new(g: &Graph<'_>, rows: usize, how: AheadChoice) -> Result<Self, DecodeError> {
        let bytes = (rows.max(1) * 4) as u64;
        let dev = |i| g.ctx().buffer(bytes, &format!("chosen ids {i}"));
        let host = |i| g.ctx().buffer_of_kind(bytes, BufferKind::Download, &format!("chosen ids {i} (host)"));
        let ring = g.ctx().buffer_of_kind(bytes * RING as u64, BufferKind::Download, "replayed ids (host)")?;
        let runs = g.ctx().buffer(4, "replayed runs")?;
        Ok(Self {
            device: [dev(0)?, dev(1)?],
            host: [host(0)?, host(1)?],
            rows,
            next: 0,
            how,
            presence: None,
            ring,
            runs,
        })
    }

    /// Sets the count of replayed runs to 0, in the open batch (before the logged step).
    pub fn reset_runs(&self, g: &Graph<'_>) -> Result<(), DecodeError> {
        g.record(|rec| rec.update(self.runs.view(), &[0; 4]))?;
        Ok(())
    }

    /// The choice of a logged or captured step from the last column of every row of `logits
    /// [B·T, V]`, written over pair `which` (the ids the step read: every run of a replay reads
    /// and writes the same buffer), then copied to the ring's slot of the run (out of the step's
    /// log). A draw's step number is `base` plus the count of runs on the device, so the logged
    /// step, the captured one and its replays record the same draw. The next step recorded
    /// plainly writes the other pair.
    pub fn record_in_place(
        &mut self,
        g: &Graph<'_>,
        (logits, t): (&Tensor, usize),
        which: usize,
        base: usize,
    ) -> Result<(), DecodeError> {
        let (bytes, v) = (self.rows as u64 * 4, logits.last_dim());
        let dev = self.device[which].slice(0, bytes);
        let runs = self.runs.view();
        g.record(|rec| match (&self.how, &self.presence) {
            (AheadChoice::Draw(p, seed), Some(presence)) => {
                let d = Draw { seed: *seed, step: base as u64 };
                sample::draw_last_counted(rec, logits.view(), presence.view(), (dev, runs), (self.rows, t, v), p, d)
            }
            _ => sample::argmax_last(rec, logits.view(), dev, self.rows, t, v),
        })?;
        let ring = self.ring.slice(0, bytes * RING as u64);
        let rows = (self.rows as u32, RING as u32);
        g.unlogged(|| g.record(|rec| vkformers_kernels::step::emit_ids(rec, dev, ring, runs, rows)))?;
        self.next = 1 - which;
        Ok(())
    }

    /// The ids of replayed run `k` (call once its batch has completed).
    pub fn read_run(&self, k: usize) -> Result<Vec<Option<u32>>, DecodeError> {
        let mut bytes = vec![0u8; self.rows * 4 * RING];
        if !self.ring.read_mapped(&mut bytes) {
            return Err(DecodeError::Device(vkformers_vk::VkError::Allocator(
                "the replayed ids' host buffer is not mapped".into(),
            )));
        }
        let ids: &[u32] = bytemuck::cast_slice(&bytes);
        let slot = &ids[(k % RING) * self.rows..][..self.rows];
        Ok(slot.iter().map(|&id| (id != NO_TOKEN).then_some(id)).collect())
    }

    /// Records step `step`'s choice from the last column of every row of `logits [B·T, V]` and its
    /// copy for the host; returns which pair holds it (for `ids` and `read`). `history[b]` (ids so
    /// far, padding included) seeds the presence buffer of a draw on the first call; later calls
    /// rely on the kernel having marked its choices, as [`DeviceChooser::sample`].
    pub fn record(
        &mut self,
        g: &Graph<'_>,
        (logits, t): (&Tensor, usize),
        history: &[Vec<u32>],
        step: usize,
    ) -> Result<usize, DecodeError> {
        let which = self.next;
        self.next = 1 - which;
        let (bytes, v) = (self.rows as u64 * 4, logits.last_dim());
        let (dev, host) = (self.device[which].slice(0, bytes), self.host[which].slice(0, bytes));
        if matches!(self.how, AheadChoice::Draw(..)) && self.presence.is_none() {
            self.presence = Some(g.ctx().buffer_from(&presence(history, v), "presence")?);
        }
        g.record(|rec| match (&self.how, &self.presence) {
            (AheadChoice::Draw(p, seed), Some(presence)) => {
                let d = Draw { seed: *seed, step: step as u64 };
                sample::draw_last(rec, logits.view(), presence.view(), dev, (self.rows, t, v), p, d)
            }
            _ => sample::argmax_last(rec, logits.view(), dev, self.rows, t, v),
        })?;
        // Out of a logged step's log: a captured step copies its ids its own way.
        g.unlogged(|| g.record(|rec| rec.copy(dev, host)))?;
        Ok(which)
    }

    /// The ids of pair `which` as a device tensor `[B, 1]`, the next step's input.
    pub fn ids(&self, g: &Graph<'_>, which: usize) -> Result<Tensor, DecodeError> {
        Ok(g.ints_over(self.device[which].clone(), &[self.rows, 1])?)
    }

    /// The next step's input `[B, 1]`: `fixed[b]` where it is given (a finished row's pad, what the
    /// synchronous loop feeds it), else pair `which`'s id, copied on the device (one copy per
    /// run of consecutive rows).
    pub fn ids_with(&self, g: &Graph<'_>, which: usize, fixed: &[Option<u32>]) -> Result<Tensor, DecodeError> {
        if fixed.iter().all(Option::is_none) {
            return self.ids(g, which);
        }
        let host: Vec<i32> = fixed.iter().map(|f| f.map_or(0, |id| id as i32)).collect();
        let ids = g.ints(&host, &[self.rows, 1])?;
        let dst = ids.view();
        let src = &self.device[which];
        g.record(|rec| {
            let mut row = 0;
            while row < self.rows {
                let len = fixed[row..].iter().take_while(|f| f.is_none()).count();
                if len > 0 {
                    let (at, n) = ((row * 4) as u64, (len * 4) as u64);
                    rec.copy(src.slice(at, n), BufferView { buffer: dst.buffer, offset: dst.offset + at, len: n })?;
                }
                row += len.max(1);
            }
            Ok::<(), vkformers_vk::VkError>(())
        })?;
        Ok(ids)
    }

    /// The ids of pair `which` (call once the batch that recorded them has completed).
    pub fn read(&self, which: usize) -> Result<Vec<Option<u32>>, DecodeError> {
        let mut bytes = vec![0u8; self.rows * 4];
        if !self.host[which].read_mapped(&mut bytes) {
            return Err(DecodeError::Device(vkformers_vk::VkError::Allocator(
                "the chosen ids' host buffer is not mapped".into(),
            )));
        }
        let ids: &[u32] = bytemuck::cast_slice(&bytes);
        Ok(ids.iter().map(|&id| (id != NO_TOKEN).then_some(id)).collect())
    }
}

/// `[B, V]`: 1 where id j occurs in row b's history (ids `>= V` are ignored, as the host penalty
/// ignores them).
fn presence(history: &[Vec<u32>], v: usize) -> Vec<u32> {
    let mut p = vec![0u32; history.len() * v];
    for (row, ids) in history.iter().enumerate() {
        ids.iter().filter(|&&i| (i as usize) < v).for_each(|&i| p[row * v + i as usize] = 1);
    }
    p
}

/// The id of a row that must produce a token, or the error of a row with nothing to choose.
pub fn required(id: Option<u32>) -> Result<u32, GenerateError> {
    id.ok_or(GenerateError::NothingToSample)
}

/// The device form of a host pipeline (same processors, same order, the host's f32 parameters), or
/// `None` when it cannot be expressed (a processor twice, or different `min_tokens_to_keep`s). Not
/// greedy: the caller sets `greedy` for greedy decoding (whose pipeline is at most the penalty).
pub fn device_processors(pipeline: &Pipeline) -> Option<Processors> {
    let mut p =
        Processors { penalty: None, temperature: None, top_k: None, top_p: None, min_p: None, keep: 1, greedy: false };
    let mut keep = None;
    let mut same_keep = |k: usize| keep.replace(k).is_none_or(|old| old == k);
    for proc in &pipeline.processors {
        let fresh = match *proc {
            LogitsProcessor::RepetitionPenalty { penalty } => p.penalty.replace(penalty as f32).is_none(),
            LogitsProcessor::Temperature { temperature } => p.temperature.replace(temperature as f32).is_none(),
            LogitsProcessor::TopK { top_k, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.top_k.replace(top_k).is_none()
            }
            LogitsProcessor::TopP { top_p, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.top_p.replace(top_p).is_none()
            }
            LogitsProcessor::MinP { min_p, min_tokens_to_keep } => {
                same_keep(min_tokens_to_keep) && p.min_p.replace(min_p as f32).is_none()
            }
        };
        if !fresh {
            return None;
        }
    }
    p.keep = keep.unwrap_or(1);
    in_transformers_order(pipeline).then_some(p)
}

/// Whether the processors run in the order the device applies them (penalty, temperature, top-k,
/// top-p, min-p), as `SamplingParams::processors` builds them.
fn in_transformers_order(pipeline: &Pipeline) -> bool {
    let rank = |p: &LogitsProcessor| match p {
        LogitsProcessor::RepetitionPenalty { .. } => 0,
        LogitsProcessor::Temperature { .. } => 1,
        LogitsProcessor::TopK { .. } => 2,
        LogitsProcessor::TopP { .. } => 3,
        LogitsProcessor::MinP { .. } => 4,
    };
    pipeline.processors.windows(2).all(|w| rank(&w[0]) < rank(&w[1]))
}
