//! The training loop: optimizer steps over accumulated micro-batches, the learning rate set
//! per step from the schedule, evaluation, metrics and checkpoints with exact resume.
//!
//! Gradient accumulation follows transformers 5: with `N` counted target tokens over all
//! micro-batches of one optimizer step and `n_i` in micro-batch `i`, micro-batch `i`'s loss
//! (its own token mean `L_i`) is scaled by `n_i / N` before backward, so the accumulated
//! gradient is that of `Σ_i n_i L_i / N`, the token-weighted mean over the whole step — the
//! gradient of one batch holding all the micro-batches. The targets are the model's
//! (`LanguageModel::objective`): shifted tokens, masked-LM or token-class labels, or rows for a
//! sequence classifier (whose loss is a row mean, so rows weigh as tokens do above).

use std::path::{Path, PathBuf};

use vkformers_data::Example;
use vkformers_kernels::optim::AdamW as AdamWHp;
use vkformers_tensor::ops::broadcast;
use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{Graph, Tensor};

use crate::batching::{Loader, TokenBatch};
use crate::checkpoint::{self, StepRecord, TrainerState, OPTIMIZER_DIR, PARAMS_DIR};
use crate::dist::{DataParallel, SingleProcess};
use crate::error::{Result, TrainError};
use crate::eval::evaluate;
use crate::model::{LanguageModel, TrainableParam};
use crate::precision::{GradScaler, Precision};
use crate::schedule::Schedule;

/// AdamW's hyper-parameters other than the learning rate (which the schedule sets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimOptions {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip the global gradient norm to this; 0 disables clipping.
    pub max_grad_norm: f32,
}

impl Default for OptimOptions {
    /// The HF Trainer's defaults: betas (0.9, 0.999), eps 1e-8, no weight decay, clip at 1.
    fn default() -> Self {
        OptimOptions { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, max_grad_norm: 1.0 }
    }
}

/// How to train (the data options live in the `Loader`).
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub grad_accum: usize,
    pub schedule: Schedule,
    pub optim: OptimOptions,
    /// Optimizer steps in all (the schedule's `total`).
    pub max_steps: u64,
    /// Write a checkpoint every this many steps (0: never).
    pub save_every: u64,
    /// Keep the newest this many checkpoints (0: all).
    pub keep_checkpoints: usize,
    /// Evaluate every this many steps (0: never; needs `eval_data`).
    pub eval_every: u64,
    pub eval_batch_size: usize,
    pub out_dir: PathBuf,
    /// Shuffling seed and flag (recorded in checkpoints).
    pub seed: u64,
    pub shuffle: bool,
}

/// What one optimizer step did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    pub record: StepRecord,
    /// Real tokens fed (padding excluded) and counted targets.
    pub tokens: usize,
    pub targets: usize,
    pub seconds: f64,
    /// Peak bytes of device memory allocated so far in the run.
    pub device_memory_peak_bytes: u64,
    /// fp16: the loss scale this step used, and whether an overflow skipped it.
    pub loss_scale: Option<f32>,
    pub skipped: bool,
    /// MoE with `output_router_logits`: the load-balancing term (`router_aux_loss_coef` times
    /// the auxiliary loss) included in `record.loss`, summed over the micro-batches.
    pub aux_loss: Option<f64>,
}

