//! `vkformers serve`: an OpenAI-compatible HTTP server (axum on tokio) over the continuous-batching
//! engine (`vkformers_generate::engine`). One engine thread owns the device, the model (and one
//! copy per LoRA adapter, each served under its own name) and runs the batching loop; the HTTP
//! handlers tokenize, check and queue requests through a channel and stream the text back.
//!
//! - `GET /v1/models`, `POST /v1/completions` (text, token ids, or lists of them),
//!   `POST /v1/chat/completions` (the model's chat template), with `stream` (server-sent events
//!   ending in `[DONE]`), sampling fields, `stop`, `n`, log-probabilities, penalties and `usage`.
//! - Errors in OpenAI's JSON shape: 400 bad request, 401 no key, 404 unknown model, 413 too long,
//!   429 queue full, 503 shutting down ([`error::ApiError`]).
//! - `POST /v1/embeddings` instead of the generation routes when the model is an embedding model
//!   ([`Config::embedder`]; `embeddings`).
//! - Before it listens, the engine thread warms up on synthetic requests ([`warmup`]; off with
//!   [`Config::warmup`] false or `VKFORMERS_SERVE_WARMUP=0`): the first clients find every
//!   kernel's pipeline made.
//! - `/health`, Prometheus `/metrics` ([`metrics::Metrics`]); on SIGTERM (or Ctrl-C) the server
//!   answers 503 to new requests, finishes the running ones, then exits.

pub mod api;
pub mod embeddings;
pub mod error;
pub mod limits;
pub mod metrics;
mod respond;
mod routes;
pub mod shared_base;
mod state;
pub mod warmup;
pub mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vkformers_generate::config::GenerationDefaults;
use vkformers_io::HfTokenizer;
use vkformers_vk::DeviceSelector;

pub use error::{ApiError, ServeError};
use state::AppState;
pub use worker::Loader;
use worker::{Command, Setup};

/// Request bodies larger than this are refused (413) unless the config says otherwise.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;

/// Positions per slot the KV cache's pools hold before they first grow.
const INITIAL_POSITIONS_PER_SLOT: usize = 1024;

