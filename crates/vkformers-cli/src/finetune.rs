//! `vkformers finetune`: LoRA fine-tuning with every option of `vkformers train`, writing a
//! PEFT adapter (`adapter_config.json` + `adapter_model.safetensors`) that
//! `PeftModel.from_pretrained` loads. The base weights stay frozen on the device (graph
//! constants: no gradient, no optimizer state) and are never written.

use std::cell::Cell;
use std::path::Path;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::Context as _;
use vkformers_io::HfTokenizer;
use vkformers_models::encoder::{OwnedClsLabels, Problem};
use vkformers_models::lora::{self, Adapter, LoraConfig, LoraParams, SampleKeys, Targets};
use vkformers_models::model::Model;
use vkformers_tensor::{Graph, Tensor};
use vkformers_train::metrics::MetricsLog;
use vkformers_train::{ForwardLoss, LanguageModel, Observer, StepStats, TokenBatch, TrainableParam};
use vkformers_vk::{Context, DeviceSelector};

use crate::dist::Dist;
use crate::outdir::OutDir;

/// LoRA options on top of `vkformers train`'s.
#[derive(clap::Args)]
pub struct LoraArgs {
    /// LoRA rank r (1 or more).
    #[arg(long, default_value_t = 8, value_parser = crate::ranges::at_least_one)]
    lora_rank: usize,
    /// LoRA alpha: the term is scaled by alpha / r (alpha / sqrt(r) with --use-rslora).
    #[arg(long, default_value_t = 16.0, value_parser = crate::ranges::positive)]
    lora_alpha: f64,
    /// Dropout on the input of each LoRA term (training only), in [0, 1).
    #[arg(long, default_value_t = 0.0, value_parser = crate::ranges::unit_open_f32)]
    lora_dropout: f32,
    /// Modules to adapt: `all-linear`, comma-separated names (a module matches when its full
    /// name ends with `.name`), or a regex matched against the whole module name.
    #[arg(long, default_value = "all-linear")]
    target_modules: String,
    /// Comma-separated packed expert parameters to adapt directly, as PEFT's
    /// `target_parameters` (e.g. `experts.gate_up_proj,experts.down_proj` on an MoE model).
    #[arg(long, value_delimiter = ',')]
    target_parameters: Vec<String>,
    /// Scale by alpha / sqrt(r) (rsLoRA).
    #[arg(long)]
    use_rslora: bool,
    /// Comma-separated modules trained in full and saved in the adapter (e.g. lm_head).
    #[arg(long, value_delimiter = ',')]
    modules_to_save: Vec<String>,
    /// Continue training this PEFT adapter (its config replaces the LoRA options above).
    #[arg(long)]
    adapter: Option<String>,
    /// Print a JSON summary (steps, final loss, trainable parameters, device memory peak).
    #[arg(long)]
    json: bool,
}

/// The base model, every shared `vkformers train` option, and the LoRA ones.
#[derive(clap::Args)]
pub struct Args {
    /// Base model folder (or Hub id) to adapt.
    #[arg(long)]
    model: String,
    #[command(flatten)]
    train: Box<crate::train::TrainArgs>,
    #[command(flatten)]
    lora: LoraArgs,
}

/// The model with its adapter for the trainer. Dropout masks are keyed by each row's global
/// sample index (`TokenBatch::samples`) and token position, so a sample draws the same masks
/// whichever rank trains it and whatever the batch size or world size (2 ranks × B = 1 rank ×
/// 2B), and a resumed run draws the masks a straight run would. Rows the adapter cannot key
/// (routed or gathered) draw from the batch-wide stream keyed by (optimizer step, global
/// micro-batch): in a step, rank r's i-th micro-batch is batch `i·N + r` of the step's window
/// of the global order (N ranks; `Loader::shard`).
struct LoraModel<'m> {
    model: &'m Model,
    step: Cell<u64>,
    micro: Cell<u64>,
    /// (rank, ranks) of a data-parallel run; (0, 1) alone.
    place: (u64, u64),
}

