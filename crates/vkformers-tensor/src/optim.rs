//! AdamW over the graph's parameters, with optional global gradient-norm clipping computed
//! and applied on the device (no host round trip inside a step).

use std::collections::HashMap;

use vkformers_kernels::{elementwise, optim as k};

use crate::{Graph, Result, Tensor};

/// One parameter and whether weight decay applies to it (the HF Trainer exempts biases and
/// norm weights).
#[derive(Clone)]
pub struct Param {
    pub tensor: Tensor,
    pub decay: bool,
}

/// AdamW (`torch.optim.AdamW` semantics) with its moment buffers.
pub struct AdamW {
    pub hp: k::AdamW,
    /// Clip the global gradient norm to this value; 0 disables clipping.
    pub max_grad_norm: f32,
    step: u64,
    moments: HashMap<u64, (Tensor, Tensor)>,
    /// `[norm, clip coefficient]` of the last step (when clipping).
    norm: Option<(Tensor, Tensor)>,
    /// Loss scaling of the gradients (fp16): unscaled on the device, and a non-finite norm
    /// skips the step inside the AdamW kernel (see `k::LossScale`).
    pub loss_scale: k::LossScale,
}

impl AdamW {
    pub fn new(hp: k::AdamW, max_grad_norm: f32) -> Self {
        AdamW { hp, max_grad_norm, step: 0, moments: HashMap::new(), norm: None, loss_scale: k::LossScale::NONE }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The global gradient norm tensor `[1]` of the last step, when clipping is on.
    pub fn last_grad_norm(&self) -> Option<&Tensor> {
        self.norm.as_ref().map(|(n, _)| n)
    }

    /// Bytes of all moment buffers (the memory report).
    pub fn moment_bytes(&self) -> u64 {
        self.moments.values().map(|(m, v)| m.bytes() + v.bytes()).sum()
    }

    /// The moments (exp_avg, exp_avg_sq) of a parameter, once it has been stepped.
    pub fn moments(&self, p: &Tensor) -> Option<&(Tensor, Tensor)> {
        self.moments.get(&p.id())
    }

    /// Records one step for every parameter that has a gradient, then clears the gradients.
    pub fn step(&mut self, g: &Graph<'_>, params: &[Param]) -> Result<()> {
        self.step += 1;
        let with_grad: Vec<(&Param, Tensor)> =
            params.iter().filter_map(|p| p.tensor.grad().map(|gr| (p, gr))).collect();
        let coef = self.clip_coef(g, &with_grad)?;
        let mut steps = Vec::with_capacity(with_grad.len());
        for (p, grad) in &with_grad {
            let (m, v, moments) = self.moments_for(g, &p.tensor)?;
            // Mixed precision: the kernel rewrites the weight's kept 16-bit copy from the new
            // f32 value (rounded as a cast would), so the next forward casts no weight.
            let copy = g.autocast().and_then(|dt| g.cached_cast(&p.tensor, dt));
            if copy.is_none() {
                g.forget_cast(&p.tensor);
            }
            let weight_decay = if p.decay { self.hp.weight_decay } else { 0.0 };
            steps.push(ParamStep { param: &p.tensor, grad, m, v, moments, copy, weight_decay });
        }
        if per_tensor_adamw() {
            self.record_each(g, &steps, coef.as_ref())?;
        } else {
            self.record_all(g, &steps, coef.as_ref())?;
        }
        for (p, _) in &with_grad {
            p.tensor.zero_grad();
        }
        Ok(())
    }

    /// One `optim/adamw` dispatch per parameter.
    fn record_each(&self, g: &Graph<'_>, steps: &[ParamStep<'_>], coef: Option<&Tensor>) -> Result<()> {
        for s in steps {
            let hp = k::AdamW { weight_decay: s.weight_decay, ..self.hp };
            let bufs = k::AdamWBuffers {
                param: s.param.view(),
                grad: s.grad.view(),
                exp_avg: s.m.view(),
                exp_avg_sq: s.v.view(),
                grad_scale: coef.map(|c| c.view()),
            };
            let copy_view = s.copy.as_ref().map(|c| (c.view(), c.dtype()));
            g.record(|rec| k::adamw_step_from(rec, &bufs, copy_view, &hp, self.step, s.moments))?;
        }
        Ok(())
    }

