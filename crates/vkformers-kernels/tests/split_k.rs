//! Split-K GEMM (weight-gradient shapes: a small C summed over a long K) against the f64
//! reference, in f32 and 16-bit storage, with beta 0 and 1; and the plan's choices.

use vkformers_kernels::matmul::auto::{gemm_split_k, split_k_plan, split_k_plan_for};
use vkformers_kernels::matmul::{reference, DType, GemmDesc};
use vkformers_kernels::testutil::storage::{round, upload};
use vkformers_kernels::testutil::{assert_close, f64s, Rng, TOL_F32};
use vkformers_vk::testing::on_every_device;

fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    (0..c * r).map(|i| x[(i % r) * c + i / r]).collect()
}

#[test]
fn the_plan_splits_only_thin_products_with_a_long_k() {
    let dw = GemmDesc::packed(64, 48, 4096, true, false);
    assert_eq!(split_k_plan(&dw), Some((8, 8 * 64 * 48 * 4)), "slices of at least 512");
    assert_eq!(split_k_plan(&GemmDesc::packed(8192, 8192, 4096, false, true)), None, "C fills the device");
    assert_eq!(split_k_plan(&GemmDesc::packed(64, 48, 700, true, false)), None, "K too short to split");
    // A batch-64 decode step of the 1.1B shape (weights [N, K]): q/k/v and o split 4 ways, down
    // 8 ways, gate/up and the LM head (at least one 64 x 64 tile per SM) not at all.
    let step = |n, k| split_k_plan(&GemmDesc::packed(64, n, k, false, true)).map(|p| p.0);
    assert_eq!((step(2560, 2048), step(2048, 2048), step(2048, 5632)), (Some(4), Some(4), Some(8)));
    assert_eq!((step(11264, 2048), step(32000, 2048)), (None, None));
    let mut biased = dw;
    biased.has_bias = true;
    assert_eq!(split_k_plan(&biased), None);
    // `VKFORMERS_SKINNY_SPLIT_K=0`: decode rows unsplit; other thin products as before.
    let o_proj = GemmDesc::packed(64, 2048, 2048, false, true);
    assert_eq!(split_k_plan_for(&o_proj, false), None);
    assert_eq!(split_k_plan_for(&o_proj, true).map(|p| p.0), Some(4));
    assert_eq!(split_k_plan_for(&GemmDesc::packed(65, 48, 4096, true, false), false).map(|p| p.0), Some(8));
}

/// The commands of a batch-64 decode step's q/k/v and gate/up products of the 1.1B Llama (K =
/// 2048, 64 x 64 tiles), by the plan the launcher follows on every device: separate, each of q
/// (2048 columns), k and v (256), gate and up (5632: 88 tiles) splits along K and sums its
/// slices after (10 commands a layer); packed (`vkformers_models::packed`), q/k/v (2560) still
/// splits, gate/up (11264: 176 tiles) does not, and one dispatch splits q/k/v's columns apart
/// (4 commands a layer: 132 fewer a step over 22 layers).
#[test]
fn packed_projections_of_a_batch_64_step_take_fewer_commands() {
    let commands = |n: u32| 1 + u32::from(split_k_plan(&GemmDesc::packed(64, n, 2048, false, true)).is_some());
    let separate: u32 = [2048, 256, 256, 5632, 5632].map(commands).iter().sum();
    let packed: u32 = [2560, 11264].map(commands).iter().sum::<u32>() + 1;
    assert_eq!((separate, packed), (10, 4));
}

#[test]
fn split_k_equals_the_reference() {
    on_every_device("split-K", |ctx| {
        let (m, n, k) = (40usize, 24usize, 2048usize);
        let mut rng = Rng::new(9);
        // dW = dYᵀ · X: A stored [K, M] (read transposed), B stored [K, N].
        let (a, b, c0) = (rng.vec(k * m, 1.0), rng.vec(k * n, 1.0), rng.vec(m * n, 1.0));
        for dt in [DType::F32, DType::BF16, DType::F16] {
            for beta in [0.0f32, 1.0] {
                let mut desc = GemmDesc::packed(m as u32, n as u32, k as u32, true, false);
                desc.dtype = dt;
                desc.beta = beta;
                let (splits, bytes) = split_k_plan(&desc).expect("this shape splits");
                let (ab, bb) = (upload(ctx, dt, &a, "A")?, upload(ctx, dt, &b, "B")?);
                let c = ctx.buffer_from(&c0, "C")?;
                let ws = ctx.buffer(bytes, "workspace")?;
                let mut rec = ctx.recorder(false)?;
                gemm_split_k(&mut rec, &desc, splits, ab.view(), bb.view(), ws.view(), c.view())?;
                rec.submit()?;
                let (ar, br) = (f64s(&round(dt, &a)), f64s(&round(dt, &b)));
                let mut want = reference::matmul(&transpose(&ar, k, m), &br, m, k, n);
                for (w, c) in want.iter_mut().zip(&c0) {
                    *w += f64::from(beta) * f64::from(*c);
                }
                assert_close(
                    &format!("{dt:?} beta {beta} ({splits} splits)"),
                    &ctx.read_vec(c.view())?,
                    &want,
                    TOL_F32,
                );
            }
        }
        Ok(())
    });
}
