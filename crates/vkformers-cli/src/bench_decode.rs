//! `vkformers bench decode`: times the paged decode attention (`attention/decode`, which merges
//! its splits itself) alone on one shape, for each split count asked, as a chain of dependent calls (each
//! call overwrites the previous one's output, so barriers separate them as in a decode step).
//! Reports the device time per call (submit to done over the chain, and the median between
//! timestamps) and the effective K+V bandwidth. The default shape is TinyLlama-1.1B's attention
//! at batch 1 over a 1,536-key cache (the `generate --profile` shape). `--rope apart` times a
//! decode step's rope + KV store dispatch and the attention after it (two dispatches a call),
//! `--rope inside` the attention that rotates and stores the new token itself (one; what
//! `VKFORMERS_ROPE_IN_ATTN=1` runs in a decode step). `--kernel tiled|lean|env` picks the
//! kernel (`env`: what `VKFORMERS_DECODE_LEAN` picks).

use std::process::ExitCode;

use anyhow::bail;
use vkformers_kernels::attention::decode::{
    self, DecodeOptions, DecodeOutputs, DecodeShape, PagedInputs, SMALL_TILE, TILE,
};
use vkformers_kernels::attention::decode_lean::{self, Kernel};
use vkformers_kernels::attention::rope_store::{self, NewRows, NewToken};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::rope::{Rope, RopeLayout};
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Buffer, Context, DeviceSelector, Recorder};

#[derive(clap::Args)]
pub struct DecodeBenchArgs {
    #[arg(long, default_value_t = 1)]
    batch: u32,
    #[arg(long, default_value_t = 32)]
    heads: u32,
    #[arg(long, default_value_t = 4)]
    kv_heads: u32,
    #[arg(long, default_value_t = 64)]
    head_dim: u32,
    /// Keys in every row's cache.
    #[arg(long, default_value_t = 1536)]
    len: u32,
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Pool storage: bf16, f16 or f32 (q and o f32 with 16-bit pools, as the decoder runs).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Split counts to time, comma-separated; `auto` is the launcher's choice.
    #[arg(long, default_value = "auto,1,4,8,12,16,24,32")]
    splits: String,
    /// Key tile: 128, or 64 (head dims up to 128).
    #[arg(long, default_value_t = TILE)]
    tile: u32,
    /// Dependent calls in the timed chain.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Megabytes copied between calls (0 = none): evicts the cache from L2 as a decode step's
    /// weight reads do, so the calls read K and V from memory.
    #[arg(long, default_value_t = 0)]
    flush_mb: u64,
    /// Milliseconds of untimed chains before each measurement (the clocks ramp under load).
    #[arg(long, default_value_t = 1500)]
    warm_ms: u64,
    /// The new token's rope + KV store: `none` (attention alone), `apart` (the rope_store
    /// dispatch, then the attention) or `inside` (the attention's `_rope` variant; 128-key tile).
    #[arg(long, default_value = "none")]
    rope: String,
    /// Kernel: `tiled` (decode.comp), `lean` (decode_lean.comp; an error where it cannot run the
    /// shape, and `--tile` is then ignored), or `env` (what `VKFORMERS_DECODE_LEAN` picks, as a
    /// decode step does).
    #[arg(long, default_value = "env")]
    kernel: String,
}

/// `--kernel`: the kernel forced for the calls, or `None` for the environment's choice.
fn kernel_arg(name: &str) -> anyhow::Result<Option<Kernel>> {
    match name {
        "tiled" => Ok(Some(Kernel::Tiled)),
        "lean" => Ok(Some(Kernel::Lean)),
        "env" => Ok(None),
        other => bail!("--kernel {other}: tiled, lean or env"),
    }
}

/// Runs `f` on `kernel` (`None`: the environment's).
fn on_kernel<T>(kernel: Option<Kernel>, f: impl FnOnce() -> T) -> T {
    match kernel {
        Some(k) => decode_lean::with_kernel(k, f),
        None => f(),
    }
}

/// The new token of each row for `--rope`: unrotated q, k, v (f32), the rotated q, positions,
/// slots (pool row of key len - 1) and inv_freq.
struct NewTokenBufs {
    k: Buffer,
    v: Buffer,
    qo: Buffer,
    pos: Buffer,
    slots: Buffer,
    inv_freq: Buffer,
}

