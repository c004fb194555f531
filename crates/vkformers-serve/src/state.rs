//! What every handler shares, and submitting a request's prompts to the engine thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::HeaderMap;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::engine::Request;
use vkformers_io::HfTokenizer;

use crate::api::Plan;
use crate::embeddings::EmbedJob;
use crate::error::ApiError;
use crate::limits::PromptLimits;
use crate::metrics::Metrics;
use crate::worker::{Command, Item, Update};

/// The server's shared state.
pub struct AppState {
    pub commands: Mutex<Sender<Command>>,
    /// The embedding thread's queue when the model is an embedding model (then `commands` has
    /// no engine behind it).
    pub embed: Option<Mutex<Sender<EmbedJob>>>,
    pub tokenizer: Arc<HfTokenizer>,
    pub defaults: GenerationDefaults,
    /// Ids that end a chat reply (the model's EOS and the template's end-of-turn tokens).
    pub chat_eos: Vec<u32>,
    /// Served model names; a name's index is its model in the engine.
    pub models: Vec<String>,
    pub api_key: Option<String>,
    pub max_model_len: usize,
    /// The model's vocabulary size (token ids must be below it).
    pub vocab: usize,
    /// Requests queued and running at most: `max_batch + max_queue`.
    pub max_outstanding: usize,
    pub max_queue: usize,
    pub metrics: Arc<Metrics>,
    pub draining: AtomicBool,
    pub next_id: AtomicU64,
    /// Unix seconds the server started (`created` of the models).
    pub started: u64,
}

/// A submitted request: its updates, and the ids to cancel if the client goes away first.
pub struct Job {
    pub updates: UnboundedReceiver<Update>,
    pub guard: CancelOnDrop,
    /// Choices in all (prompts × n).
    pub choices: usize,
    /// Prompt tokens over all prompts (each counted once, whatever n is).
    pub prompt_tokens: usize,
    /// The first request's id (the response's id is made from it).
    pub first_id: u64,
}

/// Cancels its requests when dropped before [`CancelOnDrop::disarm`]: a client that disconnects
/// drops its handler's future or stream, and the engine frees the requests' slots and blocks.
pub struct CancelOnDrop {
    ids: Vec<u64>,
    commands: Sender<Command>,
    armed: bool,
}

impl CancelOnDrop {
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Cancel(std::mem::take(&mut self.ids)));
        }
    }
}

/// Requests counted in `metrics.outstanding` (queued or running: what a drain waits for and the
/// queue limit counts); counted out when dropped, unless handed over to the engine thread, which
/// counts each request out as it finishes or is cancelled.
pub struct Admission {
    metrics: Arc<Metrics>,
    n: usize,
}

impl Admission {
    /// The engine thread has the requests now: it counts them out.
    pub fn hand_over(mut self) {
        self.n = 0;
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.metrics.outstanding.fetch_sub(self.n, Ordering::SeqCst);
    }
}

impl AppState {
    /// Counts `n` requests in (completions' and chat's choices, an embedding request), or 429
    /// when they would pass `max_batch + max_queue` outstanding requests.
    pub fn admit(&self, n: usize) -> Result<Admission, ApiError> {
        let before = self.metrics.outstanding.fetch_add(n, Ordering::SeqCst);
        let admission = Admission { metrics: self.metrics.clone(), n };
        if before + n > self.max_outstanding {
            return Err(ApiError::queue_full(self.max_queue));
        }
        Ok(admission)
    }

    /// Refuses a request without the API key (401) or while draining (503).
    pub fn gate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        if let Some(key) = &self.api_key {
            let given =
                headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
            if given.map(str::trim) != Some(key.as_str()) {
                return Err(ApiError::unauthorized());
            }
        }
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::shutting_down());
        }
        Ok(())
    }

    /// Refuses a generation request when the served model is an embedding model (400).
    pub fn generates(&self) -> Result<(), ApiError> {
        if self.embed.is_some() {
            return Err(ApiError::bad_request(format!(
                "`{}` is an embedding model: it serves /v1/embeddings, not completions",
                self.models[0]
            )));
        }
        Ok(())
    }

    /// The engine index of a served model name (404 otherwise).
    pub fn model_index(&self, name: &str) -> Result<usize, ApiError> {
        self.models.iter().position(|m| m == name).ok_or_else(|| ApiError::unknown_model(name, &self.models))
    }

    /// Queues every prompt × `plan.n` choices on engine `model` (429 when the queue is full).
    pub fn submit(
        &self,
        model: usize,
        prompts: Vec<Vec<u32>>,
        plan: &Plan,
        default_max: fn(usize) -> usize,
    ) -> Result<Job, ApiError> {
        let limits = PromptLimits { vocab: self.vocab, max_model_len: self.max_model_len };
        let maxes = limits.admit(&prompts, plan.max_tokens, default_max)?;
        let choices = prompts.len() * plan.n;
        let admission = self.admit(choices)?;
        let received = Instant::now();
        let prompt_tokens = prompts.iter().map(Vec::len).sum();
        let mut items = Vec::with_capacity(choices);
        for (p, (prompt, max_new)) in prompts.into_iter().zip(maxes).enumerate() {
            for j in 0..plan.n {
                let mut opts = plan.opts.clone();
                (opts.row, opts.max_new_tokens) = (j as u32, max_new);
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let req = Request { id, prompt: prompt.clone(), opts };
                items.push(Item { req, index: p * plan.n + j, stops: plan.stops.clone(), received });
            }
        }
        let ids: Vec<u64> = items.iter().map(|i| i.req.id).collect();
        let first_id = ids[0];
        let (tx, updates) = unbounded_channel();
        let commands = self.commands.lock().map_err(|_| ApiError::internal("the engine channel is poisoned"))?.clone();
        if commands.send(Command::Submit { model, items, events: tx }).is_err() {
            return Err(ApiError::internal("the engine thread has stopped"));
        }
        admission.hand_over();
        Ok(Job { updates, guard: CancelOnDrop { ids, commands, armed: true }, choices, prompt_tokens, first_id })
    }
}
