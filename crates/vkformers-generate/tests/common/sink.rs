//! What an engine run handed its sink, kept for the engine tests.

use std::collections::HashMap;

use vkformers_generate::engine::{Finished, Sink};
use vkformers_generate::TokenLogprob;

/// Every request's finish, its tokens' log-probabilities (when asked for) and how many times
/// the sink was called for it; `stops[id] = k` stops request `id` at its k-th token (as a stop
/// string would).
#[derive(Default)]
pub struct Gather {
    pub done: HashMap<u64, Finished>,
    pub logprobs: HashMap<u64, Vec<TokenLogprob>>,
    pub seen: HashMap<u64, usize>,
    pub stops: HashMap<u64, usize>,
}

impl Sink for Gather {
    fn token(&mut self, id: u64, new: &[u32], logprob: Option<&TokenLogprob>) -> bool {
        *self.seen.entry(id).or_default() += 1;
        self.logprobs.entry(id).or_default().extend(logprob.cloned());
        self.stops.get(&id).is_some_and(|&k| new.len() >= k)
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.done.insert(id, done);
    }
}
