//! The precision policy of a run (the Trainer's `--bf16`, `--fp16`, `--fp32`) and fp16's dynamic
//! loss scaling, as `torch.autocast` + `torch.amp.GradScaler`.
//!
//! Mixed precision keeps f32 master weights and f32 AdamW moments; matrix products and
//! attention read 16-bit copies of their operands (the graph's autocast) and accumulate in f32;
//! norms, softmax, the loss and reductions stay f32. fp16's narrow range needs the loss scaled
//! by S before backward so small gradients survive, then unscaled before the step; an inf/NaN
//! gradient skips the step and halves S, and S doubles after `growth_interval` clean steps.

use vkformers_tensor::DType;
use vkformers_vk::Caps;

/// The precision of a training or evaluation run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Bf16,
    Fp16,
}

impl Precision {
    /// From the flags (at most one set); none set: bf16 where the device has bf16 tensor cores,
    /// else f32 (where 16-bit arithmetic would only be emulated).
    pub fn from_flags(bf16: bool, fp16: bool, fp32: bool, caps: &Caps) -> Self {
        match (bf16, fp16, fp32) {
            (true, _, _) => Precision::Bf16,
            (_, true, _) => Precision::Fp16,
            (_, _, true) => Precision::Fp32,
            _ if vkformers_kernels::gemm_coopmat::supported(caps, vkformers_kernels::gemm_coopmat::Elem::Bf16) => {
                Precision::Bf16
            }
            _ => Precision::Fp32,
        }
    }

    /// The graph's autocast type.
    pub fn autocast(self) -> Option<DType> {
        match self {
            Precision::Fp32 => None,
            Precision::Bf16 => Some(DType::BF16),
            Precision::Fp16 => Some(DType::F16),
        }
    }

    /// The name the Trainer's flag uses.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

/// `torch.amp.GradScaler`'s dynamic loss scale (its defaults: init 2^16, growth ×2 after 2000
/// clean steps, back-off ×0.5 on inf/NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScaler {
    pub scale: f32,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub growth_interval: u32,
    /// Clean steps since the last change of scale.
    pub growth_tracker: u32,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler { scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000, growth_tracker: 0 }
    }
}

impl GradScaler {
    /// A scaler starting at `scale` with torch's other defaults.
    pub fn with_scale(scale: f32) -> Self {
        GradScaler { scale, ..GradScaler::default() }
    }

    /// `scaler.update()` after a step that found (or did not find) inf/NaN gradients.
    pub fn update(&mut self, found_inf: bool) {
        if found_inf {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaler_halves_on_overflow_and_doubles_after_the_interval() {
        let mut s = GradScaler { growth_interval: 3, ..GradScaler::default() };
        s.update(true);
        assert_eq!((s.scale, s.growth_tracker), (32768.0, 0));
        s.update(false);
        s.update(false);
        assert_eq!((s.scale, s.growth_tracker), (32768.0, 2));
        s.update(false);
        assert_eq!((s.scale, s.growth_tracker), (65536.0, 0));
        s.update(false);
        s.update(true);
        assert_eq!((s.scale, s.growth_tracker), (32768.0, 0), "an overflow resets the clean-step count");
    }

    #[test]
    fn flags_pick_the_precision_and_the_default_follows_the_device() {
        let lavapipe = Caps::default();
        assert_eq!(Precision::from_flags(false, false, false, &lavapipe), Precision::Fp32);
        assert_eq!(Precision::from_flags(true, false, false, &lavapipe), Precision::Bf16);
        assert_eq!(Precision::from_flags(false, true, false, &lavapipe), Precision::Fp16);
        assert_eq!(Precision::Fp16.autocast(), Some(DType::F16));
        assert_eq!(Precision::Fp32.autocast(), None);
    }
}
