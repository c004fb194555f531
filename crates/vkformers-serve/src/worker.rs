//! The engine thread: it owns the Vulkan context, the models (the base and one per LoRA adapter,
//! sharing the base's tensors) and one engine over all of them (one pool of slots, one KV cache;
//! each forward runs the rows of one model), takes commands from the handlers through a channel,
//! runs one engine step between reading commands, and sends each request's text back as it is
//! produced. When the engine is idle it blocks on the channel.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use vkformers_generate::detok::Detokenizer;
use vkformers_generate::engine::{admission_hold_env, Engine, Finished, Request, Sink};
use vkformers_generate::stop::{StopStrings, TextStream};
use vkformers_generate::TokenLogprob;
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

use crate::error::ServeError;
use crate::metrics::Metrics;
use crate::{shared_base, warmup};

/// Loads the base model on `g` (once: adapters attach onto its tensors, see `shared_base`).
pub type Loader = Box<dyn Fn(&Graph<'_>) -> Result<Model, String> + Send>;

/// One request of a submission (a prompt's choice).
pub struct Item {
    pub req: Request,
    /// The choice's index in the response.
    pub index: usize,
    pub stops: StopStrings,
    pub received: Instant,
}

/// From the handlers to the engine thread.
pub enum Command {
    /// Queue `items` on served model `model`; updates go to `events`.
    Submit { model: usize, items: Vec<Item>, events: UnboundedSender<Update> },
    /// Drop these requests (the client went away): their KV blocks go back at once.
    Cancel(Vec<u64>),
    /// Finish: the thread returns once this is read.
    Shutdown,
}

/// A token's log-probabilities with tokens as text.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprob {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

/// From the engine thread to a request's handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A new token of choice `index` and the text it settled (possibly empty: held back until a
    /// stop string or a whole character is certain).
    Token { index: usize, text: String, logprob: Option<Logprob> },
    /// Choice `index` finished: the last settled text, the whole text (cut before a stop string),
    /// why (`stop` / `length`) and its token count.
    Done { index: usize, tail: String, text: String, finish: &'static str, tokens: usize },
    /// The engine failed.
    Error(String),
}

/// What the thread needs to start.
pub struct Setup {
    pub device: DeviceSelector,
    pub loader: Loader,
    /// Per served model: the adapter folder (None: the base).
    pub adapters: Vec<Option<PathBuf>>,
    pub max_batch: usize,
    /// Positions per slot the cache starts with.
    pub capacity: usize,
    pub tokenizer: Arc<HfTokenizer>,
    pub metrics: Arc<Metrics>,
    /// Run the warm-up (`crate::warmup`) before telling the server it may listen.
    pub warmup: bool,
}

/// Starts the engine thread and waits until its models are loaded; returns the thread and the
/// model's vocabulary size.
pub fn spawn(setup: Setup, commands: Receiver<Command>) -> Result<(std::thread::JoinHandle<()>, usize), ServeError> {
    spawn_ready("vkformers-engine", move |ready| run(setup, commands, ready))
}

/// Starts the thread `name` running `body`, which owns the device and sends `Ok(vocab)` on the
/// channel once its model is loaded (or the loading error); waits for that word. Returns the
/// thread and the vocabulary size.
pub(crate) fn spawn_ready(
    name: &str,
    body: impl FnOnce(Sender<Result<usize, String>>) + Send + 'static,
) -> Result<(std::thread::JoinHandle<()>, usize), ServeError> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new().name(name.into()).spawn(move || body(ready_tx)).map_err(ServeError::Io)?;
    match ready_rx.recv() {
        Ok(Ok(vocab)) => Ok((handle, vocab)),
        Ok(Err(e)) => Err(ServeError::Load(e)),
        Err(_) => Err(ServeError::EngineGone),
    }
}

fn run(setup: Setup, commands: Receiver<Command>, ready: Sender<Result<usize, String>>) {
    let ctx = match Context::new(&setup.device) {
        Ok(c) => c,
        Err(e) => return drop(ready.send(Err(e.to_string()))),
    };
    let g = Graph::new(&ctx);
    let models = match load_models(&g, &setup) {
        Ok(m) => m,
        Err(e) => return drop(ready.send(Err(e))),
    };
    setup.metrics.device_memory_bytes.store(ctx.device_memory().current, Ordering::Relaxed);
    // Attention and the KV cache in the weights' type, as `vkformers generate` runs.
    if let Some(m) = models.first() {
        g.set_autocast(Some(m.weight_dtype()));
    }
    let mut engine = match Engine::with_models(&g, models.iter().collect(), setup.max_batch, setup.capacity) {
        Ok(e) => e,
        Err(e) => return drop(ready.send(Err(format!("creating the KV cache: {e}")))),
    };
    // A server's clients send their next requests a few steps apart: holding an arrival one step
    // lets them share a prefill forward (measured on an H200: TTFT p99 0.36-0.80 s -> 0.10 s, see
    // `admission_hold_env`). `VKFORMERS_ADMISSION_HOLD=0` turns it off.
    engine.set_admission_hold(admission_hold_env().unwrap_or(true));
    let vocab = models.first().map_or(0, |m| m.spec.vocab);
    // Before the word that lets the server listen: no request meets a cold engine.
    if setup.warmup {
        let cpu = ctx.caps().is_cpu();
        if let Err(e) = warm_up(&g, &mut engine, vocab, &setup, cpu) {
            return drop(ready.send(Err(format!("the warm-up failed: {e} (--no-warmup skips it)"))));
        }
    }
    let detok = Detokenizer::new(&setup.tokenizer);
    let mut loop_state =
        Loop { engine, requests: HashMap::new(), tok: &setup.tokenizer, detok: &detok, metrics: &setup.metrics };
    loop_state.publish();
    let _ = ready.send(Ok(vocab));
    loop_state.serve(&g, &commands);
}

