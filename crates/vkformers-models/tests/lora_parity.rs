//! LoRA parity with PEFT on the fixtures of `tools/parity/peft_reference.py` (logits and loss
//! with the adapter, LoRA gradients, LoRA weights after two AdamW steps, merge), on every
//! Vulkan device with the validation layer.

use std::path::PathBuf;

use vkformers_models::lora::parity::{check, check_merge};
use vkformers_models::parity::{TOL_GRAD, TOL_LOGITS, TOL_STEP};
use vkformers_vk::testing::on_every_device;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests")
}

fn check_fixture(name: &str, base: &str) {
    check_unmerged(name, base);
    let (base, lora) = (fixtures().join("fixtures").join(base), fixtures().join("fixtures_lora").join(name));
    let merge = check_merge(&base, &lora).unwrap_or_else(|e| panic!("{name} merge: {e}"));
    assert!(merge <= 1e-6, "{name}: merged weights differ from PEFT's merge_and_unload by {merge:e}");
}

/// Everything but the merge: logits, loss, gradients, two AdamW steps.
fn check_unmerged(name: &str, base: &str) {
    let (base, lora) = (fixtures().join("fixtures").join(base), fixtures().join("fixtures_lora").join(name));
    on_every_device(&format!("lora parity {name}"), |ctx| {
        let r = check(ctx, &base, &lora).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The fixture is only a test of the LoRA term if the adapter moves the logits.
        assert!(r.adapter_effect > 1e-3, "{name}: adapter barely changes the logits ({:e})", r.adapter_effect);
        assert!(r.logits_rel <= TOL_LOGITS, "{name}: logits relative error {:e}", r.logits_rel);
        assert!(r.loss_rel <= TOL_LOGITS, "{name}: loss relative error {:e}", r.loss_rel);
        assert!(r.grad_rel <= TOL_GRAD, "{name}: worst LoRA gradient relative error {:e}", r.grad_rel);
        assert!(r.step2_abs <= TOL_STEP, "{name}: worst |Δ| after two AdamW steps {:e}", r.step2_abs);
        assert!(r.step2_ill_abs <= 2e-3, "{name}: ill-conditioned elements moved {:e}", r.step2_ill_abs);
        assert_eq!(r.frozen_with_grad, 0, "{name}: frozen base weights received gradients");
        Ok(())
    });
}

/// The packed expert tensors as PEFT's `target_parameters` adapts them (nested ParamWrappers:
/// `experts.base_layer.lora_*` for gate_up, `experts.lora_*` for down), beside q_proj; merged
/// into the per-expert stored tensors.
#[test]
fn qwen3_moe_target_parameters_experts() {
    check_fixture("qwen3_moe_experts", "qwen3_moe");
}

/// Llama 4's in-out packed experts (`gate_up_proj [E, H, 2I]`, `down_proj [E, I, H]`), which PEFT
/// adapts in their stored layout as `[E, out, in]` (`lora_A [E·r, 2I]`, `lora_B [H, E·r]`),
/// beside q_proj and o_proj; merged into the packed stored tensors.
#[test]
fn llama4_text_target_parameters_experts() {
    check_fixture("llama4_text_experts", "llama4_text");
}

/// gpt-oss's biased experts, stored `[E, in, out]` with `is_transposed`: PEFT adapts them in-out
/// (`lora_A [E·r, H]`, `lora_B [2I, E·r]`, the delta `(B_e A_e)ᵀ`), beside q_proj.
#[test]
fn gpt_oss_target_parameters_transposed_experts() {
    check_fixture("gpt_oss_experts", "gpt_oss");
}

/// [`qwen3_moe_target_parameters_adapter_saves_as_peft`] on gpt-oss's transposed experts.
#[test]
fn gpt_oss_target_parameters_adapter_saves_as_peft() {
    check_expert_adapter_saves_as_peft("gpt_oss_experts", "gpt_oss", Some("mlp.experts.base_layer"));
}

/// JetMoE: the fused kv_proj and the attention router by name, and by target_parameters the
/// attention experts' and the MLP's packed `[E, out, in]` stacks (`input_linear.weight`,
/// `output_linear.weight`: one parameter per module, no nesting); merged into those stacks.
#[test]
fn jetmoe_attention_experts_target_parameters() {
    check_fixture("jetmoe_experts", "jetmoe");
}

/// One targeted packed parameter (`gate_up_proj`: no nesting), merged into Mixtral's
/// per-expert `w1`/`w3`.
#[test]
fn mixtral_target_parameters_gate_up() {
    check_fixture("mixtral_experts", "mixtral");
}

macro_rules! lora_parity {
    ($($test:ident: $name:literal on $base:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            check_fixture($name, $base);
        }
    )*};
}

