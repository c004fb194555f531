//! Rotary encoders: RoFormer's fixed sinusoid table is a buffer that a model drawn from its
//! config fills exactly as transformers' `create_weight` does (f64 angles rounded to f32), and
//! that training leaves alone (it is no parameter). ESM's stored `inv_freq` buffers, in either
//! layout checkpoints have them, are skipped on load (recomputed from `rope_theta`).

mod common;

use std::path::PathBuf;

use vkformers_io::{Dtype, ModelWeights};
use vkformers_models::init::init_from_config;
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::write_model;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

#[test]
fn a_fresh_roformer_stores_transformers_sinusoid_table_as_a_buffer() {
    let table = "roformer.encoder.embed_positions.weight";
    on_every_device("roformer table", |ctx| {
        let g = Graph::new(ctx);
        let config = vkformers_io::read_json(fixture("roformer").join("config.json")).unwrap();
        let m = init_from_config(&g, config, 7).unwrap();
        assert!(m.params.iter().all(|(n, _)| n != table), "the table is not trained");
        let (_, buf) = m.buffers.iter().find(|(n, _)| n == table).expect("the table is a buffer");
        let want = ModelWeights::open(fixture("roformer")).unwrap().tensor_f32(table).unwrap();
        // Exact: the same f64 angles rounded once to f32 (rows 64 × head_dim 8).
        assert_eq!(g.read(buf).unwrap(), want);
        Ok(())
    });
}

/// The `esm` fixture rewritten into `out` with `inv_freq` buffers under `keys`, and its layer
/// LayerNorms named `gamma` / `beta` when `legacy`.
fn esm_with_buffers(out: &std::path::Path, keys: &[String], legacy: bool) {
    let src = ModelWeights::open(fixture("esm")).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for info in src.tensors() {
        let mut name = info.name.clone();
        if legacy {
            name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta");
        }
        tensors.push((name, info.shape.clone(), src.tensor_f32(&info.name).unwrap()));
    }
    // head_dim 8: inv_freq [4] (any values: they are not read).
    tensors.extend(keys.iter().map(|k| (k.clone(), vec![4], vec![1.0, 0.1, 0.01, 0.001])));
    write_model(out, &tensors, (Dtype::F32, u64::MAX), &fixture("esm"));
}

#[test]
fn esm_loads_hub_and_transformers_5_rotary_buffer_layouts_to_the_same_parameters() {
    let layer = |i: &str| format!("esm.encoder.layer.{i}.attention.self.rotary_embeddings.inv_freq");
    // The hub's ESM-2 (one per layer), and what transformers 5 saves (one under layer `*`,
    // LayerNorms as gamma / beta).
    let cases = [(vec![layer("0"), layer("1")], false), (vec![layer("*")], true)];
    let root = std::env::temp_dir().join(format!("vkformers-esm-buffers-{}", std::process::id()));
    on_every_device("esm buffers", |ctx| {
        let g = Graph::new(ctx);
        let want = Model::load(&g, &fixture("esm")).unwrap();
        for (i, (keys, legacy)) in cases.iter().enumerate() {
            let dir = root.join(i.to_string());
            esm_with_buffers(&dir, keys, *legacy);
            let got = Model::load(&g, &dir).unwrap_or_else(|e| panic!("{keys:?}: {e}"));
            assert_eq!(got.params.len(), want.params.len());
            for ((name, a), (_, b)) in got.params.iter().zip(&want.params) {
                assert_eq!(g.read(a).unwrap(), g.read(b).unwrap(), "{keys:?}: {name}");
            }
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&root);
}