/// Hooks of the loop: progress display, and extra files in each checkpoint.
pub trait Observer {
    fn on_step(&mut self, _stats: &StepStats) -> Result<()> {
        Ok(())
    }
    /// Adds files to a checkpoint folder being written (e.g. a loadable model folder).
    fn save_extra(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    fn on_checkpoint(&mut self, _dir: &Path) -> Result<()> {
        Ok(())
    }
}

/// An observer that does nothing.
pub struct Silent;
impl Observer for Silent {}

pub struct Trainer<'g, 'c> {
    g: &'g Graph<'c>,
    params: Vec<TrainableParam>,
    opt_params: Vec<Param>,
    opt: AdamW,
    loader: Loader,
    opts: TrainOptions,
    eval_data: Option<(Vec<Example>, u32)>,
    step: u64,
    log: Vec<StepRecord>,
    precision: Precision,
    /// fp16's dynamic loss scale.
    scaler: Option<GradScaler>,
    /// The peak lr this run was asked for explicitly: it replaces the checkpoint's on resume.
    lr_override: Option<f64>,
    /// Tests only: fail a checkpoint write after this many of its parts (a simulated kill).
    pub fail_checkpoint_after: Option<usize>,
    /// The other ranks of a data-parallel run (`SingleProcess` alone).
    dp: Box<dyn DataParallel>,
}

impl<'g, 'c> Trainer<'g, 'c> {
    pub fn new(g: &'g Graph<'c>, params: Vec<TrainableParam>, loader: Loader, opts: TrainOptions) -> Result<Self> {
        if params.is_empty() {
            return Err(TrainError::Config("nothing to train: no trainable parameters".into()));
        }
        if opts.grad_accum == 0 {
            return Err(TrainError::Config("--grad-accum must be at least 1".into()));
        }
        let o = opts.optim;
        let hp =
            AdamWHp { lr: opts.schedule.lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay };
        // Without clipping the norm is still computed (for the metrics) with an infinite limit:
        // the coefficient min(1, ∞) = 1 multiplies every gradient exactly.
        let clip = if o.max_grad_norm > 0.0 { o.max_grad_norm } else { f32::INFINITY };
        let opt_params = params.iter().map(|p| Param { tensor: p.tensor.clone(), decay: p.decay }).collect();
        Ok(Trainer {
            g,
            params,
            opt_params,
            opt: AdamW::new(hp, clip),
            loader,
            opts,
            eval_data: None,
            step: 0,
            log: Vec::new(),
            precision: Precision::Fp32,
            scaler: None,
            lr_override: None,
            fail_checkpoint_after: None,
            dp: Box::new(SingleProcess),
        })
    }

    /// Trains in `p` (see `precision`): the graph's autocast, and for fp16 a `GradScaler`
    /// (`scaler`, default torch's).
    pub fn set_precision(&mut self, p: Precision, scaler: Option<GradScaler>) {
        self.precision = p;
        self.g.set_autocast(p.autocast());
        self.scaler = (p == Precision::Fp16).then(|| scaler.unwrap_or_default());
    }

    /// A peak learning rate given explicitly (`--lr`): a resume follows it instead of the
    /// checkpoint's (the HF Trainer would keep the saved one silently).
    pub fn set_lr_override(&mut self, lr: Option<f64>) {
        self.lr_override = lr;
    }

    /// Trains as one rank of `dp`: the loader takes this rank's share of each global batch,
    /// target counts, losses and gradients are summed over the ranks (see `dist`).
    pub fn set_data_parallel(&mut self, dp: Box<dyn DataParallel>) {
        self.loader.shard(dp.rank(), dp.world());
        if dp.shards_optimizer() {
            // The norm is over every rank's share: `reduce_grads` clips.
            self.opt.max_grad_norm = 0.0;
        }
        self.dp = dp;
    }

    /// The data-parallel hooks (to finish or report on them).
    pub fn data_parallel(&mut self) -> &mut dyn DataParallel {
        self.dp.as_mut()
    }

    /// The precision of the run.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The fp16 loss scaler's state, if any.
    pub fn scaler(&self) -> Option<&GradScaler> {
        self.scaler.as_ref()
    }

    /// Examples to evaluate every `eval_every` steps and at the end (`pad_id` pads batches).
    pub fn set_eval_data(&mut self, examples: Vec<Example>, pad_id: u32) {
        self.eval_data = Some((examples, pad_id));
    }

    /// Optimizer steps completed.
    /// Bytes of AdamW's moments held by this process (a sharded optimizer: its share).
    pub fn optimizer_state_bytes(&self) -> u64 {
        self.opt.moment_bytes() + self.dp.optimizer_state_bytes()
    }

    pub fn steps_done(&self) -> u64 {
        self.step
    }

    pub fn finished(&self) -> bool {
        self.step >= self.opts.max_steps
    }

    /// Every step logged so far (restored on resume).
    pub fn log(&self) -> &[StepRecord] {
        &self.log
    }

    pub fn options(&self) -> &TrainOptions {
        &self.opts
    }

