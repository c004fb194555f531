//! Learning-rate schedules, as transformers' schedulers compute them: the lr used by
//! optimizer step `s` (0-based, steps already taken) is `lr · factor(s)`.
//!
//! - warm-up (every kind, when `warmup > 0`): `factor = s / warmup` for `s < warmup` (from 0);
//! - constant: 1 after warm-up (`get_constant_schedule_with_warmup`);
//! - linear: `max(0, (total − s) / (total − warmup))` (`get_linear_schedule_with_warmup`),
//!   decaying to `min_lr` instead of 0 when one is given;
//! - cosine: `0.5 (1 + cos(π · progress))` with `progress = (s − warmup) / (total − warmup)`,
//!   mapped onto `[min_lr / lr, 1]` (`get_cosine_with_min_lr_schedule_with_warmup`).

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    Constant,
    Linear,
    Cosine,
}

impl std::str::FromStr for ScheduleKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "constant" => Ok(ScheduleKind::Constant),
            "linear" => Ok(ScheduleKind::Linear),
            "cosine" => Ok(ScheduleKind::Cosine),
            _ => Err(format!("unknown schedule `{s}`: use constant, linear or cosine")),
        }
    }
}

/// A schedule over `total` optimizer steps; it is a pure function of the step, so its whole
/// state in a checkpoint is these fields and the step count.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub kind: ScheduleKind,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup: u64,
    pub total: u64,
}

impl Schedule {
    pub fn new(kind: ScheduleKind, lr: f64, min_lr: f64, warmup: u64, total: u64) -> Result<Self> {
        if !(lr > 0.0 && lr.is_finite()) {
            return Err(TrainError::Config(format!("--lr must be a positive number, got {lr}")));
        }
        if !(0.0..=lr).contains(&min_lr) {
            return Err(TrainError::Config(format!("--min-lr must lie in [0, --lr = {lr}], got {min_lr}")));
        }
        Ok(Schedule { kind, lr, min_lr, warmup, total })
    }

    /// The learning rate of optimizer step `s` (0-based).
    pub fn lr_at(&self, s: u64) -> f64 {
        self.lr * self.factor(s)
    }

    fn factor(&self, s: u64) -> f64 {
        if s < self.warmup {
            return s as f64 / self.warmup.max(1) as f64;
        }
        let floor = self.min_lr / self.lr;
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let progress = (s - self.warmup) as f64 / span;
        match self.kind {
            ScheduleKind::Constant => 1.0,
            ScheduleKind::Linear => floor + (1.0 - floor) * (1.0 - progress).max(0.0),
            ScheduleKind::Cosine => {
                let c = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                floor + (1.0 - floor) * c.max(0.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_decay() {
        let lin = Schedule::new(ScheduleKind::Linear, 1.0, 0.0, 2, 10).unwrap();
        let got: Vec<f64> = (0..11).map(|s| lin.lr_at(s)).collect();
        let want = [0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0];
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12), "{got:?}");
        let cos = Schedule::new(ScheduleKind::Cosine, 1.0, 0.1, 0, 4).unwrap();
        // factor = 0.1 + 0.9 · 0.5 (1 + cos(π s / 4))
        let want = [1.0, 0.1 + 0.9 * 0.5 * (1.0 + 0.5f64.sqrt()), 0.55, 0.1 + 0.9 * 0.5 * (1.0 - 0.5f64.sqrt()), 0.1];
        for (s, w) in want.iter().enumerate() {
            assert!((cos.lr_at(s as u64) - w).abs() < 1e-12, "cosine step {s}");
        }
        let c = Schedule::new(ScheduleKind::Constant, 2e-3, 0.0, 4, 100).unwrap();
        assert_eq!((c.lr_at(1), c.lr_at(4), c.lr_at(99)), (5e-4, 2e-3, 2e-3));
        assert!(Schedule::new(ScheduleKind::Linear, 1e-3, 1e-2, 0, 5).is_err());
    }
}
