//! Peak device memory of training steps of one model, full-parameter vs LoRA (r 8, all-linear),
//! and (with `--out DIR`) the LoRA-trained adapter plus its logits and token ids on the batch,
//! to check by hand that PEFT loads it with the same logits:
//! `tools/parity/peft_reference.py --check-adapter DIR --model MODEL_DIR --logits DIR/logits.safetensors`.
//!
//! `cargo run --release -p vkformers-models --example lora_step_memory -- MODEL_DIR [STEPS] [SEQ] [--out DIR]`

use std::path::PathBuf;

use vkformers_models::decoder::{causal_lm_loss, forward, Batch};
use vkformers_models::lora::{self, LoraConfig, Targets};
use vkformers_models::model::Model;
use vkformers_models::weights::HostTensor;
use vkformers_tensor::optim::{AdamW, Param};
use vkformers_tensor::Graph;
use vkformers_vk::{Context, DeviceSelector};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or("usage: MODEL_DIR [STEPS] [SEQ] [--out DIR]")?);
    let steps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let seq: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let out = args.iter().position(|a| a == "--out").and_then(|i| args.get(i + 1)).map(PathBuf::from);
    let ctx = Context::new(&DeviceSelector::Best)?;
    let hp = vkformers_kernels::optim::AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-6, weight_decay: 0.01 };
    for full in [true, false] {
        let g = Graph::new(&ctx);
        ctx.reset_peak_memory();
        let start = ctx.device_memory().current;
        let (model, lora) = if full {
            (Model::load(&g, &dir)?, None)
        } else {
            let mut m = lora::load_frozen(&g, &dir, &[])?;
            let a = lora::new_adapter(&m, LoraConfig::new(8, 16.0, Targets::AllLinear), 1)?;
            let l = lora::attach(&g, &mut m, &a, 0)?;
            (m, Some(l))
        };
        let params: Vec<Param> = match &lora {
            Some(l) => l.params(),
            None => model.params.iter().map(|(_, p)| Param { tensor: p.clone(), decay: true }).collect(),
        };
        let ids: Vec<i32> = (0..2 * seq).map(|i| (3 + (i * 7919) % (model.spec.vocab - 3)) as i32).collect();
        let mask = vec![1; 2 * seq];
        let batch = Batch { ids: &ids, mask: &mask, batch: 2, seq };
        let mut opt = AdamW::new(hp, 1.0);
        let mut losses = Vec::new();
        for _ in 0..steps {
            let logits = forward(&g, &model.spec, &model.weights, &batch)?;
            let loss = causal_lm_loss(&g, &logits, &ids, 2, seq)?;
            g.backward(&loss)?;
            opt.step(&g, &params)?;
            losses.push(g.read(&loss)?[0]);
        }
        let mem = ctx.device_memory();
        let trainable: usize = params.iter().map(|p| p.tensor.numel()).sum();
        let mode = if full { "full" } else { "lora_r8_all_linear" };
        println!(
            "{{\"mode\": \"{mode}\", \"trainable_params\": {trainable}, \"peak_device_bytes\": {}, \
             \"peak_above_start\": {}, \"losses\": {losses:?}}}",
            mem.peak,
            mem.peak - start
        );
        if let (Some(l), Some(out)) = (&lora, &out) {
            l.save(&g, out)?;
            let logits = g.no_grad(|| forward(&g, &model.spec, &model.weights, &batch))?;
            let shape = vec![2, seq, model.spec.vocab];
            let tensors = [
                HostTensor { name: "logits".into(), shape, data: g.read(&logits)? },
                HostTensor {
                    name: "input_ids".into(),
                    shape: vec![2, seq],
                    data: ids.iter().map(|&i| i as f32).collect(),
                },
            ];
            lora::adapter::write_safetensors(&out.join("logits.safetensors"), tensors.iter())?;
        }
    }
    Ok(())
}