    /// One optimizer step over up to `grad_accum` micro-batches (fewer at the end of an epoch,
    /// as the HF Trainer does).
    pub fn step(&mut self, model: &dyn LanguageModel) -> Result<StepStats> {
        let start = std::time::Instant::now();
        let lr = self.opts.schedule.lr_at(self.step);
        let micro = self.take_micro_batches();
        let objective = model.objective();
        let local: usize = micro.iter().map(|b| b.targets_for(objective)).sum();
        let local_tokens: usize = micro.iter().map(TokenBatch::tokens).sum();
        // N is the targets of the accumulated batch over every rank (exact in f64: < 2^53).
        let counts = self.dp.sum(&[local as f64, local_tokens as f64])?;
        let (targets, tokens) = (counts[0] as usize, counts[1] as usize);
        if targets == 0 {
            return Err(TrainError::Config(format!(
                "step {}: no token to predict in this batch (every label is -100): check the data's labels",
                self.step + 1
            )));
        }
        let mut losses: Vec<Tensor> = Vec::with_capacity(micro.len());
        let mut auxes: Vec<Tensor> = Vec::new();
        let loss_scale = self.scaler.map_or(1.0, |s| s.scale);
        // The last backward of the step: data parallelism reduces gradients as it finishes them.
        let last = micro.iter().rposition(|mb| mb.targets_for(objective) > 0);
        for (i, mb) in micro.iter().enumerate() {
            let n = mb.targets_for(objective);
            if n == 0 {
                continue;
            }
            let crate::model::ForwardLoss { loss, aux, logits } = model.loss_and_aux(self.g, mb)?;
            self.report_memory("after forward", logits.as_ref());
            // The loss saved what its backward needs: holding the logits `[tokens, vocab]` f32
            // here through the whole backward would keep them alive past their use.
            drop(logits);
            // fp16: backward from S·loss (S a power of two, so dividing the read value is exact).
            let factor = n as f32 / targets as f32 * loss_scale;
            let mut scaled = if factor == 1.0 { loss } else { broadcast::scale(self.g, &loss, factor)? };
            if let Some(aux) = aux {
                // As the HF Trainer with a model that takes `num_items_in_batch`: each
                // micro-batch's loss is its share of the token-mean cross-entropy plus its
                // whole auxiliary term (not divided by the accumulation steps).
                let aux = if loss_scale == 1.0 { aux } else { broadcast::scale(self.g, &aux, loss_scale)? };
                scaled = broadcast::add(self.g, &scaled, &aux)?;
                auxes.push(aux);
            }
            let hook = if Some(i) == last { self.dp.grad_ready_hook(self.g, &self.opt_params)? } else { None };
            self.g.set_grad_ready_hook(hook);
            let ran = self.g.backward(&scaled);
            self.g.set_grad_ready_hook(None);
            ran?;
            self.report_memory("after backward", None);
            losses.push(scaled);
            if i + 1 < micro.len() {
                // Submit each micro-batch so that its activations are released before the next.
                self.g.sync()?;
            }
        }
        // One reduction per optimizer step, none on the accumulation micro-steps.
        let host_norm = self.dp.reduce_grads(self.g, &self.opt_params, self.opts.optim.max_grad_norm)?;
        self.opt.hp.lr = lr;
        self.opt.loss_scale = match self.scaler {
            Some(s) => vkformers_kernels::optim::LossScale { scale: s.scale, skip_nonfinite: true },
            None => vkformers_kernels::optim::LossScale::NONE,
        };
        self.opt.step(self.g, &self.opt_params)?;
        self.dp.after_step(self.g, &self.opt_params, &self.opt)?;
        self.report_memory("after step", None);
        let mut loss = 0.0;
        for l in &losses {
            loss += f64::from(self.g.read(l)?[0]) / f64::from(loss_scale);
        }
        let mut aux_loss = None;
        for a in &auxes {
            *aux_loss.get_or_insert(0.0) += f64::from(self.g.read(a)?[0]) / f64::from(loss_scale);
        }
        let (loss, aux_loss) = self.sum_losses(loss, aux_loss)?;
        let grad_norm = match (host_norm, self.opt.last_grad_norm()) {
            (Some(n), _) => Some(n),
            (None, Some(n)) => Some(f64::from(self.g.read(n)?[0])),
            (None, None) => None,
        };
        let norm_bad = grad_norm.is_some_and(|n| !n.is_finite());
        if self.scaler.is_none() && (!loss.is_finite() || norm_bad) {
            // Without a loss scaler nothing recovers from this: stop before saving a NaN model.
            let grad_norm = grad_norm.unwrap_or(f64::NAN);
            return Err(TrainError::NonFinite { step: self.step + 1, loss, grad_norm });
        }
        let mut skipped = false;
        if let Some(scaler) = self.scaler.as_mut() {
            // The device skipped the step on a non-finite norm; the scale backs off.
            skipped = !grad_norm.is_some_and(f64::is_finite);
            if skipped {
                self.opt.undo_skipped_step();
            }
            scaler.update(skipped);
        }
        self.step += 1;
        // Throughput counts the training step only, not the evaluation after it.
        let seconds = start.elapsed().as_secs_f64();
        let eval_loss = self.maybe_evaluate(model)?;
        let record = StepRecord { step: self.step, loss, lr, grad_norm, eval_loss };
        self.log.push(record.clone());
        let device_memory_peak_bytes = self.g.ctx().device_memory().peak;
        let loss_scale = self.scaler.is_some().then_some(loss_scale);
        Ok(StepStats { record, tokens, targets, seconds, device_memory_peak_bytes, loss_scale, skipped, aux_loss })
    }

