//! Recording a step once and replaying it. A decode step whose inputs that change from step to
//! step all live on the device (the ids the previous step chose; the KV cache's positions,
//! lengths and store slots, which the step itself advances for the next one) is the same
//! batch every time: the host records it once ([`StepMode::Capture`]) and then only submits
//! it ([`Graph::replay`]).
//!
//! Whether a step is the same batch every time is checked, not assumed: the caller records one
//! step with [`StepMode::Log`] and the next with [`StepMode::Capture`], and replays only when
//! the two [`StepRecord::log`]s are equal — the same kernels, specialization constants,
//! workgroup counts and scalar parameters, and the same host data written into the batch,
//! except into the buffers marked as step inputs ([`Graph::mark_step_input`], whose advance the
//! step records itself). Buffer addresses are not compared: a step's intermediates take other
//! buffers each time it is recorded; what a replay reads and writes are the buffers of the
//! captured recording, which the replay holds.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use vkformers_vk::{LogEntry, Pending, Recorder, Replay, Result};

use super::{Graph, MAX_IN_FLIGHT};
use crate::tensor::Tensor;

/// How the commands of a step are kept between [`Graph::begin_step`] and [`Graph::end_step`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StepMode {
    /// Recorded and submitted as any other work.
    #[default]
    Plain,
    /// Logged, for comparison with the next step's.
    Log,
    /// Logged and recorded into one batch kept for replay.
    Capture,
}

/// A step as [`Graph::end_step`] leaves it.
pub struct StepRecord {
    /// The step's commands (see the module): buffer ids left out, the writes into step inputs
    /// left out, commands recorded in [`Graph::unlogged`] left out.
    pub log: Vec<LogEntry>,
    /// The step's batch, submitted once already, ready to be submitted again (a capture that
    /// nothing broke).
    pub replay: Option<Replay>,
    /// Why a capture was not kept.
    pub refused: Option<&'static str>,
    /// The submission count once the step was submitted (for `Graph::wait_submitted`).
    pub ticket: usize,
}

/// The graph's state of the step being recorded.
#[derive(Default)]
pub(crate) struct StepState {
    mode: Cell<StepMode>,
    log: RefCell<Vec<LogEntry>>,
    /// Buffer ids of the step's inputs that the step advances on the device.
    inputs: RefCell<HashSet<u64>>,
    unlogged: Cell<bool>,
    broken: Cell<Option<&'static str>>,
}

impl StepState {
    /// Runs `f` on the open recorder, with logging paused inside [`Graph::unlogged`].
    pub(crate) fn run_logged<R>(&self, rec: &mut Recorder, f: impl FnOnce(&mut Recorder) -> Result<R>) -> Result<R> {
        if !self.unlogged.get() {
            return f(rec);
        }
        let log = rec.take_log();
        let out = f(rec);
        if let Some(log) = log {
            rec.resume_log(log);
        }
        out
    }

    /// A batch of the step leaves the graph (`flush`, `sync`): its log joins the step's, and a
    /// capture cut in two is no longer one replayable batch.
    pub(crate) fn batch_ends(&self, rec: &mut Recorder) {
        if let Some(log) = rec.take_log() {
            self.log.borrow_mut().extend(log);
        }
        if rec.is_reusable() {
            self.broken.set(Some("the step was submitted in parts (a flush or sync inside it)"));
        }
    }

    /// A host transfer outside the batch (the staging path) happened inside the step: a replay
    /// would not repeat it.
    pub(crate) fn outside_transfer(&self) {
        if self.mode.get() == StepMode::Capture {
            self.broken.set(Some("the step uploads data outside its batch"));
        }
    }
}

