//! Row-keyed dropout (`dropout::rows`): forward and backward equal the reference on odd shapes
//! in every storage type, a row's mask follows its key wherever the row sits (so a sample
//! draws the same mask in any batch), and bad arguments are errors naming the kernel.

use vkformers_kernels::dropout::{reference, rows};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::storage::{download, on_halves, round, tol, upload};
use vkformers_kernels::testutil::{assert_close, f64s, Rng};
use vkformers_vk::testing::on_every_device;
use vkformers_vk::{Context, Result, VkError};

fn key_bytes(ctx: &Context, keys: &[[u32; 3]]) -> Result<vkformers_vk::Buffer> {
    let flat: Vec<u32> = keys.iter().flatten().copied().collect();
    ctx.buffer_from(&flat, "keys")
}

/// Forward on `xs` and backward on `dys` (both `[keys.len(), cols]`, stored as `dt`).
fn run(
    ctx: &Context,
    dt: DType,
    (xs, dys): (&[f32], &[f32]),
    keys: &[[u32; 3]],
    cols: usize,
    (p, seed): (f32, u64),
) -> Result<(Vec<f32>, Vec<f32>)> {
    let bytes = xs.len() as u64 * dt.bytes();
    let (x, dy, k) = (upload(ctx, dt, xs, "x")?, upload(ctx, dt, dys, "dy")?, key_bytes(ctx, keys)?);
    let (y, dx) = (ctx.buffer(bytes, "y")?, ctx.buffer(bytes, "dx")?);
    let (y, dx) = (y.slice(0, bytes), dx.slice(0, bytes));
    let mut rec = ctx.recorder(false)?;
    rows::apply(&mut rec, x.view(), k.view(), y, (keys.len(), cols), p, seed, dt)?;
    rows::apply(&mut rec, dy.view(), k.view(), dx, (keys.len(), cols), p, seed, dt)?;
    rec.submit()?;
    Ok((download(ctx, dt, y)?, download(ctx, dt, dx)?))
}

fn random_keys(rng: &mut Rng, n: usize) -> Vec<[u32; 3]> {
    (0..n).map(|_| [rng.next_u64() as u32 % 512, rng.next_u64() as u32, rng.next_u64() as u32]).collect()
}

fn check(ctx: &Context, dt: DType, rng: &mut Rng) -> Result<()> {
    for (r, cols, p, seed) in
        [(1, 1, 0.5f32, 3u64), (3, 7, 0.1, u64::MAX), (17, 33, 0.3, 1 << 40), (5, 4, 1.0, 9), (301, 129, 0.6, 23)]
    {
        let keys = random_keys(rng, r);
        let (xs, dys) = (round(dt, &rng.vec(r * cols, 3.0)), round(dt, &rng.vec(r * cols, 1.0)));
        let (y, dx) = run(ctx, dt, (&xs, &dys), &keys, cols, (p, seed))?;
        let what = format!("{dt:?} [{r}, {cols}] p {p} seed {seed:#x}");
        assert_close(&format!("{what}: y"), &y, &reference::rows_apply(&f64s(&xs), &keys, cols, p, seed), tol(dt));
        assert_close(&format!("{what}: dx"), &dx, &reference::rows_apply(&f64s(&dys), &keys, cols, p, seed), tol(dt));
        let mask = reference::row_mask(&keys, cols, p, seed);
        for (i, keep) in mask.iter().enumerate() {
            if xs[i] != 0.0 {
                assert_eq!(y[i] != 0.0, *keep, "{what}: forward mask at {i}");
            }
            if dys[i] != 0.0 {
                assert_eq!(dx[i] != 0.0, *keep, "{what}: backward replays the mask at {i}");
            }
        }
    }
    Ok(())
}

#[test]
fn gpu_rows_forward_and_backward_match_reference() {
    on_every_device("dropout rows", |ctx| check(ctx, DType::F32, &mut Rng::new(15)));
}

#[test]
fn gpu_rows_in_16_bits_match_reference() {
    on_halves("dropout rows f16/bf16", 16, |ctx, rng, dt| check(ctx, dt, rng));
}

#[test]
fn a_rows_mask_follows_its_key_not_its_place() {
    on_every_device("dropout rows placement", |ctx| {
        // Batch [a, b, c] vs batch [c, a] (the rows as another batch or rank would hold
        // them): each row comes out the same; and a different key gives a different mask.
        let cols = 64;
        let mut rng = Rng::new(17);
        let keys = random_keys(&mut rng, 3);
        let xs = rng.vec(3 * cols, 1.0);
        let (whole, _) = run(ctx, DType::F32, (&xs, &xs), &keys, cols, (0.5, 77))?;
        let part_x = [&xs[2 * cols..], &xs[..cols]].concat();
        let (part, _) = run(ctx, DType::F32, (&part_x, &part_x), &[keys[2], keys[0]], cols, (0.5, 77))?;
        assert_eq!(part, [&whole[2 * cols..], &whole[..cols]].concat());
        let other = [keys[0][0] + 1, keys[0][1], keys[0][2]];
        let (moved, _) = run(ctx, DType::F32, (&xs[..cols], &xs[..cols]), &[other], cols, (0.5, 77))?;
        assert_ne!(moved, whole[..cols], "the key selects the mask");
        Ok(())
    });
}

#[test]
fn rows_arguments_are_checked() {
    on_every_device("dropout rows errors", |ctx| {
        let (a, k) = (ctx.buffer(48, "a")?, ctx.buffer(12, "k")?);
        let mut rec = ctx.recorder(false)?;
        let e = rows::apply(&mut rec, a.view(), k.view(), a.view(), (2, 6), 0.5, 1, DType::F32).unwrap_err();
        assert!(matches!(&e, VkError::Kernel { kernel, .. } if kernel == "dropout/rows:f32"), "{e}");
        assert!(e.to_string().contains("keys of 12 bytes"), "{e}");
        let e = rows::apply(&mut rec, a.view(), k.view(), a.view(), (1, 12), 1.5, 1, DType::F32).unwrap_err();
        assert!(e.to_string().contains("outside [0, 1]"), "{e}");
        Ok(())
    });
}
