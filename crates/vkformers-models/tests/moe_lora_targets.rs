//! LoRA targets on MoE models: names PEFT turns into packed-expert or router parameter targets
//! (`w1`/`w2`/`w3`, `gate_proj`/`up_proj`/`down_proj`, `gate`), listed or matched through
//! `all-linear`, are refused; attention, Qwen2-MoE's `shared_expert_gate` and Hunyuan's router
//! `wg` (Linear modules PEFT keeps) are targeted. On a dense model `gate_proj` stays a module.
//! DBRX's expert stacks are refused as `target_parameters`.

use std::path::PathBuf;

use vkformers_models::lora::{self, LoraConfig, Targets};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn names(list: &[&str]) -> LoraConfig {
    LoraConfig::new(4, 8.0, Targets::Names(list.iter().map(|s| s.to_string()).collect()))
}

#[test]
fn expert_and_router_parameter_targets_are_refused_on_moe_models() {
    on_every_device("moe lora targets", |ctx| {
        let g = Graph::new(ctx);
        let (mixtral, qwen) =
            (Model::load(&g, &fixture("mixtral")).unwrap(), Model::load(&g, &fixture("qwen2_moe")).unwrap());
        for (model, list) in [(&mixtral, vec!["q_proj", "w1"]), (&mixtral, vec!["gate"]), (&qwen, vec!["gate_proj"])] {
            let err = lora::target_modules(model, &names(&list)).unwrap_err().to_string();
            assert!(err.contains("target_parameters"), "{list:?}: {err}");
        }
        // all-linear reaches the shared expert's gate_proj, which PEFT would turn into experts.
        let all = LoraConfig::new(4, 8.0, Targets::AllLinear);
        assert!(lora::target_modules(&qwen, &all).is_err());
        let ok = lora::target_modules(&qwen, &names(&["q_proj", "shared_expert_gate"])).unwrap();
        // Two q_proj, one shared_expert_gate: layer 1 is dense (mlp_only_layers).
        assert_eq!(ok.len(), 3, "{ok:?}");
        let hunyuan = Model::load(&g, &fixture("hunyuan_v1_moe")).unwrap();
        let wg = lora::target_modules(&hunyuan, &names(&["wg"])).unwrap();
        assert_eq!(
            wg.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["model.layers.0.mlp.gate.wg", "model.layers.1.mlp.gate.wg"]
        );
        let llama = Model::load(&g, &fixture("llama")).unwrap();
        assert_eq!(lora::target_modules(&llama, &names(&["gate_proj"])).unwrap().len(), 2);
        Ok(())
    });
}

/// DBRX's separate expert stacks by `target_parameters` are refused (PEFT 0.21 cannot run them
/// either); gpt-oss's transposed stacks are taken.
#[test]
fn dbrx_target_parameters_are_refused() {
    on_every_device("moe lora target_parameters", |ctx| {
        let g = Graph::new(ctx);
        let mut config = names(&["out_proj"]);
        config.target_parameters = vec!["experts.mlp.v1".into()];
        let dbrx = Model::load(&g, &fixture("dbrx")).unwrap();
        let err = lora::new_adapter(&dbrx, config, 0).unwrap_err().to_string();
        assert!(err.contains("DBRX"), "{err}");
        let mut config = names(&["q_proj"]);
        config.target_parameters = vec!["experts.gate_up_proj".into()];
        let gpt_oss = Model::load(&g, &fixture("gpt_oss")).unwrap();
        assert!(lora::new_adapter(&gpt_oss, config, 0).is_ok());
        Ok(())
    });
}
