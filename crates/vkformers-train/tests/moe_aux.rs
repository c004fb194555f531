//! The MoE load-balancing loss in the trainer: with `output_router_logits` (the `mixtral_aux`
//! fixture) a step's loss is the cross-entropy plus `router_aux_loss_coef` times the auxiliary
//! loss, and that term is reported apart (`StepStats::aux_loss`, the metrics' `aux_loss`);
//! without it (`mixtral`) there is no such term.

mod common;

use std::path::PathBuf;

use vkformers_data::Example;
use vkformers_models::decoder::{causal_lm_loss, forward};
use vkformers_models::model::Model;
use vkformers_tensor::Graph;
use vkformers_train::{full_model_params, sequences, Loader, Trainer};
use vkformers_vk::testing::on_every_device;

use common::plain_steps;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// One step on two rows (one padded); `(loss, aux_loss, cross-entropy before the step)`.
fn one_step(name: &str) -> (f64, Option<f64>, f64) {
    let out = std::cell::RefCell::new((0.0, None, 0.0));
    on_every_device("moe aux trainer", |ctx| {
        let tmp = tempfile::tempdir().unwrap();
        let rows: Vec<Example> = [vec![5u32, 9, 17, 3, 44, 100, 7, 8], vec![31, 2, 60, 61, 12]]
            .into_iter()
            .map(|ids| Example::new(ids.clone(), ids.iter().map(|&t| t as i32).collect()))
            .collect();
        let seqs = sequences(&rows, 16, false).unwrap();
        let g = Graph::new(ctx);
        let m = Model::load(&g, &fixture(name)).unwrap();
        // The cross-entropy alone on the same padded batch, before the step.
        let batch = vkformers_train::TokenBatch::pad(&seqs.iter().collect::<Vec<_>>(), 0);
        let mb = batch.as_model_batch();
        let ce = g.no_grad(|| -> f64 {
            let logits = forward(&g, &m.spec, &m.weights, &mb).unwrap();
            let l = causal_lm_loss(&g, &logits, &batch.labels, batch.batch, batch.seq).unwrap();
            f64::from(g.read(&l).unwrap()[0])
        });
        let o = plain_steps(tmp.path(), 1e-3, 1);
        let loader = Loader::new(seqs, 2, false, 0, 0).unwrap();
        let mut t = Trainer::new(&g, full_model_params(&m), loader, o).unwrap();
        let s = t.step(&m).unwrap();
        *out.borrow_mut() = (s.record.loss, s.aux_loss, ce);
        Ok(())
    });
    out.into_inner()
}

#[test]
fn the_aux_loss_is_added_and_reported_when_the_config_asks() {
    let (loss, aux, ce) = one_step("mixtral_aux");
    let aux = aux.expect("mixtral_aux outputs router logits: an aux term");
    // coef 0.5 times E·Σ f·P, which is about k = 2 for balanced routing (E = 4, top-2).
    assert!(aux > 0.5 && aux < 2.0, "aux term {aux}");
    assert!((loss - (ce + aux)).abs() <= 1e-5 * loss, "loss {loss} is not cross-entropy {ce} + aux {aux}");
    let (loss, aux, ce) = one_step("mixtral");
    assert_eq!(aux, None, "mixtral without output_router_logits has no aux term");
    assert!((loss - ce).abs() <= 1e-6 * loss, "loss {loss} vs cross-entropy {ce}");
}
