//! Bad encoder-decoder inputs are errors that say what is wrong, not garbage or a crash.

use std::path::PathBuf;

use vkformers_models::model::Model;
use vkformers_models::seq2seq::{forward_loss, Seq2SeqBatch};
use vkformers_tensor::Graph;
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

#[test]
fn out_of_vocabulary_ids_and_labels_and_bad_shapes_are_named() {
    on_every_device("seq2seq inputs", |ctx| {
        let g = Graph::new(ctx);
        let model = Model::load(&g, &fixture("t5")).unwrap();
        let v = model.spec.vocab as i32;
        let run = |ids: &[i32], labels: &[i32]| {
            let mask = vec![1; ids.len()];
            let b = Seq2SeqBatch {
                ids,
                mask: &mask,
                batch: 1,
                src_len: ids.len(),
                labels,
                tgt_len: labels.len(),
                train: false,
            };
            forward_loss(&g, &model.spec, &model.weights, &b).map(|_| ()).map_err(|e| e.to_string())
        };
        assert!(run(&[5, 6, 7], &[8, 9, -100]).is_ok());
        let e = run(&[5, 6, 7], &[8, v, -100]).unwrap_err();
        assert!(e.contains("label") && e.contains("-100"), "{e}");
        let e = run(&[5, v + 3, 7], &[8, 9]).unwrap_err();
        assert!(e.contains("token id"), "{e}");
        let mask = [1, 1];
        let b =
            Seq2SeqBatch { ids: &[5, 6, 7], mask: &mask, batch: 1, src_len: 3, labels: &[8], tgt_len: 1, train: false };
        assert!(forward_loss(&g, &model.spec, &model.weights, &b).is_err(), "a mask shorter than the ids");
        Ok(())
    });
}