impl LoraModel<'_> {
    fn begin_step(&self, step: u64) {
        self.step.set(step);
        self.micro.set(0);
    }

    /// Selects the dropout masks of the next micro-batch, `batch`.
    fn next_masks(&self, batch: &TokenBatch) {
        let micro = self.micro.replace(self.micro.get() + 1);
        let (rank, ranks) = self.place;
        let global = micro * ranks + rank;
        let lora = self.model.weights.lora();
        lora.set_step(self.step.get().wrapping_mul(1 << 20).wrapping_add(global));
        let keyed = batch.samples.len() == batch.batch && batch.batch > 0;
        lora.set_samples(keyed.then(|| SampleKeys {
            samples: Rc::new(batch.samples.clone()),
            seq: batch.seq,
            decoder_seq: batch.decoder_len,
        }));
    }
}

impl LanguageModel for LoraModel<'_> {
    fn logits(&self, g: &Graph<'_>, batch: &TokenBatch) -> vkformers_train::Result<Tensor> {
        self.next_masks(batch);
        self.model.logits(g, batch)
    }

    // An encoder trains through the model's own forward + loss (a masked-LM head on the target
    // rows only); the rest through the logits and `loss`.
    fn loss_and_aux(&self, g: &Graph<'_>, batch: &TokenBatch) -> vkformers_train::Result<ForwardLoss> {
        if self.model.spec.encoder.is_some() {
            self.next_masks(batch);
            return self.model.loss_and_aux(g, batch);
        }
        let logits = self.logits(g, batch)?;
        Ok(ForwardLoss { loss: self.loss(g, &logits, batch)?, aux: None, logits: Some(logits) })
    }

    // An encoder's objective and loss are its head's (masked LM, classification).
    fn objective(&self) -> vkformers_train::Objective {
        self.model.objective()
    }

    fn loss(&self, g: &Graph<'_>, logits: &Tensor, batch: &TokenBatch) -> vkformers_train::Result<Tensor> {
        self.model.loss(g, logits, batch)
    }

    fn label_names(&self) -> Vec<String> {
        self.model.label_names()
    }

    fn problem(&self, labels: &OwnedClsLabels) -> Option<Problem> {
        self.model.problem(labels)
    }
}

fn lora_config(a: &LoraArgs, model_dir: &Path) -> LoraConfig {
    let mut c = LoraConfig::new(a.lora_rank, a.lora_alpha, Targets::parse_cli(&a.target_modules));
    c.lora_dropout = a.lora_dropout;
    c.use_rslora = a.use_rslora;
    c.modules_to_save = a.modules_to_save.clone();
    c.target_parameters = a.target_parameters.clone();
    c.base_model_name_or_path = Some(model_dir.display().to_string());
    c
}

/// `config` for the model's head as PEFT's task wrappers make it: a sequence or token classifier
/// (the folder's head, or the one `--task` gives it) gets task_type SEQ_CLS / TOKEN_CLS and its
/// `classifier` / `score` module trained in full and saved in the adapter (`modules_to_save`).
fn classifier_config(mut config: LoraConfig, dir: &Path, t: &crate::train::TrainArgs) -> anyhow::Result<LoraConfig> {
    let model_config = match t.task {
        Some(task) => crate::encoder_task::task_config(dir, task, t.num_labels)?.0,
        None => vkformers_io::read_json(dir.join("config.json"))?,
    };
    let arch = model_config["architectures"].get(0).and_then(serde_json::Value::as_str).unwrap_or_default();
    if arch.ends_with("ForSequenceClassification") {
        config.for_classifier(lora::SEQ_CLS);
    } else if arch.ends_with("ForTokenClassification") {
        config.for_classifier(lora::TOKEN_CLS);
    }
    Ok(config)
}

