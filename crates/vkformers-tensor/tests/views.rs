//! Row views of one buffer (`Graph::view_rows`): a packed weight `[q + k + v, in]` filled part by
//! part (`upload_into` through the views) reads back as its parts, a product on a view equals the
//! product on its own copy of the rows, one product on the packed weight split by columns
//! (`split::split_cols`) equals the three; bad views are errors.

use vkformers_tensor::ops::matmul::linear;
use vkformers_tensor::ops::split::split_cols;
use vkformers_tensor::{DType, Graph};
use vkformers_vk::testing::on_every_device;

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * 0.61).sin() + 0.1) * scale).collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn row_views_of_a_packed_weight_are_its_parts() {
    on_every_device("view_rows", |ctx| {
        let g = Graph::new(ctx);
        let (k, rows, m) = (24, [16usize, 8, 8], 21);
        let parts: Vec<Vec<f32>> = rows.iter().enumerate().map(|(i, r)| ramp(r * k, 1.0 + i as f32)).collect();
        let packed = g.constant_uninit(&[rows.iter().sum(), k], DType::F32)?;
        let mut views = Vec::new();
        let mut row0 = 0;
        for (p, r) in parts.iter().zip(rows) {
            let v = g.view_rows(&packed, row0, r)?;
            g.upload_into(&v, &bytes(p))?;
            views.push(v);
            row0 += r;
        }
        let x = g.constant(&ramp(m * k, 0.5), &[m, k])?;
        let fused = g.no_grad(|| linear(&g, &x, &packed, None))?;
        let split = g.no_grad(|| split_cols(&g, &fused, &rows))?;
        for ((view, part), (r, s)) in views.iter().zip(&parts).zip(rows.iter().zip(&split)) {
            assert_eq!(g.read(view)?, *part, "a view reads its rows");
            let own = g.constant(part, &[*r, k])?;
            let want = g.read(&g.no_grad(|| linear(&g, &x, &own, None))?)?;
            assert_eq!(g.read(&g.no_grad(|| linear(&g, &x, view, None))?)?, want, "product on a view");
            assert_eq!(g.read(s)?, want, "the packed product's columns");
        }
        assert!(g.view_rows(&packed, 30, 3).is_err(), "rows past the end");
        let half = g.constant_uninit(&[3, 3], DType::BF16)?;
        assert!(g.view_rows(&half, 1, 1).is_err(), "a bf16 view starting inside a word");
        assert!(g.upload_into(&views[0], &bytes(&[1.0])).is_err(), "upload of the wrong size");
        Ok(())
    });
}
