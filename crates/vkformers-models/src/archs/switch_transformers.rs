//! `switch_transformers`: T5 v1.0's encoder-decoder (relative position buckets shared from layer
//! 0, ReLU feed-forward under `mlp`, the tied head read at `d_model^-0.5`) whose every
//! `sparse_step`-th layer (`i % step == 1`, all with step 1) has a top-1 mixture of experts with
//! an expert capacity per sequence (`seq2seq::switch`). With `output_router_logits: true` in the
//! config the loss adds the router z and load-balancing losses (`seq2seq::router_loss`).

use serde_json::Value;

use super::encoder_common::activation;
use crate::error::{ModelError, Result};
use crate::seq2seq::switch::SwitchSpec;
use crate::spec::{MlpSpec, ModelSpec};

/// The sparse layers of a stack of `layers` with `step` (`encoder_sparse_step`, or derived from
/// `num_sparse_*_layers` as `SwitchTransformersConfig.__post_init__` does).
fn sparse(cfg: &Value, layers: usize, step_key: &str, count_key: &str) -> Vec<bool> {
    let step = step(cfg, layers, step_key, count_key);
    (0..layers).map(|i| step > 0 && (step == 1 || i % step == 1)).collect()
}

fn step(cfg: &Value, layers: usize, step_key: &str, count_key: &str) -> usize {
    let count = cfg.get(count_key).and_then(Value::as_u64).unwrap_or(3) as usize;
    let derived = layers.checked_div(count).unwrap_or(layers);
    cfg.get(step_key).and_then(Value::as_u64).map_or(derived, |v| v as usize)
}

pub fn switch_transformers(cfg: &Value) -> Result<ModelSpec> {
    let mut spec = super::t5::t5(cfg)?;
    let u = |k: &str| cfg.get(k).and_then(Value::as_u64).map(|v| v as usize);
    let act = activation(cfg.get("dense_act_fn").and_then(Value::as_str).unwrap_or("relu"))?;
    if cfg.get("router_bias").and_then(Value::as_bool) == Some(true) {
        return Err(ModelError::Unsupported("switch_transformers with router_bias".into()));
    }
    let d_ff = u("d_ff").unwrap_or(2048);
    let coef = |k: &str| cfg.get(k).and_then(Value::as_f64).unwrap_or(1e-3) as f32;
    let with_losses = cfg.get("output_router_logits").and_then(Value::as_bool) == Some(true);
    spec.model_type = "switch_transformers".into();
    let s = spec.seq2seq.as_mut().expect("t5 builds an encoder-decoder");
    let dense = |names: &mut crate::spec::LayerNames| {
        names.up = names.up.replace("DenseReluDense", "mlp");
        names.down = names.down.replace("DenseReluDense", "mlp");
    };
    dense(&mut s.encoder_names);
    dense(&mut spec.layer_names);
    for l in s.encoder_layers.iter_mut().chain(spec.layers.iter_mut()) {
        l.mlp = MlpSpec::Plain { intermediate: d_ff, act, bias: false };
    }
    let (enc, dec) = (s.encoder_layers.len(), spec.layers.len());
    s.switch = Some(SwitchSpec {
        experts: u("num_experts").unwrap_or(8),
        capacity: u("expert_capacity").unwrap_or(64),
        d_ff,
        act,
        encoder_sparse: sparse(cfg, enc, "encoder_sparse_step", "num_sparse_encoder_layers"),
        decoder_sparse: sparse(cfg, dec, "decoder_sparse_step", "num_sparse_decoder_layers"),
        router: [
            "encoder.block.{i}.layer.1.mlp.router.classifier".into(),
            "decoder.block.{i}.layer.2.mlp.router.classifier".into(),
        ],
        expert: [
            "encoder.block.{i}.layer.1.mlp.experts.expert_{e}".into(),
            "decoder.block.{i}.layer.2.mlp.experts.expert_{e}".into(),
        ],
        losses: with_losses.then(|| (coef("router_z_loss_coef"), coef("router_aux_loss_coef"))),
        loss_stacks: [
            step(cfg, enc, "encoder_sparse_step", "num_sparse_encoder_layers") > 1,
            step(cfg, dec, "decoder_sparse_step", "num_sparse_decoder_layers") > 1,
        ],
    });
    Ok(spec)
}