fn new_token_bufs(ctx: &Context, s: &DecodeShape, len: u32) -> anyhow::Result<NewTokenBufs> {
    let kv = (s.batch * s.hkv * s.d) as usize;
    let rows = s.max_blocks * s.block_size;
    let slots: Vec<i32> = (0..s.batch).map(|b| (b * rows + len - 1) as i32).collect();
    let inv: Vec<f32> = (0..s.d / 2).map(|i| 10_000f32.powf(-2.0 * i as f32 / s.d as f32)).collect();
    Ok(NewTokenBufs {
        k: ctx.buffer_from(&Rng::new(4).vec(kv, 1.0), "k new")?,
        v: ctx.buffer_from(&Rng::new(5).vec(kv, 1.0), "v new")?,
        qo: ctx.buffer(u64::from(s.batch * s.hq * s.d) * 4, "rotated q")?,
        pos: ctx.buffer_from(&vec![len as i32 - 1; s.batch as usize], "pos")?,
        slots: ctx.buffer_from(&slots, "slots")?,
        inv_freq: ctx.buffer_from(&inv, "inv_freq")?,
    })
}

/// One call of the chain: the attention of `x` alone (`mode` none), after the rope + store of
/// the new token (apart), or with them inside it (inside).
#[allow(clippy::too_many_arguments)]
fn record_call(
    rec: &mut Recorder,
    mode: &str,
    nt: &NewTokenBufs,
    x: &PagedInputs<'_>,
    out: &DecodeOutputs<'_>,
    s: &DecodeShape,
    opt: &DecodeOptions<'_>,
    (splits, tile): (u32, u32),
) -> anyhow::Result<()> {
    let (pos, inv, slots) = (nt.pos.view(), nt.inv_freq.view(), nt.slots.view());
    let pool_rows = s.num_blocks * s.block_size;
    match mode {
        "none" => decode::forward_tiled(rec, x, out, s, opt, (splits, tile))?,
        "apart" => {
            let p = Rope {
                batch: s.batch,
                seq: 1,
                heads: s.hq,
                head_dim: s.d,
                rotary_dim: s.d,
                layout: RopeLayout::HalfSplit,
                mscale: 1.0,
                dtype: DType::F32,
            };
            let rows = NewRows { q: x.q, k: nt.k.view(), v: nt.v.view(), strides: None };
            let pools = decode::Pools { k: x.k, v: x.v, rows: pool_rows, width: s.hkv * s.d };
            rope_store::rope_store(rec, &p, &rows, (pos, inv, slots), (nt.qo.view(), &pools), opt.dtype)?;
            let rotated = PagedInputs { q: nt.qo.view(), ..*x };
            decode::forward_tiled(rec, &rotated, out, s, opt, (splits, tile))?;
        }
        _ => {
            let token = NewToken {
                k: nt.k.view(),
                v: nt.v.view(),
                strides: None,
                pos,
                inv_freq: inv,
                slots,
                layout: RopeLayout::HalfSplit,
                rotary_dim: s.d,
                mscale: 1.0,
                pool_rows,
            };
            rope_store::attend(rec, &token, x, out, s, opt, splits)?;
        }
    }
    Ok(())
}

/// The block table and lengths of `batch` rows of `len` keys each over a pool of `num_blocks`:
/// row b owns blocks b·n .. (b+1)·n in order (n = num_blocks / batch).
pub(crate) fn in_order_pages(ctx: &Context, num_blocks: u32, batch: u32, len: u32) -> anyhow::Result<(Buffer, Buffer)> {
    let table = ctx.buffer_from(&(0..num_blocks as i32).collect::<Vec<_>>(), "table")?;
    let lens = ctx.buffer_from(&vec![len as i32; batch as usize], "lens")?;
    Ok((table, lens))
}

/// A `--splits` item other than `auto`: the split count it names.
pub(crate) fn split_count(item: &str) -> anyhow::Result<u32> {
    item.parse::<u32>().map_err(|e| anyhow::anyhow!("--splits {item}: {e}"))
}

