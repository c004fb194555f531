//! `smollm3`: Llama where some layers skip RoPE (NoPE). `no_rope_layers[i]` is 1 where layer i
//! uses RoPE and 0 where it does not; without the list, every `no_rope_layer_interval`-th layer
//! (i + 1 divisible by it) is NoPE. With `use_sliding_window`, layers whose `layer_types` entry is
//! `sliding_attention` (by default the NoPE ones) attend within `sliding_window`.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    no_rope_layers: Option<Vec<u8>>,
    #[serde(default = "default_interval")]
    no_rope_layer_interval: usize,
    #[serde(default)]
    use_sliding_window: bool,
    layer_types: Option<Vec<String>>,
}

fn default_interval() -> usize {
    4
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let n = c.base.num_hidden_layers;
    let uses_rope: Vec<bool> = match &c.no_rope_layers {
        Some(v) if v.len() >= n => v[..n].iter().map(|&r| r != 0).collect(),
        Some(v) => return Err(ModelError::Config(format!("no_rope_layers has {} entries for {n} layers", v.len()))),
        None if c.no_rope_layer_interval == 0 => return Err(ModelError::Config("no_rope_layer_interval 0".into())),
        None => (0..n).map(|i| (i + 1) % c.no_rope_layer_interval != 0).collect(),
    };
    let window = c.base.sliding_window;
    let sliding: Vec<bool> = match &c.layer_types {
        Some(t) if t.len() == n => t.iter().map(|s| s == "sliding_attention").collect(),
        Some(t) => return Err(ModelError::Config(format!("layer_types has {} entries for {n} layers", t.len()))),
        None => uses_rope.iter().map(|r| c.use_sliding_window && window.is_some() && !r).collect(),
    };
    let glu = c.base.glu("silu")?;
    let mut spec = c.base.llama_spec("smollm3", glu, false, false, c.base.attention_bias)?;
    // smollm3's config class defaults pad_token_id to 128004.
    spec.padding_idx = crate::spec::padding_idx_or(cfg, 128004, spec.vocab);
    for (i, l) in spec.layers.iter_mut().enumerate() {
        if !uses_rope[i] {
            l.attn.rope = None;
        }
        l.attn.sliding_window = if c.use_sliding_window && sliding[i] { window } else { None };
    }
    Ok(spec)
}
