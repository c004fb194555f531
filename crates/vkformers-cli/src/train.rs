//! `vkformers train`: full-parameter training of a Hugging Face model folder, or pre-training
//! from a `config.json`, with the options of the HF Trainer; writes checkpoints, metrics and a
//! final Hugging Face folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use vkformers_data::{Dataset, Example};
use vkformers_io::HfTokenizer;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::metrics::MetricsLog;
use vkformers_train::{
    full_model_params, sequences, steps_for_epochs, Loader, Observer, OptimOptions, Schedule, ScheduleKind, StepStats,
    TrainOptions, TrainableParam, Trainer,
};
use vkformers_vk::{Context, DeviceSelector};

use crate::dist::Dist;

/// AdamW's peak learning rate when `--lr` is not given (the HF Trainer's).
const DEFAULT_LR: f64 = 5e-5;

/// The options, boxed so the command enum stays small.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: SourceArgs,
    #[command(flatten)]
    opts: Box<TrainArgs>,
    /// Print a JSON summary (steps, final loss, tokens, tokens/s, device memory peak).
    #[arg(long)]
    json: bool,
    /// Under mpirun: 1 shards AdamW's state over the ranks (ZeRO stage 1, by parameter); 0 keeps
    /// a full copy on every rank.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    zero: u8,
}

/// Where `train`'s model comes from (`finetune` takes only `--model`, so these stay out of its
/// `--help`).
#[derive(clap::Args)]
pub struct SourceArgs {
    /// Model folder (or Hub id) to train.
    #[arg(long, conflicts_with = "init_from_config", required_unless_present = "init_from_config")]
    model: Option<String>,
    /// Pre-train from scratch: a config.json, parameters drawn as the model's `_init_weights`.
    #[arg(long)]
    init_from_config: Option<PathBuf>,
    /// Tokenizer folder for --init-from-config (tokenizer.json, tokenizer_config.json).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// With --init-from-config: train a byte-level BPE tokenizer of this many tokens on the
    /// data first (written to OUT; the config's vocab_size follows it).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    train_tokenizer: Option<usize>,
}

