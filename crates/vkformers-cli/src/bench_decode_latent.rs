//! `vkformers bench decode-latent`: times the wide latent decode (`attention/decode_latent`,
//! multi-head latent attention's absorbed decode over a paged cache of `[c | k_rot]` rows) alone
//! on one shape, for each split count asked, as a chain of dependent calls (each call overwrites
//! the previous one's output). Reports the device time per call and the effective bandwidth of the
//! latent rows read (each workgroup of 16 query heads reads its split's rows: the cache once per
//! row tile). The default shape is DeepSeek-V3's attention (128 heads, 512 + 64) at batch 1 over a
//! 4,096-key cache. `VKFORMERS_LATENT_WIDE=0` times the element loads of the pool in place of the
//! 16-byte loads (an A/B on one binary).

use std::process::ExitCode;

use vkformers_kernels::attention::decode::DecodeOptions;
use vkformers_kernels::attention::decode_latent::{self, LatentInputs, LatentOutputs, LatentShape};
use vkformers_kernels::dtype::DType;
use vkformers_kernels::testutil::Rng;
use vkformers_vk::{Context, DeviceSelector};

#[derive(clap::Args)]
pub struct LatentBenchArgs {
    #[arg(long, default_value_t = 1)]
    batch: u32,
    #[arg(long, default_value_t = 128)]
    heads: u32,
    /// Latent row width, kv_lora_rank + qk_rope_head_dim.
    #[arg(long, default_value_t = 576)]
    width: u32,
    /// Value columns, kv_lora_rank.
    #[arg(long, default_value_t = 512)]
    values: u32,
    /// Keys in every row's cache.
    #[arg(long, default_value_t = 4096)]
    len: u32,
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Pool storage: bf16, f16 or f32 (q and o f32 with 16-bit pools, as the decoder runs).
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Split counts to time, comma-separated; `auto` is the launcher's choice.
    #[arg(long, default_value = "auto,1,4,8,16,32")]
    splits: String,
    /// Dependent calls in the timed chain.
    #[arg(long, default_value_t = 100)]
    calls: usize,
    /// Milliseconds of untimed chains before each measurement (the clocks ramp under load).
    #[arg(long, default_value_t = 1500)]
    warm_ms: u64,
}

pub fn decode_latent(selector: &DeviceSelector, args: &LatentBenchArgs) -> anyhow::Result<ExitCode> {
    let dt = crate::bench::dtype_arg(&args.dtype)?;
    let ctx = Context::new(selector)?;
    let blocks_per_row = args.len.div_ceil(args.block_size);
    let s = LatentShape {
        batch: args.batch,
        tq: 1,
        hq: args.heads,
        d: args.width,
        dv: args.values,
        block_size: args.block_size,
        num_blocks: blocks_per_row * args.batch,
        max_blocks: blocks_per_row,
    };
    let pool = u64::from(s.num_blocks * s.block_size * s.d);
    let q_len = u64::from(s.batch * s.hq * s.d);
    let pool_buf = crate::bench::random_buffer(&ctx, pool, dt, 1, "latent pool")?;
    let q = ctx.buffer_from(&Rng::new(3).vec(q_len as usize, 1.0), "q")?;
    let (table, lens) = crate::bench_decode::in_order_pages(&ctx, s.num_blocks, s.batch, args.len)?;
    let o = ctx.buffer(u64::from(s.batch * s.hq * s.dv) * 4, "o")?;
    let lse = ctx.buffer(u64::from(s.batch * s.hq) * 4, "lse")?;
    let work = ctx.buffer(decode_latent::work_floats(&s, decode_latent::MAX_SPLITS) * 4, "work")?;
    let opt = DecodeOptions { dtype: dt, act: (dt != DType::F32).then_some(DType::F32), ..DecodeOptions::new(s.d) };
    let x = LatentInputs { q: q.view(), pool: pool_buf.view(), table: table.view(), lens: lens.view() };
    let row_bytes = f64::from(args.len * s.batch * s.d) * dt.bytes() as f64;
    println!(
        "{}: latent decode B {} Hq {} D {} Dv {} keys {} block {} {dt:?} pool",
        ctx.caps().name,
        s.batch,
        s.hq,
        s.d,
        s.dv,
        args.len,
        s.block_size
    );
    // The pool's load path: 16-byte loads unless VKFORMERS_LATENT_WIDE=0 (or an odd width).
    let path = if decode_latent::reads_wide(s.d, &x) { "16-byte" } else { "element" };
    println!("  pool loads: {path} (VKFORMERS_LATENT_WIDE=0 forces the element loads)");
    for item in args.splits.split(',') {
        let splits = match item.trim() {
            "auto" => decode_latent::splits(&s, args.len),
            n => crate::bench_decode::split_count(n)?,
        };
        let work_view = work.slice(0, decode_latent::work_floats(&s, splits) * 4);
        let out = LatentOutputs { o: o.view(), lse: lse.view(), work: (splits > 1).then_some(work_view) };
        let seconds = crate::bench::warm_chain_seconds(&ctx, (args.calls, args.warm_ms), &mut |rec| {
            Ok(decode_latent::forward(rec, &x, &out, &s, &opt, splits)?)
        })?;
        let per_call_us = seconds / args.calls as f64 * 1e6;
        println!(
            "  splits {splits:>2}: {per_call_us:>8.2} µs a call (chain of {}), {:>7.1} GB/s of latent rows (read once)",
            args.calls,
            row_bytes / (per_call_us * 1e3),
        );
    }
    Ok(ExitCode::SUCCESS)
}