impl Graph<'_> {
    /// A recorder for the open batch, as the step's mode asks.
    pub(super) fn open_recorder(&self) -> Result<Recorder> {
        let mode = self.step.mode.get();
        let capture = mode == StepMode::Capture;
        let mut rec =
            if capture { self.ctx.replay_recorder()? } else { self.ctx.recorder(self.profile.borrow().is_some())? };
        // A replay runs behind whatever was submitted before it, the previous replay included:
        // its batch always starts with the barrier after earlier batches.
        if capture || !self.in_flight.borrow().is_empty() {
            rec.order_after_earlier_batches();
        }
        if mode != StepMode::Plain {
            rec.start_log();
        }
        if vkformers_vk::chains_on() {
            let mut chain = self.chain.borrow_mut();
            if chain.is_none() {
                let bytes = u64::from(vkformers_vk::CHAIN_SLOTS) * 4;
                *chain = Some(self.ctx.buffer(bytes, "dispatch chain counters")?);
            }
            if let Some(counters) = chain.as_ref() {
                rec.enable_chain(counters)?;
            }
        }
        Ok(rec)
    }

    /// Starts a step kept as `mode` says: what was recorded before goes to the device first, so
    /// the step's commands are a batch of their own. Under `--profile` a capture is refused
    /// (timed batches are not replayed).
    pub fn begin_step(&self, mode: StepMode) -> Result<()> {
        self.flush()?;
        self.step.mode.set(mode);
        self.step.log.borrow_mut().clear();
        self.step.inputs.borrow_mut().clear();
        let profiled = self.profile.borrow().is_some();
        self.step.broken.set((mode == StepMode::Capture && profiled).then_some("profiling is on"));
        Ok(())
    }

    /// Marks `t` as an input of the step that the step advances on the device itself: the
    /// host data written into it is left out of the step's log.
    pub fn mark_step_input(&self, t: &Tensor) {
        if self.step.mode.get() != StepMode::Plain {
            self.step.inputs.borrow_mut().insert(t.view().buffer.id());
        }
    }

    /// Whether the step being recorded is a capture.
    pub fn capturing(&self) -> bool {
        self.step.mode.get() == StepMode::Capture
    }

    /// Refuses the capture under way (`why` is what [`StepRecord::refused`] says): the step
    /// needs host work a replay would not repeat.
    pub fn refuse_capture(&self, why: &'static str) {
        if self.capturing() {
            self.step.broken.set(Some(why));
        }
    }

    /// Runs `f` with its commands left out of the step's log (what only a captured step
    /// records: the advance of its inputs for the next replay).
    pub fn unlogged<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.step.unlogged.replace(true);
        let out = f();
        self.step.unlogged.set(before);
        out
    }

    /// Ends the step: submits it (a capture as the first run of its replay) and returns its
    /// log, its replay and its ticket.
    pub fn end_step(&self) -> Result<StepRecord> {
        let mode = self.step.mode.replace(StepMode::Plain);
        let open = self.rec.borrow_mut().take();
        let mut replay = None;
        if let Some(mut rec) = open {
            if let Some(log) = rec.take_log() {
                self.step.log.borrow_mut().extend(log);
            }
            let whole = rec.is_reusable() && self.step.broken.get().is_none() && !rec.is_empty();
            if whole && !rec.pin_for_replay() {
                self.step.broken.set(Some("a buffer the step used was taken for other work before it ended"));
            }
            if whole && self.step.broken.get().is_none() {
                let r = rec.into_replay()?;
                self.push_pending(r.submit()?)?;
                replay = Some(r);
            } else {
                *self.rec.borrow_mut() = Some(rec);
                self.flush()?;
            }
        }
        let refused = match (mode, &replay) {
            (StepMode::Capture, None) => Some(self.step.broken.get().unwrap_or("the step recorded nothing")),
            _ => None,
        };
        let inputs = std::mem::take(&mut *self.step.inputs.borrow_mut());
        let log = std::mem::take(&mut *self.step.log.borrow_mut())
            .into_iter()
            .filter_map(|e| without_ids(e, &inputs))
            .collect();
        Ok(StepRecord { log, replay, refused, ticket: self.submissions.get() })
    }

    /// Submits a captured step once more (what was recorded since goes first); returns its
    /// ticket for `wait_submitted`.
    pub fn replay(&self, r: &Replay) -> Result<usize> {
        self.flush()?;
        self.push_pending(r.submit()?)?;
        Ok(self.submissions.get())
    }

    /// Counts a submitted batch and keeps at most `MAX_IN_FLIGHT` of them running ahead.
    pub(super) fn push_pending(&self, p: Pending) -> Result<()> {
        self.submissions.set(self.submissions.get() + 1);
        self.in_flight.borrow_mut().push_back(p);
        if self.in_flight.borrow().len() > MAX_IN_FLIGHT {
            self.wait_oldest()?;
        }
        Ok(())
    }

    pub(super) fn step_outside_transfer(&self) {
        self.step.outside_transfer();
    }
}

/// A log entry as steps are compared: no buffer ids, and no writes into step inputs (a
/// captured step writes them outside its batch: `Graph::step_ints`).
fn without_ids(e: LogEntry, inputs: &HashSet<u64>) -> Option<LogEntry> {
    match e {
        LogEntry::Update { buffer, .. } if inputs.contains(&buffer) => None,
        LogEntry::Update { data, .. } => Some(LogEntry::Update { buffer: 0, data }),
        other => Some(other),
    }
}
