//! The chunked training loss (`lm_loss`) against the whole-logits path that the parity tests
//! hold to transformers (`forward_with_aux` + `causal_lm_loss` + the MoE term): the loss and
//! every parameter's gradient, with chunks that do and do not divide the tokens, on fixtures
//! with a tied head, a final softcap, a logit scale and the MoE load-balancing loss.

use std::path::PathBuf;

use vkformers_io::ModelWeights;
use vkformers_models::decoder::{causal_lm_loss, forward_with_aux, Batch};
use vkformers_models::lm_loss::causal_lm_loss_in_chunks;
use vkformers_models::model::Model;
use vkformers_models::moe::aux_loss_coef;
use vkformers_tensor::ops::broadcast;
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::testing::on_every_device;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

fn ints(dir: &std::path::Path, name: &str) -> (Vec<i32>, Vec<usize>) {
    let r = ModelWeights::open_file(dir.join("reference.safetensors")).expect("reference");
    let raw = r.tensor_bytes(name).expect(name);
    (raw.data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(), raw.shape.to_vec())
}

/// Loss and every parameter's gradient, by name, then the gradients are cleared.
fn loss_and_grads(g: &Graph<'_>, model: &Model, loss: &Tensor) -> Vec<(String, Vec<f32>)> {
    g.backward(loss).expect("backward");
    let mut out = vec![("loss".to_string(), g.read(loss).expect("loss"))];
    for (name, p) in &model.params {
        if let Some(gr) = p.grad() {
            out.push((name.clone(), g.read(&gr).expect("grad")));
        }
        p.zero_grad();
    }
    out
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    let n: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (d / n.max(1e-300)).sqrt()
}

fn check(name: &str) {
    on_every_device(&format!("chunked loss {name}"), |ctx| {
        let dir = fixture(name);
        let (ids, shape) = ints(&dir, "input_ids");
        let (mask, _) = ints(&dir, "attention_mask");
        let (labels, _) = ints(&dir, "labels");
        let (b, t) = (shape[0], shape[1]);
        let batch = Batch { ids: &ids, mask: &mask, batch: b, seq: t };
        let g = Graph::new(ctx);
        let model = Model::load(&g, &dir).expect("model");
        let (spec, w) = (&model.spec, &model.weights);
        let with_aux = |loss: Tensor, aux: Option<Tensor>| match (aux, aux_loss_coef(spec)) {
            (Some(a), Some(c)) => broadcast::add(&g, &loss, &broadcast::scale(&g, &a, c)?),
            _ => Ok(loss),
        };
        let (logits, aux) = forward_with_aux(&g, spec, w, &batch).expect("forward");
        let whole = with_aux(causal_lm_loss(&g, &logits, &labels, b, t).expect("loss"), aux)?;
        drop(logits);
        let want = loss_and_grads(&g, &model, &whole);
        for chunk in [Some(3), Some(b * t), None] {
            let (loss, aux) = causal_lm_loss_in_chunks(&g, spec, w, &batch, &labels, chunk).expect("chunked");
            let got = loss_and_grads(&g, &model, &with_aux(loss, aux)?);
            assert_eq!(got.len(), want.len(), "{name}: the same parameters get gradients");
            for ((n, a), (_, b)) in got.iter().zip(&want) {
                // The same kernels on the same rows; only the head products' row blocking differs.
                let e = rel_l2(a, b);
                assert!(e <= 1e-5, "{name} chunks {chunk:?}: {n} relative error {e:e}");
            }
        }
        Ok(())
    });
}

#[test]
fn llama() {
    check("llama");
}

#[test]
fn tied_head() {
    check("llama_llama3");
}

#[test]
fn final_softcap() {
    check("gemma2");
}

#[test]
fn logit_scale() {
    check("granite");
}

#[test]
fn moe_aux_loss() {
    check("mixtral_aux");
}