/// Runs the warm-up (`crate::warmup`) on the idle engine and logs what it ran.
fn warm_up(g: &Graph<'_>, engine: &mut Engine<'_>, vocab: usize, setup: &Setup, cpu: bool) -> Result<(), String> {
    let Some(plan) = warmup::Plan::new(setup.max_batch, setup.capacity, cpu) else {
        eprintln!("vkformers serve: warm-up skipped (a slot holds {} positions)", setup.capacity);
        return Ok(());
    };
    let summary = warmup::run(g, engine, (vocab, setup.adapters.len()), &plan).map_err(|e| e.to_string())?;
    eprintln!("vkformers serve: {summary}");
    setup.metrics.warmup_millis.store(summary.millis.ceil() as u64, Ordering::Relaxed);
    Ok(())
}

/// The served models: the base uploaded once, each adapter's model sharing its tensors; publishes
/// the distinct weight bytes they hold.
fn load_models(g: &Graph<'_>, setup: &Setup) -> Result<Vec<Model>, String> {
    let base = (setup.loader)(g)?;
    let (mut models, mut own) = (Vec::new(), Vec::new());
    for adapter in &setup.adapters {
        match adapter {
            None => models.push(shared_base::share(&base)),
            Some(dir) => {
                let (m, tensors) = shared_base::with_adapter(g, &base, dir)?;
                models.push(m);
                own.extend(tensors);
            }
        }
    }
    setup.metrics.weight_bytes.store(shared_base::distinct_bytes(&models, &own), Ordering::Relaxed);
    Ok(models)
}

/// A request's state on the engine thread.
struct State {
    index: usize,
    stops: StopStrings,
    stream: TextStream,
    received: Instant,
    first_token: bool,
    /// The client went away (its updates could not be sent).
    gone: bool,
    events: UnboundedSender<Update>,
}

struct Loop<'m, 'a> {
    engine: Engine<'m>,
    requests: HashMap<u64, State>,
    tok: &'a HfTokenizer,
    detok: &'a Detokenizer<'a>,
    metrics: &'a Metrics,
}

