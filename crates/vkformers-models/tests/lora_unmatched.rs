//! An adapter whose tensors match no module of the model is refused, naming the tensors and
//! saying what to do, instead of running the model without them: tensors of a layer the model
//! lacks, a DoRA magnitude vector, and tensors left out by the adapter's own `target_modules`;
//! on a decoder (llama) and an encoder-decoder (t5), attached directly (finetune's path) and
//! loaded from a folder (`--adapter`: generate, chat, eval).

use std::path::PathBuf;

use vkformers_models::lora::adapter::write_safetensors;
use vkformers_models::lora::{self, Adapter, Targets, ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use vkformers_models::weights::HostTensor;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(kind: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests").join(kind).join(name)
}

/// `adapter` with a tensor `key` of shape `[2, 3]` added.
fn with_extra(mut adapter: Adapter, key: &str) -> Adapter {
    let t = HostTensor { name: key.into(), shape: vec![2, 3], data: vec![0.5; 6] };
    adapter.tensors.insert(key.into(), t);
    adapter
}

/// The error of attaching `adapter` to the base fixture `base`.
fn attach_error(g: &Graph<'_>, base: &str, adapter: &Adapter) -> String {
    let mut model = lora::load_frozen(g, &fixture("fixtures", base), &adapter.config.modules_to_save).unwrap();
    match lora::attach(g, &mut model, adapter, 0) {
        Ok(_) => panic!("{base}: an adapter with unmatched tensors was attached"),
        Err(e) => e.to_string(),
    }
}

fn assert_names(err: &str, keys: &[&str]) {
    for k in keys {
        assert!(err.contains(k), "the error does not name `{k}`: {err}");
    }
    assert!(err.contains("load it on the model it was trained for"), "no advice: {err}");
}

#[test]
fn unmatched_adapter_tensors_are_an_error_naming_them() {
    on_every_device("lora unmatched tensors", |ctx| {
        let g = Graph::new(ctx);
        for (base, prefix) in [("llama", "model.layers"), ("t5", "decoder.block")] {
            let peft = Adapter::load(&fixture("fixtures_lora", base)).unwrap();
            // As PEFT wrote it, every tensor is read.
            let mut model = lora::load_frozen(&g, &fixture("fixtures", base), &[]).unwrap();
            lora::attach(&g, &mut model, &peft, 0).unwrap();

            let missing_layer = format!("base_model.model.{prefix}.57.mlp.lora_A.weight");
            let dora = format!("base_model.model.{prefix}.0.lora_magnitude_vector");
            let adapter = with_extra(with_extra(peft.clone(), &missing_layer), &dora);
            let err = attach_error(&g, base, &adapter);
            assert_names(&err, &[&missing_layer, &dora]);
            assert!(err.contains("2 adapter tensor(s)"), "{err}");

            // The config narrowed to one target: the other targets' tensors are unread.
            let mut narrowed = peft.clone();
            let first = match &peft.config.target_modules {
                Targets::Names(n) => n[0].clone(),
                other => panic!("{base}: targets {other:?}"),
            };
            narrowed.config.target_modules = Targets::Names(vec![first.clone()]);
            let err = attach_error(&g, base, &narrowed);
            let dropped: Vec<&str> = peft
                .tensors
                .keys()
                .filter(|k| !k.contains(&format!(".{first}.")))
                .map(String::as_str)
                .take(3)
                .collect();
            assert!(!dropped.is_empty());
            assert_names(&err, &dropped);

            // The folder path (`--adapter`).
            let dir = tempfile::tempdir().unwrap();
            std::fs::copy(fixture("fixtures_lora", base).join(ADAPTER_CONFIG), dir.path().join(ADAPTER_CONFIG))
                .unwrap();
            write_safetensors(&dir.path().join(ADAPTER_WEIGHTS), adapter.tensors.values()).unwrap();
            let err = match lora::load_with_adapter(&g, &fixture("fixtures", base), dir.path()) {
                Ok(_) => panic!("{base}: loaded an adapter with unmatched tensors"),
                Err(e) => e.to_string(),
            };
            assert_names(&err, &[&missing_layer, &dora]);
        }
        Ok(())
    });
}