    /// The step's loss (and auxiliary term) over all ranks: each rank's share is already
    /// divided by the global target count, so the sum is the global token mean.
    fn sum_losses(&mut self, loss: f64, aux: Option<f64>) -> Result<(f64, Option<f64>)> {
        if self.dp.world() == 1 {
            return Ok((loss, aux));
        }
        let s = self.dp.sum(&[loss, aux.unwrap_or(0.0)])?;
        Ok((s[0], aux.map(|_| s[1])))
    }

    /// `VKFORMERS_MEMORY=1`: live device bytes by kind at this point (see `memory`).
    fn report_memory(&self, at: &str, logits: Option<&Tensor>) {
        if crate::memory::enabled() {
            let b = crate::memory::Breakdown::measure(self.g, &self.opt_params, &self.opt, logits);
            eprintln!("step {}: {}", self.step + 1, b.line(at));
        }
    }

    fn take_micro_batches(&mut self) -> Vec<TokenBatch> {
        let mut micro = Vec::with_capacity(self.opts.grad_accum);
        while micro.len() < self.opts.grad_accum {
            micro.push(self.loader.next_batch());
            if self.loader.epoch_done() {
                break;
            }
        }
        micro
    }

    fn maybe_evaluate(&self, model: &dyn LanguageModel) -> Result<Option<f64>> {
        let due = self.opts.eval_every > 0 && self.step.is_multiple_of(self.opts.eval_every);
        match (&self.eval_data, due || self.finished()) {
            (Some((data, pad)), true) => {
                Ok(Some(evaluate(self.g, model, data, self.opts.eval_batch_size.max(1), *pad)?.loss))
            }
            _ => Ok(None),
        }
    }

    /// Steps until `max_steps`, saving checkpoints every `save_every` steps.
    pub fn run(&mut self, model: &dyn LanguageModel, observer: &mut dyn Observer) -> Result<()> {
        while !self.finished() {
            let stats = self.step(model)?;
            observer.on_step(&stats)?;
            let due = self.opts.save_every > 0 && self.step.is_multiple_of(self.opts.save_every);
            if due {
                self.dp.before_save(self.g, &self.opt_params, &mut self.opt)?;
            }
            if due && self.dp.writes_checkpoints() {
                let dir = self.save_checkpoint(observer)?;
                observer.on_checkpoint(&dir)?;
            }
            if due {
                self.dp.after_save(&self.opt_params, &mut self.opt);
            }
        }
        Ok(())
    }

    fn state(&self) -> TrainerState {
        let o = self.opts.optim;
        TrainerState {
            format: TrainerState::new_format(),
            step: self.step,
            optimizer_steps: self.opt.steps(),
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
            max_grad_norm: o.max_grad_norm,
            schedule: self.opts.schedule,
            grad_accum: self.opts.grad_accum,
            seed: self.opts.seed,
            shuffle: self.opts.shuffle,
            data_position: self.loader.position(),
            params: self.params.iter().map(|p| (p.name.clone(), p.decay)).collect(),
            log: self.log.clone(),
            loss_scale: self.scaler.map(|s| (s.scale, s.growth_tracker)),
            data_sequences: Some(self.loader.len()),
            files: Default::default(),
        }
    }

