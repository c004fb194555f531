//! Helpers shared by the train crate's integration tests.

use std::path::Path;

use vkformers_train::{OptimOptions, Schedule, ScheduleKind, TrainOptions};

/// `max_steps` plain AdamW steps at a constant `lr` (no weight decay, no clipping, no warm-up),
/// one micro-batch a step, in order (no shuffle, seed 5), saving and evaluating nothing, into
/// `out_dir`.
pub fn plain_steps(out_dir: &Path, lr: f64, max_steps: u64) -> TrainOptions {
    TrainOptions {
        grad_accum: 1,
        schedule: Schedule::new(ScheduleKind::Constant, lr, 0.0, 0, max_steps).unwrap(),
        optim: OptimOptions { beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.0, max_grad_norm: 0.0 },
        max_steps,
        save_every: 0,
        keep_checkpoints: 0,
        eval_every: 0,
        eval_batch_size: 2,
        out_dir: out_dir.to_path_buf(),
        seed: 5,
        shuffle: false,
    }
}
