//! `--bf16`, `--fp16`, `--fp32` (the Trainer's names) and `--profile`, shared by `train`,
//! `finetune`, `eval` and `generate`.

use vkformers_tensor::{DType, Graph, Profile};
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

/// `1 step`, `2 steps`, `2 batches`.
pub(crate) fn plural(n: u64, unit: &str) -> String {
    let suffix = match (n, unit.ends_with("ch") || unit.ends_with('s')) {
        (1, _) => "",
        (_, true) => "es",
        _ => "s",
    };
    format!("{n} {unit}{suffix}")
}

/// A storage type named as transformers names it (`float32`, `bfloat16`, `float16`) or
/// shortly (`f32`/`fp32`, `bf16`, `f16`/`fp16`); `auto` is `None`.
pub fn parse_dtype(s: &str) -> anyhow::Result<Option<DType>> {
    Ok(Some(match s {
        "auto" => return Ok(None),
        "float32" | "f32" | "fp32" => DType::F32,
        "bfloat16" | "bf16" => DType::BF16,
        "float16" | "f16" | "fp16" => DType::F16,
        other => anyhow::bail!("unknown dtype `{other}`: use auto, float32, bfloat16 or float16"),
    }))
}

/// `--dtype` of the inference commands: the type weights keep on the device.
#[derive(clap::Args, Clone, Debug)]
pub struct DtypeArgs {
    /// Weights' type on the device: auto (the folder's `dtype`/`torch_dtype`, as
    /// `from_pretrained(dtype="auto")`), float32, bfloat16 or float16. 16-bit keeps the projection
    /// weights in that type (products widen them to f32 math); embeddings and norms stay f32.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
}

impl DtypeArgs {
    /// The chosen type, `auto` resolved from the folder's config.
    pub fn resolve(&self, dir: &std::path::Path) -> anyhow::Result<DType> {
        if let Some(d) = parse_dtype(&self.dtype)? {
            return Ok(d);
        }
        let config = vkformers_io::read_json(dir.join("config.json"))?;
        let name = config.get("dtype").or_else(|| config.get("torch_dtype")).and_then(|v| v.as_str());
        Ok(name.map(parse_dtype).transpose()?.flatten().unwrap_or(DType::F32))
    }
}
