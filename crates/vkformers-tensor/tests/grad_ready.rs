//! The grad-ready hook (data parallelism's overlap): called once per parameter, last layer
//! first, when nothing left on the tape adds into its gradient — the gradient read at that
//! moment is the final one, bit for bit — and backward's results do not depend on it.

use std::cell::RefCell;
use std::rc::Rc;

use vkformers_tensor::ops::{matmul, reduce};
use vkformers_tensor::{Graph, Tensor};
use vkformers_vk::testing::on_every_device;

/// A leaf's id and its gradient as read when the hook reported it.
type Reported = (u64, Vec<f32>);

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((i as u32 * 37 + seed * 11) % 23) as f32 / 23.0 - 0.45).collect()
}

/// x [3, 5] → w1 [5, 5] → w2 [5, 5] → w1 again (tied: its gradient is final only after the
/// first layer's node) → w3 [2, 5] → Σ. Returns the loss and the weights [w1, w2, w3].
fn chain(g: &Graph<'_>) -> vkformers_tensor::Result<(Tensor, Vec<Tensor>)> {
    let w: Vec<Tensor> = [(5, 1), (5, 2), (2, 3)]
        .iter()
        .map(|&(o, s)| g.parameter(&values(o * 5, s), &[o, 5]))
        .collect::<Result<_, _>>()?;
    let x = g.constant(&values(15, 7), &[3, 5])?;
    let h = matmul::linear(g, &x, &w[0], None)?;
    let h = matmul::linear(g, &h, &w[1], None)?;
    let h = matmul::linear(g, &h, &w[0], None)?;
    let y = matmul::linear(g, &h, &w[2], None)?;
    Ok((reduce::sum(g, &y)?, w))
}

#[test]
fn each_gradient_is_reported_once_when_final_last_layer_first() {
    on_every_device("grad ready", |ctx| {
        let g = Graph::new(ctx);
        let (loss, w) = chain(&g)?;
        let seen: Rc<RefCell<Vec<Reported>>> = Rc::default();
        let log = seen.clone();
        g.set_grad_ready_hook(Some(Box::new(move |g, leaf| {
            let grad = g.read(&leaf.grad().expect("a reported leaf has a gradient"))?;
            log.borrow_mut().push((leaf.id(), grad));
            Ok(())
        })));
        g.backward(&loss)?;
        let seen = seen.borrow();
        let order: Vec<u64> = seen.iter().map(|(id, _)| *id).collect();
        assert_eq!(order, vec![w[2].id(), w[1].id(), w[0].id()], "once each, last layer first");
        for (id, early) in seen.iter() {
            let t = w.iter().find(|t| t.id() == *id).expect("a weight");
            let last = g.read(&t.grad().expect("grad"))?;
            assert!(
                early.iter().zip(&last).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{:?}: read early != final",
                t.shape()
            );
        }
        // Without a hook: the same gradients, bit for bit.
        let plain = Graph::new(ctx);
        let (loss, v) = chain(&plain)?;
        plain.backward(&loss)?;
        for (a, b) in w.iter().zip(&v) {
            let (a, b) = (g.read(&a.grad().expect("grad"))?, plain.read(&b.grad().expect("grad"))?);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "the hook changed a gradient");
        }
        Ok(())
    });
}

#[test]
fn no_report_under_gradient_checkpointing() {
    on_every_device("grad ready checkpointing", |ctx| {
        let g = Graph::new(ctx);
        g.set_checkpointing(true);
        let (loss, _) = chain(&g)?;
        let calls = Rc::new(RefCell::new(0));
        let count = calls.clone();
        g.set_grad_ready_hook(Some(Box::new(move |_, _| {
            *count.borrow_mut() += 1;
            Ok(())
        })));
        g.backward(&loss)?;
        assert_eq!(*calls.borrow(), 0, "a block's recompute may still add into any parameter's gradient");
        Ok(())
    });
}
