//! The registry: every supported `model_type`, its family, and the function that turns its
//! `config.json` into a `ModelSpec`. The only place that looks at `model_type`.

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::spec::ModelSpec;

mod albert;
mod apertus;
mod arcee;
mod axk2;
mod bart;
mod bart_family;
mod bart_layers;
mod bert;
mod bert_defaults;
mod bert_family;
mod bert_heads;
mod bert_layout;
mod biogpt;
mod bitnet;
mod bloom;
mod check;
mod cohere;
mod cohere2;
mod cohere_compass;
mod common;
mod ctrl;
mod dbrx;
mod deberta;
mod deberta_config;
mod deberta_v2;
mod deepseek;
mod deepseek_moe;
mod distilbert;
mod electra;
pub(crate) mod encoder_common;
mod encoder_heads;
mod ernie4_5;
mod ernie4_5_moe;
mod esm;
mod eurobert;
mod exaone4;
mod falcon;
mod gemma;
mod gemma2;
mod gemma3;
mod glm;
mod glm4_moe;
mod gpt2;
mod gpt_bigcode;
mod gpt_neo;
mod gpt_neox;
mod gpt_neox_japanese;
mod gpt_oss;
mod gptj;
mod granite;
mod granite_swa;
mod granitemoe;
mod helium;
mod hunyuan_moe;
mod hyperclovax;
mod jetmoe;
mod layer_types;
mod llama;
mod llama4;
mod ln_common;
mod longcat;
mod mellum;
mod minicpm3;
mod ministral;
mod mistral4;
mod mixtral;
mod mla_common;
mod mobilebert;
mod modernbert;
mod modernbert_config;
mod moe_common;
mod mpnet;
mod mpt;
mod multimodal;
mod nanochat;
mod nomic_bert;
mod olmo2;
mod olmo3;
mod olmoe;
mod openai_gpt;
mod opt;
mod persimmon;
mod phi;
mod phi3;
mod phimoe;
mod qwen;
mod qwen_moe;
mod roformer;
mod seed_oss;
mod smollm3;
mod stablelm;
mod starcoder2;
mod switch_transformers;
mod t5;
mod t5_layers;
mod t5gemma;
mod vaultgemma;
mod xglm;
mod youtu;

/// One registered architecture.
pub struct Arch {
    pub model_type: &'static str,
    pub family: &'static str,
    build: fn(&Value) -> Result<ModelSpec>,
}

