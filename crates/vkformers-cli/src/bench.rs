//! `vkformers bench gemm`: times one matrix product on the device (GPU timestamps, median of
//! the timed runs after warm-up), checks sampled entries against an f64 dot product, and
//! reports TFLOP/s. `tools/bench/gemm.sh` runs it beside `torch.matmul` and prints ratios.

use std::process::ExitCode;

use anyhow::{bail, Context as _};
use half::{bf16, f16};
use vkformers_kernels::gemm_coopmat::{self, CoopGemm, Elem, Engine};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Buffer, Context, DeviceSelector};

#[derive(clap::Args)]
pub struct GemmArgs {
    #[arg(long)]
    m: u32,
    #[arg(long)]
    n: u32,
    #[arg(long)]
    k: u32,
    /// Operand type: f16 or bf16 (tensor cores, f32 accumulation).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Timed runs (after a second of untimed ones: the clocks ramp under load).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// B given as [n, k] (the nn.Linear weight layout) instead of [k, n].
    #[arg(long)]
    trans_b: bool,
    /// Kernel: auto, coopmat (KHR), coopmat2 or coopmat2-wide (NV) and the other cm2 tiles, or
    /// portable (the tiled FMA kernel every device runs; f32, or f16/bf16 storage).
    #[arg(long, default_value = "auto")]
    engine: String,
    /// Tile of the portable kernel: auto, 128x128, 128x128k16, 128x64 or 64x64.
    #[arg(long, default_value = "auto")]
    tile: String,
    /// Cooperative-matrix-2 knobs (defaults: the measured best): unclamped aligned loads for
    /// interior blocks (0/1), block-rows per raster group, K slices per unrolled step.
    #[arg(long)]
    fast: Option<u32>,
    #[arg(long)]
    raster: Option<u32>,
    #[arg(long)]
    unroll: Option<u32>,
    /// Cooperative-matrix-2 switches: lda/ldb/ldc as specialization constants (1; 2: also
    /// constant layout dimensions in the fast path; default VKFORMERS_CM2_STATIC_STRIDES, else 2
    /// for products of 2^34 multiply-adds and up, 0 below); A and B loaded through 16-byte
    /// (uvec4) pointers where aligned (0/1; default VKFORMERS_CM2_VEC16, else off).
    #[arg(long)]
    static_strides: Option<u32>,
    #[arg(long)]
    vec16: Option<u32>,
    /// KHR kernels: cost probes (bits: 1 fragments from global, 2 no later fetches, 4 no
    /// barriers); the result is not the product, so it is not checked.
    #[arg(long, default_value_t = 0)]
    probe: u32,
    /// Split K this many ways, as the decoder's split-K runs it: a batch of K/S slices into S f32
    /// partial products, then the column sum of the partials into C (both passes timed
    /// together, the result checked).
    #[arg(long, default_value_t = 1)]
    split_k: u32,
    /// C in the operand type (f16/bf16: the kernels' 16-bit C store, as o_proj's backward
    /// writes attention's dO) instead of f32.
    #[arg(long)]
    c16: bool,
    #[arg(long)]
    json: bool,
}

/// Random operand values rounded to the operand type: (device bytes, values as f32).
fn operand(n: usize, elem: Elem, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let mut bytes = Vec::with_capacity(n * 2);
    let mut vals = Vec::with_capacity(n);
    for v in rng.vec(n, 1.0) {
        let (bits, back) = match elem {
            Elem::F16 => (f16::from_f32(v).to_bits(), f16::from_f32(v).to_f32()),
            Elem::Bf16 => (bf16::from_f32(v).to_bits(), bf16::from_f32(v).to_f32()),
        };
        bytes.extend_from_slice(&bits.to_le_bytes());
        vals.push(back);
    }
    (bytes, vals)
}

/// The storage type a bench's `--dtype` names: bf16, f16 or f32.
pub(crate) fn dtype_arg(s: &str) -> anyhow::Result<vkformers_kernels::dtype::DType> {
    use vkformers_kernels::dtype::DType;
    Ok(match s {
        "bf16" => DType::BF16,
        "f16" => DType::F16,
        "f32" => DType::F32,
        other => bail!("--dtype {other}: expected bf16, f16 or f32"),
    })
}

