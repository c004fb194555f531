//! f64 references of the optimizer kernels.

use super::AdamW;

/// Parameters and AdamW moments in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamWState {
    pub param: Vec<f64>,
    pub exp_avg: Vec<f64>,
    pub exp_avg_sq: Vec<f64>,
}

impl AdamWState {
    /// Fresh state: zero moments.
    pub fn new(param: Vec<f64>) -> Self {
        let n = param.len();
        AdamWState { param, exp_avg: vec![0.0; n], exp_avg_sq: vec![0.0; n] }
    }

    /// One AdamW step (torch.optim.AdamW, non-amsgrad) with gradient `grad * grad_scale`;
    /// `step` is the 1-based step number.
    pub fn step(&mut self, grad: &[f64], grad_scale: f64, hp: &AdamW, step: u64) {
        let t = step as f64;
        let bias_c1 = 1.0 - hp.beta1.powf(t);
        let bias_c2 = 1.0 - hp.beta2.powf(t);
        let step_size = hp.lr / bias_c1;
        for (i, &g) in grad.iter().enumerate() {
            let g = g * grad_scale;
            let (p, m, v) = (&mut self.param[i], &mut self.exp_avg[i], &mut self.exp_avg_sq[i]);
            *p *= 1.0 - hp.lr * hp.weight_decay;
            *m = hp.beta1 * *m + (1.0 - hp.beta1) * g;
            *v = hp.beta2 * *v + (1.0 - hp.beta2) * g * g;
            let denom = v.sqrt() / bias_c2.sqrt() + hp.eps;
            *p -= step_size * *m / denom;
        }
    }
}

/// Global 2-norm over all buffers.
pub fn global_norm(grads: &[&[f64]]) -> f64 {
    grads.iter().flat_map(|g| g.iter()).map(|x| x * x).sum::<f64>().sqrt()
}

/// `min(1, max_norm / (norm + 1e-6))`, as `clip_grad_norm_`.
pub fn clip_coef(norm: f64, max_norm: f64) -> f64 {
    (max_norm / (norm + 1e-6)).min(1.0)
}