/// The base model with every weight frozen but `modules_to_save`; with `--task`, with that
/// task's head (a new head drawn as `vkformers train --task` draws it).
fn load_base(
    g: &Graph<'_>,
    dir: &Path,
    t: &crate::train::TrainArgs,
    modules_to_save: &[String],
) -> anyhow::Result<Model> {
    let trainable = |name: &str| lora::attach::is_saved_module(modules_to_save, name);
    let Some(task) = t.task else {
        return lora::load_frozen(g, dir, modules_to_save).with_context(|| format!("loading {}", dir.display()));
    };
    let (model, drawn) = crate::encoder_task::load_for_task_drawn(g, dir, task, t.num_labels, t.seed, &trainable)?;
    // PEFT loads the adapter on the base folder, whose missing head parts it draws afresh.
    let frozen: Vec<&String> = drawn.iter().filter(|n| !trainable(n)).collect();
    if !frozen.is_empty() {
        eprintln!(
            "note: {} stay at their random draw, frozen and not saved in the adapter (PEFT draws them \
             anew when it loads the base); list their modules in --modules-to-save to train and save them",
            frozen.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(model)
}

/// The adapter given with `--adapter`, if any.
fn given_adapter(a: &LoraArgs) -> anyhow::Result<Option<Adapter>> {
    let Some(dir) = &a.adapter else { return Ok(None) };
    let dir = vkformers_hub::resolve_model(dir)?;
    crate::outdir::check_complete(&dir)?;
    Ok(Some(Adapter::load(&dir).with_context(|| format!("loading the adapter {}", dir.display()))?))
}

pub fn run(selector: &DeviceSelector, args: &Args) -> anyhow::Result<ExitCode> {
    // Under mpirun (feature `mpi`): one rank of a data-parallel run, as `train`'s; an error on
    // any rank ends them all.
    let mut dist = Dist::start()?;
    let result = run_rank(selector, args, dist.as_mut());
    match (&dist, result) {
        (Some(d), Err(e)) => d.fail(&e),
        (_, result) => result,
    }
}

fn run_rank(selector: &DeviceSelector, args: &Args, dist: Option<&mut Dist>) -> anyhow::Result<ExitCode> {
    let model_dir = vkformers_hub::resolve_model(&args.model)?;
    let out = OutDir::check(&args.train.out, Some(&model_dir), args.train.overwrite_output_dir)?;
    // Rank 0 alone writes the output folder, once every rank has checked it as it was.
    let lead = dist.as_ref().is_none_or(|d| d.rank() == 0);
    if let Some(d) = &dist {
        d.barrier()?;
    }
    let result = finetune(selector, args, &model_dir, &out, dist);
    if result.is_err() && lead {
        out.clean_after_failure();
    }
    result
}

fn finetune(
    selector: &DeviceSelector,
    args: &Args,
    model_dir: &Path,
    out: &OutDir,
    mut dist: Option<&mut Dist>,
) -> anyhow::Result<ExitCode> {
    let t = &*args.train;
    crate::outdir::check_complete(model_dir)?;
    let selector = match &dist {
        Some(d) => d.device(selector)?,
        None => selector.clone(),
    };
    let ctx = Context::new(&selector)?;
    let g = Graph::new(&ctx);
    let given = given_adapter(&args.lora)?;
    let config = match &given {
        Some(a) => a.config.clone(),
        None => classifier_config(lora_config(&args.lora, model_dir), model_dir, t)?,
    };
    let mut model = load_base(&g, model_dir, t, &config.modules_to_save)?;
    let adapter = match given {
        Some(a) => a,
        None => lora::new_adapter(&model, config, t.seed)?,
    };
    let lora = lora::attach(&g, &mut model, &adapter, t.seed)?;
    let tokenizer = model_dir.join("tokenizer.json").exists().then(|| HfTokenizer::from_dir(model_dir)).transpose()?;
    let params: Vec<TrainableParam> =
        lora.named_params().into_iter().map(|(name, tensor, decay)| TrainableParam { name, tensor, decay }).collect();
    if let Some(d) = &dist {
        d.same_start(&g, &params)?;
    }
    let (mut trainer, max_steps, plan) = crate::train::build_trainer(&g, t, &model, tokenizer.as_ref(), params)?;
    let place = match dist.as_mut() {
        Some(d) => {
            trainer.set_data_parallel(d.hooks(false)?);
            (d.rank() as u64, trainer.data_parallel().world() as u64)
        }
        None => (0, 1),
    };
    let lm = LoraModel { model: &model, step: Cell::new(0), micro: Cell::new(0), place };
    let resumed = t.resume.as_ref().map(|r| trainer.resume(r)).transpose()?;
    if place.0 != 0 {
        // Another rank: the same steps, nothing written.
        while !trainer.finished() {
            lm.begin_step(trainer.steps_done());
            trainer.step(&lm)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "fine-tuning {} with LoRA r={} on {} ({} trainable of {} parameters) on {}: {plan}",
        model.spec.model_type,
        lora.config.r,
        crate::precision::plural(lora.modules.len() as u64, "module"),
        lora.numel(),
        model.params.iter().map(|(_, p)| p.numel()).sum::<usize>(),
        ctx.caps().name,
    );
    out.create()?;
    if let Some(cp) = resumed {
        eprintln!("resumed from {} at step {}", cp.display(), trainer.steps_done());
    }
    let metrics = MetricsLog::open(&t.out.join("metrics.jsonl"), trainer.steps_done())?;
    let mut obs = AdapterObserver { g: &g, lora: &lora, metrics, max_steps, last_loss: None };
    let save_every = t.save_every;
    let first = trainer.steps_done();
    t.profile.start(&g);
    while !trainer.finished() {
        lm.begin_step(trainer.steps_done());
        let stats = trainer.step(&lm)?;
        obs.on_step(&stats)?;
        if save_every > 0 && trainer.steps_done().is_multiple_of(save_every) {
            let dir = trainer.save_checkpoint(&mut obs)?;
            obs.on_checkpoint(&dir)?;
        }
    }
    t.profile.report(&g, trainer.steps_done() - first, "step")?;
    crate::train::print_summary(trainer.log());
    if let Some(line) = trainer.data_parallel().report() {
        eprintln!("{line}");
    }
    out.publish(|dir| lora.save(&g, dir).with_context(|| format!("saving the adapter to {}", t.out.display())))?;
    let mem = ctx.device_memory();
    if args.lora.json {
        let v = serde_json::json!({
            "out": t.out, "steps": trainer.steps_done(), "final_loss": obs.last_loss,
            "trainable_parameters": lora.numel(), "lora_modules": lora.modules.len(),
            "peak_device_bytes": mem.peak,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    eprintln!("saved the adapter to {} (peak device memory {:.1} MiB)", t.out.display(), mem.peak as f64 / 1048576.0);
    Ok(ExitCode::SUCCESS)
}

/// Metrics and progress lines, and the adapter written into every checkpoint (so a checkpoint
/// folder is itself a loadable PEFT adapter).
struct AdapterObserver<'a, 'g, 'c> {
    g: &'g Graph<'c>,
    lora: &'a LoraParams,
    metrics: MetricsLog,
    max_steps: u64,
    last_loss: Option<f64>,
}

impl Observer for AdapterObserver<'_, '_, '_> {
    fn on_step(&mut self, s: &StepStats) -> vkformers_train::Result<()> {
        self.metrics.write(s)?;
        self.last_loss = Some(s.record.loss);
        eprintln!("{}", crate::train::step_line(s, self.max_steps));
        Ok(())
    }

    fn save_extra(&mut self, dir: &Path) -> vkformers_train::Result<()> {
        self.lora
            .save(self.g, dir)
            .map_err(|e| vkformers_train::TrainError::Config(format!("saving the adapter into {}: {e}", dir.display())))
    }

    fn on_checkpoint(&mut self, dir: &Path) -> vkformers_train::Result<()> {
        eprintln!("saved {}", dir.display());
        Ok(())
    }
}