/// The options `train` and `finetune` share.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// Training data: a JSONL file or folder (or Hub dataset id).
    #[arg(long)]
    data: String,
    #[command(flatten)]
    hub_data: crate::data_args::HubDataArgs,
    #[command(flatten)]
    langs: crate::seq2seq_data::LangArgs,
    /// Output folder: checkpoints, metrics.jsonl, and the final model. It must be new, empty,
    /// or the output of an earlier vkformers run (to continue or redo it).
    #[arg(long)]
    pub(crate) out: PathBuf,
    /// Write into --out even when it holds other files or is the --model folder.
    #[arg(long)]
    pub(crate) overwrite_output_dir: bool,
    /// Passes over the data (ignored when --max-steps is given).
    #[arg(long, default_value_t = 1, value_parser = crate::ranges::at_least_one_u64)]
    epochs: u64,
    /// Optimizer steps in all.
    #[arg(long, value_parser = crate::ranges::at_least_one_u64)]
    max_steps: Option<u64>,
    /// Sequences per micro-batch.
    #[arg(long, default_value_t = 8, value_parser = crate::ranges::at_least_one)]
    batch_size: usize,
    /// Micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, value_parser = crate::ranges::at_least_one)]
    grad_accum: usize,
    /// Tokens per sequence (default: the model's max_position_embeddings, at most 1024).
    #[arg(long, value_parser = crate::ranges::at_least_one)]
    seq_len: Option<usize>,
    /// Concatenate examples and cut seq-len blocks (default: on for plain text).
    #[arg(long, overrides_with = "no_packing")]
    packing: bool,
    /// Keep each example its own sequence (padded), even for plain text.
    #[arg(long)]
    no_packing: bool,
    /// Train on the prompt part of instruction/Q&A/chat rows too.
    #[arg(long)]
    train_on_prompt: bool,
    #[command(flatten)]
    pub(crate) eos: EosArgs,
    /// Encoders: train for this task; a folder with another head gets a new one, drawn as
    /// transformers draws a head it does not find.
    #[arg(long, value_enum)]
    pub(crate) task: Option<crate::encoder_task::Task>,
    /// With --task: the number of classes (default: the config's id2label, else 2).
    #[arg(long, value_parser = crate::ranges::at_least_one, requires = "task")]
    pub(crate) num_labels: Option<usize>,
    /// Masked-LM training: the chance that a token becomes a target (80% replaced by the mask
    /// token, 10% by a random token, 10% kept; seeded). Default 0.15 on text rows; rows with
    /// `input_ids` + `labels` are used as given (-100 = not a target).
    #[arg(long, value_parser = crate::ranges::unit_open)]
    pub(crate) mlm_probability: Option<f64>,
    /// Peak learning rate of AdamW [default: 5e-5]; with --resume, replaces the checkpoint's.
    #[arg(long, value_parser = crate::ranges::non_negative, allow_hyphen_values = true)]
    lr: Option<f64>,
    /// Learning-rate schedule after the warm-up: constant, linear or cosine (decaying to --min-lr).
    #[arg(long, default_value = "linear")]
    schedule: ScheduleKind,
    /// Steps of linear warm-up from 0 to --lr.
    #[arg(long, default_value_t = 0)]
    warmup_steps: u64,
    /// The learning rate the linear and cosine schedules end at.
    #[arg(long, default_value_t = 0.0, value_parser = crate::ranges::non_negative, allow_hyphen_values = true)]
    min_lr: f64,
    /// AdamW weight decay (not on biases and norm weights).
    #[arg(long, default_value_t = 0.0, value_parser = crate::ranges::non_negative, allow_hyphen_values = true)]
    weight_decay: f64,
    /// AdamW's beta1, beta2 and epsilon.
    #[arg(long, default_value_t = 0.9, value_parser = crate::ranges::unit_open)]
    beta1: f64,
    /// AdamW's beta2: decay of the squared-gradient average, in [0, 1).
    #[arg(long, default_value_t = 0.999, value_parser = crate::ranges::unit_open)]
    beta2: f64,
    /// AdamW's epsilon, above 0.
    #[arg(long, default_value_t = 1e-8, value_parser = crate::ranges::positive, allow_hyphen_values = true)]
    eps: f64,
    /// Clip the global gradient norm (0 disables).
    #[arg(long, default_value_t = 1.0, value_parser = crate::ranges::non_negative_f32)]
    max_grad_norm: f32,
    /// Seed of the shuffling, dropout and initialisation.
    #[arg(long, default_value_t = 42)]
    pub(crate) seed: u64,
    /// Shuffle the data each epoch (default on).
    #[arg(long, overrides_with = "no_shuffle")]
    shuffle: bool,
    /// Keep the data in file order.
    #[arg(long)]
    no_shuffle: bool,
    /// Evaluation data (JSONL file or folder).
    #[arg(long, conflicts_with = "eval_split")]
    eval_data: Option<String>,
    /// Hold out this fraction of the training rows for evaluation.
    #[arg(long, value_parser = crate::ranges::unit_open)]
    eval_split: Option<f64>,
    /// Evaluate every this many steps (and at the end).
    #[arg(long, default_value_t = 0)]
    eval_every: u64,
    /// Write a checkpoint every this many steps (0: none).
    #[arg(long, default_value_t = 0)]
    pub(crate) save_every: u64,
    /// Keep only the newest N checkpoints (0: all).
    #[arg(long, default_value_t = 0)]
    keep_checkpoints: usize,
    /// Continue from a checkpoint folder, or the newest complete checkpoint of an output folder.
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) precision: crate::precision::PrecisionArgs,
    /// The type of the saved weights: float32, bfloat16 or float16 (default: the input model's
    /// `dtype`/`torch_dtype`, f32 when it names none).
    #[arg(long)]
    pub(crate) save_dtype: Option<String>,
    /// Recompute each decoder layer in backward instead of keeping its activations (the HF
    /// Trainer's `gradient_checkpointing`): less device memory for about one more forward.
    #[arg(long)]
    pub(crate) gradient_checkpointing: bool,
    /// fp16: the loss scale to start from (torch.amp.GradScaler's init_scale).
    #[arg(long, default_value_t = 65536.0, requires = "fp16")]
    pub(crate) loss_scale: f32,
    #[command(flatten)]
    pub(crate) profile: crate::precision::ProfileArgs,
}

