//! `OUT/metrics.jsonl`: one JSON object per optimizer step (step, loss, lr, grad_norm,
//! tokens_per_s, and eval_loss when evaluated).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Result, TrainError};
use crate::trainer::StepStats;

pub struct MetricsLog {
    path: PathBuf,
    file: std::fs::File,
}

impl MetricsLog {
    /// Opens `path` for appending. Lines of steps after `keep_through` (left by a run that
    /// went on past the checkpoint being resumed) are dropped so no step is logged twice.
    pub fn open(path: &Path, keep_through: u64) -> Result<Self> {
        let kept: Vec<String> = match std::fs::read_to_string(path) {
            Ok(text) => text
                .lines()
                .filter(|l| {
                    let step = serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["step"].as_u64());
                    step.is_some_and(|s| s <= keep_through)
                })
                .map(String::from)
                .collect(),
            Err(_) => Vec::new(),
        };
        let body: String = kept.iter().map(|l| format!("{l}\n")).collect();
        vkformers_io::write_atomic(path, |w| w.write_all(body.as_bytes()))?;
        let file = std::fs::OpenOptions::new().append(true).open(path).map_err(|e| TrainError::file(path, e))?;
        Ok(MetricsLog { path: path.to_path_buf(), file })
    }

    /// Appends one step's line.
    pub fn write(&mut self, s: &StepStats) -> Result<()> {
        let r = &s.record;
        let mut v = json!({
            "step": r.step,
            "loss": r.loss,
            "lr": r.lr,
            "grad_norm": r.grad_norm,
            "tokens": s.tokens,
            "tokens_per_s": s.tokens as f64 / s.seconds.max(1e-9),
            "device_memory_peak_bytes": s.device_memory_peak_bytes,
        });
        if let Some(scale) = s.loss_scale {
            v["loss_scale"] = json!(scale);
            v["skipped"] = json!(s.skipped);
        }
        if let Some(e) = r.eval_loss {
            v["eval_loss"] = json!(e);
        }
        if let Some(a) = s.aux_loss {
            // The MoE load-balancing term inside `loss` (coefficient times the auxiliary loss).
            v["aux_loss"] = json!(a);
        }
        writeln!(self.file, "{v}").map_err(|e| TrainError::file(&self.path, e))?;
        self.file.flush().map_err(|e| TrainError::file(&self.path, e))
    }
}
