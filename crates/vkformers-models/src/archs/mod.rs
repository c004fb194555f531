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

/// The families the registry names (`vkformers architectures` prints them).
const LLAMA: &str = "llama-like decoder";
const GPT: &str = "absolute-position GPT";
const LN_ROTARY: &str = "layernorm rotary decoder";
const ALIBI: &str = "ALiBi decoder";
const ENCODER: &str = "BERT-family encoder";
const WRAPPER: &str = "image-text wrapper (text backbone)";
const MOE: &str = "routed MoE decoder";
const SEQ2SEQ: &str = "encoder-decoder";
const MLA: &str = "latent-attention decoder";
const MLA_MOE: &str = "latent-attention MoE decoder";

const fn arch(model_type: &'static str, family: &'static str, build: fn(&Value) -> Result<ModelSpec>) -> Arch {
    Arch { model_type, family, build }
}

/// Every registered architecture.
pub const ARCHS: &[Arch] = &[
    arch("llama", LLAMA, |c| llama::spec("llama", c)),
    arch("mistral", LLAMA, |c| llama::spec("mistral", c)),
    arch("qwen2", LLAMA, qwen::qwen2),
    arch("qwen3", LLAMA, qwen::qwen3),
    arch("gemma", LLAMA, gemma::spec),
    arch("olmo2", LLAMA, olmo2::spec),
    arch("granite", LLAMA, granite::spec),
    arch("smollm3", LLAMA, smollm3::spec),
    arch("gemma2", LLAMA, gemma2::spec),
    arch("gemma3_text", LLAMA, gemma3::spec),
    arch("gpt2", GPT, gpt2::spec),
    arch("opt", GPT, opt::spec),
    arch("starcoder2", LN_ROTARY, starcoder2::spec),
    arch("phi", LN_ROTARY, phi::spec),
    arch("phi3", LLAMA, phi3::spec),
    arch("gpt_neox", LN_ROTARY, gpt_neox::spec),
    arch("cohere", LN_ROTARY, cohere::spec),
    arch("stablelm", LN_ROTARY, stablelm::spec),
    arch("bloom", ALIBI, bloom::spec),
    arch("falcon", LN_ROTARY, falcon::spec),
    arch("ministral", LLAMA, ministral::ministral),
    arch("cwm", LLAMA, ministral::cwm),
    arch("arcee", LLAMA, arcee::spec),
    arch("helium", LLAMA, helium::spec),
    arch("glm", LLAMA, glm::glm),
    arch("glm4", LLAMA, glm::glm4),
    arch("seed_oss", LLAMA, seed_oss::spec),
    arch("olmo3", LLAMA, olmo3::spec),
    arch("exaone4", LLAMA, exaone4::spec),
    arch("ernie4_5", LLAMA, ernie4_5::spec),
    arch("hyperclovax", LLAMA, hyperclovax::spec),
    arch("jais2", LN_ROTARY, arcee::jais2),
    arch("vaultgemma", LLAMA, vaultgemma::spec),
    arch("cohere2", LN_ROTARY, cohere2::spec),
    arch("persimmon", LN_ROTARY, persimmon::spec),
    arch("gpt_bigcode", GPT, gpt_bigcode::gpt_bigcode),
    arch("gpt-sw3", GPT, gpt_bigcode::gpt_sw3),
    arch("gptj", LN_ROTARY, gptj::gptj),
    arch("codegen", LN_ROTARY, gptj::codegen),
    arch("gpt_neo", GPT, gpt_neo::spec),
    // Encoders (masked LM), run by `encoder::forward`.
    arch("bert", ENCODER, bert_family::bert),
    arch("roberta", ENCODER, bert_family::roberta),
    arch("xlm-roberta", ENCODER, bert_family::xlm_roberta),
    arch("camembert", ENCODER, bert_family::camembert),
    arch("data2vec-text", ENCODER, bert_family::data2vec_text),
    arch("ernie", ENCODER, bert_family::ernie),
    arch("roberta-prelayernorm", ENCODER, bert_family::roberta_prelayernorm),
    arch("xlm-roberta-xl", ENCODER, bert_family::xlm_roberta_xl),
    arch("megatron-bert", ENCODER, bert_family::megatron_bert),
    arch("distilbert", ENCODER, distilbert::spec),
    arch("electra", ENCODER, electra::spec),
    arch("roformer", ENCODER, roformer::spec),
    arch("nomic_bert", ENCODER, nomic_bert::spec),
    arch("esm", ENCODER, esm::spec),
    arch("mpnet", ENCODER, mpnet::spec),
    arch("deberta-v2", ENCODER, deberta_v2::spec),
    arch("deberta", ENCODER, deberta::spec),
    arch("mobilebert", ENCODER, mobilebert::spec),
    arch("albert", ENCODER, albert::spec),
    arch("eurobert", ENCODER, eurobert::spec),
    arch("modernbert", ENCODER, modernbert::spec),
    arch("biogpt", GPT, biogpt::spec),
    arch("gpt_neox_japanese", LN_ROTARY, gpt_neox_japanese::spec),
    arch("openai-gpt", GPT, openai_gpt::spec),
    arch("xglm", GPT, xglm::spec),
    arch("ctrl", GPT, ctrl::spec),
    arch("nemotron", LN_ROTARY, arcee::nemotron),
    arch("olmo", LLAMA, olmo2::olmo),
    arch("mpt", ALIBI, mpt::spec),
    arch("bitnet", LLAMA, bitnet::spec),
    arch("ministral3", LLAMA, ministral::ministral3),
    arch("cohere_compass_text", LN_ROTARY, cohere_compass::text),
    arch("apertus", LLAMA, apertus::spec),
    arch("granite_swa", LLAMA, granite_swa::spec),
    arch("gemma3", WRAPPER, multimodal::gemma3),
    arch("mistral3", WRAPPER, multimodal::mistral3),
    arch("nanochat", LLAMA, nanochat::nanochat),
    arch("hunyuan_v1_dense", LLAMA, nanochat::hunyuan_v1_dense),
    // Routed mixtures of experts (issue 17).
    arch("mixtral", MOE, mixtral::spec),
    arch("qwen2_moe", MOE, qwen_moe::qwen2_moe),
    arch("qwen3_moe", MOE, qwen_moe::qwen3_moe),
    arch("olmoe", MOE, olmoe::spec),
    arch("mellum", MOE, mellum::spec),
    arch("glm4_moe", MOE, glm4_moe::glm4_moe),
    arch("dots1", MOE, glm4_moe::dots1),
    arch("hunyuan_v1_moe", MOE, hunyuan_moe::spec),
    arch("ernie4_5_moe", MOE, ernie4_5_moe::spec),
    arch("phimoe", MOE, phimoe::spec),
    arch("dbrx", MOE, dbrx::spec),
    arch("gpt_oss", MOE, gpt_oss::spec),
    arch("granitemoe", MOE, granitemoe::granitemoe),
    arch("granitemoeshared", MOE, granitemoe::granitemoeshared),
    arch("jetmoe", MOE, jetmoe::spec),
    arch("llama4_text", MOE, llama4::spec),
    // Encoder-decoders (issue 20), run by `seq2seq::forward_loss`.
    arch("t5", SEQ2SEQ, t5::t5),
    arch("mt5", SEQ2SEQ, t5::mt5),
    arch("umt5", SEQ2SEQ, t5::umt5),
    arch("t5gemma", SEQ2SEQ, t5gemma::t5gemma),
    arch("switch_transformers", SEQ2SEQ, switch_transformers::switch_transformers),
    arch("bart", SEQ2SEQ, bart::bart),
    arch("mbart", SEQ2SEQ, bart_family::mbart),
    arch("plbart", SEQ2SEQ, bart_family::plbart),
    arch("blenderbot", SEQ2SEQ, bart_family::blenderbot),
    arch("blenderbot-small", SEQ2SEQ, bart_family::blenderbot_small),
    arch("marian", SEQ2SEQ, bart_family::marian),
    arch("pegasus", SEQ2SEQ, bart_family::pegasus),
    arch("m2m_100", SEQ2SEQ, bart_family::m2m_100),
    // Multi-head latent attention (issue 18).
    arch("minicpm3", MLA, minicpm3::spec),
    arch("deepseek_v2", MLA_MOE, deepseek::deepseek_v2),
    arch("deepseek_v3", MLA_MOE, deepseek::deepseek_v3),
    arch("youtu", MLA, youtu::spec),
    arch("axk1", MLA_MOE, deepseek::axk1),
    arch("sarvam_mla", MLA_MOE, deepseek::sarvam_mla),
    arch("glm4_moe_lite", MLA_MOE, deepseek::glm4_moe_lite),
    arch("mistral4", MLA_MOE, mistral4::mistral4),
    arch("longcat_flash", MLA_MOE, longcat::spec),
    arch("axk2", MLA_MOE, axk2::spec),
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
