//! `norm/col_sum_tiled` against `norm/col_sum`: the same bits (both add the partial rows in
//! increasing order from zero) on odd shapes, in every storage type, with and without
//! accumulating; and against the host sum. On every device with validation on.

use vkformers_kernels::dtype::DType;
use vkformers_kernels::norm::{col_sum, col_sum_as, ColSum};
use vkformers_kernels::testutil::storage::{download, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Buffer, Context, Result};

/// The raw bits of `out` after a col_sum by `how` of `partial [blocks, dim]` into `start`.
fn bits(
    ctx: &Context,
    how: ColSum,
    partial: &Buffer,
    (blocks, dim): (u32, u32),
    start: &[f32],
    accumulate: bool,
    dt: DType,
) -> Result<Vec<u8>> {
    let out = upload(ctx, dt, start, "sum")?;
    let mut rec = ctx.recorder(false)?;
    col_sum_as(&mut rec, how, partial.view(), out.view(), blocks, dim, accumulate, dt)?;
    rec.submit()?;
    ctx.read_vec::<u8>(out.view())
}

#[test]
fn tiled_col_sum_gives_the_serial_bits() {
    on_every_device("col_sum tiled", |ctx| {
        let mut rng = Rng::new(41);
        // Whole tiles; a short last tile of blocks and of columns; fewer blocks than a tile;
        // one column; the norm backward's shape.
        let shapes = [(128u32, 32u32), (64, 64), (130, 100), (7, 45), (300, 1), (1024, 2048)];
        for (blocks, dim) in shapes {
            let data = rng.vec((blocks * dim) as usize, 1.0);
            let partial = ctx.buffer_from(&data, "partial")?;
            let start = round(DType::BF16, &rng.vec(dim as usize, 1.0)); // exact in every type
            for dt in [DType::F32, DType::F16, DType::BF16] {
                if dt != DType::F32 && !ctx.caps().fp16 {
                    continue;
                }
                for accumulate in [false, true] {
                    let what = format!("blocks {blocks} dim {dim} {dt:?} accumulate {accumulate}");
                    let tiled = bits(ctx, ColSum::Tiled, &partial, (blocks, dim), &start, accumulate, dt)?;
                    let serial = bits(ctx, ColSum::Serial, &partial, (blocks, dim), &start, accumulate, dt)?;
                    assert!(tiled == serial, "{what}: tiled and serial sums differ");
                    let (n, d) = (blocks as usize, dim as usize);
                    let want: Vec<f64> = (0..d)
                        .map(|i| {
                            let s: f64 = (0..n).map(|b| f64::from(data[b * d + i])).sum();
                            s + if accumulate { f64::from(start[i]) } else { 0.0 }
                        })
                        .collect();
                    let out = upload(ctx, dt, &start, "sum")?;
                    let mut rec = ctx.recorder(false)?;
                    col_sum(&mut rec, partial.view(), out.view(), blocks, dim, accumulate, dt)?;
                    rec.submit()?;
                    // Recursive f32 summation: |error| <= (n - 1) u sum_b |x_b|, with u = 2^-24.
                    let magnitude = (0..d)
                        .map(|i| (0..n).map(|b| f64::from(data[b * d + i].abs())).sum::<f64>())
                        .fold(0.0, f64::max);
                    let mut t = tol(dt);
                    t.abs += n as f64 * f64::from(f32::EPSILON) / 2.0 * magnitude;
                    assert_close(&what, &download(ctx, dt, out.view())?, &want, t);
                }
            }
        }
        Ok(())
    });
}