impl Loop<'_, '_> {
    fn serve(&mut self, g: &Graph<'_>, commands: &Receiver<Command>) {
        loop {
            if self.engine.is_idle() {
                match commands.recv() {
                    Ok(Command::Shutdown) | Err(_) => return,
                    Ok(cmd) => self.handle(cmd),
                }
            }
            while let Ok(cmd) = commands.try_recv() {
                if matches!(cmd, Command::Shutdown) {
                    return;
                }
                self.handle(cmd);
            }
            self.step(g);
            self.publish();
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit { model, items, events } => {
                for item in items {
                    let id = item.req.id;
                    self.metrics.prompt_tokens.fetch_add(item.req.prompt.len() as u64, Ordering::Relaxed);
                    if let Err(e) = self.engine.submit_to(model, item.req) {
                        self.metrics.outstanding.fetch_sub(1, Ordering::Relaxed);
                        let _ = events.send(Update::Error(e.to_string()));
                        continue;
                    }
                    let state = State {
                        index: item.index,
                        stops: item.stops,
                        stream: TextStream::default(),
                        received: item.received,
                        first_token: false,
                        gone: false,
                        events: events.clone(),
                    };
                    self.requests.insert(id, state);
                }
            }
            Command::Cancel(ids) => {
                for id in ids {
                    if self.requests.remove(&id).is_some() {
                        self.engine.cancel(id);
                        self.metrics.outstanding.fetch_sub(1, Ordering::Relaxed);
                        self.metrics.requests_cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Command::Shutdown => {}
        }
        self.publish();
    }

    /// One engine step; a failure ends every request with the error.
    fn step(&mut self, g: &Graph<'_>) {
        if self.engine.is_idle() {
            return;
        }
        let start = Instant::now();
        let mut sink = Reporter {
            requests: &mut self.requests,
            tok: self.tok,
            detok: self.detok,
            metrics: self.metrics,
            nanos: 0,
        };
        let result = self.engine.step(g, &mut sink);
        let m = self.metrics;
        m.engine_sink_nanos.fetch_add(sink.nanos, Ordering::Relaxed);
        m.engine_step_nanos.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let times = self.engine.step_times();
        let nanos = |secs: f64| (secs * 1e9) as u64;
        m.engine_record_nanos.store(nanos(times.record_secs), Ordering::Relaxed);
        m.engine_submit_nanos.store(nanos(times.submit_secs), Ordering::Relaxed);
        m.engine_wait_nanos.store(nanos(times.wait_secs), Ordering::Relaxed);
        m.engine_steps.fetch_add(1, Ordering::Relaxed);
        if let Err(err) = result {
            for (id, state) in std::mem::take(&mut self.requests) {
                self.engine.cancel(id);
                self.metrics.outstanding.fetch_sub(1, Ordering::Relaxed);
                let _ = state.events.send(Update::Error(format!("the engine failed: {err}")));
            }
        }
    }

    /// Gauges after a step or a command.
    fn publish(&self) {
        let m = self.metrics;
        m.queue_depth.store(self.engine.queued(), Ordering::Relaxed);
        m.running.store(self.engine.running(), Ordering::Relaxed);
        let (used, total) = self.engine.blocks_in_use();
        m.kv_blocks_in_use.store(used, Ordering::Relaxed);
        m.kv_blocks_total.store(total, Ordering::Relaxed);
        m.prefill_forwards.store(self.engine.prefill_forwards() as u64, Ordering::Relaxed);
        m.host_sampled_rows.store(self.engine.host_chosen_rows() as u64, Ordering::Relaxed);
        m.sample_rate(Instant::now());
    }
}

/// The engine's sink: decodes each request's new text (a few ids a token, `detok`), spots stop
/// strings in it, sends updates.
struct Reporter<'r, 'a> {
    requests: &'r mut HashMap<u64, State>,
    tok: &'a HfTokenizer,
    detok: &'a Detokenizer<'a>,
    metrics: &'a Metrics,
    /// Nanoseconds spent in the sink this step.
    nanos: u64,
}

impl Reporter<'_, '_> {
    /// Runs `f`, counting its time in `nanos`.
    fn timed<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let start = Instant::now();
        let out = f(self);
        self.nanos += start.elapsed().as_nanos() as u64;
        out
    }

    fn logprob(&self, lp: &TokenLogprob) -> Logprob {
        let piece = |id: u32| self.tok.decode(&[id], false).unwrap_or_default();
        Logprob {
            token: piece(lp.token),
            logprob: lp.logprob,
            top: lp.top.iter().map(|&(t, l)| (piece(t), l)).collect(),
        }
    }
}

impl Sink for Reporter<'_, '_> {
    fn token(&mut self, id: u64, new: &[u32], logprob: Option<&TokenLogprob>) -> bool {
        self.timed(|r| r.report_token(id, new, logprob))
    }

    fn finished(&mut self, id: u64, done: Finished) {
        self.timed(|r| r.report_finished(id, done))
    }
}

impl Reporter<'_, '_> {
    fn report_token(&mut self, id: u64, new: &[u32], logprob: Option<&TokenLogprob>) -> bool {
        self.metrics.generated_tokens.fetch_add(1, Ordering::Relaxed);
        let logprob = logprob.map(|lp| self.logprob(lp));
        let Some(state) = self.requests.get_mut(&id) else { return true };
        if !std::mem::replace(&mut state.first_token, true) {
            self.metrics.observe_ttft(state.received.elapsed().as_secs_f64());
        }
        // A decode error prints nothing more (the finished text is decoded again in full).
        let chunk = state.stream.push(self.detok, new, &state.stops).unwrap_or_default();
        state.gone = state.events.send(Update::Token { index: state.index, text: chunk.text, logprob }).is_err();
        // A stop string ends it; so does a client that went away (its blocks free now).
        chunk.stop || state.gone
    }

    fn report_finished(&mut self, id: u64, done: Finished) {
        self.metrics.outstanding.fetch_sub(1, Ordering::Relaxed);
        let Some(mut state) = self.requests.remove(&id) else { return };
        let counter = if state.gone { &self.metrics.requests_cancelled } else { &self.metrics.requests_finished };
        counter.fetch_add(1, Ordering::Relaxed);
        let text = self.detok.decode(&done.tokens).unwrap_or_default();
        let tail = state.stream.finish(&text, &state.stops);
        let _ = state.events.send(Update::Done {
            index: state.index,
            tail,
            text: state.stops.trim(&text).to_string(),
            finish: done.finish.name(),
            tokens: done.tokens.len(),
        });
    }
}
