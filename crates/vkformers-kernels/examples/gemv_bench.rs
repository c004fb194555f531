//! Decode-shaped products `y [m, n] = x [m, k] · Wᵀ`: `matmul::gemv` against `matmul::gemm`
//! on the same shapes, timed by GPU timestamps (best of the batch), with GB/s of weight
//! traffic (`n · k · sizeof(W)` bytes per product: what decoding must stream).
//!
//! `cargo run --release -p vkformers-kernels --example gemv_bench [-- M ...]` (default m = 1 8).
//! The GEMM reads x in W's dtype (as a 16-bit layer would feed it); the GEMV reads f32 x.

use vkformers_kernels::elementwise::fill;
use vkformers_kernels::matmul::gemv::{gemv, GemvDesc};
use vkformers_kernels::matmul::{gemm, DType, GemmDesc};
use vkformers_vk::{Buffer, Context, DeviceSelector, Recorder, Result};

/// (n, k): a 49152-token vocabulary over a 576-wide model (LM head), and an MLP down
/// projection of 5632 → 2048.
const SHAPES: [(u32, u32); 2] = [(49_152, 576), (5_632, 2_048)];
const DTYPES: [DType; 2] = [DType::F32, DType::BF16];
/// Dispatches per timed batch; rounds of them until one batch lasts 50 ms (clocks ramped up).
const REPS: usize = 10;
const ROUNDS: usize = 20;

fn main() -> Result<()> {
    let rows: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rows = if rows.is_empty() { vec![1, 8] } else { rows };
    let ctx = Context::new(&DeviceSelector::Best)?;
    println!("device: {} (timestamps: {})", ctx.caps().name, ctx.caps().timestamps);
    for (n, k) in SHAPES {
        for dtype in DTYPES {
            for &m in &rows {
                bench_shape(&ctx, m, n, k, dtype)?;
            }
        }
    }
    Ok(())
}

/// A buffer of `elems` elements of `dtype` (rounded up to whole 4-byte words), filled.
fn filled(ctx: &Context, elems: u32, dtype: DType, value: f32, what: &str) -> Result<Buffer> {
    let bytes = (u64::from(elems) * dtype.bytes()).next_multiple_of(4);
    let buf = ctx.buffer(bytes, what)?;
    let mut rec = ctx.recorder(false)?;
    fill(&mut rec, buf.view(), value)?; // 16-bit: each word holds (0, value's high half)
    rec.submit()?;
    Ok(buf)
}

fn bench_shape(ctx: &Context, m: u32, n: u32, k: u32, dtype: DType) -> Result<()> {
    let w = filled(ctx, n * k, dtype, 0.5, "W")?;
    let x = filled(ctx, m * k, DType::F32, 0.25, "x")?;
    let x16 = filled(ctx, m * k, dtype, 0.25, "x in W's dtype")?;
    let y = filled(ctx, m * n, DType::F32, 0.0, "y")?;
    let gv = GemvDesc::packed(m, n, k, dtype);
    let gm = GemmDesc { dtype, ..GemmDesc::packed(m, n, k, false, true) };
    let t_gemv = best_ns(ctx, |rec| gemv(rec, &gv, x.view(), w.view(), None, y.view()))?;
    let t_gemm = best_ns(ctx, |rec| gemm(rec, &gm, x16.view(), w.view(), None, y.view()))?;
    let gbs = |ns: f64| gv.weight_bytes() as f64 / ns; // bytes per ns = GB/s
    println!(
        "{dtype:?} n={n} k={k} m={m}: gemv {:9.1} µs {:7.1} GB/s | gemm {:9.1} µs {:7.1} GB/s | gemm/gemv {:5.2}",
        t_gemv / 1e3,
        gbs(t_gemv),
        t_gemm / 1e3,
        gbs(t_gemm),
        t_gemm / t_gemv
    );
    Ok(())
}

/// Best GPU time of one dispatch recorded by `record`, in ns. Successive dispatches write the
/// same y, so the recorder puts a barrier between them and each is timed alone. Without
/// timestamps, wall time of a batch divided by its length.
fn best_ns(ctx: &Context, record: impl Fn(&mut Recorder) -> Result<()>) -> Result<f64> {
    let mut warm = ctx.recorder(false)?;
    record(&mut warm)?; // pipeline creation and first touch outside the timing
    warm.submit()?;
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let mut rec = ctx.recorder(true)?;
        for _ in 0..REPS {
            record(&mut rec)?;
        }
        let start = std::time::Instant::now();
        let report = rec.submit()?;
        let wall = start.elapsed().as_nanos() as f64;
        let times: Vec<f64> = report.timings.iter().map(|t| t.1).collect();
        if times.is_empty() {
            best = best.min(wall / REPS as f64);
        } else {
            best = times.iter().copied().fold(best, f64::min);
        }
        if wall > 50e6 {
            break;
        }
    }
    Ok(best)
}
