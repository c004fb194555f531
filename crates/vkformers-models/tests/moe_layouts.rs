//! MoE checkpoints in both layouts met in practice: the per-expert tensors of Hub checkpoints and
//! of what transformers 5 saves (`block_sparse_moe.experts.{e}.w1`, `mlp.experts.{e}.gate_proj`,
//! ... : the parity fixtures), and transformers 5's in-memory packed layout (`mlp.gate`,
//! `mlp.experts.gate_up_proj [E, 2I, H]`, `mlp.experts.down_proj [E, H, I]`), which a
//! `state_dict` written as it is holds and transformers also loads. Both give the same logits.

use std::path::{Path, PathBuf};

use vkformers_io::{ModelWeights, SaveTensor};
use vkformers_models::decoder::{forward, Batch};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Fixture `name` rewritten in the packed layout into `out`: per layer, the router renamed from
/// `{moe}.gate` to `mlp.gate`, and the experts' (gate, up, down) stacked into 3-D tensors.
fn packed_copy(name: &str, moe: &str, (gate, up, down): (&str, &str, &str), layers: usize, experts: usize, out: &Path) {
    let src = ModelWeights::open(fixture(name)).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    let expert = |i: usize, e: usize, w: &str| format!("model.layers.{i}.{moe}.experts.{e}.{w}.weight");
    for n in src.names().filter(|n| !n.contains(".experts.")) {
        let packed = n.replace(&format!(".{moe}.gate."), ".mlp.gate.");
        tensors.push((packed, src.info(n).unwrap().shape, src.tensor_f32(n).unwrap()));
    }
    for i in 0..layers {
        let (mut gu, mut dn) = (Vec::new(), Vec::new());
        let (ishape, dshape) =
            (src.info(&expert(i, 0, gate)).unwrap().shape, src.info(&expert(i, 0, down)).unwrap().shape);
        for e in 0..experts {
            gu.extend(src.tensor_f32(&expert(i, e, gate)).unwrap());
            gu.extend(src.tensor_f32(&expert(i, e, up)).unwrap());
            dn.extend(src.tensor_f32(&expert(i, e, down)).unwrap());
        }
        let p = format!("model.layers.{i}.mlp.experts");
        tensors.push((format!("{p}.gate_up_proj"), vec![experts, 2 * ishape[0], ishape[1]], gu));
        tensors.push((format!("{p}.down_proj"), vec![experts, dshape[0], dshape[1]], dn));
    }
    let save: Vec<SaveTensor<'_>> =
        tensors.iter().map(|(n, s, d)| SaveTensor::f32(n.clone(), vkformers_io::Dtype::F32, s, d)).collect();
    vkformers_io::save_safetensors(out, &save, u64::MAX).unwrap();
    std::fs::copy(fixture(name).join("config.json"), out.join("config.json")).unwrap();
}

fn logits(g: &Graph<'_>, dir: &Path) -> Vec<f32> {
    let model = Model::load(g, dir).unwrap();
    let ids = [5, 9, 17, 3, 44, 100, 7, 8, 31, 2, 60, 61];
    let mask = [1; 12];
    let batch = Batch { ids: &ids, mask: &mask, batch: 2, seq: 6 };
    let y = g.no_grad(|| forward(g, &model.spec, &model.weights, &batch)).unwrap();
    g.read(&y).unwrap()
}

fn same_logits_in_both_layouts(name: &str, moe: &str, names: (&str, &str, &str)) {
    let out = std::env::temp_dir().join(format!("vkformers-moe-packed-{name}-{}", std::process::id()));
    packed_copy(name, moe, names, 2, 4, &out);
    on_every_device("moe layouts", |ctx| {
        let g = Graph::new(ctx);
        let (a, b) = (logits(&g, &fixture(name)), logits(&g, &out));
        assert_eq!(a, b, "{name}: per-expert and packed checkpoints give different logits");
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn mixtral_loads_per_expert_and_packed_checkpoints_alike() {
    same_logits_in_both_layouts("mixtral", "block_sparse_moe", ("w1", "w3", "w2"));
}

#[test]
fn olmoe_loads_per_expert_and_packed_checkpoints_alike() {
    same_logits_in_both_layouts("olmoe", "mlp", ("gate_proj", "up_proj", "down_proj"));
}
