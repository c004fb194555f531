//! `seed_oss` (ByteDance Seed-OSS): Llama with q/k/v biases (`attention_bias`, on by default)
//! and a separate output bias switch (`attention_out_bias`, off by default).

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::Result;
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default = "yes")]
    attention_bias: bool,
    #[serde(default)]
    attention_out_bias: bool,
}

fn yes() -> bool {
    true
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = c.base.llama_spec("seed_oss", c.base.glu("silu")?, false, false, c.attention_bias)?;
    // SeedOssConfig defaults pad_token_id to 1.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 1, spec.vocab);
    for l in &mut spec.layers {
        l.attn.out_bias = c.attention_out_bias;
        l.attn.sliding_window = None;
    }
    Ok(spec)
}
