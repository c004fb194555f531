//! The training step's hooks for data parallelism (`vkformers-dist` implements them over MPI).
//!
//! With `W` ranks, each optimizer step reads `W · grad_accum` batches of the global order (rank
//! `r` takes the `r`-th batch of each window of `W`, as the HF Trainer's sharded sampler does).
//! The micro-batch loss is scaled by `n_i / N` with `N` the targets of the whole accumulated
//! batch over all ranks, so summing the ranks' accumulated gradients gives the gradient of
//! the global token mean: `Σ_r Σ_i n_ri L_ri / N`. The sum is taken once per optimizer step,
//! after the last micro-batch, before clipping (the norm is that of the reduced gradient).

use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{GradReadyHook, Graph};

use crate::error::Result;

/// What the trainer asks of the other ranks. The single-process path (`SingleProcess`) makes
/// every hook the identity.
pub trait DataParallel {
    /// This process's rank, `0..world()`.
    fn rank(&self) -> usize {
        0
    }

    /// Ranks in all.
    fn world(&self) -> usize {
        1
    }

    /// The sum over ranks of each value of `x` (target counts, partial losses); every rank gets
    /// the same bits.
    fn sum(&mut self, x: &[f64]) -> Result<Vec<f64>> {
        Ok(x.to_vec())
    }

    /// Replaces the gradient of each parameter by its sum over ranks (same bits everywhere).
    /// A sharded optimizer (`shards_optimizer`) instead clips the sums itself to `max_norm`
    /// (0: no clipping), keeps only the gradients of the parameters this rank steps, and
    /// returns the global norm.
    fn reduce_grads(&mut self, _g: &Graph<'_>, _params: &[Param], _max_norm: f32) -> Result<Option<f64>> {
        Ok(None)
    }

    /// Before the backward of an optimizer step's last micro-batch: a hook the graph calls as
    /// each parameter's gradient becomes final, to start reducing it while backward goes on
    /// (`reduce_grads` then finishes). None: everything is reduced in `reduce_grads`.
    fn grad_ready_hook(&mut self, _g: &Graph<'_>, _params: &[Param]) -> Result<Option<GradReadyHook>> {
        Ok(None)
    }

    /// ZeRO-1: each rank steps (and keeps AdamW's moments of) only its share of the
    /// parameters; the trainer's optimizer then leaves clipping to `reduce_grads`.
    fn shards_optimizer(&self) -> bool {
        false
    }

    /// After the optimizer step: a sharded optimizer gives every rank the new values of the
    /// parameters the other ranks stepped.
    fn after_step(&mut self, _g: &Graph<'_>, _params: &[Param], _opt: &AdamW) -> Result<()> {
        Ok(())
    }

    /// Before a checkpoint (called on every rank): a sharded optimizer gathers every moment
    /// into `opt`, so that rank 0 writes the whole optimizer state.
    fn before_save(&mut self, _g: &Graph<'_>, _params: &[Param], _opt: &mut AdamW) -> Result<()> {
        Ok(())
    }

    /// Whether this rank keeps AdamW's moments of parameter `i` (a checkpoint being resumed:
    /// a sharded optimizer loads only its own share).
    fn keeps_moments(&mut self, _params: &[Param], _i: usize) -> bool {
        true
    }

    /// A checkpoint's moments of parameter `i` that `keeps_moments` declined (a sharded
    /// optimizer keeps its own share of them).
    fn import_moments(&mut self, _params: &[Param], _i: usize, _m: &[f32], _v: &[f32]) {}

    /// Bytes of optimizer state held by the hooks (a sharded optimizer's slice of the moments).
    fn optimizer_state_bytes(&self) -> u64 {
        0
    }

    /// After a checkpoint (called on every rank): a sharded optimizer drops again the moments
    /// `before_save` gathered that this rank does not step.
    fn after_save(&mut self, _params: &[Param], _opt: &mut AdamW) {}

    /// A line on the communication of the run so far (time per step), if any.
    fn report(&self) -> Option<String> {
        None
    }

    /// Only rank 0 writes checkpoints (every rank holds the same parameters and moments).
    fn writes_checkpoints(&self) -> bool {
        self.rank() == 0
    }
}

/// One process: no communication.
pub struct SingleProcess;
impl DataParallel for SingleProcess {}