/// Every registered architecture.
pub const ARCHS: &[Arch] = &[
    Arch { model_type: "llama", family: "llama-like decoder", build: |c| llama::spec("llama", c) },
    Arch { model_type: "mistral", family: "llama-like decoder", build: |c| llama::spec("mistral", c) },
    Arch { model_type: "qwen2", family: "llama-like decoder", build: qwen::qwen2 },
    Arch { model_type: "qwen3", family: "llama-like decoder", build: qwen::qwen3 },
    Arch { model_type: "gemma", family: "llama-like decoder", build: gemma::spec },
    Arch { model_type: "olmo2", family: "llama-like decoder", build: olmo2::spec },
    Arch { model_type: "granite", family: "llama-like decoder", build: granite::spec },
    Arch { model_type: "smollm3", family: "llama-like decoder", build: smollm3::spec },
    Arch { model_type: "gemma2", family: "llama-like decoder", build: gemma2::spec },
    Arch { model_type: "gemma3_text", family: "llama-like decoder", build: gemma3::spec },
    Arch { model_type: "gpt2", family: "absolute-position GPT", build: gpt2::spec },
    Arch { model_type: "opt", family: "absolute-position GPT", build: opt::spec },
    Arch { model_type: "starcoder2", family: "layernorm rotary decoder", build: starcoder2::spec },
    Arch { model_type: "phi", family: "layernorm rotary decoder", build: phi::spec },
    Arch { model_type: "phi3", family: "llama-like decoder", build: phi3::spec },
    Arch { model_type: "gpt_neox", family: "layernorm rotary decoder", build: gpt_neox::spec },
    Arch { model_type: "cohere", family: "layernorm rotary decoder", build: cohere::spec },
    Arch { model_type: "stablelm", family: "layernorm rotary decoder", build: stablelm::spec },
    Arch { model_type: "bloom", family: "ALiBi decoder", build: bloom::spec },
    Arch { model_type: "falcon", family: "layernorm rotary decoder", build: falcon::spec },
    Arch { model_type: "ministral", family: "llama-like decoder", build: ministral::ministral },
    Arch { model_type: "cwm", family: "llama-like decoder", build: ministral::cwm },
    Arch { model_type: "arcee", family: "llama-like decoder", build: arcee::spec },
    Arch { model_type: "helium", family: "llama-like decoder", build: helium::spec },
    Arch { model_type: "glm", family: "llama-like decoder", build: glm::glm },
    Arch { model_type: "glm4", family: "llama-like decoder", build: glm::glm4 },
    Arch { model_type: "seed_oss", family: "llama-like decoder", build: seed_oss::spec },
    Arch { model_type: "olmo3", family: "llama-like decoder", build: olmo3::spec },
    Arch { model_type: "exaone4", family: "llama-like decoder", build: exaone4::spec },
    Arch { model_type: "ernie4_5", family: "llama-like decoder", build: ernie4_5::spec },
    Arch { model_type: "hyperclovax", family: "llama-like decoder", build: hyperclovax::spec },
    Arch { model_type: "jais2", family: "layernorm rotary decoder", build: arcee::jais2 },
    Arch { model_type: "vaultgemma", family: "llama-like decoder", build: vaultgemma::spec },
    Arch { model_type: "cohere2", family: "layernorm rotary decoder", build: cohere2::spec },
    Arch { model_type: "persimmon", family: "layernorm rotary decoder", build: persimmon::spec },
    Arch { model_type: "gpt_bigcode", family: "absolute-position GPT", build: gpt_bigcode::gpt_bigcode },
    Arch { model_type: "gpt-sw3", family: "absolute-position GPT", build: gpt_bigcode::gpt_sw3 },
    Arch { model_type: "gptj", family: "layernorm rotary decoder", build: gptj::gptj },
    Arch { model_type: "codegen", family: "layernorm rotary decoder", build: gptj::codegen },
    Arch { model_type: "gpt_neo", family: "absolute-position GPT", build: gpt_neo::spec },
    // Encoders (masked LM), run by `encoder::forward`.
    Arch { model_type: "bert", family: "BERT-family encoder", build: bert_family::bert },
    Arch { model_type: "roberta", family: "BERT-family encoder", build: bert_family::roberta },
    Arch { model_type: "xlm-roberta", family: "BERT-family encoder", build: bert_family::xlm_roberta },
    Arch { model_type: "camembert", family: "BERT-family encoder", build: bert_family::camembert },
    Arch { model_type: "data2vec-text", family: "BERT-family encoder", build: bert_family::data2vec_text },
    Arch { model_type: "ernie", family: "BERT-family encoder", build: bert_family::ernie },
    Arch {
        model_type: "roberta-prelayernorm",
        family: "BERT-family encoder",
        build: bert_family::roberta_prelayernorm,
    },
    Arch { model_type: "xlm-roberta-xl", family: "BERT-family encoder", build: bert_family::xlm_roberta_xl },
    Arch { model_type: "megatron-bert", family: "BERT-family encoder", build: bert_family::megatron_bert },
    Arch { model_type: "distilbert", family: "BERT-family encoder", build: distilbert::spec },
    Arch { model_type: "electra", family: "BERT-family encoder", build: electra::spec },
    Arch { model_type: "roformer", family: "BERT-family encoder", build: roformer::spec },
    Arch { model_type: "nomic_bert", family: "BERT-family encoder", build: nomic_bert::spec },
    Arch { model_type: "esm", family: "BERT-family encoder", build: esm::spec },
    Arch { model_type: "mpnet", family: "BERT-family encoder", build: mpnet::spec },
    Arch { model_type: "deberta-v2", family: "BERT-family encoder", build: deberta_v2::spec },
    Arch { model_type: "deberta", family: "BERT-family encoder", build: deberta::spec },
    Arch { model_type: "mobilebert", family: "BERT-family encoder", build: mobilebert::spec },
    Arch { model_type: "albert", family: "BERT-family encoder", build: albert::spec },
    Arch { model_type: "eurobert", family: "BERT-family encoder", build: eurobert::spec },
    Arch { model_type: "modernbert", family: "BERT-family encoder", build: modernbert::spec },
    Arch { model_type: "biogpt", family: "absolute-position GPT", build: biogpt::spec },
    Arch { model_type: "gpt_neox_japanese", family: "layernorm rotary decoder", build: gpt_neox_japanese::spec },
    Arch { model_type: "openai-gpt", family: "absolute-position GPT", build: openai_gpt::spec },
    Arch { model_type: "xglm", family: "absolute-position GPT", build: xglm::spec },
    Arch { model_type: "ctrl", family: "absolute-position GPT", build: ctrl::spec },
    Arch { model_type: "nemotron", family: "layernorm rotary decoder", build: arcee::nemotron },
    Arch { model_type: "olmo", family: "llama-like decoder", build: olmo2::olmo },
    Arch { model_type: "mpt", family: "ALiBi decoder", build: mpt::spec },
    Arch { model_type: "bitnet", family: "llama-like decoder", build: bitnet::spec },
    Arch { model_type: "ministral3", family: "llama-like decoder", build: ministral::ministral3 },
    Arch { model_type: "cohere_compass_text", family: "layernorm rotary decoder", build: cohere_compass::text },
    Arch { model_type: "apertus", family: "llama-like decoder", build: apertus::spec },
    Arch { model_type: "granite_swa", family: "llama-like decoder", build: granite_swa::spec },
    Arch { model_type: "gemma3", family: "image-text wrapper (text backbone)", build: multimodal::gemma3 },
    Arch { model_type: "mistral3", family: "image-text wrapper (text backbone)", build: multimodal::mistral3 },
    Arch { model_type: "nanochat", family: "llama-like decoder", build: nanochat::nanochat },
    Arch { model_type: "hunyuan_v1_dense", family: "llama-like decoder", build: nanochat::hunyuan_v1_dense },
    // Routed mixtures of experts (issue 17).
    Arch { model_type: "mixtral", family: "routed MoE decoder", build: mixtral::spec },
    Arch { model_type: "qwen2_moe", family: "routed MoE decoder", build: qwen_moe::qwen2_moe },
    Arch { model_type: "qwen3_moe", family: "routed MoE decoder", build: qwen_moe::qwen3_moe },
    Arch { model_type: "olmoe", family: "routed MoE decoder", build: olmoe::spec },
    Arch { model_type: "mellum", family: "routed MoE decoder", build: mellum::spec },
    Arch { model_type: "glm4_moe", family: "routed MoE decoder", build: glm4_moe::glm4_moe },
    Arch { model_type: "dots1", family: "routed MoE decoder", build: glm4_moe::dots1 },
    Arch { model_type: "hunyuan_v1_moe", family: "routed MoE decoder", build: hunyuan_moe::spec },
    Arch { model_type: "ernie4_5_moe", family: "routed MoE decoder", build: ernie4_5_moe::spec },
    Arch { model_type: "phimoe", family: "routed MoE decoder", build: phimoe::spec },
    Arch { model_type: "dbrx", family: "routed MoE decoder", build: dbrx::spec },
    Arch { model_type: "gpt_oss", family: "routed MoE decoder", build: gpt_oss::spec },
    Arch { model_type: "granitemoe", family: "routed MoE decoder", build: granitemoe::granitemoe },
    Arch { model_type: "granitemoeshared", family: "routed MoE decoder", build: granitemoe::granitemoeshared },
    Arch { model_type: "jetmoe", family: "routed MoE decoder", build: jetmoe::spec },
    Arch { model_type: "llama4_text", family: "routed MoE decoder", build: llama4::spec },
    // Encoder-decoders (issue 20), run by `seq2seq::forward_loss`.
    Arch { model_type: "t5", family: "encoder-decoder", build: t5::t5 },
    Arch { model_type: "mt5", family: "encoder-decoder", build: t5::mt5 },
    Arch { model_type: "umt5", family: "encoder-decoder", build: t5::umt5 },
    Arch { model_type: "t5gemma", family: "encoder-decoder", build: t5gemma::t5gemma },
    Arch {
        model_type: "switch_transformers",
        family: "encoder-decoder",
        build: switch_transformers::switch_transformers,
    },
    Arch { model_type: "bart", family: "encoder-decoder", build: bart::bart },
    Arch { model_type: "mbart", family: "encoder-decoder", build: bart_family::mbart },
    Arch { model_type: "plbart", family: "encoder-decoder", build: bart_family::plbart },
    Arch { model_type: "blenderbot", family: "encoder-decoder", build: bart_family::blenderbot },
    Arch { model_type: "blenderbot-small", family: "encoder-decoder", build: bart_family::blenderbot_small },
    Arch { model_type: "marian", family: "encoder-decoder", build: bart_family::marian },
    Arch { model_type: "pegasus", family: "encoder-decoder", build: bart_family::pegasus },
    Arch { model_type: "m2m_100", family: "encoder-decoder", build: bart_family::m2m_100 },
    // Multi-head latent attention (issue 18).
    Arch { model_type: "minicpm3", family: "latent-attention decoder", build: minicpm3::spec },
    Arch { model_type: "deepseek_v2", family: "latent-attention MoE decoder", build: deepseek::deepseek_v2 },
    Arch { model_type: "deepseek_v3", family: "latent-attention MoE decoder", build: deepseek::deepseek_v3 },
    Arch { model_type: "youtu", family: "latent-attention decoder", build: youtu::spec },
    Arch { model_type: "axk1", family: "latent-attention MoE decoder", build: deepseek::axk1 },
    Arch { model_type: "sarvam_mla", family: "latent-attention MoE decoder", build: deepseek::sarvam_mla },
    Arch { model_type: "glm4_moe_lite", family: "latent-attention MoE decoder", build: deepseek::glm4_moe_lite },
    Arch { model_type: "mistral4", family: "latent-attention MoE decoder", build: mistral4::mistral4 },
    Arch { model_type: "longcat_flash", family: "latent-attention MoE decoder", build: longcat::spec },
    Arch { model_type: "axk2", family: "latent-attention MoE decoder", build: axk2::spec },
];

/// The spec of a parsed `config.json`.
pub fn spec_from_config(cfg: &Value) -> Result<ModelSpec> {
    let mt = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| ModelError::Config("no `model_type` field".into()))?;
    let arch = ARCHS.iter().find(|a| a.model_type == mt).ok_or_else(|| ModelError::UnknownModelType(mt.into()))?;
    check::config_fields(cfg)?;
    let spec = (arch.build)(cfg)?;
    check::spec(&spec)?;
    check::head(cfg, &spec)?;
    Ok(spec)
}