/// A device buffer of `n` random values (seed `seed`) in `dt` storage (16-bit as bit patterns).
pub(crate) fn random_buffer(
    ctx: &Context,
    n: u64,
    dt: vkformers_kernels::dtype::DType,
    seed: u64,
    what: &str,
) -> anyhow::Result<Buffer> {
    use vkformers_kernels::dtype::DType;
    let vals = Rng::new(seed).vec(n as usize, 1.0);
    let bytes: Vec<u8> = match dt {
        DType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => vals.iter().flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes()).collect(),
        DType::BF16 => vals.iter().flat_map(|v| bf16::from_f32(*v).to_bits().to_le_bytes()).collect(),
    };
    upload(ctx, &bytes, what)
}

pub(crate) fn upload(ctx: &Context, bytes: &[u8], what: &str) -> anyhow::Result<Buffer> {
    let buf = ctx.buffer(bytes.len() as u64, what)?;
    ctx.upload(&buf, 0, bytes)?;
    Ok(buf)
}

pub fn gemm(selector: &DeviceSelector, args: &GemmArgs) -> anyhow::Result<ExitCode> {
    let elem = match args.dtype.as_str() {
        _ if args.engine == "portable" => return gemm_portable(selector, args),
        "f16" => Elem::F16,
        "bf16" => Elem::Bf16,
        "f32" => return gemm_portable(selector, args),
        other => bail!("--dtype {other}: expected f32, f16 or bf16"),
    };
    let ctx = Context::new(selector)?;
    if !gemm_coopmat::supported(ctx.caps(), elem) {
        bail!("{} has no {} cooperative-matrix GEMM", ctx.caps().name, args.dtype);
    }
    let (m, n, k) = (args.m, args.n, args.k);
    let mut desc = CoopGemm::dense(m, n, k, args.trans_b, elem);
    desc.engine = match args.engine.as_str() {
        "auto" => Engine::Auto,
        "coopmat" => Engine::Coopmat,
        "coopmat2" => Engine::Coopmat2,
        "coopmat2-wide" => Engine::Coopmat2Wide,
        "coopmat2-wide64" => Engine::Coopmat2Wide64,
        "coopmat2-tall64" => Engine::Coopmat2Tall64,
        "coopmat2-wide16" => Engine::Coopmat2Wide16,
        "coopmat2-small" => Engine::Coopmat2Small,
        "coopmat2-small64" => Engine::Coopmat2Small64,
        "coopmat2-tall" => Engine::Coopmat2Tall,
        "coopmat2-t128" => Engine::Coopmat2T128,
        "coopmat2-t128k64" => Engine::Coopmat2T128K64,
        "coopmat2-skinny64" => Engine::Coopmat2Skinny64,
        "coopmat2-skinny32" => Engine::Coopmat2Skinny32,
        "coopmat2-staged" => Engine::Coopmat2Staged,
        other => {
            bail!("--engine {other}: expected auto, coopmat, or a coopmat2 tile (coopmat2, coopmat2-t128k64, ...)")
        }
    };
    if let Some(f) = args.fast {
        desc.tuning.fast = f != 0;
    }
    if let Some(r) = args.raster {
        desc.tuning.raster = r;
    }
    if let Some(u) = args.unroll {
        desc.tuning.unroll = u;
    }
    if let Some(s) = args.static_strides {
        desc.tuning.static_strides = Some(s.min(2));
    }
    if let Some(v) = args.vec16 {
        desc.tuning.vec16 = v != 0;
    }
    desc.tuning.probe = args.probe;
    desc.c_half = args.c16;
    if args.split_k > 1 {
        if !k.is_multiple_of(args.split_k) || !args.trans_b {
            bail!("--split-k {} needs --trans-b and K a multiple of it", args.split_k);
        }
        // Slice z reads columns z·K/S.. of A [m, k] and of B stored [n, k]; writes C[z].
        (desc.k, desc.batch) = (k / args.split_k, args.split_k);
        (desc.a_bstride, desc.b_bstride, desc.c_bstride) = (k / args.split_k, k / args.split_k, m * n);
    }
    let (a_bytes, a) = operand((m * k) as usize, elem, 1);
    let (b_bytes, b) = operand((k * n) as usize, elem, 2);
    let a_buf = upload(&ctx, &a_bytes, "A")?;
    let b_buf = upload(&ctx, &b_bytes, "B")?;
    let c_bytes = if args.c16 { 2 } else { 4 };
    let c_buf = ctx.buffer(u64::from(m) * u64::from(n) * c_bytes, "C")?;
    let median_ns = if args.split_k > 1 {
        // The partials in f32 [S, m, n], then their fixed-order sum into C (its type).
        desc.c_half = false;
        let partial = ctx.buffer(u64::from(m) * u64::from(n) * 4 * u64::from(args.split_k), "partials")?;
        let c_dtype = match (args.c16, elem) {
            (false, _) => vkformers_kernels::dtype::DType::F32,
            (true, Elem::F16) => vkformers_kernels::dtype::DType::F16,
            (true, Elem::Bf16) => vkformers_kernels::dtype::DType::BF16,
        };
        time_median_of(&ctx, args.iters, 2, &mut |rec| {
            gemm_coopmat::gemm_coopmat(rec, &desc, a_buf.view(), b_buf.view(), None, partial.view())?;
            Ok(vkformers_kernels::norm::col_sum(
                rec,
                partial.view(),
                c_buf.view(),
                args.split_k,
                m * n,
                false,
                c_dtype,
            )?)
        })?
    } else {
        time_median(&ctx, args.iters, &mut |rec| {
            Ok(gemm_coopmat::gemm_coopmat(rec, &desc, a_buf.view(), b_buf.view(), None, c_buf.view())?)
        })?
    };
    let c = read_c(&ctx, &c_buf, args.c16.then_some(elem))?;
    let checked = args.probe == 0;
    let max_err = if checked { check_samples(&a, &b, &c, m, n, k, args.trans_b) } else { 0.0 };
    report(args, &ctx, desc.flops(), median_ns, max_err)
}