/// `--add-eos` / `--no-add-eos`, shared by train, finetune and eval (`ReadOptions::add_eos`).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct EosArgs {
    /// Append the tokenizer's EOS token to every text, prompt/completion, instruction and Q&A
    /// row (chat rows end as their template ends them; token-id rows are used as they are).
    /// Default: on for train and finetune (the model learns to stop), off for eval (as
    /// transformers' `model(input_ids, labels=input_ids)` loss).
    #[arg(long, overrides_with = "no_add_eos")]
    add_eos: bool,
    /// Do not append EOS to the rows.
    #[arg(long)]
    no_add_eos: bool,
}

impl EosArgs {
    /// Whether to append EOS, given the command's default.
    pub fn resolve(&self, default: bool) -> bool {
        if self.add_eos {
            true
        } else if self.no_add_eos {
            false
        } else {
            default
        }
    }
}

/// The model, where its tokenizer files come from, and its tokenizer.
struct Loaded {
    model: Model,
    /// The type the saved folders store weights in.
    save_dtype: vkformers_tensor::DType,
    files_from: Option<PathBuf>,
    tokenizer: Option<HfTokenizer>,
}

/// The model of `--model` (resolved to `model_dir` by the caller), else one drawn from
/// `--init-from-config`.
/// `dist`: under mpirun, rank 0 alone trains a `--train-tokenizer` into OUT, which the other
/// ranks then read (so every rank tokenizes the data with the same vocabulary).
fn load_model(
    g: &Graph<'_>,
    model_dir: Option<&Path>,
    src: &SourceArgs,
    args: &TrainArgs,
    dist: Option<&Dist>,
) -> anyhow::Result<Loaded> {
    if let Some(dir) = model_dir {
        let dir = dir.to_path_buf();
        crate::outdir::check_complete(&dir)?;
        let model = match args.task {
            Some(task) => crate::encoder_task::load_for_task(g, &dir, task, args.num_labels, args.seed, &|_| true)?,
            None => Model::load(g, &dir).with_context(|| format!("loading {}", dir.display()))?,
        };
        let tokenizer = dir.join("tokenizer.json").exists().then(|| HfTokenizer::from_dir(&dir)).transpose()?;
        let save_dtype = save_dtype(args, &model)?;
        return Ok(Loaded { model, save_dtype, files_from: Some(dir), tokenizer });
    }
    let cfg_path = src.init_from_config.as_ref().context("--model or --init-from-config is required")?;
    if args.task.is_some() {
        bail!("--task applies to --model; with --init-from-config, name the head in the config's `architectures`");
    }
    let mut config = vkformers_io::read_json(cfg_path)?;
    let tok_dir = match (&src.tokenizer, src.train_tokenizer) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(vocab)) => {
            let dir = args.out.join("tokenizer");
            if dist.is_none_or(|d| d.rank() == 0) {
                let files = data_files(&args.data, &args.hub_data.query())?;
                eprintln!("training a BPE tokenizer of {vocab} tokens on {} file(s)", files.len());
                train_tokenizer_on_text(&files, vocab, &dir)?;
            }
            if let Some(d) = dist {
                d.barrier()?;
            }
            Some(dir)
        }
        (None, None) => None,
    };
    let tokenizer = tok_dir.as_ref().map(HfTokenizer::from_dir).transpose()?;
    if let Some(t) = &tokenizer {
        // The embedding must cover the tokenizer; special ids follow it too. An image-text
        // wrapper's text model reads its own `text_config`, so both get them.
        let wrapper = config.get("text_config").is_some_and(serde_json::Value::is_object);
        let mut set = |key: &str, v: serde_json::Value| {
            if wrapper {
                config["text_config"][key] = v.clone();
            }
            config[key] = v;
        };
        set("vocab_size", t.vocab_size().into());
        for (key, tok) in [("pad_token_id", t.pad()), ("bos_token_id", t.bos()), ("eos_token_id", t.eos())] {
            if let Some(s) = tok {
                set(key, s.id.into());
            }
        }
    }
    let model = vkformers_models::init::init_from_config(g, config, args.seed)?;
    let save_dtype = save_dtype(args, &model)?;
    Ok(Loaded { model, save_dtype, files_from: tok_dir, tokenizer })
}