/// What to serve and how.
pub struct Config {
    pub device: DeviceSelector,
    /// The base model's folder (config.json, weights, tokenizer files).
    pub model_dir: PathBuf,
    /// The name clients give as `model` for the base model.
    pub model_name: String,
    /// LoRA adapters served by name: `(name, folder)`.
    pub adapters: Vec<(String, PathBuf)>,
    /// Loads the base model on the engine thread's graph, once: every adapter attaches onto its
    /// tensors (`shared_base`).
    pub loader: Loader,
    /// Serve an embedding model instead (`/v1/embeddings`; the generation routes answer 400):
    /// builds its embedder on the embedding thread. `loader` and `adapters` are then unused.
    pub embedder: Option<embeddings::EmbedLoader>,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    /// Requests decoding at once.
    pub max_batch: usize,
    /// Requests waiting for a slot at most (more: 429).
    pub max_queue: usize,
    /// Prompt plus new tokens at most (None: the model's context).
    pub max_model_len: Option<usize>,
    pub max_body_bytes: usize,
    /// Warm the engine up before listening (`warmup`; `VKFORMERS_SERVE_WARMUP=0` turns it off
    /// too): the first requests then find every kernel's pipeline made.
    pub warmup: bool,
    /// Told the address once the server listens (port 0 picks a free one).
    pub on_listen: Option<Box<dyn FnOnce(SocketAddr) + Send>>,
    /// Besides SIGTERM and Ctrl-C: draining starts when this fires (tests, embedding).
    pub stop: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// The context length served: `--max-model-len` if given (at most the model's context), else the
/// model's context, else 2048.
fn max_model_len(asked: Option<usize>, context: Option<usize>) -> Result<usize, ServeError> {
    match (asked, context) {
        (Some(0), _) => Err(ServeError::Load("--max-model-len must be at least 1".into())),
        (Some(a), Some(c)) if a > c => Err(ServeError::Load(format!(
            "--max-model-len {a} is longer than the model's context of {c} positions: give at most {c}"
        ))),
        (Some(a), _) => Ok(a),
        (None, Some(c)) => Ok(c),
        (None, None) => Ok(2048),
    }
}

/// Loads the model(s), listens, and serves until SIGTERM / Ctrl-C / `config.stop`, then drains.
pub fn run(mut config: Config) -> Result<(), ServeError> {
    let tok = HfTokenizer::from_dir(&config.model_dir)
        .map_err(|e| ServeError::Load(format!("serve needs the model's tokenizer (tokenizer.json): {e}")))?;
    let defaults = GenerationDefaults::from_dir(&config.model_dir).map_err(|e| ServeError::Load(e.to_string()))?;
    let max_len = max_model_len(config.max_model_len, defaults.context)?;
    let tokenizer = Arc::new(tok);
    let metrics = Arc::new(metrics::Metrics::default());
    let mut names = vec![config.model_name.clone()];
    let mut adapters = vec![None];
    for (name, dir) in &config.adapters {
        if names.contains(name) {
            return Err(ServeError::Load(format!(
                "the model name `{name}` is given twice: give each adapter its own name"
            )));
        }
        names.push(name.clone());
        adapters.push(Some(dir.clone()));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (engine, vocab, embed) = match config.embedder.take() {
        Some(loader) => {
            if !config.adapters.is_empty() {
                return Err(ServeError::Load(
                    "LoRA adapters are served for generation only, not for embeddings".into(),
                ));
            }
            let (jobs, job_rx) = std::sync::mpsc::channel();
            let (handle, vocab) = embeddings::spawn(config.device.clone(), loader, job_rx)?;
            (handle, vocab, Some(Mutex::new(jobs)))
        }
        None => {
            let setup = Setup {
                device: config.device.clone(),
                loader: std::mem::replace(&mut config.loader, Box::new(|_| Err("loader used".into()))),
                adapters,
                max_batch: config.max_batch.max(1),
                // The pools start at this many positions per slot and double when rows need more: a
                // long-context model's full `max_batch × context` would not fit most devices up front.
                capacity: max_len.min(INITIAL_POSITIONS_PER_SLOT),
                tokenizer: tokenizer.clone(),
                metrics: metrics.clone(),
                warmup: warmup::enabled(config.warmup),
            };
            let (handle, vocab) = worker::spawn(setup, rx)?;
            (handle, vocab, None)
        }
    };
    let mut chat_eos = defaults.eos.clone();
    chat_eos.extend(vkformers_chat::end_of_turn_ids(&tokenizer));
    chat_eos.sort_unstable();
    chat_eos.dedup();
    let state = Arc::new(AppState {
        commands: Mutex::new(tx.clone()),
        embed,
        tokenizer,
        defaults,
        chat_eos,
        models: names,
        api_key: config.api_key.clone(),
        max_model_len: max_len,
        vocab,
        max_outstanding: config.max_batch.max(1) + config.max_queue,
        max_queue: config.max_queue,
        metrics,
        draining: AtomicBool::new(false),
        next_id: AtomicU64::new(0),
        started: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let served = rt.block_on(serve_http(state, &mut config));
    // The runtime's tasks hold the last handles of the state (and of the embedding queue, whose
    // thread ends when they are gone).
    drop(rt);
    let _ = tx.send(Command::Shutdown);
    let joined = engine.join();
    served?;
    joined.map_err(|_| ServeError::EngineGone)
}

async fn serve_http(state: Arc<AppState>, config: &mut Config) -> Result<(), ServeError> {
    let addr = format!("{}:{}", config.host, config.port);
    let listener =
        tokio::net::TcpListener::bind(&addr).await.map_err(|source| ServeError::Bind { addr: addr.clone(), source })?;
    let local = listener.local_addr()?;
    eprintln!("vkformers serve: listening on http://{local} (models: {})", state.models.join(", "));
    if let Some(tell) = config.on_listen.take() {
        tell(local);
    }
    let app = routes::router(state.clone(), config.max_body_bytes);
    let stop = config.stop.take();
    axum::serve(listener, app).with_graceful_shutdown(drain(state, stop)).await?;
    Ok(())
}

/// Resolves once a stop signal came and every accepted request has finished: new requests get
/// 503 meanwhile.
async fn drain(state: Arc<AppState>, stop: Option<tokio::sync::oneshot::Receiver<()>>) {
    let stop_signal = async {
        match stop {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = terminate() => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = stop_signal => {}
    }
    state.draining.store(true, Ordering::SeqCst);
    eprintln!(
        "vkformers serve: draining ({} requests running or queued)",
        state.metrics.outstanding.load(Ordering::SeqCst)
    );
    while state.metrics.outstanding.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("vkformers serve: drained, stopping");
}

#[cfg(unix)]
async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn terminate() {
    std::future::pending().await
}
