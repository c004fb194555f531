//! `vkformers generate`: KV-cached text generation from prompts.
//!
//! Defaults come from the model's `generation_config.json` (else `config.json`); flags override
//! them. One prompt streams its text to stdout as it is produced; several (`--prompt-file`, one per
//! line) run as one left-padded batch and each row is printed when it finishes. `--json` prints
//! token ids, text, timings and the KV cache's size (`kv_report`) instead.

mod kv_report;
mod seq2seq;
mod seq2seq_lang;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use serde_json::json;
use vkformers_chat::Message;
use vkformers_generate::config::GenerationDefaults;
use vkformers_generate::detok::Detokenizer;
use vkformers_generate::generation::{generate, GenerateOptions, Generation, Timings};
use vkformers_generate::stop::{Chunk, StopStrings, TextStream};
use vkformers_io::HfTokenizer;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

/// Sampling and length flags shared by `generate` and `chat`; each overrides the model's
/// `generation_config.json`.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// New tokens per prompt at most (default: generation_config.json, else 128).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    pub max_new_tokens: Option<usize>,
    /// Sample instead of decoding greedily.
    #[arg(long, conflicts_with = "greedy")]
    pub do_sample: bool,
    /// Decode greedily even if generation_config.json says `do_sample`.
    #[arg(long)]
    pub greedy: bool,
    /// Divide the logits by this before sampling (default: the model's generation config, else 1).
    #[arg(long, value_parser = crate::ranges::non_negative)]
    pub temperature: Option<f64>,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, value_parser = crate::ranges::count)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches p, in (0, 1].
    #[arg(long, value_parser = crate::ranges::probability)]
    pub top_p: Option<f64>,
    /// Drop tokens less likely than min-p times the most likely one, in [0, 1].
    #[arg(long, value_parser = crate::ranges::unit_closed)]
    pub min_p: Option<f64>,
    /// Above 1 discourages repeating prompt and generated tokens (above 0).
    #[arg(long, value_parser = crate::ranges::positive)]
    pub repetition_penalty: Option<f64>,
    /// Seed of the sampler: the same seed repeats a sampled run exactly.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop a row when its text contains this string (repeatable); the string is cut from the output.
    #[arg(long)]
    pub stop: Vec<String>,
}

#[derive(clap::Args)]
pub struct Args {
    /// Model folder (config.json, model.safetensors, tokenizer files).
    #[arg(long)]
    model: String,
    #[command(flatten)]
    adapter: crate::load::AdapterArgs,
    /// The prompt text.
    #[arg(long, group = "input")]
    prompt: Option<String>,
    /// A file of prompts, one per line (empty lines skipped), generated as one batch.
    #[arg(long, group = "input")]
    prompt_file: Option<PathBuf>,
    /// Prompt token ids, comma-separated (no tokenizer needed).
    #[arg(long, group = "input")]
    prompt_ids: Option<String>,
    /// A JSONL file of token-id prompts, one `{"input_ids": [...]}` per line, generated as one
    /// batch (no tokenizer needed).
    #[arg(long, group = "input")]
    prompt_ids_file: Option<PathBuf>,
    /// Wrap each prompt as a user message in the model's chat template (with the assistant prompt).
    #[arg(long)]
    chat: bool,
    /// A system message for `--chat`.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    beams: seq2seq::BeamArgs,
    #[command(flatten)]
    langs: seq2seq_lang::GenLangArgs,
    /// Print JSON: per row the prompt and new token ids, text and finish reason; prefill and
    /// decode timings of the batch and the device memory peak.
    #[arg(long)]
    json: bool,
    /// Continuous batching: at most this many prompts decode at once; when a row finishes, the
    /// next prompt of the file takes its slot (each row gets the tokens it gets alone).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    max_batch: Option<usize>,
    /// Run the whole generation this many times in this process, each from an empty cache, and
    /// report every run's timings (`--json`: `runs`); rows are printed once, from the last run.
    /// For benchmarks: the first run pays for building pipelines and waking an idle GPU, the
    /// later ones measure what a warm process (a server, a framework after its warm-up) gets.
    #[arg(long, default_value_t = 1, value_parser = crate::ranges::at_least_one)]
    repeat: usize,
    #[command(flatten)]
    dtype: crate::precision::DtypeArgs,
    #[command(flatten)]
    profile: crate::precision::ProfileArgs,
}

/// A model folder from `--model`, with a message saying what is missing.
pub fn model_dir(arg: &str) -> anyhow::Result<PathBuf> {
    let dir = vkformers_hub::resolve_model(arg)?;
    if !dir.is_dir() {
        bail!("model folder `{}` not found: give a folder with config.json and model.safetensors", dir.display());
    }
    if !dir.join("config.json").is_file() {
        bail!("`{}` has no config.json: is it a Hugging Face model folder?", dir.display());
    }
    crate::outdir::check_complete(&dir)?;
    // The generation defaults read these before the model loader (which checks its own).
    for f in ["config.json", "generation_config.json"] {
        vkformers_io::check_json_size(dir.join(f))?;
    }
    Ok(dir)
}

