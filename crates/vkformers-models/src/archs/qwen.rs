//! `qwen2`: Llama with q/k/v biases and an optional sliding window (`use_sliding_window`).
//! `qwen3`: Llama with RMSNorm over each head's q and k (QK-norm) and an explicit `head_dim`.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

#[derive(Deserialize)]
struct Config {
    #[serde(flatten)]
    base: BaseConfig,
    #[serde(default)]
    use_sliding_window: bool,
    max_window_layers: Option<usize>,
}

fn window_layers(spec: &mut ModelSpec, c: &Config) -> Result<()> {
    let window = c.base.sliding_window;
    for (i, l) in spec.layers.iter_mut().enumerate() {
        // transformers applies the window to layers at index >= max_window_layers.
        let on = c.use_sliding_window && i >= c.max_window_layers.unwrap_or(0);
        l.attn.sliding_window = if on { window } else { None };
    }
    if c.use_sliding_window && window.is_none() {
        return Err(ModelError::Config("use_sliding_window without sliding_window".into()));
    }
    Ok(())
}

pub fn qwen2(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = c.base.llama_spec("qwen2", c.base.glu("silu")?, false, false, true)?;
    window_layers(&mut spec, &c)?;
    Ok(spec)
}

pub fn qwen3(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let mut spec = c.base.llama_spec("qwen3", c.base.glu("silu")?, false, true, c.base.attention_bias)?;
    window_layers(&mut spec, &c)?;
    Ok(spec)
}