    /// Writes `OUT/checkpoint-<step>` (see `checkpoint`), returning its path.
    pub fn save_checkpoint(&self, observer: &mut dyn Observer) -> Result<PathBuf> {
        let out = &self.opts.out_dir;
        let tmp = checkpoint::temp_dir(out, self.step)?;
        let mut parts_left = self.fail_checkpoint_after;
        let mut part = |tmp: &Path| -> Result<()> {
            match parts_left.as_mut() {
                Some(0) => Err(TrainError::checkpoint(tmp, "simulated failure mid-write")),
                Some(n) => {
                    *n -= 1;
                    Ok(())
                }
                None => Ok(()),
            }
        };
        let mut params = Vec::new();
        let mut moments = Vec::new();
        for p in &self.params {
            let data = self.g.read(&p.tensor)?;
            params.push((p.name.clone(), p.tensor.shape().to_vec(), data));
            if let Some((m, v)) = self.opt.moments(&p.tensor) {
                let shape = p.tensor.shape().to_vec();
                moments.push((format!("exp_avg.{}", p.name), shape.clone(), self.g.read(m)?));
                moments.push((format!("exp_avg_sq.{}", p.name), shape, self.g.read(v)?));
            }
        }
        save_tensors(&tmp.join(PARAMS_DIR), &params)?;
        part(&tmp)?;
        save_tensors(&tmp.join(OPTIMIZER_DIR), &moments)?;
        part(&tmp)?;
        observer.save_extra(&tmp)?;
        part(&tmp)?;
        let mut state = self.state();
        checkpoint::record_checksums(&tmp, &mut state)?;
        let state = serde_json::to_value(state).map_err(|e| TrainError::checkpoint(&tmp, e.to_string()))?;
        vkformers_io::write_json_atomic(tmp.join(checkpoint::STATE_FILE), &state)?;
        checkpoint::publish(&tmp, out, self.step, self.opts.keep_checkpoints)
    }

    /// Continues from the checkpoint `dir` (a `checkpoint-*` folder, or an output folder whose
    /// newest complete checkpoint is taken): parameters, moments, step, schedule, data position
    /// and log. Returns the checkpoint used.
    pub fn resume(&mut self, dir: &Path) -> Result<PathBuf> {
        let cp = checkpoint::find_resume_dir(dir)?;
        let state = checkpoint::read_state(&cp)?;
        self.check_data_matches(&state, &cp)?;
        let names: Vec<&str> = self.params.iter().map(|p| p.name.as_str()).collect();
        let saved: Vec<&str> = state.params.iter().map(|(n, _)| n.as_str()).collect();
        if names != saved {
            return Err(TrainError::checkpoint(&cp, params_differ(&names, &saved)));
        }
        let weights = vkformers_io::ModelWeights::open(cp.join(PARAMS_DIR))?;
        let moments = vkformers_io::ModelWeights::open(cp.join(OPTIMIZER_DIR))?;
        self.g.sync()?;
        for (i, p) in self.params.iter().enumerate() {
            let data = checked(&weights, &p.name, p.tensor.shape(), &cp)?;
            // At the view's offset: a packed q/k/v parameter is a row block of one buffer.
            let view = p.tensor.view();
            self.g.ctx().upload(view.buffer, view.offset, bytemuck::cast_slice(&data))?;
            let m_name = format!("exp_avg.{}", p.name);
            if moments.contains(&m_name) {
                let m = checked(&moments, &m_name, p.tensor.shape(), &cp)?;
                let v = checked(&moments, &format!("exp_avg_sq.{}", p.name), p.tensor.shape(), &cp)?;
                if self.dp.keeps_moments(&self.opt_params, i) {
                    self.opt.import_moments(self.g, &p.tensor, &m, &v)?;
                } else {
                    self.dp.import_moments(&self.opt_params, i, &m, &v);
                }
            }
        }
        // New f32 values: any 16-bit copy of them (autocast) is stale.
        self.g.clear_casts();
        self.opts.schedule = self.resumed_schedule(&state, &cp)?;
        self.opt.set_steps(state.optimizer_steps);
        self.loader.set_position(state.data_position)?;
        self.step = state.step;
        self.log = state.log;
        if let (Some(scaler), Some((scale, tracker))) = (self.scaler.as_mut(), state.loss_scale) {
            scaler.scale = scale;
            scaler.growth_tracker = tracker;
        }
        Ok(cp)
    }
}

impl Trainer<'_, '_> {
    /// The data position counts sequences of one shuffled order: it means the same data only
    /// over the same sequences (data, --seq-len, --packing) in the same order (seed, shuffle).
    fn check_data_matches(&self, state: &TrainerState, cp: &Path) -> Result<()> {
        let n = self.loader.len();
        if let Some(saved) = state.data_sequences.filter(|&s| s != n) {
            return Err(TrainError::checkpoint(
                cp,
                format!(
                    "it was made over {saved} training sequences and this run has {n}: resume with the \
                     checkpoint's data, --seq-len and --packing (its data position would point elsewhere)"
                ),
            ));
        }
        if (state.seed, state.shuffle) != (self.opts.seed, self.opts.shuffle) {
            return Err(TrainError::checkpoint(
                cp,
                format!(
                    "it was made with --seed {} and shuffle {}, this run has --seed {} and shuffle {}: the \
                     data order would change mid-epoch; resume with the checkpoint's",
                    state.seed, state.shuffle, self.opts.seed, self.opts.shuffle
                ),
            ));
        }
        if state.step > self.opts.max_steps {
            let msg = format!("it is at step {}, past --max-steps {}", state.step, self.opts.max_steps);
            return Err(TrainError::checkpoint(cp, msg));
        }
        Ok(())
    }