pub fn decode_attention(selector: &DeviceSelector, args: &DecodeBenchArgs) -> anyhow::Result<ExitCode> {
    let dt = crate::bench::dtype_arg(&args.dtype)?;
    let kernel = kernel_arg(&args.kernel)?;
    if args.tile != TILE && args.tile != SMALL_TILE {
        bail!("--tile {}: 128 or 64", args.tile);
    }
    if !["none", "apart", "inside"].contains(&args.rope.as_str()) || (args.rope == "inside" && args.tile != TILE) {
        bail!("--rope {}: none, apart or inside (inside: --tile 128)", args.rope);
    }
    let ctx = Context::new(selector)?;
    let blocks_per_row = args.len.div_ceil(args.block_size);
    let s = DecodeShape {
        batch: args.batch,
        tq: 1,
        hq: args.heads,
        hkv: args.kv_heads,
        d: args.head_dim,
        dv: args.head_dim,
        v_row: args.head_dim,
        block_size: args.block_size,
        num_blocks: blocks_per_row * args.batch,
        max_blocks: blocks_per_row,
    };
    let pool = u64::from(s.num_blocks * s.block_size * s.hkv * s.d);
    let q_len = u64::from(s.batch * s.hq * s.d);
    let k = crate::bench::random_buffer(&ctx, pool, dt, 1, "k pool")?;
    let v = crate::bench::random_buffer(&ctx, pool, dt, 2, "v pool")?;
    let q = ctx.buffer_from(&Rng::new(3).vec(q_len as usize, 1.0), "q")?;
    let (table, lens) = in_order_pages(&ctx, s.num_blocks, s.batch, args.len)?;
    let o = ctx.buffer(q_len * 4, "o")?;
    let lse = ctx.buffer(u64::from(s.batch * s.hq) * 4, "lse")?;
    let work = ctx.buffer(decode::work_floats(&s, decode::MAX_SPLITS) * 4, "work")?;
    // Zero once: every call leaves the split counters zero.
    let counters = ctx.buffer_from(&vec![0u32; decode::counter_words(&s) as usize], "counters")?;
    let opt = DecodeOptions { dtype: dt, act: (dt != DType::F32).then_some(DType::F32), ..DecodeOptions::new(s.d) };
    let x = PagedInputs { q: q.view(), k: k.view(), v: v.view(), table: table.view(), lens: lens.view() };
    let nt = new_token_bufs(&ctx, &s, args.len)?;
    let flush_bytes = (args.flush_mb << 20).max(4);
    let (fa, fb) = (ctx.buffer(flush_bytes, "flush a")?, ctx.buffer(flush_bytes, "flush b")?);
    let kv_bytes = 2.0 * f64::from(args.len * s.batch * s.hkv * s.d) * dt.bytes() as f64;
    println!(
        "{}: decode attention B {} Hq {} Hkv {} D {} keys {} block {} {:?} pools, tile {}, rope {}, kernel {:?}",
        ctx.caps().name,
        s.batch,
        s.hq,
        s.hkv,
        s.d,
        args.len,
        s.block_size,
        dt,
        args.tile,
        args.rope,
        on_kernel(kernel, decode_lean::preferred)
    );
    for item in args.splits.split(',') {
        let splits = match item.trim() {
            // The lean kernel's own policy where it is chosen (its tile is its own).
            "auto" if on_kernel(kernel, decode_lean::preferred) == Kernel::Lean => {
                on_kernel(kernel, || decode::splits(&s, args.len))
            }
            "auto" => decode::splits_for(&s, args.len, args.tile),
            n => split_count(n)?,
        };
        let work_view = work.slice(0, decode::work_floats(&s, splits) * 4);
        let out = DecodeOutputs {
            o: o.view(),
            lse: lse.view(),
            work: (splits > 1).then_some(work_view),
            counters: (splits > 1).then(|| counters.view()),
            o16: None,
        };
        let (per_call, medians) = on_kernel(kernel, || {
            crate::bench::time_chain(&ctx, (args.calls, args.warm_ms), |rec| {
                if args.flush_mb > 0 {
                    vkformers_kernels::elementwise::copy(rec, fa.view(), fb.view())?;
                }
                record_call(rec, &args.rope, &nt, &x, &out, &s, &opt, (splits, args.tile))
            })
        })?;
        let per_call_us = per_call * 1e6;
        let medians: Vec<String> = medians.iter().map(|(name, ns)| format!("{name} {:.2} µs", ns / 1e3)).collect();
        println!(
            "  splits {splits:>2}: {per_call_us:>7.2} µs a call (chain of {}{}), {:>7.1} GB/s of K+V; medians: {}",
            args.calls,
            if args.flush_mb > 0 { format!(", each after a {} MB copy", args.flush_mb) } else { String::new() },
            kv_bytes / (per_call_us * 1e3),
            medians.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
