//! A batch's prefill in groups of rows (`prefill_rows`, what `generate` runs past
//! `VKFORMERS_MAX_PREFILL_TOKENS` columns) gives the logits of one forward over every row, bit
//! for bit where the products take the same kernel both ways (here the GEMM: every forward has
//! more rows than the GEMV's 16), and leaves the same cache: two decode steps after it give the
//! same logits too.
//! Left-padded prompts of different lengths; f32 and bf16 weights (bf16 pools); llama and gemma2
//! (sliding and global layers).
//! The prefill's LM head runs on each forward's last tokens: 7 rows in one forward, 2 or 1 in a
//! group. Where cooperative matrix 2 exists more than 4 rows take the GEMM (`CM2_ROWS`), so the
//! two would run different kernels there (the H200 failed this test so, f32 step 0); the test
//! holds the GEMV for up to 16 rows on every device (`VKFORMERS_GEMV_MAX_ROWS=16`), as lavapipe
//! chooses anyway, so both ways run the same kernels.

mod common;

use common::fixtures_root;
use vkformers_generate::prefill_rows::{in_groups_of, rows_per_forward};
use vkformers_models::decoder::{forward_cached_last, Batch, KvCache};
use vkformers_models::model::Model;
use vkformers_tensor::{DType, Graph, Tensor};
use vkformers_vk::testing::on_every_device;

const ROWS: usize = 7;
/// Columns a row: even one row alone is more rows than the GEMV takes (16), so every forward's
/// products run the GEMM, as a grouped prefill's do (thousands of columns a forward).
const T: usize = 18;

/// Logits of the prefill (grouped at `cap` columns a forward, or one forward with `None`) and of
/// two greedy decode steps after it.
fn run(g: &Graph<'_>, model: &Model, cap: Option<usize>) -> Vec<Vec<f32>> {
    let cache = KvCache::batched(g, &model.spec, ROWS, T + 4).unwrap();
    let ids: Vec<i32> = (0..ROWS * T).map(|i| (i * 11 % 50 + 3) as i32).collect();
    // Row r has T - 3 (r % 4) real tokens, left-padded.
    let mask: Vec<i32> = (0..ROWS * T).map(|i| i32::from(i % T >= 3 * ((i / T) % 4))).collect();
    let first: Tensor = g.no_grad(|| match cap {
        Some(c) => in_groups_of(g, model, &cache, (&ids, &mask), (ROWS, T), c).unwrap().expect("grouped"),
        None => {
            let batch = Batch { ids: &ids, mask: &mask, batch: ROWS, seq: T };
            forward_cached_last(g, &model.spec, &model.weights, &batch, &cache).unwrap()
        }
    });
    let mut out = vec![g.read(&first).unwrap()];
    for _ in 0..2 {
        let last = out.last().unwrap();
        let v = last.len() / ROWS;
        let next: Vec<i32> =
            last.chunks(v).map(|r| (0..v).fold(0, |b, j| if r[j] > r[b] { j } else { b }) as i32).collect();
        let batch = Batch { ids: &next, mask: &[1; ROWS], batch: ROWS, seq: 1 };
        let logits = g.no_grad(|| forward_cached_last(g, &model.spec, &model.weights, &batch, &cache).unwrap());
        out.push(g.read(&logits).unwrap());
    }
    out
}

#[test]
fn grouped_prefill_equals_one_forward() {
    assert_eq!(rows_per_forward(7, 6, 12), Some(2));
    assert_eq!(rows_per_forward(7, 6, 100), None, "within the cap: one forward");
    assert_eq!(rows_per_forward(7, 600, 100), Some(1), "a row longer than the cap goes alone");
    assert_eq!(rows_per_forward(7, 6, 0), None, "0: no cap");
    // Read once by the first product; this binary's only test sets it first.
    std::env::set_var("VKFORMERS_GEMV_MAX_ROWS", "16");
    on_every_device("grouped prefill", |ctx| {
        for (name, dtype) in [("llama", DType::F32), ("llama", DType::BF16), ("gemma2", DType::BF16)] {
            let g = Graph::new(ctx);
            let model = Model::load_for_inference(&g, &fixtures_root().join(name), dtype).unwrap();
            g.set_autocast((dtype != DType::F32).then_some(dtype));
            let one = run(&g, &model, None);
            // 2 rows a forward (the last alone), and 1.
            for cap in [2 * T, T] {
                let grouped = run(&g, &model, Some(cap));
                for (step, (a, b)) in grouped.iter().zip(&one).enumerate() {
                    let diff = a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits());
                    assert!(diff.is_none(), "{name} {dtype:?} cap {cap}: step {step} logit {diff:?} differs");
                }
            }
        }
        Ok(())
    });
}