/// Wall time of untimed runs before a median is timed: the GPU's clocks ramp only after a while
/// under load. Three runs alone were not enough: on an H100 that had idled at 345 MHz while the
/// process started, 8192³ bf16 timed 223 TFLOP/s where the same binary had timed 307 after busy
/// work (`docs/bench/h100-2026-12-05-f`, its clocks log).
const WARM_MS: u128 = 1000;

/// Median GPU time of `iters` dispatches recorded by `dispatch`, after at least 3 warm-up runs
/// and [`WARM_MS`] of them.
pub(crate) fn time_median(
    ctx: &Context,
    iters: usize,
    dispatch: &mut dyn FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    time_median_of(ctx, iters, 1, dispatch)
}

/// [`time_median`] of a call recording `per_call` dispatches: each call's time is the sum of its
/// dispatches' (the barriers between them not counted).
pub(crate) fn time_median_of(
    ctx: &Context,
    iters: usize,
    per_call: usize,
    dispatch: &mut dyn FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    // One call alone first: its pipelines are built (a cooperative-matrix pipeline not in the
    // disk cache compiles for ~1 s) before the warm-up's clock starts.
    let mut first = ctx.recorder(false)?;
    dispatch(&mut first)?;
    first.submit()?;
    let start = std::time::Instant::now();
    while start.elapsed().as_millis() < WARM_MS {
        let mut warm = ctx.recorder(false)?;
        for _ in 0..3 {
            dispatch(&mut warm)?;
        }
        warm.submit()?;
    }
    let mut rec = ctx.recorder(true)?;
    for _ in 0..iters {
        dispatch(&mut rec)?;
    }
    let each: Vec<f64> = rec.submit()?.timings.iter().map(|t| t.1).collect();
    if each.len() != iters * per_call {
        bail!("{} timed dispatches for {iters} calls of {per_call}", each.len());
    }
    let mut times: Vec<f64> = each.chunks(per_call).map(|c| c.iter().sum()).collect();
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().context("no timings (device lacks timestamps)")
}

