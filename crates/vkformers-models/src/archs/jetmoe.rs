//! `jetmoe`: every layer routes both halves. Attention is a mixture of attention heads
//! (`MoaSpec`: top-k of `num_local_experts` query/output projection experts per token, each
//! giving `num_key_value_heads` heads of `kv_channels` that share one fused `kv_proj`, K rows
//! first); the MLP is a routed MoE with GraniteMoE's packed experts (`input_linear [E, 2I, H]`,
//! gate rows first, `output_linear [E, H, I]`), its top-k-then-softmax router and an output
//! bias. The layer norms are built without the config's eps (transformers' `JetMoeRMSNorm(
//! hidden_size)`: 1e-6); the final norm takes `rms_norm_eps`. With `output_router_logits` the
//! load-balancing loss spans the attention and MLP routers of every layer.

use serde::Deserialize;
use serde_json::Value;

use super::common::{parse, BaseConfig};
use crate::error::{ModelError, Result};
use crate::moe::{MoaSpec, MoeSpec, Router};
use crate::spec::{MapEntry, MlpSpec, ModelSpec, Norm};

#[derive(Deserialize)]
struct Config {
    num_key_value_heads: usize,
    kv_channels: usize,
    num_local_experts: usize,
    num_experts_per_tok: usize,
    #[serde(default = "silu")]
    activation_function: String,
    #[serde(default)]
    output_router_logits: bool,
    #[serde(default = "aux_default")]
    aux_loss_coef: f64,
    #[serde(default = "tied")]
    tie_word_embeddings: bool,
}

fn silu() -> String {
    "silu".into()
}

fn aux_default() -> f64 {
    0.01
}

fn tied() -> bool {
    true
}

const ATTN: &str = "model.layers.{i}.self_attention";
const MLP: &str = "model.layers.{i}.mlp";

fn moa(c: &Config) -> MoaSpec {
    let e = |t: &str| format!("{ATTN}.experts.{t}");
    MoaSpec {
        experts: c.num_local_experts,
        top_k: c.num_experts_per_tok,
        router: e("router.layer.weight"),
        input: e("input_linear.weight"),
        output: e("output_linear.weight"),
        bias: e("bias"),
    }
}

fn moe(c: &Config, base: &BaseConfig, glu: vkformers_kernels::glu::Glu) -> MoeSpec {
    let names = super::granitemoe::names(MLP);
    let (experts, top_k) = (c.num_local_experts, c.num_experts_per_tok);
    MoeSpec {
        aux_loss_coef: c.output_router_logits.then_some(c.aux_loss_coef as f32),
        packed: true,
        out_bias: Some(format!("{MLP}.bias")),
        ..MoeSpec::plain(experts, top_k, base.intermediate_size, glu, Router::TopKSoftmax, names)
    }
}

/// `kv_proj [2·kv·D, H]` of every layer split into the internal k and v projections.
fn weight_map(layers: usize, kv_rows: usize) -> Vec<MapEntry> {
    (0..layers)
        .map(|i| {
            let a = ATTN.replace("{i}", &i.to_string());
            MapEntry {
                hf: format!("{a}.kv_proj.weight"),
                transpose: false,
                parts: vec![(format!("{a}.k_proj.weight"), kv_rows), (format!("{a}.v_proj.weight"), kv_rows)],
                groups: 1,
            }
        })
        .collect()
}

pub fn spec(cfg: &Value) -> Result<ModelSpec> {
    let c: Config = parse(cfg)?;
    let (kv, k) = (c.num_key_value_heads, c.num_experts_per_tok);
    if kv == 0 || k == 0 || k > c.num_local_experts || c.kv_channels == 0 {
        return Err(ModelError::Config(format!(
            "jetmoe attention of {kv} kv heads of {} values choosing {k} of {} experts",
            c.kv_channels, c.num_local_experts
        )));
    }
    // The Llama skeleton with transformers' derived sizes: k·kv query heads of kv_channels.
    let mut base_cfg = cfg.clone();
    base_cfg["num_attention_heads"] = Value::from(kv * k);
    base_cfg["head_dim"] = Value::from(c.kv_channels);
    base_cfg["hidden_act"] = Value::from(c.activation_function.clone());
    base_cfg["tie_word_embeddings"] = Value::from(c.tie_word_embeddings);
    let base: BaseConfig = parse(&base_cfg)?;
    let glu = base.glu("silu")?;
    let mut spec = base.llama_spec("jetmoe", glu, false, false, false)?;
    spec.layer_names = spec.layer_names.map(|n| n.replace(".self_attn.", ".self_attention."));
    let layer_norm = Norm::Rms { eps: 1e-6, unit_offset: false };
    let (moa, moe) = (moa(&c), moe(&c, &base, glu));
    moe.check()?;
    for l in &mut spec.layers {
        l.attn_norm = Some(layer_norm.clone());
        l.mlp_norm = Some(layer_norm.clone());
        l.attn.moa = Some(moa.clone());
        l.mlp = MlpSpec::Moe(Box::new(moe.clone()));
    }
    spec.weight_map = weight_map(spec.layers.len(), kv * c.kv_channels);
    Ok(spec)
}