/// `--save-dtype`, else the input model's stored type (as `save_pretrained` keeps it).
/// Under mpirun, each rank's share of the optimizer state (`--zero 1`: about 1/N of it). The
/// barrier keeps every rank alive until all have printed: the launcher may drop the last
/// output of a rank that exits at once.
fn report_rank_state(dist: Option<&Dist>, trainer: &Trainer<'_, '_>) -> anyhow::Result<()> {
    if let Some(d) = dist {
        // One write: the launcher interleaves the ranks' output by write, not by line.
        let line = format!("rank {}: optimizer state {} bytes\n", d.rank(), trainer.optimizer_state_bytes());
        eprint!("{line}");
        d.barrier()?;
    }
    Ok(())
}

fn save_dtype(args: &TrainArgs, model: &Model) -> anyhow::Result<vkformers_tensor::DType> {
    match &args.save_dtype {
        Some(s) => crate::precision::parse_dtype(s)?.context("--save-dtype takes float32, bfloat16 or float16"),
        None => Ok(model.stored_dtype()),
    }
}

fn data_files(arg: &str, query: &vkformers_hub::DatasetQuery) -> anyhow::Result<Vec<PathBuf>> {
    Ok(vkformers_hub::resolve_dataset(arg, query)?)
}

/// Reads a dataset with `vkformers-data` (every row shape of the design); `query` picks the
/// files of a Hub dataset. A model folder without a tokenizer can still train and evaluate on
/// pre-tokenized rows.
pub fn read_data_from(
    arg: &str,
    query: &vkformers_hub::DatasetQuery,
    tok: Option<&HfTokenizer>,
    opts: &vkformers_data::ReadOptions,
) -> anyhow::Result<Dataset> {
    let files = data_files(arg, query)?;
    let ds = match tok {
        Some(tok) => vkformers_data::read_dataset(&files, tok, opts)?,
        None => vkformers_train::pretokenized::read_pretokenized_dataset(&files)?,
    };
    if ds.examples.is_empty() {
        bail!("{arg}: no rows");
    }
    Ok(ds)
}

/// Cuts the rows of `data` to `seq_len` tokens, printing how many were cut and naming the rows
/// left with nothing to predict (removed when `drop_untrained`).
pub(crate) fn truncate_rows(data: &mut Dataset, seq_len: usize, drop_untrained: bool, what: &str) {
    for line in data.truncate(seq_len, drop_untrained).warnings(what) {
        eprintln!("{line}");
    }
}

/// Trains a BPE tokenizer on the text of the data: the `text`/`content` of JSON-lines rows (the
/// trainer reads lines, so each row's text goes to a temporary file first), other files as
/// they are.
fn train_tokenizer_on_text(files: &[PathBuf], vocab: usize, dir: &Path) -> anyhow::Result<()> {
    let mut texts = tempfile::NamedTempFile::new()?;
    let mut plain = Vec::new();
    for f in files {
        let is_jsonl = f.extension().is_some_and(|e| e == "jsonl");
        if !is_jsonl {
            plain.push(f.clone());
            continue;
        }
        let body = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let row: serde_json::Value = serde_json::from_str(line).with_context(|| format!("{}", f.display()))?;
            if let Some(t) = row.get("text").or_else(|| row.get("content")).and_then(|t| t.as_str()) {
                std::io::Write::write_all(&mut texts, t.as_bytes())?;
                std::io::Write::write_all(&mut texts, b"\n")?;
            }
        }
    }
    plain.push(texts.path().to_path_buf());
    vkformers_data::train_bpe_tokenizer(&plain, vocab, dir)?;
    Ok(())
}