/// The tokenizer of `dir`, or an error saying why `what` needs one.
pub fn tokenizer(dir: &Path, what: &str) -> anyhow::Result<HfTokenizer> {
    HfTokenizer::from_dir(dir).with_context(|| format!("{what} needs the model's tokenizer (tokenizer.json)"))
}

/// Generation options: the folder's defaults, overridden by the flags. `width` is the longest
/// prompt; the new tokens are clipped to the model's context.
pub fn options(
    defaults: &GenerationDefaults,
    args: &SamplingArgs,
    width: usize,
    pad: u32,
) -> anyhow::Result<GenerateOptions> {
    let mut params = defaults.params.clone();
    params.do_sample = (params.do_sample || args.do_sample) && !args.greedy;
    params.temperature = args.temperature.unwrap_or(params.temperature);
    params.top_k = args.top_k.unwrap_or(params.top_k);
    params.top_p = args.top_p.unwrap_or(params.top_p);
    params.min_p = args.min_p.or(params.min_p);
    params.repetition_penalty = args.repetition_penalty.unwrap_or(params.repetition_penalty);
    // transformers skips top_p >= 1 silently; a flag out of range is a mistake worth saying.
    if !(0.0..=1.0).contains(&params.top_p) {
        bail!("--top-p {} is outside [0, 1]", params.top_p);
    }
    params.processors()?; // rejects other bad values now, with the parameter's name
    let from_length = defaults.max_length.map(|l| l.saturating_sub(width)).filter(|&n| n > 0);
    let mut max_new = args.max_new_tokens.or(defaults.max_new_tokens).or(from_length).unwrap_or(128);
    if let Some(context) = defaults.context {
        if width >= context {
            bail!("the prompt has {width} tokens but the model's context is {context} positions: shorten it");
        }
        max_new = max_new.min(context - width);
    }
    Ok(GenerateOptions { params, seed: args.seed, max_new_tokens: max_new, eos: defaults.eos.clone(), pad })
}

/// `messages` rendered by the model's chat template (with the assistant prompt).
pub fn chat_prompt(tok: &HfTokenizer, messages: &[Message]) -> anyhow::Result<String> {
    Ok(vkformers_chat::assistant_prompt(tok, messages)?)
}

/// The ids that end a chat reply: the model's EOS ids, the tokenizer's EOS, and any end-of-turn
/// token the vocabulary has.
pub fn end_ids(defaults: &GenerationDefaults, tok: &HfTokenizer) -> Vec<u32> {
    let mut ids = defaults.eos.clone();
    ids.extend(vkformers_chat::end_of_turn_ids(tok));
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn parse_ids(s: &str) -> anyhow::Result<Vec<u32>> {
    s.split(',')
        .map(|t| t.trim().parse::<u32>().with_context(|| format!("--prompt-ids: `{t}` is not a token id")))
        .collect()
}

/// `{"input_ids": [...]}` rows of a JSONL file; a bad line names its file and line.
fn read_id_prompts(file: &Path) -> anyhow::Result<Vec<Vec<u32>>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    vkformers_generate::prompt_file::id_prompts(&text, file).map_err(anyhow::Error::msg)
}

/// The prompts as token ids, and the tokenizer where one was needed or found.
fn prompts(dir: &Path, args: &Args) -> anyhow::Result<(Vec<Vec<u32>>, Option<HfTokenizer>)> {
    if let Some(ids) = &args.prompt_ids {
        let ids = parse_ids(ids)?;
        return Ok((vec![ids], HfTokenizer::from_dir(dir).ok()));
    }
    if let Some(file) = &args.prompt_ids_file {
        return Ok((read_id_prompts(file)?, HfTokenizer::from_dir(dir).ok()));
    }
    let texts = prompt_texts(args)?;
    let tok = tokenizer(dir, "a text prompt")?;
    let mut out = Vec::new();
    for t in &texts {
        let ids = if args.chat {
            let mut messages: Vec<Message> = args.system.iter().map(|s| Message::system(s.clone())).collect();
            messages.push(Message::user(t.clone()));
            tok.encode(&chat_prompt(&tok, &messages)?, false)?
        } else {
            tok.encode(t, true)?
        };
        if ids.is_empty() {
            bail!("the prompt `{t}` encodes to no tokens");
        }
        out.push(ids);
    }
    Ok((out, Some(tok)))
}