/// The portable kernel (tiled, register-blocked FMA; no tensor cores) in `--dtype` storage
/// (f32 math) with `--tile`.
fn gemm_portable(selector: &DeviceSelector, args: &GemmArgs) -> anyhow::Result<ExitCode> {
    use vkformers_kernels::matmul::{self, DType, GemmDesc, Tile};
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("--dtype {other}: expected f32, f16 or bf16"),
    };
    let tile = match args.tile.as_str() {
        "auto" => Tile::Auto,
        "128x128" => Tile::T128x128,
        "128x128k16" => Tile::T128x128K16,
        "128x64" => Tile::T128x64,
        "64x64" => Tile::T64x64,
        other => bail!("--tile {other}: expected auto, 128x128, 128x128k16, 128x64 or 64x64"),
    };
    let ctx = Context::new(selector)?;
    let (m, n, k) = (args.m, args.n, args.k);
    let c16 = match dtype {
        DType::F16 if args.c16 => Some(Elem::F16),
        DType::BF16 if args.c16 => Some(Elem::Bf16),
        DType::F32 if args.c16 => bail!("--c16 needs --dtype f16 or bf16"),
        _ => None,
    };
    let c_dtype = if c16.is_some() { dtype } else { DType::F32 };
    let desc = GemmDesc { dtype, c_dtype, tile, ..GemmDesc::packed(m, n, k, false, args.trans_b) };
    let (a_bytes, a) = portable_operand((m * k) as usize, dtype, 1);
    let (b_bytes, b) = portable_operand((k * n) as usize, dtype, 2);
    let a_buf = upload(&ctx, &a_bytes, "A")?;
    let b_buf = upload(&ctx, &b_bytes, "B")?;
    let c_buf = ctx.buffer((u64::from(m) * u64::from(n) * c_dtype.bytes()).next_multiple_of(4), "C")?;
    let median_ns = time_median(&ctx, args.iters, &mut |rec| {
        Ok(matmul::gemm(rec, &desc, a_buf.view(), b_buf.view(), None, c_buf.view())?)
    })?;
    let c = read_c(&ctx, &c_buf, c16)?;
    let max_err = if args.probe == 0 { check_samples(&a, &b, &c, m, n, k, args.trans_b) } else { 0.0 };
    report(args, &ctx, matmul::flops(&desc), median_ns, max_err)
}

/// C read back as f32: f32 values, or (`c16`) 16-bit ones of that type widened.
fn read_c(ctx: &Context, c: &Buffer, c16: Option<Elem>) -> anyhow::Result<Vec<f32>> {
    Ok(match c16 {
        None => ctx.read_vec(c.view())?,
        Some(Elem::F16) => ctx.read_vec::<u16>(c.view())?.into_iter().map(|b| f16::from_bits(b).to_f32()).collect(),
        Some(Elem::Bf16) => ctx.read_vec::<u16>(c.view())?.into_iter().map(|b| bf16::from_bits(b).to_f32()).collect(),
    })
}

/// Random operand values in the portable kernel's storage: (device bytes, padded to 4, and the
/// stored values as f32).
pub(crate) fn portable_operand(n: usize, dtype: vkformers_kernels::matmul::DType, seed: u64) -> (Vec<u8>, Vec<f32>) {
    use vkformers_kernels::matmul::DType;
    let (mut bytes, vals) = match dtype {
        DType::F32 => {
            let vals = Rng::new(seed).vec(n, 1.0);
            (vals.iter().flat_map(|v| v.to_le_bytes()).collect(), vals)
        }
        DType::F16 => operand(n, Elem::F16, seed),
        DType::BF16 => operand(n, Elem::Bf16, seed),
    };
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    (bytes, vals)
}

fn report(args: &GemmArgs, ctx: &Context, flops: f64, median_ns: f64, max_err: f64) -> anyhow::Result<ExitCode> {
    let (m, n, k) = (args.m, args.n, args.k);
    let tflops = flops / median_ns / 1e3;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"op": "gemm", "m": m, "n": n, "k": k, "dtype": args.dtype, "trans_b": args.trans_b, "median_ms": median_ns / 1e6, "tflops": tflops, "max_rel_err": max_err, "device": ctx.caps().name})
        );
    } else {
        println!(
            "gemm {m}x{n}x{k} {} on {}: {:.3} ms, {} (max rel err of 64 samples {max_err:.1e})",
            args.dtype,
            ctx.caps().name,
            median_ns / 1e6,
            rate(tflops)
        );
    }
    if max_err > 1e-3 {
        bail!("sampled entries differ from the f64 reference by {max_err:e}: the kernel is wrong here");
    }
    Ok(ExitCode::SUCCESS)
}

