//! Logits of a model with an unmerged PEFT adapter (`lora::load_with_adapter`) on fixed token
//! ids, written with the ids to a safetensors file for
//! `tools/parity/peft_reference.py --check-adapter ADAPTER --model MODEL --logits FILE`.
//!
//! `cargo run -p vkformers-models --example lora_logits -- MODEL_DIR ADAPTER_DIR OUT.safetensors`

use std::path::PathBuf;

use vkformers_models::decoder::{forward, Batch};
use vkformers_models::lora;
use vkformers_models::weights::HostTensor;
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let [model_dir, adapter_dir, out] = &a[..] else {
        return Err("usage: MODEL_DIR ADAPTER_DIR OUT.safetensors".into());
    };
    let ctx = Context::new(&DeviceSelector::Best)?;
    let g = Graph::new(&ctx);
    let (model, _lora) = lora::load_with_adapter(&g, model_dir, adapter_dir)?;
    let (b, t) = (2, 8);
    let ids: Vec<i32> = (0..b * t).map(|i| (3 + (i * 37) % (model.spec.vocab - 3)) as i32).collect();
    let mask = vec![1; b * t];
    let logits =
        g.no_grad(|| forward(&g, &model.spec, &model.weights, &Batch { ids: &ids, mask: &mask, batch: b, seq: t }))?;
    let tensors = [
        HostTensor { name: "logits".into(), shape: vec![b, t, model.spec.vocab], data: g.read(&logits)? },
        HostTensor { name: "input_ids".into(), shape: vec![b, t], data: ids.iter().map(|&i| i as f32).collect() },
    ];
    lora::adapter::write_safetensors(out, tensors.iter())?;
    Ok(())
}
