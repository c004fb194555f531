//! `vkformers serve`: the OpenAI-compatible server (`vkformers_serve`) on a model folder, with
//! LoRA adapters served by name; an embedding model (sentence-transformers or encoder folder) is
//! served on `/v1/embeddings` instead.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use vkformers_vk::DeviceSelector;

use crate::load::AdapterArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json, model.safetensors, tokenizer files) or Hub id; clients name it
    /// as given here in `model`.
    #[arg(long)]
    model: String,
    /// A LoRA adapter served as model NAME: `--adapter NAME=DIR` (repeatable; each keeps its own
    /// copy of the base weights on the device).
    #[arg(long = "adapter", value_name = "NAME=DIR")]
    adapters: Vec<String>,
    /// Address to listen on (loopback by default: give 0.0.0.0 to accept other machines).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Require `Authorization: Bearer KEY` (default: the VKFORMERS_API_KEY environment variable;
    /// none: no key needed).
    #[arg(long)]
    api_key: Option<String>,
    /// Requests decoding together at most.
    #[arg(long, default_value_t = 32, value_parser = crate::ranges::at_least_one)]
    max_batch: usize,
    /// Requests waiting for a slot at most; more get 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Prompt plus new tokens at most (default: the model's context).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    max_model_len: Option<usize>,
    /// Request bodies larger than this many bytes get 413.
    #[arg(long, default_value_t = vkformers_serve::DEFAULT_MAX_BODY_BYTES, value_parser = crate::ranges::at_least_one)]
    max_body_bytes: usize,
    /// Before listening, run a few synthetic requests as wide as the engine batches (the largest
    /// prefill forward, decode steps with every slot, greedy and sampled rows) so that the first
    /// clients do not pay the kernels' pipeline creation; its counts never reach /metrics
    /// (default; VKFORMERS_SERVE_WARMUP=0 also turns it off).
    #[arg(long, overrides_with = "no_warmup")]
    warmup: bool,
    /// Listen at once, without the warm-up.
    #[arg(long, overrides_with = "warmup")]
    no_warmup: bool,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
}

/// `NAME=DIR` of `--adapter`.
fn adapter(arg: &str) -> anyhow::Result<(String, PathBuf)> {
    let Some((name, dir)) = arg.split_once('=').filter(|(n, d)| !n.is_empty() && !d.is_empty()) else {
        bail!("--adapter `{arg}`: give NAME=DIR (the model name clients use, and the adapter folder or Hub id)");
    };
    Ok((name.to_string(), vkformers_hub::resolve_adapter(dir)?))
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let dir = crate::generate::model_dir(&args.model)?;
    let embedding = crate::serve_embed::is_embedding_model(&dir)?;
    // An embedding model's tokenizer and config live in its transformer's folder.
    let tokenizer_dir = if embedding { crate::st_modules::SentenceModel::read(&dir)?.transformer } else { dir.clone() };
    let dtype = args.dtype.resolve(&tokenizer_dir)?;
    let adapters = args.adapters.iter().map(|a| adapter(a)).collect::<anyhow::Result<Vec<_>>>()?;
    let api_key = args.api_key.clone().or_else(|| std::env::var("VKFORMERS_API_KEY").ok()).filter(|k| !k.is_empty());
    let model_dir = dir.clone();
    // The base only: the server attaches each adapter onto the base's tensors (one upload).
    let loader: vkformers_serve::Loader = Box::new(move |g| {
        crate::load::inference_model(g, &model_dir, &AdapterArgs { adapter: None }, dtype).map_err(|e| format!("{e:#}"))
    });
    let config = vkformers_serve::Config {
        device: selector.clone(),
        model_dir: tokenizer_dir,
        model_name: args.model.clone(),
        adapters,
        loader,
        embedder: embedding.then(|| crate::serve_embed::loader(dir.clone(), dtype)),
        host: args.host.clone(),
        port: args.port,
        api_key,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        max_model_len: args.max_model_len,
        max_body_bytes: args.max_body_bytes,
        warmup: !args.no_warmup,
        on_listen: None,
        stop: None,
    };
    vkformers_serve::run(config).context("vkformers serve")?;
    Ok(ExitCode::SUCCESS)
}