/// Checks that every token id fits the model's vocabulary (an id past it would read outside
/// the embedding table).
pub fn check_vocab(examples: &[Example], vocab: usize, what: &str) -> anyhow::Result<()> {
    for (i, e) in examples.iter().enumerate() {
        if let Some(&bad) = e.input_ids.iter().find(|&&t| t as usize >= vocab) {
            bail!("{what} row {}: token id {bad} is outside the model's vocabulary of {vocab}", i + 1);
        }
        // A label is a token id to predict or -100 (ignored); anything else would be dropped by
        // the loss yet counted as a target.
        let mut labels = e.labels.iter().chain(&e.decoder_labels);
        if let Some(&bad) = labels.find(|&&l| l != -100 && (l < 0 || l as usize >= vocab)) {
            bail!("{what} row {}: label {bad} is neither -100 nor a token id below the vocabulary of {vocab}", i + 1);
        }
    }
    Ok(())
}

/// A deterministic split: every row whose seeded draw falls below `fraction` is held out.
fn split_eval(examples: Vec<Example>, fraction: f64, seed: u64) -> anyhow::Result<(Vec<Example>, Vec<Example>)> {
    if !(0.0..1.0).contains(&fraction) {
        bail!("--eval-split must lie in [0, 1), got {fraction}");
    }
    let n = examples.len();
    let held = ((n as f64 * fraction).round() as usize).clamp(1, n.saturating_sub(1).max(1));
    let order = vkformers_train::rng::epoch_order(n, seed ^ 0xE5A1, 0, true);
    let mut is_eval = vec![false; n];
    for &i in &order[..held] {
        is_eval[i] = true;
    }
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (e, held_out) in examples.into_iter().zip(is_eval) {
        if held_out {
            eval.push(e)
        } else {
            train.push(e)
        }
    }
    Ok((train, eval))
}

fn default_seq_len(model: &Model) -> usize {
    let offset = crate::encoder_task::position_offset(model);
    max_positions(model).map_or(1024, |m| m.saturating_sub(offset).clamp(2, 1024))
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    // Under mpirun (feature `mpi`): one rank of a data-parallel run; an error on any rank
    // ends them all (`Dist::fail`).
    let mut dist = crate::dist::Dist::start()?;
    let result = run_rank(selector, args, dist.as_mut());
    match (&dist, result) {
        (Some(d), Err(e)) => d.fail(&e),
        (_, result) => result,
    }
}

fn run_rank(selector: &DeviceSelector, args: &Args, dist: Option<&mut Dist>) -> anyhow::Result<ExitCode> {
    let model_dir = args.source.model.as_deref().map(vkformers_hub::resolve_model).transpose()?;
    let out = crate::outdir::OutDir::check(&args.opts.out, model_dir.as_deref(), args.opts.overwrite_output_dir)?;
    // Rank 0 alone writes the output folder, once every rank has checked it as it was.
    let lead = dist.as_ref().is_none_or(|d| d.rank() == 0);
    if let Some(d) = &dist {
        d.barrier()?;
    }
    let result = train(selector, args, model_dir.as_deref(), &out, dist);
    if result.is_err() && lead {
        out.clean_after_failure();
    }
    result
}