/// A rate in TFLOP/s, or GFLOP/s below 1 TFLOP/s (where one decimal of TFLOP/s reads 0.0).
pub(crate) fn rate(tflops: f64) -> String {
    if tflops >= 1.0 {
        format!("{tflops:.1} TFLOP/s")
    } else {
        format!("{:.1} GFLOP/s", tflops * 1e3)
    }
}

/// Largest relative error of 64 sampled C entries against f64 dot products of the same inputs.
fn check_samples(a: &[f32], b: &[f32], c: &[f32], m: u32, n: u32, k: u32, trans_b: bool) -> f64 {
    let mut rng = Rng::new(7);
    let (m, n, k) = (m as usize, n as usize, k as usize);
    (0..64)
        .map(|_| {
            let (i, j) = (rng.below(m), rng.below(n));
            let (mut dot, mut mag) = (0.0f64, 0.0f64);
            for p in 0..k {
                let bv = if trans_b { b[j * k + p] } else { b[p * n + j] };
                let t = f64::from(a[i * k + p]) * f64::from(bv);
                dot += t;
                mag += t.abs();
            }
            (f64::from(c[i * n + j]) - dot).abs() / mag.max(1e-30)
        })
        .fold(0.0, f64::max)
}

/// Median device time (ns) of each kernel name in a timed chain's report.
pub(crate) fn kernel_medians(timings: Vec<(&'static str, f64)>) -> Vec<(&'static str, f64)> {
    let mut kernels: Vec<(&str, Vec<f64>)> = Vec::new();
    for (name, ns) in timings {
        match kernels.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(ns),
            None => kernels.push((name, vec![ns])),
        }
    }
    kernels
        .into_iter()
        .map(|(name, mut v)| {
            v.sort_by(f64::total_cmp);
            (name, v[v.len() / 2])
        })
        .collect()
}

/// Records `calls` dependent calls (`record_call` records one) into one batch (`timed`: with
/// timestamps) and runs it: seconds from submit to done, and the kernels' timings (ns).
fn run_chain(
    ctx: &vkformers_vk::Context,
    calls: usize,
    timed: bool,
    record_call: &mut impl FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<(f64, Vec<(&'static str, f64)>)> {
    let mut rec = ctx.recorder(timed)?;
    for _ in 0..calls {
        record_call(&mut rec)?;
    }
    let t = std::time::Instant::now();
    let report = rec.submit()?;
    Ok((t.elapsed().as_secs_f64(), report.timings.iter().map(|(n, ns)| (*n, *ns)).collect()))
}

/// Untimed chains of `calls` dependent calls for `warm_ms` (the GPU's clocks ramp up only after
/// ~1 s of load), then the seconds from submit to done of one more untimed chain.
pub(crate) fn warm_chain_seconds(
    ctx: &vkformers_vk::Context,
    (calls, warm_ms): (usize, u64),
    record_call: &mut impl FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let warm = std::time::Instant::now();
    while warm.elapsed().as_millis() < u128::from(warm_ms) {
        run_chain(ctx, calls, false, record_call)?;
    }
    Ok(run_chain(ctx, calls, false, record_call)?.0)
}

/// A chain of `calls` dependent calls (`record_call` records one) timed two ways, after untimed
/// chains for `warm_ms` ([`warm_chain_seconds`]): device seconds per call from submit to done of
/// an untimed chain, and the kernels' median times (ns) of a timed chain.
pub(crate) fn time_chain(
    ctx: &vkformers_vk::Context,
    (calls, warm_ms): (usize, u64),
    mut record_call: impl FnMut(&mut vkformers_vk::Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<(f64, Vec<(&'static str, f64)>)> {
    let wall = warm_chain_seconds(ctx, (calls, warm_ms), &mut record_call)?;
    let (_, timings) = run_chain(ctx, calls, true, &mut record_call)?;
    Ok((wall / calls.max(1) as f64, kernel_medians(timings)))
}
