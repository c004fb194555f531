//! `--bf16`, `--fp16`, `--fp32` (the Trainer's names) and `--profile`, shared by `train`,
//! `finetune`, `eval` and `generate`.

use vkformers_tensor::{Graph, Profile};
use vkformers_train::Precision;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct PrecisionArgs {
    /// Mixed precision in bfloat16: f32 master weights and moments, products and attention on
    /// 16-bit copies (tensor cores where the device has them). Default where the device has bf16
    /// cooperative matrices.
    #[arg(long, conflicts_with_all = ["fp16", "fp32"])]
    pub bf16: bool,
    /// Mixed precision in float16 with dynamic loss scaling (torch.amp.GradScaler's rules).
    #[arg(long, conflicts_with = "fp32")]
    pub fp16: bool,
    /// Everything in f32 (the default on devices without bf16 tensor cores).
    #[arg(long)]
    pub fp32: bool,
}

impl PrecisionArgs {
    /// The precision these flags choose on the graph's device.
    pub fn precision(&self, g: &Graph<'_>) -> Precision {
        Precision::from_flags(self.bf16, self.fp16, self.fp32, g.ctx().caps())
    }
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct ProfileArgs {
    /// Time every kernel on the device and print a table (calls, ms, share, mean µs) at the end.
    #[arg(long)]
    pub profile: bool,
}

impl ProfileArgs {
    /// Starts profiling on `g` when asked.
    pub fn start(&self, g: &Graph<'_>) {
        if self.profile {
            g.set_profiling(true);
        }
    }

    /// Prints the table of what `g` timed since `start`, divided by `per` (`unit`s: steps,
    /// tokens, batches), to standard error.
    pub fn report(&self, g: &Graph<'_>, per: u64, unit: &str) -> anyhow::Result<Option<Profile>> {
        if !self.profile {
            return Ok(None);
        }
        let p = g.take_profile()?.unwrap_or_default();
        eprintln!("\nprofile ({} on {}):\n{}", g.ctx().caps().name, plural(per, unit), p.table(per, unit));
        Ok(Some(p))
    }
}

fn plural(n: u64, unit: &str) -> String {
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}
