//! Real BERT checkpoints differ from what `save_pretrained` writes today: TensorFlow-converted
//! ones (bert-base-uncased) name LayerNorms `gamma` / `beta`, and pre-training checkpoints carry
//! the pooler, the next-sentence head and the tied decoder's bias alias. transformers loads them
//! into `BertForMaskedLM` (renaming, dropping the rest); so must we, to the same parameters.

mod common;

use std::path::{Path, PathBuf};

use vkformers_io::{Dtype, ModelWeights};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

use common::write_model;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// The `bert` fixture rewritten as an old pre-training checkpoint into `out`.
fn legacy_checkpoint(out: &Path) {
    let src = ModelWeights::open(fixture("bert")).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for info in src.tensors() {
        let name = info.name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta");
        tensors.push((name, info.shape.clone(), src.tensor_f32(&info.name).unwrap()));
    }
    let word = src.tensor_f32("bert.embeddings.word_embeddings.weight").unwrap();
    let bias = src.tensor_f32("cls.predictions.bias").unwrap();
    let h = 32;
    tensors.push(("bert.pooler.dense.weight".into(), vec![h, h], vec![0.5; h * h]));
    tensors.push(("bert.pooler.dense.bias".into(), vec![h], vec![0.1; h]));
    tensors.push(("cls.seq_relationship.weight".into(), vec![2, h], vec![0.3; 2 * h]));
    tensors.push(("cls.seq_relationship.bias".into(), vec![2], vec![0.0; 2]));
    tensors.push(("cls.predictions.decoder.weight".into(), vec![word.len() / h, h], word));
    tensors.push(("cls.predictions.decoder.bias".into(), vec![bias.len()], bias));
    write_model(out, &tensors, (Dtype::F32, u64::MAX), &fixture("bert"));
}

#[test]
fn a_tensorflow_era_pretraining_checkpoint_loads_as_the_masked_lm() {
    let dir = std::env::temp_dir().join(format!("vkformers-legacy-bert-{}", std::process::id()));
    legacy_checkpoint(&dir);
    on_every_device("legacy bert", |ctx| {
        let g = Graph::new(ctx);
        let (want, got) = (Model::load(&g, &fixture("bert")).unwrap(), Model::load(&g, &dir).unwrap());
        let names = |m: &Model| m.params.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&got), names(&want), "internal parameter names");
        for ((name, a), (_, b)) in got.params.iter().zip(&want.params) {
            assert_eq!(g.read(a).unwrap(), g.read(b).unwrap(), "{name}");
        }
        // Saved back under the names the folder used (as transformers would read them again).
        let out = dir.join("saved");
        got.save(&g, &out, None, u64::MAX).unwrap();
        let saved = ModelWeights::open(&out).unwrap();
        assert!(saved.info("bert.embeddings.LayerNorm.gamma").is_ok());
        assert!(saved.info("bert.pooler.dense.weight").is_err(), "the dropped pooler is not saved");
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
}