fn train(
    selector: &DeviceSelector,
    cli: &Args,
    model_dir: Option<&Path>,
    out: &crate::outdir::OutDir,
    mut dist: Option<&mut Dist>,
) -> anyhow::Result<ExitCode> {
    let args = &*cli.opts;
    let selector = match &dist {
        Some(d) => d.device(selector)?,
        None => selector.clone(),
    };
    let ctx = Context::new(&selector)?;
    let g = Graph::new(&ctx);
    let loaded = load_model(&g, model_dir, &cli.source, args, dist.as_deref())?;
    let model = &loaded.model;
    let params = full_model_params(model);
    if let Some(d) = &dist {
        d.same_start(&g, &params)?;
    }
    let n_params = params.iter().map(|p| p.tensor.numel()).sum::<usize>();
    let (mut trainer, max_steps, plan) = build_trainer(&g, args, model, loaded.tokenizer.as_ref(), params)?;
    let lead = dist.as_ref().is_none_or(|d| d.rank() == 0);
    match dist.as_mut() {
        Some(d) => {
            if cli.zero == 1 && trainer.precision() == vkformers_train::Precision::Fp16 {
                bail!("--zero 1 does not support fp16's loss scaling (each rank would skip steps on its own)");
            }
            trainer.set_data_parallel(d.hooks(cli.zero == 1)?);
        }
        None if cli.zero == 1 => {
            bail!("--zero 1 shards the optimizer over the ranks of an mpirun job: run under mpirun")
        }
        None => {}
    }
    if let Some(r) = &args.resume {
        let cp = trainer.resume(r)?;
        if lead {
            eprintln!("resumed from {} at step {}", cp.display(), trainer.steps_done());
        }
    }
    if !lead {
        trainer.run(model, &mut vkformers_train::Silent)?;
        report_rank_state(dist.as_deref(), &trainer)?;
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("training {} ({n_params} parameters) on {}: {plan}", model.spec.model_type, ctx.caps().name);
    out.create()?;
    let metrics = MetricsLog::open(&args.out.join("metrics.jsonl"), trainer.steps_done())?;
    let mut progress = Progress::new(&g, &loaded, metrics, trainer.steps_done(), max_steps);
    let first = trainer.steps_done();
    args.profile.start(&g);
    trainer.run(model, &mut progress)?;
    progress.finish();
    args.profile.report(&g, trainer.steps_done() - first, "step")?;
    print_summary(trainer.log());
    if let Some(line) = trainer.data_parallel().report() {
        eprintln!("{line}");
    }
    report_rank_state(dist.as_deref(), &trainer)?;
    out.publish(|dir| save_model_folder(&g, &loaded, dir))?;
    let peak = ctx.device_memory().peak;
    if cli.json {
        let v = serde_json::json!({
            "out": args.out, "steps": trainer.steps_done(), "final_loss": trainer.log().last().map(|r| r.loss),
            "tokens": progress.tokens, "tokens_per_s": progress.tokens as f64 / progress.seconds.max(1e-9),
            "parameters": n_params, "peak_device_bytes": peak,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    eprintln!("saved the model to {} (peak device memory {:.1} MiB)", args.out.display(), peak as f64 / 1048576.0);
    Ok(ExitCode::SUCCESS)
}

/// The trainer over `params` with the data, schedule and optimizer options of `args`
/// (shared by `train` and `finetune`), its total number of steps, and the plan of the run in
/// words (sequences, steps, precision) for the caller's one header line.
pub(crate) fn build_trainer<'g, 'c>(
    g: &'g Graph<'c>,
    args: &TrainArgs,
    model: &Model,
    tokenizer: Option<&HfTokenizer>,
    params: Vec<TrainableParam>,
) -> anyhow::Result<(Trainer<'g, 'c>, u64, String)> {
    g.set_checkpointing(args.gradient_checkpointing);
    if let Some(n) = args.seq_len {
        check_seq_len(model, n)?;
    }
    let seq_len = args.seq_len.unwrap_or_else(|| default_seq_len(model));
    // Encoder and encoder-decoder rows are sentences: the tokenizer's post-processor ends them
    // (T5's `</s>`), nothing packs.
    let seq2seq = crate::seq2seq_data::is_seq2seq(model);
    crate::seq2seq_data::check_langs(model, &args.langs)?;
    let encoder = crate::encoder_task::is_encoder(model) || seq2seq;
    let add_eos = args.eos.resolve(!encoder);
    let read = vkformers_data::ReadOptions {
        train_on_prompt: args.train_on_prompt,
        add_eos,
        label2id: crate::encoder_task::label2id(model),
        ..Default::default()
    };
    let read_rows = |arg: &str, query: &vkformers_hub::DatasetQuery| match seq2seq {
        true => crate::seq2seq_data::read(arg, query, tokenizer, &args.langs, add_eos),
        false => read_data_from(arg, query, tokenizer, &read),
    };
    let mut data = read_rows(&args.data, &args.hub_data.query())?;
    let packing = if args.packing {
        true
    } else if args.no_packing {
        false
    } else {
        data.plain_text && !encoder
    };
    let masking = crate::encoder_task::mlm_masking(model, tokenizer, args.mlm_probability, data.plain_text, args.seed)?;
    if !packing {
        truncate_rows(&mut data, seq_len, true, "training data");
    }
    let (train_rows, eval_rows) = match (&args.eval_data, args.eval_split) {
        (Some(e), _) => {
            let mut eval = read_rows(e, &args.hub_data.eval_query())?;
            truncate_rows(&mut eval, seq_len, true, "evaluation data");
            (data.examples, Some(eval.examples))
        }
        (None, Some(f)) => {
            let (t, e) = split_eval(data.examples, f, args.seed)?;
            (t, Some(e))
        }
        (None, None) => (data.examples, None),
    };
    check_vocab(&train_rows, model.spec.vocab, "training data")?;
    let pad = model.config["pad_token_id"].as_u64().unwrap_or(0) as u32;
    let shuffle = !args.no_shuffle;
    let seqs = sequences(&train_rows, seq_len, packing)?;
    // Packed blocks holding only masked tokens (inside a long prompt) would make a batch with
    // nothing to predict.
    let (seqs, empty) = vkformers_train::batching::drop_untrained(seqs);
    if empty > 0 {
        eprintln!("warning: {empty} packed block(s) of {seq_len} tokens have no token to predict: skipped");
    }
    let mut loader = Loader::new(seqs, args.batch_size, shuffle, args.seed, pad)?;
    if let Some(m) = &masking {
        loader.set_mlm_masking(m.clone());
    }
    let max_steps = args.max_steps.unwrap_or_else(|| steps_for_epochs(&loader, args.grad_accum, args.epochs));
    if max_steps == 0 {
        // An untrained copy saved as "the final model" would look like a result.
        bail!("the data gives 0 optimizer steps: give --max-steps, more --epochs or more data");
    }
    let opts = TrainOptions {
        grad_accum: args.grad_accum,
        schedule: Schedule::new(
            args.schedule,
            args.lr.unwrap_or(DEFAULT_LR),
            args.min_lr,
            args.warmup_steps,
            max_steps,
        )?,
        optim: OptimOptions {
            beta1: args.beta1,
            beta2: args.beta2,
            eps: args.eps,
            weight_decay: args.weight_decay,
            max_grad_norm: args.max_grad_norm,
        },
        max_steps,
        save_every: args.save_every,
        keep_checkpoints: args.keep_checkpoints,
        eval_every: args.eval_every,
        eval_batch_size: args.batch_size,
        out_dir: args.out.clone(),
        seed: args.seed,
        shuffle,
    };
    let precision = args.precision.precision(g);
    let plan = format!(
        "{} of <= {seq_len} tokens{}{}{}, {}, {}",
        crate::precision::plural(loader.len() as u64, "sequence"),
        if packing { " (packed)" } else { "" },
        masking.as_ref().map_or(String::new(), |m| format!(", {} of the tokens masked", m.probability)),
        if tokenizer.is_none() {
            ""
        } else if seq2seq {
            ", source/target pairs"
        } else if add_eos {
            ", EOS appended"
        } else {
            ", no EOS appended"
        },
        crate::precision::plural(max_steps, "step"),
        precision.name(),
    );
    let mut trainer = Trainer::new(g, params, loader, opts)?;
    trainer.set_lr_override(args.lr);
    trainer.set_precision(precision, Some(vkformers_train::GradScaler::with_scale(args.loss_scale)));
    if let Some(e) = eval_rows {
        check_vocab(&e, model.spec.vocab, "evaluation data")?;
        let e = crate::encoder_task::mask_eval_rows(masking.as_ref(), sequences(&e, seq_len, false)?);
        trainer.set_eval_data(e, pad);
    }
    Ok((trainer, max_steps, plan))
}

/// `--seq-len` past the positions the model was trained for: a learned position table has no
/// rows there (refused); rotary, ALiBi and other computed positions extrapolate, badly, so
/// they get transformers' warning.
pub(crate) fn check_seq_len(model: &Model, seq_len: usize) -> anyhow::Result<()> {
    let Some((key, max)) = position_limit(model) else { return Ok(()) };
    if seq_len <= max {
        return Ok(());
    }
    if model.spec.position_embedding.is_some() {
        bail!(
            "--seq-len {seq_len} is longer than the {max} positions of {}'s learned position embeddings \
             ({key} in config.json): use --seq-len {max} or less",
            model.spec.model_type
        );
    }
    eprintln!(
        "warning: --seq-len {seq_len} is longer than the model's {key} ({max}); \
         results past that length may be poor"
    );
    Ok(())
}

/// The context the config declares (`max_position_embeddings`, or GPT-2's `n_positions`).
fn max_positions(model: &Model) -> Option<usize> {
    position_limit(model).map(|(_, m)| m)
}

/// [`max_positions`] with the config key it came from, for messages.
fn position_limit(model: &Model) -> Option<(&'static str, usize)> {
    ["max_position_embeddings", "n_positions"].into_iter().find_map(|k| Some((k, model.config[k].as_u64()? as usize)))
}

/// The first and last loss of the run (and the last evaluation).
pub(crate) fn print_summary(log: &[vkformers_train::checkpoint::StepRecord]) {
    if let (Some(first), Some(last)) = (log.first(), log.last()) {
        let eval = log.iter().rev().find_map(|r| r.eval_loss).map_or(String::new(), |e| format!(", eval loss {e:.4}"));
        eprintln!("loss {:.4} (step {}) -> {:.4} (step {}){eval}", first.loss, first.step, last.loss, last.step);
    }
}

/// Writes the Hugging Face folder (weights, config, tokenizer files, generation config).
fn save_model_folder(g: &Graph<'_>, loaded: &Loaded, dir: &Path) -> anyhow::Result<()> {
    let shard = vkformers_io::DEFAULT_MAX_SHARD_BYTES;
    loaded.model.save_as(g, dir, loaded.files_from.as_deref(), shard, loaded.save_dtype)?;
    vkformers_models::init::ensure_generation_config(dir, &loaded.model.config)?;
    Ok(())
}

/// The CLI's hooks on the loop: a progress bar (plain lines when stderr is not a terminal),
/// `metrics.jsonl`, and a loadable model folder in every checkpoint.
struct Progress<'a, 'g, 'c> {
    g: &'g Graph<'c>,
    loaded: &'a Loaded,
    metrics: MetricsLog,
    bar: Option<indicatif::ProgressBar>,
    max_steps: u64,
    /// Tokens and seconds of the steps run (for `--json`'s tokens/s).
    tokens: u64,
    seconds: f64,
}

impl<'a, 'g, 'c> Progress<'a, 'g, 'c> {
    fn new(g: &'g Graph<'c>, loaded: &'a Loaded, metrics: MetricsLog, done: u64, max_steps: u64) -> Self {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(max_steps).with_position(done);
            let style =
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        Progress { g, loaded, metrics, bar, max_steps, tokens: 0, seconds: 0.0 }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish();
        }
    }
}

impl Observer for Progress<'_, '_, '_> {
    fn on_step(&mut self, s: &StepStats) -> vkformers_train::Result<()> {
        self.metrics.write(s)?;
        self.tokens += s.tokens as u64;
        self.seconds += s.seconds;
        let line = step_line(s, self.max_steps);
        match &self.bar {
            Some(b) => {
                b.set_position(s.record.step);
                b.set_message(line.split_once(' ').map_or(line.clone(), |(_, rest)| rest.to_string()));
                // Every tenth of the run stays on screen, so the falling loss can be read back.
                if s.record.eval_loss.is_some() || s.record.step.is_multiple_of(self.max_steps.div_ceil(10).max(1)) {
                    b.println(&line);
                }
            }
            None => eprintln!("{line}"),
        }
        Ok(())
    }

    fn save_extra(&mut self, dir: &Path) -> vkformers_train::Result<()> {
        save_model_folder(self.g, self.loaded, dir)
            .map_err(|e| vkformers_train::TrainError::Config(format!("saving the model into {}: {e:#}", dir.display())))
    }

    fn on_checkpoint(&mut self, dir: &Path) -> vkformers_train::Result<()> {
        let msg = format!("saved {}", dir.display());
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
        Ok(())
    }
}

/// One step as a log line.
pub fn step_line(s: &StepStats, max_steps: u64) -> String {
    let r = &s.record;
    let mut line = format!(
        "step {}/{max_steps} loss {:.4} lr {:.3e} grad_norm {} tokens/s {:.0}",
        r.step,
        r.loss,
        r.lr,
        r.grad_norm.map_or("-".into(), |n| format!("{n:.4}")),
        s.tokens as f64 / s.seconds.max(1e-9)
    );
    if let Some(e) = r.eval_loss {
        line += &format!(" eval_loss {e:.4}");
    }
    line
}