lora_parity! {
    llama: "llama" on "llama",
    mistral: "mistral" on "mistral",
    qwen2: "qwen2" on "qwen2",
    qwen3_all_linear: "qwen3" on "qwen3",
    gemma_regex_rslora: "gemma" on "gemma",
    // PEFT's module paths of an image-text wrapper (`model.language_model.*`) over its stored names.
    gemma3_wrapper_regex: "gemma3" on "gemma3",
    gpt2_fused_conv1d: "gpt2" on "gpt2",
    llama_modules_to_save: "llama_modules_to_save" on "llama",
    // Encoder-decoders: q / v / wo in the encoder, the decoder's self- and cross-attention.
    t5_q_v_wo: "t5" on "t5",
    bart_all_linear: "bart" on "bart",
    // Both Gemma 2 stacks and the cross-attention; PEFT trains in train mode, where T5Gemma's
    // decoder (running without a cache) masks its pad-id inputs as keys.
    t5gemma_q_v_o_down: "t5gemma" on "t5gemma",
    // The experts of Switch Transformers' sparse layers by PEFT's names.
    switch_transformers_experts: "switch_transformers" on "switch_transformers",
    // Multi-head latent attention's projections by PEFT's names (issue 18).
    deepseek_v2_qlora_mla: "deepseek_v2_qlora" on "deepseek_v2_qlora",
    deepseek_v2_mla: "deepseek_v2" on "deepseek_v2",
    // Routed MoE (issue 17): attention, Qwen2-MoE's shared_expert_gate, Hunyuan's router `wg`.
    qwen2_moe_attention_shared_gate: "qwen2_moe" on "qwen2_moe",
    hunyuan_v1_moe_router: "hunyuan_v1_moe" on "hunyuan_v1_moe",
    bert_encoder_query_key_value_dense: "bert" on "bert",
    roberta_encoder_all_linear: "roberta" on "roberta",
}

/// An adapter on packed experts saves as PEFT saved it: the same keys (nested `base_layer` for
/// the first parameter of the experts module), shapes and values, and `target_parameters` in
/// its config. (`VKFORMERS_KEEP_ADAPTER=DIR` keeps the saved folder, e.g. to load it in PEFT:
/// `tools/parity/peft_reference.py --check-adapter DIR ...`.)
#[test]
fn qwen3_moe_target_parameters_adapter_saves_as_peft() {
    check_expert_adapter_saves_as_peft("qwen3_moe_experts", "qwen3_moe", Some("mlp.experts.base_layer"));
}

/// [`qwen3_moe_target_parameters_adapter_saves_as_peft`] on Llama 4's in-out experts.
#[test]
fn llama4_text_target_parameters_adapter_saves_as_peft() {
    check_expert_adapter_saves_as_peft("llama4_text_experts", "llama4_text", Some("feed_forward.experts.base_layer"));
}

/// [`qwen3_moe_target_parameters_adapter_saves_as_peft`] on JetMoE's attention and MLP experts.
#[test]
fn jetmoe_target_parameters_adapter_saves_as_peft() {
    check_expert_adapter_saves_as_peft("jetmoe_experts", "jetmoe", None);
}

/// Loads the adapter `name` on the base fixture `base`, saves it and compares with PEFT's file;
/// `nested` is a module path (ending) where PEFT nests a ParamWrapper, when it does.
fn check_expert_adapter_saves_as_peft(name: &str, base: &str, nested: Option<&str>) {
    use vkformers_models::lora::{attach, load_frozen, Adapter};
    use vkformers_tensor::Graph;
    let (base, lora) = (fixtures().join("fixtures").join(base), fixtures().join("fixtures_lora").join(name));
    on_every_device("lora target_parameters save", |ctx| {
        let g = Graph::new(ctx);
        let adapter = Adapter::load(&lora).unwrap();
        let mut model = load_frozen(&g, &base, &[]).unwrap();
        let params = attach(&g, &mut model, &adapter, 0).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::env::var_os("VKFORMERS_KEEP_ADAPTER").map_or(tmp.path().to_path_buf(), PathBuf::from);
        params.save(&g, &dir).unwrap();
        let back = Adapter::load(&dir).unwrap();
        assert_eq!(back.config.target_parameters, adapter.config.target_parameters);
        assert_eq!(back.tensors.keys().collect::<Vec<_>>(), adapter.tensors.keys().collect::<Vec<_>>());
        if let Some(n) = nested {
            let key = format!("{n}.lora_A.weight");
            assert!(back.tensors.keys().any(|k| k.ends_with(&key)), "no `{key}`");
        }
        for (k, t) in &adapter.tensors {
            let b = &back.tensors[k];
            assert_eq!((&b.shape, &b.data), (&t.shape, &t.data), "{k}");
        }
        Ok(())
    });
}
