//! Parity with `transformers` on the fixtures of `tools/parity/make_fixtures.py` (see
//! `vkformers_models::parity` for what is compared and the tolerances), on every Vulkan device
//! with the validation layer.

use std::path::PathBuf;

use vkformers_models::parity::{check, fixtures, TOL_GRAD, TOL_GRAD_ZERO, TOL_LOGITS, TOL_STEP};
use vkformers_vk::testing::on_every_device;

fn root() -> PathBuf {
    std::env::var_os("VKFORMERS_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures"))
}

fn check_fixture(name: &str) {
    on_every_device(&format!("parity {name}"), |ctx| {
        let r = check(ctx, &root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Shown with --nocapture: the margins each fixture keeps to its tolerances.
        eprintln!("{name}: {}", serde_json::to_string(&r).unwrap_or_default());
        assert!(r.logits_rel <= TOL_LOGITS, "{name}: logits relative error {:e}", r.logits_rel);
        assert!(r.loss_rel <= TOL_LOGITS, "{name}: loss relative error {:e}", r.loss_rel);
        assert!(r.grad_rel <= TOL_GRAD, "{name}: worst gradient relative error {:e}", r.grad_rel);
        assert!(r.grad_zero_abs <= TOL_GRAD_ZERO, "{name}: gradients zero in theory are {:e} off", r.grad_zero_abs);
        assert!(r.step2_abs <= TOL_STEP, "{name}: worst |Δ| after two AdamW steps {:e}", r.step2_abs);
        assert!(r.step2_ill_abs <= 2e-3, "{name}: ill-conditioned elements moved {:e}", r.step2_ill_abs);
        Ok(())
    });
}

macro_rules! parity {
    ($($test:ident: $name:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            check_fixture($name);
        }
    )*};
}

parity! {
    llama: "llama",
    llama_llama3_tied: "llama_llama3",
    // pad_token_id 53 occurs unmasked in the batch: its embedding row gets only the tied head's gradient.
    llama_padding: "llama_padding",
    mistral: "mistral",
    qwen2: "qwen2",
    qwen3: "qwen3",
    gemma: "gemma",
    gpt2: "gpt2",
    olmo2: "olmo2",
    granite: "granite",
    smollm3: "smollm3",
    gemma2: "gemma2",
    gemma3_text: "gemma3_text",
    starcoder2: "starcoder2",
    phi: "phi",
    gpt_neox: "gpt_neox",
    cohere: "cohere",
    stablelm: "stablelm",
    stablelm_parallel: "stablelm_parallel",
    stablelm_qknorm: "stablelm_qknorm",
    cohere_qknorm: "cohere_qknorm",
    bloom: "bloom",
    falcon: "falcon",
    falcon_alibi: "falcon_alibi",
    phi3: "phi3",
    opt: "opt",
    // Wave 2 (issue 16): config parsers on existing features.
    ministral: "ministral",
    cwm: "cwm",
    arcee: "arcee",
    helium: "helium",
    glm: "glm",
    glm4: "glm4",
    seed_oss: "seed_oss",
    olmo3: "olmo3",
    exaone4: "exaone4",
    ernie4_5: "ernie4_5",
    hyperclovax: "hyperclovax",
    jais2: "jais2",
    vaultgemma: "vaultgemma",
    cohere2: "cohere2",
    persimmon: "persimmon",
    gpt_bigcode: "gpt_bigcode",
    gpt_bigcode_mha: "gpt_bigcode_mha",
    gpt_sw3: "gpt-sw3",
    gptj: "gptj",
    codegen: "codegen",
    gpt_neo: "gpt_neo",
    // Encoders (issue 19), masked-LM loss on a padded batch (make_encoder_fixtures.py).
    bert: "bert",
    roberta: "roberta",
    xlm_roberta: "xlm-roberta",
    camembert: "camembert",
    data2vec_text: "data2vec-text",
    ernie: "ernie",
    // Pre-LN layers and a final LayerNorm.
    roberta_prelayernorm: "roberta-prelayernorm",
    // Pre-LN under other names, a final norm, and no LayerNorm on the embeddings.
    xlm_roberta_xl: "xlm-roberta-xl",
    megatron_bert: "megatron-bert",
    distilbert: "distilbert",
    // embedding_size 16 < hidden_size 32: the embedding projection and a 16-wide head.
    electra: "electra",
    electra_untied: "electra_untied",
    // Sequence classification: BERT's pooler + 3-way cross-entropy; RoBERTa's head, 1 label (MSE).
    bert_seqcls: "bert_seqcls",
    roberta_seqcls_regression: "roberta_seqcls_regression",
    // Token classification: a classifier on every position, -100 on the padding.
    distilbert_tokcls: "distilbert_tokcls",
    biogpt: "biogpt",
    gpt_neox_japanese: "gpt_neox_japanese",
    // Wave 2 (issue 16): one small feature each.
    openai_gpt: "openai-gpt",
    xglm: "xglm",
    ctrl: "ctrl",
    nemotron: "nemotron",
    olmo: "olmo",
    mpt: "mpt",
    nanochat: "nanochat",
    hunyuan_v1_dense: "hunyuan_v1_dense",
    ministral3: "ministral3",
    bitnet: "bitnet",
    // Routed mixtures of experts (issue 17); `*_aux` add the load-balancing loss.
    mixtral: "mixtral",
    mixtral_aux: "mixtral_aux",
    qwen2_moe_aux: "qwen2_moe",
    olmoe: "olmoe",
    qwen3_moe: "qwen3_moe",
}

#[test]
fn every_registered_model_type_has_a_fixture() {
    let covered: Vec<String> = fixtures(&root())
        .iter()
        .map(|d| vkformers_io::read_json(d.join("config.json")).unwrap()["model_type"].as_str().unwrap().to_string())
        .collect();
    for arch in vkformers_models::ARCHS {
        assert!(covered.iter().any(|m| m == arch.model_type), "{} has no parity fixture", arch.model_type);
    }
}