    /// The schedule after a resume, as the HF Trainer builds it: the checkpoint's kind, warm-up
    /// and floor over this run's total (`max_steps`), with this run's peak lr when one was given.
    /// Each change is printed once: a longer run otherwise looks like it trains on at lr 0.
    fn resumed_schedule(&self, state: &TrainerState, cp: &Path) -> Result<Schedule> {
        let saved = state.schedule;
        let (total, lr) = (self.opts.max_steps, self.lr_override.unwrap_or(saved.lr));
        let s = Schedule::new(saved.kind, lr, saved.min_lr, saved.warmup, total)
            .map_err(|e| TrainError::checkpoint(cp, format!("cannot continue its schedule: {e}")))?;
        if saved.total != total {
            eprintln!("resume: max_steps {} -> {total}, the schedule follows the new total", saved.total);
        }
        if saved.lr != lr {
            eprintln!("resume: lr {} -> {lr}, the schedule follows the new peak lr", saved.lr);
        }
        let asked = self.opts.schedule;
        if (asked.kind, asked.warmup, asked.min_lr) != (saved.kind, saved.warmup, saved.min_lr) {
            eprintln!(
                "resume: keeping the checkpoint's schedule {} with {} warm-up steps and min lr {} (this \
                 run's options differ)",
                format!("{:?}", saved.kind).to_lowercase(),
                saved.warmup,
                saved.min_lr
            );
        }
        Ok(s)
    }
}

fn checked(w: &vkformers_io::ModelWeights, name: &str, shape: &[usize], cp: &Path) -> Result<Vec<f32>> {
    let info = w.info(name).map_err(|e| TrainError::checkpoint(cp, e.to_string()))?;
    if info.shape != shape {
        return Err(TrainError::checkpoint(cp, format!("`{name}` has shape {:?}, the model {shape:?}", info.shape)));
    }
    Ok(w.tensor_f32(name)?)
}

fn save_tensors(dir: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Result<()> {
    let save: Vec<vkformers_io::SaveTensor<'_>> = tensors
        .iter()
        .map(|(n, s, d)| vkformers_io::SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d))
        .collect();
    vkformers_io::save_safetensors(dir, &save, u64::MAX)?;
    Ok(())
}

/// Optimizer steps that `epochs` epochs take: `ceil(batches / grad_accum)` per epoch.
pub fn steps_for_epochs(loader: &Loader, grad_accum: usize, epochs: u64) -> u64 {
    loader.batches_per_epoch().div_ceil(grad_accum.max(1)) as u64 * epochs
}

/// Why a checkpoint's trainable parameters (`saved`) do not fit this run's (`names`): those only
/// one side has (a few named), or their order, and what to do.
fn params_differ(names: &[&str], saved: &[&str]) -> String {
    let list = |xs: Vec<&&str>| {
        let shown: Vec<String> = xs.iter().take(6).map(|n| format!("`{n}`")).collect();
        let more = xs.len().saturating_sub(6);
        format!("{}{}", shown.join(", "), if more > 0 { format!(" and {more} more") } else { String::new() })
    };
    let only_saved: Vec<&&str> = saved.iter().filter(|n| !names.contains(n)).collect();
    let only_run: Vec<&&str> = names.iter().filter(|n| !saved.contains(n)).collect();
    let mut why = Vec::new();
    if !only_saved.is_empty() {
        why.push(format!(
            "{} of its tensors match no trainable parameter of this run: {}",
            only_saved.len(),
            list(only_saved)
        ));
    }
    if !only_run.is_empty() {
        why.push(format!("it lacks {} of this run's: {}", only_run.len(), list(only_run)));
    }
    if why.is_empty() {
        why.push("the same parameters in another order".into());
    }
    format!(
        "its trainable parameters differ from this run's ({}); resume with the model, --adapter and LoRA \
         settings (target modules, rank, modules to save) of the run that wrote it, or start a new run \
         without --resume",
        why.join("; ")
    )
}