/// The text prompts of `--prompt` or `--prompt-file` (one per non-empty line).
fn prompt_texts(args: &Args) -> anyhow::Result<Vec<String>> {
    Ok(match (&args.prompt, &args.prompt_file) {
        (Some(p), _) => vec![p.clone()],
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
            vkformers_generate::prompt_file::text_prompts(&text, file).map_err(anyhow::Error::msg)?
        }
        (None, None) => bail!("give a prompt: --prompt TEXT, --prompt-file FILE or --prompt-ids 1,2,3"),
    })
}

/// Decoded text of `ids` without special tokens, cut before the first stop string.
pub fn row_text(tok: &HfTokenizer, ids: &[u32], stops: &StopStrings) -> anyhow::Result<String> {
    Ok(stops.trim(&tok.decode(ids, true)?).to_string())
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    let dir = model_dir(&args.model)?;
    if seq2seq::is_seq2seq(&dir)? {
        return seq2seq::run(selector, args, &dir);
    }
    if args.langs.source_lang.is_some() {
        bail!("--source-lang/--target-lang are for encoder-decoder models (mBART, NLLB, M2M-100, ...)");
    }
    let defaults = GenerationDefaults::from_dir(&dir)?;
    if let Some(beams) = seq2seq::decoder_beams(args, &dir)? {
        return seq2seq::run_decoder_beams(selector, args, &dir, &defaults, &beams);
    }
    let (prompts, tok) = prompts(&dir, args)?;
    let stops = StopStrings::new(args.sampling.stop.iter().cloned());
    if !stops.is_empty() && tok.is_none() {
        bail!("--stop needs the model's tokenizer (tokenizer.json) to decode text");
    }
    let pad = defaults.pad.or(tok.as_ref().and_then(|t| t.pad().map(|p| p.id))).or(defaults.eos.first().copied());
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut opts = options(&defaults, &args.sampling, width, pad.unwrap_or(0))?;
    if let (true, Some(tok)) = (args.chat, &tok) {
        opts.eos = end_ids(&defaults, tok);
    }
    let ctx = Context::new(selector)?;
    let g = Graph::new(&ctx);
    let model = crate::load::inference_model(&g, &dir, &args.adapter, args.dtype.resolve(&dir)?)?;
    crate::load::generate_in_weight_type(&g, &model);
    if let Some(bad) = prompts.iter().flatten().find(|&&t| t as usize >= model.spec.vocab) {
        bail!("token id {bad} is outside the model's vocabulary of {} ids", model.spec.vocab);
    }
    if args.profile.profile && args.repeat > 1 {
        bail!("--profile times one run: leave out --repeat");
    }
    args.profile.start(&g);
    let stream = !args.json && prompts.len() == 1 && tok.is_some();
    let mut runs = Vec::with_capacity(args.repeat);
    for run in 1..=args.repeat {
        let last = run == args.repeat;
        let mut printer = Printer {
            detok: tok.as_ref().map(Detokenizer::new),
            stops: &stops,
            eos: &opts.eos,
            max_new: opts.max_new_tokens,
            stream: stream && last,
            print_rows: !args.json && !stream && last,
            texts: (0..prompts.len()).map(|_| TextStream::default()).collect(),
            error: None,
        };
        let (gen, prefill_profile) = generate_once(&g, &model, (&prompts, &opts), args, &mut printer)?;
        if let Some(e) = printer.error.take() {
            return Err(e);
        }
        runs.push((gen, prefill_profile));
    }
    let Some((gen, prefill_profile)) = runs.pop() else { bail!("no run") };
    let earlier: Vec<Timings> = runs.iter().map(|(g, _)| g.timings).collect();
    let new_tokens: usize = gen.rows.iter().map(Vec::len).sum();
    if let Some(p) = prefill_profile {
        let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
        eprintln!("\nprefill (and each row's first token), per prompt token:");
        eprintln!("{}", p.table(prompt_tokens.max(1) as u64, "prompt token"));
        eprintln!("decode steps after it, per new token:");
    }
    let decoded = new_tokens.saturating_sub(if args.profile.profile { prompts.len() } else { 0 });
    args.profile.report(&g, decoded.max(1) as u64, "token")?;
    if args.json {
        let mut r = report(&prompts, &gen, tok.as_ref(), &stops)?;
        r["timings"]["device_memory_peak_bytes"] = ctx.device_memory().peak.into();
        if args.repeat > 1 {
            let all = earlier.iter().chain(std::iter::once(&gen.timings));
            r["runs"] = all.map(timings_json).collect::<Vec<_>>().into();
        }
        r["dtype"] = format!("{:?}", model.weight_dtype()).to_lowercase().into();
        r["kv_cache"] = kv_report::kv_cache_report(&g, &model, &prompts, &gen)?;
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if stream {
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

/// One generation of `prompts`, printing through `printer`; with `--profile`, also the table
/// of the prefill's kernels (up to every row's first token), so that the decode table shows
/// the decode steps alone.
fn generate_once(
    g: &Graph<'_>,
    model: &vkformers_models::model::Model,
    (prompts, opts): (&[Vec<u32>], &GenerateOptions),
    args: &Args,
    printer: &mut Printer<'_>,
) -> anyhow::Result<(Generation, Option<vkformers_tensor::Profile>)> {
    let mut first_token = vec![false; prompts.len()];
    let mut prefill_profile = None;
    let mut on_token = |row: usize, ids: &[u32]| {
        let first =
            args.profile.profile && prefill_profile.is_none() && !std::mem::replace(&mut first_token[row], true);
        if first && first_token.iter().all(|&seen| seen) {
            prefill_profile = Some(g.take_profile());
        }
        printer.on_token(row, ids)
    };
    let gen = match args.max_batch {
        Some(0) => bail!("--max-batch must be at least 1"),
        Some(n) => vkformers_generate::continuous::generate_continuous(g, model, prompts, opts, n, &mut on_token)?,
        None => generate(g, model, prompts, opts, &mut on_token)?,
    };
    Ok((gen, prefill_profile.transpose()?.flatten()))
}

/// Streams or prints rows as tokens arrive, and spots stop strings.
struct Printer<'a> {
    detok: Option<Detokenizer<'a>>,
    stops: &'a StopStrings,
    eos: &'a [u32],
    max_new: usize,
    stream: bool,
    print_rows: bool,
    /// Per row: its text so far (new ids decoded a few at a time, stops searched in the new text).
    texts: Vec<TextStream>,
    error: Option<anyhow::Error>,
}

impl Printer<'_> {
    /// Returns true when the row's text now contains a stop string.
    fn on_token(&mut self, row: usize, ids: &[u32]) -> bool {
        match self.step(row, ids) {
            Ok(stop) => stop,
            Err(e) => {
                self.error.get_or_insert(e);
                true
            }
        }
    }

    fn step(&mut self, row: usize, ids: &[u32]) -> anyhow::Result<bool> {
        let Some(detok) = &self.detok else { return Ok(false) };
        // Without streaming or stop strings the text is needed only once the row is done.
        let chunk = match self.texts.get_mut(row) {
            Some(text) if self.stream || !self.stops.is_empty() => text.push(detok, ids, self.stops)?,
            _ => Chunk::default(),
        };
        let done = chunk.stop || ids.last().is_some_and(|t| self.eos.contains(t)) || ids.len() == self.max_new;
        if self.stream {
            let mut out = std::io::stdout().lock();
            write!(out, "{}", chunk.text)?;
            if let (true, Some(text)) = (done, self.texts.get_mut(row)) {
                write!(out, "{}", text.finish(&detok.decode(ids)?, self.stops))?;
            }
            out.flush()?;
        } else if self.print_rows && done {
            println!("[{row}] {}", self.stops.trim(&detok.decode(ids)?));
        }
        Ok(chunk.stop)
    }
}

/// The `--json` report.
/// A run's prefill and decode tokens, seconds and rates.
fn timings_json(t: &Timings) -> serde_json::Value {
    json!({
        "prefill_tokens": t.prefill_tokens,
        "prefill_seconds": t.prefill_secs,
        "prefill_tokens_per_second": t.prefill_tokens_per_sec(),
        "decode_tokens": t.decode_tokens,
        "decode_seconds": t.decode_secs,
        "decode_tokens_per_second": t.decode_tokens_per_sec(),
        "decode_replayed_steps": t.replayed_steps,
    })
}

fn report(
    prompts: &[Vec<u32>],
    gen: &Generation,
    tok: Option<&HfTokenizer>,
    stops: &StopStrings,
) -> anyhow::Result<serde_json::Value> {
    let mut rows = Vec::new();
    for (i, (prompt, ids)) in prompts.iter().zip(&gen.rows).enumerate() {
        let text = tok.map(|t| row_text(t, ids, stops)).transpose()?;
        rows.push(json!({
            "prompt_ids": prompt,
            "token_ids": ids,
            "text": text,
            "finish_reason": gen.finish[i].name(),
        }));
    }
    Ok(json!({
        "rows": rows,
        "timings": timings_json(&gen.timings),
        "per_row": gen.per_row.iter().map(|r| json!({
            "prefill_tokens": r.prefill_tokens,
            "prefill_tokens_per_second": r.prefill_tokens_per_sec(),
            "decode_tokens": r.decode_tokens,
            "decode_tokens_per_second": r.decode_tokens_per_sec(),
        })).collect::<Vec<_>>(),
    }))
}
