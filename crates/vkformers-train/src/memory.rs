//! Where a training step's device memory goes (`VKFORMERS_MEMORY=1`): live bytes by kind at
//! the points where the peak can sit — the end of the forward (every saved activation alive,
//! plus the logits), the end of the backward (all gradients) and after the optimizer step.
//!
//! Kinds known from the host: trainable parameters, their gradients, AdamW moments, the 16-bit
//! weight copies and 16-bit activation copies that autocast keeps, the logits `[tokens, vocab]`.
//! `rest` is everything else that is live: f32 activations saved for backward, gradients in
//! flight, workspaces, and the pool's size-class rounding (≤ 25% of each buffer).

use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::{Graph, Tensor};

/// Whether `VKFORMERS_MEMORY` asks for the report.
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VKFORMERS_MEMORY").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Live device bytes by kind at one point of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub live: u64,
    pub peak: u64,
    pub params: u64,
    pub grads: u64,
    pub moments: u64,
    pub weight_copies: u64,
    pub activation_copies: u64,
    pub logits: u64,
}

impl Breakdown {
    /// Live bytes now on `g`'s device, by kind; `logits` when the caller still holds them.
    pub fn measure(g: &Graph<'_>, params: &[Param], opt: &AdamW, logits: Option<&Tensor>) -> Self {
        let mem = g.ctx().device_memory();
        let (weight_copies, activation_copies) = g.cast_bytes();
        Breakdown {
            live: mem.current,
            peak: mem.peak,
            params: params.iter().map(|p| p.tensor.bytes()).sum(),
            grads: params.iter().filter_map(|p| p.tensor.grad()).map(|t| t.bytes()).sum(),
            moments: opt.moment_bytes(),
            weight_copies,
            activation_copies,
            logits: logits.map_or(0, Tensor::bytes),
        }
    }

    /// Live bytes not in a named kind (saved f32 activations, workspaces, rounding).
    pub fn rest(&self) -> u64 {
        let named = self.params + self.grads + self.moments + self.weight_copies + self.activation_copies + self.logits;
        self.live.saturating_sub(named)
    }

    /// One line in MiB: `where: live L (peak P) = params .. + grads .. + ...`.
    pub fn line(&self, at: &str) -> String {
        let mib = |b: u64| format!("{:.1}", b as f64 / 1048576.0);
        format!(
            "memory {at}: live {} MiB (run peak {}) = params {} + grads {} + moments {} + 16-bit weights {} \
             + 16-bit activations {} + logits {} + rest {}",
            mib(self.live),
            mib(self.peak),
            mib(self.params),
            mib(self.grads),
            mib(self.moments),
            mib(self.weight_copies),
            mib(self.activation_copies),
            mib(self.logits),
            mib(self.rest())
        )
    }
}
