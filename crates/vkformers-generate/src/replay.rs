//! Decode steps recorded once and replayed (`vkformers_tensor::Graph::replay`), inside the
//! lookahead loop: after a warm-up step that holds the KV-cache blocks of the steps ahead, one
//! step is logged and the next captured, both choosing in place (the ids they read are
//! overwritten with the ones they choose, copied to the slot of their run in a host-visible
//! ring, and a draw's step number is the logged step's plus a count of runs kept on the
//! device), so the two record the same commands; when their logs are equal the captured batch
//! runs again for every following step, the host only submitting it, advancing its own count of
//! the cache's positions and reading the ids back, until the decode attention's split count
//! would change (then the same again from a fresh warm-up), a finished row needs its pad fed (a
//! host input), or the generation ends. Same kernels, same inputs, so the same tokens as the
//! recorded loop.
//!
//! `VKFORMERS_DECODE_REPLAY=0` records every step (for comparison).

use vkformers_models::decoder::{forward_cached_last_ids, position_limit, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::{Graph, StepMode};
use vkformers_vk::{LogEntry, Replay};

use crate::decode::DecodeError;
use crate::device_choice::Lookahead;

/// Fewest steps a split-count range must have left to start a capture: the warm-up, the logged
/// and the captured step, and at least two replays.
const LEAST_STEPS: usize = 5;

/// Where the host reads a step's ids.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum IdsAt {
    /// A recorded step's pair of buffers.
    Pair(usize),
    /// Run k of the ring (run 0 is the logged step, 1 the captured one, then the replays).
    Run(usize),
}

enum State {
    /// Recording plainly; may start a capture.
    Idle,
    /// Blocks held until step `until`: the next step is logged.
    Warm { until: usize },
    /// The previous step's log: the next step is captured and compared with it. `base`: the
    /// logged step's number (a draw's step is `base` plus the run).
    Logged { until: usize, log: Vec<LogEntry>, base: usize },
    /// Replaying `replay` for steps before `until`; `runs` so far (the logged and the captured
    /// step included).
    Active { replay: Replay, until: usize, runs: usize },
    /// A capture was refused or differed from its logged step: record the rest.
    Off,
}

/// The replay state of one generation.
pub(crate) struct Replayer {
    state: State,
    /// The pair holding the ids the next step reads.
    pair: usize,
    /// Steps replayed (for the timings).
    pub(crate) replayed: usize,
}

/// Whether replay is on (`VKFORMERS_DECODE_REPLAY=0` turns it off).
pub(crate) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_DECODE_REPLAY").map_or(true, |v| v != "0"))
}

/// Reports why a capture was not kept, with `VKFORMERS_REPLAY_DEBUG=1`.
fn debug(why: &str) {
    if std::env::var("VKFORMERS_REPLAY_DEBUG").is_ok_and(|v| v == "1") {
        eprintln!("decode replay off: {why}");
    }
}

impl Replayer {
    /// Replay state for a generation whose first decode step reads pair `pair` (every choice
    /// the lookahead makes replays: a draw's step number counts runs on the device).
    pub(crate) fn new(pair: usize) -> Self {
        let state = if enabled() { State::Idle } else { State::Off };
        Replayer { state, pair, replayed: 0 }
    }

    /// Runs decode step `s` (of `max` steps) of `model` over `cache`: replays it, or records it
    /// (plainly, logged or captured); `pads[b]` is what a finished row is fed. Returns where
    /// its ids will be and its ticket.
    pub(crate) fn step(
        &mut self,
        g: &Graph<'_>,
        (model, cache): (&Model, &KvCache),
        device: &mut Lookahead,
        (s, max): (usize, usize),
        (pads, history): (&[Option<u32>], &[Vec<u32>]),
    ) -> Result<(IdsAt, usize), DecodeError> {
        let host_input = pads.iter().any(Option::is_some);
        if let State::Active { replay, until, runs } = &mut self.state {
            if s < *until && !host_input {
                let ticket = g.replay(replay)?;
                cache.advance_replayed();
                let at = IdsAt::Run(*runs);
                *runs += 1;
                self.replayed += 1;
                return Ok((at, ticket));
            }
            self.state = State::Idle;
        }
        if host_input && !matches!(self.state, State::Off) {
            self.state = State::Idle;
        }
        let limit = position_limit(&model.spec, &model.weights).map(|l| l.saturating_sub(cache.next_position()));
        let mode = self.mode(cache, (s, max.min(s + limit.unwrap_or(max))), host_input)?;
        if mode == StepMode::Log {
            device.reset_runs(g)?;
        }
        if mode != StepMode::Plain {
            g.begin_step(mode)?;
        }
        let b = pads.len();
        let ids = device.ids_with(g, self.pair, pads)?;
        let (ones, zeros) = (vec![1; b], vec![0; b]);
        let batch = Batch { ids: &zeros, mask: &ones, batch: b, seq: 1 };
        let logits = forward_cached_last_ids(g, &model.spec, &model.weights, &batch, &ids, cache)?;
        if mode == StepMode::Plain {
            self.pair = device.record(g, (&logits, 1), history, s)?;
            return Ok((IdsAt::Pair(self.pair), g.flush_ticket()?));
        }
        let base = match &self.state {
            State::Logged { base, .. } => *base,
            _ => s,
        };
        device.record_in_place(g, (&logits, 1), self.pair, base)?;
        let rec = g.end_step()?;
        let at = match mode {
            StepMode::Log => IdsAt::Run(0),
            _ => IdsAt::Run(1),
        };
        match (std::mem::replace(&mut self.state, State::Off), mode) {
            (State::Warm { until }, StepMode::Log) => self.state = State::Logged { until, log: rec.log, base: s },
            (State::Logged { until, log, .. }, StepMode::Capture) => match rec.replay {
                Some(replay) if rec.log == log => self.state = State::Active { replay, until, runs: 2 },
                Some(_) => debug("the captured step differs from the step before it"),
                None => debug(rec.refused.unwrap_or("refused")),
            },
            _ => {}
        }
        Ok((at, rec.ticket))
    }

    /// How step `s` is recorded, moving Idle to Warm (holding the blocks of the steps ahead)
    /// when a long enough range of steps before `max` (the generation's end, or a learned
    /// position table's) keeps its split counts.
    fn mode(&mut self, cache: &KvCache, (s, max): (usize, usize), host_input: bool) -> Result<StepMode, DecodeError> {
        if host_input {
            return Ok(StepMode::Plain);
        }
        Ok(match &self.state {
            State::Idle if cache.replayable() => {
                let steps = cache.stable_steps(max - s);
                if steps >= LEAST_STEPS {
                    cache.hold_ahead(steps)?;
                    self.state = State::Warm { until: s + steps };
                }
                StepMode::Plain
            }
            State::Warm { until } if s + 2 < *until => StepMode::Log,
            State::Logged { until, .. } if s + 1 < *until => StepMode::Capture,
            State::Warm { .. } | State::Logged { .. } => {
                self.state = State::Idle;
                StepMode::Plain
            }
            _ => StepMode::Plain,
        })
    }
}
