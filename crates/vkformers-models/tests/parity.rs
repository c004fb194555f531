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
    // Rotary q/k (interleaved pairs) and no position table; then the values rotated too.
    roformer: "roformer",
    roformer_rotary_value: "roformer_rotary_value",
    // Bias-free rotary attention and SwiGLU, post-LN; then the pooler classifier with GeGLU.
    nomic_bert: "nomic_bert",
    nomic_bert_seqcls: "nomic_bert_seqcls",
    // Pre-LN, rotary on pre-scaled queries, token_dropout, embeddings times the attention mask;
    // then ESM-1b's learned positions and embedding norm; then its classifier.
    esm: "esm",
    esm_absolute: "esm_absolute",
    esm_seqcls: "esm_seqcls",
    // A relative position bias shared by the layers; then 40 table rows bucketed by 32.
    mpnet: "mpnet",
    mpnet_seqcls: "mpnet_seqcls",
    // Disentangled attention: v3's shared projections, normed table and log buckets; v2's own
    // position projections, absolute positions and token types; c2p only under the pooler.
    deberta_v2: "deberta_v2",
    deberta_v2_plain: "deberta_v2_plain",
    deberta_v2_seqcls: "deberta_v2_seqcls",
    deberta_v2_tokcls: "deberta_v2_tokcls",
    // v1: the per-head fused in_proj, q/v biases, clamped relative positions; p2c alone.
    deberta: "deberta",
    deberta_seqcls: "deberta_seqcls",
    // Bottlenecks, stacked FFNs, NoNorm, trigram embeddings; then LayerNorms, q/k/v on the
    // input bottleneck, a plain embedding projection.
    mobilebert: "mobilebert",
    // ModernBERT's sparse_prediction: logits only at the 5 targets.
    modernbert_sparse: "modernbert_sparse",
    mobilebert_seqcls: "mobilebert_seqcls",
    mobilebert_tokcls: "mobilebert_tokcls",
    // Factorised embeddings and shared layers: one layer run 3 times; 2 groups of 2 over 3 layers.
    albert: "albert",
    albert_groups: "albert_groups",
    albert_seqcls: "albert_seqcls",
    // Llama layers as a bidirectional encoder, untied bias-free lm_head; then tied with biases;
    // then the classifier on every token averaged (`late`), and on the mean hidden state.
    eurobert: "eurobert",
    // Global and windowed local rotary layers, fused Wqkv / Wi; then every bias and other gates.
    modernbert: "modernbert",
    modernbert_bias: "modernbert_bias",
    // The classifier with the head's norm, on the first token and on the mean.
    modernbert_seqcls: "modernbert_seqcls",
    modernbert_seqcls_mean: "modernbert_seqcls_mean",
    eurobert_tied_bias: "eurobert_tied_bias",
    eurobert_seqcls: "eurobert_seqcls",
    eurobert_seqcls_mean: "eurobert_seqcls_mean",
    // Sequence classification: BERT's pooler + 3-way cross-entropy; RoBERTa's head, 1 label (MSE).
    bert_seqcls: "bert_seqcls",
    roberta_seqcls_regression: "roberta_seqcls_regression",
    // Token classification: a classifier on every position, -100 on the padding.
    distilbert_tokcls: "distilbert_tokcls",
    esm_tokcls: "esm_tokcls",
    mpnet_tokcls: "mpnet_tokcls",
    albert_tokcls: "albert_tokcls",
    eurobert_tokcls: "eurobert_tokcls",
    modernbert_tokcls: "modernbert_tokcls",
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
    // xIELU with learned scalars (both branches), QK-norm, Llama-3 RoPE.
    apertus: "apertus",
    // Sliding/global layers, per-layer RoPE base with a NoPE layer, learned attention sinks.
    granite_swa: "granite_swa",
    // Per-layer-type RoPE (half-split) with a NoPE full layer, default logit_scale 1.
    cohere_compass_text: "cohere_compass_text",
    // Routed mixtures of experts (issue 17); `*_aux` add the load-balancing loss.
    mixtral: "mixtral",
    mixtral_aux: "mixtral_aux",
    qwen2_moe_aux: "qwen2_moe",
    olmoe: "olmoe",
    qwen3_moe: "qwen3_moe",
    // Top-k then softmax, packed stored experts, Granite multipliers; then a fused shared MLP.
    granitemoe_aux: "granitemoe",
    granitemoeshared: "granitemoeshared",
    // Qwen3-MoE with sliding/full layers and their own RoPE, a dense layer, the aux loss.
    mellum_aux: "mellum",
    // DeepSeek-V3's router on GQA layers: partial rotary + biases + QK-norm; Qwen3 + sliding.
    glm4_moe: "glm4_moe",
    dots1: "dots1",
    // hunyuan_v1_dense's attention, renormalised softmax top-2 and an ungated shared MLP.
    hunyuan_v1_moe: "hunyuan_v1_moe",
    // Softmax + frozen correction bias chooses, softmax weighs; the aux loss's top-k unbiased.
    ernie4_5_moe_aux: "ernie4_5_moe",
    // The eval-mode sparsemixer router (masked softmaxes), LayerNorm, biases, sliding window.
    phimoe_aux: "phimoe",
    // Fused clipped Wqkv, separate gate/up expert stacks, transposed down stack, L1 renormalisation.
    dbrx_aux: "dbrx",
    // Biased top-2-then-softmax router, in-out biased experts with the clamped SwiGLU, attention
    // biases and sinks, sliding/full layers, untruncated YaRN; then with the aux loss.
    gpt_oss: "gpt_oss",
    gpt_oss_aux: "gpt_oss_aux",
    // Mixture of attention heads (routed query/output experts over one shared K/V) and a packed
    // top-k-then-softmax MoE MLP with an output bias; then tied, with the aux loss over both routers.
    jetmoe: "jetmoe",
    jetmoe_aux: "jetmoe_aux",
    // Chunked RoPE layer (interleaved, L2 QK-norm) and a NoPE layer with the attention temperature;
    // the input-scaled sigmoid top-2 MoE with packed in-out experts and a shared expert.
    llama4_text: "llama4_text",
    // Image-text wrappers run as their text backbone; the vision tower is carried, not loaded.
    gemma3_wrapper: "gemma3",
    mistral3_wrapper: "mistral3",
    // Encoder-decoders (issue 20), labels shifted into the decoder (make_seq2seq_fixtures.py).
    // T5: relative position buckets shared from layer 0, ReLU MLP, tied head at d_model^-0.5.
    t5: "t5",
    // Gated-GELU, head not rescaled (`tie_word_embeddings: false` in the old spelling).
    t5_gated: "t5_gated",
    mt5: "mt5",
    // A relative bias table in every layer.
    umt5: "umt5",
    // Post-LN, learned positions offset by 2, layernorm_embedding, final_logits_bias buffer.
    bart: "bart",
    // Pre-LN with final norms; the decoder starts with each row's last label.
    mbart: "mbart",
    // BART's post-LN layers with mBART's shift.
    plbart: "plbart",
    // Pre-LN, positions from 0, no embedding norm.
    blenderbot: "blenderbot",
    // Post-LN, positions from 0, the decoder's embedding norm before its positions.
    blenderbot_small: "blenderbot-small",
    // Fixed sinusoidal positions: Marian (post-LN, not stored), Pegasus (pre-LN, stored frozen).
    marian: "marian",
    pegasus: "pegasus",
    // fairseq positions counted from the ids past pad_token_id; no final_logits_bias.
    m2m_100: "m2m_100",
    t5gemma: "t5gemma",
    // T5 with a top-1 mixture of experts (capacity per sequence) in layer 1 of each stack.
    switch_transformers: "switch_transformers",
    // The same with `output_router_logits`: the router z and load-balancing losses in the loss.
    switch_transformers_router: "switch_transformers_router",
    // Multi-head latent attention (issue 18): v heads narrower and wider than q/k heads.
    minicpm3: "minicpm3",
    deepseek_v2: "deepseek_v2",
    // Low-rank query, attention biases, group-limited routing.
    deepseek_v2_qlora: "deepseek_v2_qlora",
    // Sigmoid + correction-bias group-limited router (the bias a stored buffer), rope_interleave.
    deepseek_v3: "deepseek_v3",
    // The same with a latent row of 272 + 16 values (wider than the paged decode kernel's 256).
    deepseek_v3_wide: "deepseek_v3_wide",
    youtu: "youtu",
    // DeepSeek-V3 with a norm on the MoE output, layer types listed.
    axk1: "axk1",
    sarvam_mla: "sarvam_mla",
    glm4_moe_lite: "glm4_moe_lite",
    // Softmax router, Llama 4's position scale on the query, YaRN with partial_rotary_factor.
    mistral4: "mistral4",
    // Sublayer pairs with a shortcut MoE over routed and zero-computation (identity) experts, MLA with
    // its query and latent scaled.
    longcat_flash: "longcat_flash",
    // Gated query and output gate, gated RMSNorms, ungrouped sigmoid router; the DSA indexer carried.
    axk2: "axk2",
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