    /// One `optim/adamw_multi` dispatch for every parameter (the same bits as `record_each`).
    fn record_all(&self, g: &Graph<'_>, steps: &[ParamStep<'_>], coef: Option<&Tensor>) -> Result<()> {
        if steps.is_empty() {
            return Ok(());
        }
        let copy_dtype = steps.iter().find_map(|s| s.copy.as_ref().map(Tensor::dtype));
        let ps: Vec<k::adamw_multi::MultiParam<'_>> = steps
            .iter()
            .map(|s| k::adamw_multi::MultiParam {
                param: s.param.view(),
                grad: s.grad.view(),
                exp_avg: s.m.view(),
                exp_avg_sq: s.v.view(),
                copy: s.copy.as_ref().map(Tensor::view),
                weight_decay: s.weight_decay,
                moments: s.moments,
            })
            .collect();
        let table = g.empty(&[(ps.len() as u64 * k::adamw_multi::ENTRY_BYTES / 4) as usize])?;
        let scale = coef.map(Tensor::view);
        g.record(|rec| k::adamw_multi::adamw_step_multi(rec, &ps, copy_dtype, scale, table.view(), &self.hp, self.step))
    }

    fn clip_coef(&mut self, g: &Graph<'_>, grads: &[(&Param, Tensor)]) -> Result<Option<Tensor>> {
        let scaling = self.loss_scale != k::LossScale::NONE;
        if (self.max_grad_norm <= 0.0 && !scaling) || grads.is_empty() {
            return Ok(None);
        }
        let views: Vec<_> = grads.iter().map(|(_, gr)| gr.view()).collect();
        let (norm, coef) = (g.empty(&[1])?, g.empty(&[1])?);
        let ls = self.loss_scale;
        let max = if self.max_grad_norm > 0.0 { self.max_grad_norm } else { f32::INFINITY };
        if per_buffer_norm() {
            let partials = g.empty(&[k::partials_len(&views) as usize])?;
            g.record(|rec| k::grad_norm_scaled(rec, &views, partials.view(), max, norm.view(), coef.view(), ls))?;
        } else {
            // Two dispatches for all gradients (a table of their addresses, then the norm).
            let scratch = g.empty(&[k::grad_norm_multi::scratch_len(&views) as usize])?;
            let s = scratch.view();
            g.record(|rec| {
                k::grad_norm_multi::grad_norm_multi_scaled(rec, &views, s, max, norm.view(), coef.view(), ls)
            })?;
        }
        self.norm = Some((norm, coef.clone()));
        Ok(Some(coef))
    }

    /// The moments of `p`, and whether they hold anything yet: a parameter's first step gets
    /// new buffers that the AdamW kernel writes without reading (`Moments::Fresh`), instead of
    /// zero-filling both (`[numel]` f32 x 2 per parameter: 8.8 GB for a 1.1B model).
    fn moments_for(&mut self, g: &Graph<'_>, p: &Tensor) -> Result<(Tensor, Tensor, k::Moments)> {
        if let Some((m, v)) = self.moments.get(&p.id()) {
            return Ok((m.clone(), v.clone(), k::Moments::Stored));
        }
        // They live as long as the run: exact size, outside the pool.
        let (m, v) = (g.empty_lasting(p.shape())?, g.empty_lasting(p.shape())?);
        self.moments.insert(p.id(), (m.clone(), v.clone()));
        if !crate::zero_fills() {
            return Ok((m, v, k::Moments::Fresh));
        }
        g.record(|rec| {
            elementwise::fill(rec, m.view(), 0.0)?;
            elementwise::fill(rec, v.view(), 0.0)
        })?;
        Ok((m, v, k::Moments::Stored))
    }
}

/// One parameter's part of a step: its buffers, the 16-bit copy to rewrite, its weight decay.
struct ParamStep<'a> {
    param: &'a Tensor,
    grad: &'a Tensor,
    m: Tensor,
    v: Tensor,
    moments: k::Moments,
    copy: Option<Tensor>,
    weight_decay: f64,
}

/// `VKFORMERS_ADAMW=per-tensor` steps each parameter with a dispatch of its own (the path
/// before `optim/adamw_multi`), for an A/B of the two.
fn per_tensor_adamw() -> bool {
    std::env::var("VKFORMERS_ADAMW").is_ok_and(|v| v == "per-tensor")
}

/// `VKFORMERS_GRAD_NORM=per-buffer` takes the gradient norm with one `sum_squares` dispatch per
/// gradient (the path before the multi-tensor kernel), for an A/B of the two.
fn per_buffer_norm() -> bool {
    std::env::var("VKFORMERS_GRAD_NORM").is_ok_and(|v| v == "per-buffer")
}

/// Checkpointing: the step count and the moments of each parameter can be read out and put
/// back, so a resumed run continues with the exact optimizer state.
impl AdamW {
    /// Forgets the last step after the device skipped it (an overflow under loss scaling):
    /// bias corrections continue from the steps really taken, as torch's skipped
    /// `optimizer.step()` leaves its step count.
    pub fn undo_skipped_step(&mut self) {
        self.step = self.step.saturating_sub(1);
    }

    /// Sets the number of steps taken (bias corrections continue from it).
    pub fn set_steps(&mut self, step: u64) {
        self.step = step;
    }

    /// Drops parameter `p`'s moments (a sharded optimizer's rank that does not step `p`).
    pub fn forget_moments(&mut self, p: &Tensor) {
        self.moments.remove(&p.id());
    }

    /// Gives parameter `p` the moments `exp_avg`, `exp_avg_sq` (host data shaped like `p`).
    pub fn import_moments(&mut self, g: &Graph<'_>, p: &Tensor, exp_avg: &[f32], exp_avg_sq: &[f32]) -> Result<()> {
        let (m, v) = (g.weight_constant(exp_avg, p.shape())?, g.weight_constant(exp_avg_sq, p.shape())?);
        self.moments.insert(p.id(), (m, v));
        Ok(())
    }
}
