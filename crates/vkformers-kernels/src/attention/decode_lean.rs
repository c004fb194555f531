//! The latency-lean paged decode attention (`shaders/attention/decode_lean.comp`): the same call,
//! inputs and results as [`super::decode`]'s kernel (o, lse, the split partials and their
//! in-kernel merge in the same `work` / `counters` layout, the `o16` twin, the fused rope + store
//! of [`super::rope_store::attend`]), laid out for the fewest dependent memory round trips: a
//! thread per key holding its K and V rows, subgroup row maxima, one P·V pass over the whole tile
//! from shared memory, the next tile's loads in flight during this one's math.
//!
//! It runs f32 q/o over f16 or bf16 pools, head dims up to 128 that are a multiple of 8 (16-byte
//! aligned pools), values in a pool of their own (`dv = v_row = d`), on devices with subgroup
//! arithmetic and shuffles; every mask, softcap, ALiBi, sinks and Tq > 1 as [`super::decode`].
//! [`super::decode::forward_with`] takes it when [`preferred_on`] says so and it [`supports`] the
//! call, else today's kernel. Which is preferred: `VKFORMERS_DECODE_LEAN=1` / `=0` (read once),
//! or [`with_kernel`] for the calls of one closure (tests, `vkformers bench decode --kernel`), else
//! the device type (lean on GPUs, tiled on CPU devices).
//!
//! Splits: [`super::decode::splits_for_kernel`] keeps the tiled kernel's policy (enough workgroups for a
//! large GPU, no split under one tile) with the lean tile ([`tile_keys`]: 128 keys at d64, 64 at
//! d128) and [`split_keys`]' floor (`VKFORMERS_DECODE_LEAN_SPLIT_KEYS`), so TinyLlama at batch 1
//! over 640 keys runs 5 splits of one tile either way and an A/B compares kernels, not policies.
//! A split runs interleaved tiles (s, s + S, ...) rather than a contiguous range: the same
//! partials in the same `work` layout, merged by the last workgroup as the tiled kernel does.

use std::cell::Cell;

use vkformers_vk::{Caps, KernelCode};

use super::decode::{DecodeOptions, DecodeShape};
use crate::code;
use crate::code::defines::{attention_decode_lean_d128_bf16 as d128, attention_decode_lean_d64_bf16 as d64};
use crate::dtype::DType;

/// Smallest subgroup the kernel runs on: lanes that shuffle partial sums share one subgroup.
const MIN_SUBGROUP: u32 = 8;
/// Threads of a workgroup (`NT`).
const THREADS: u32 = d64::NT;
/// Largest head dim the lean kernel runs (`DMAX` of its d128 variants).
pub const MAX_HEAD_DIM: u32 = d128::DMAX;

/// Which decode-attention kernel a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `decode.comp`: key tiles of slots, halving sums (every shape).
    Tiled,
    /// `decode_lean.comp` where it [`supports`] the call; a call it cannot run is an error when
    /// forced by [`with_kernel`], and goes to the tiled kernel when chosen by the environment.
    Lean,
}

thread_local! {
    static FORCED: Cell<Option<Kernel>> = const { Cell::new(None) };
}

/// Restores the previous forced kernel when dropped (also on a panic inside `f`).
struct Restore(Option<Kernel>);

impl Drop for Restore {
    fn drop(&mut self) {
        FORCED.with(|c| c.set(self.0));
    }
}

/// Runs `f` with every decode-attention call it records on this thread run by `kernel` (and
/// [`super::decode::splits`] choosing for it), whatever `VKFORMERS_DECODE_LEAN` says.
pub fn with_kernel<T>(kernel: Kernel, f: impl FnOnce() -> T) -> T {
    let _restore = Restore(FORCED.with(|c| c.replace(Some(kernel))));
    f()
}

/// Whether the kernel was forced by [`with_kernel`] (calls it cannot run are then errors).
pub(crate) fn forced() -> bool {
    FORCED.with(Cell::get).is_some()
}

/// `VKFORMERS_DECODE_LEAN`: `Some(Lean)` for 1, `Some(Tiled)` for any other value, `None` unset.
fn from_env() -> Option<Kernel> {
    static ENV: std::sync::OnceLock<Option<Kernel>> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| {
        std::env::var("VKFORMERS_DECODE_LEAN").ok().map(|v| if v == "1" { Kernel::Lean } else { Kernel::Tiled })
    })
}

/// The kernel calls should take where the device is not known (the split policy, tests):
/// [`with_kernel`]'s, else `VKFORMERS_DECODE_LEAN=1` → Lean, else Tiled.
pub fn preferred() -> Kernel {
    FORCED.with(Cell::get).unwrap_or(from_env().unwrap_or(Kernel::Tiled))
}

/// The kernel a call on `caps` takes: [`with_kernel`]'s or `VKFORMERS_DECODE_LEAN`'s (1 lean,
/// 0 tiled) when set; else lean on GPUs and tiled on CPU devices. On an H100 inside whole decode
/// steps of the 1.1B bf16 model the lean kernel made batch 1 446 against 342 tokens/s and batch
/// 64 16,820 against 13,944 (`docs/bench/h100-2026-12-05-c`); on lavapipe it is ~25% slower.
/// The paged cache chooses split counts for this kernel too
/// ([`super::decode::splits_for_kernel`]), so at head dims over 64 lean calls get its 64-key tiles'
/// splits, not the tiled kernel's.
pub fn preferred_on(caps: &Caps) -> Kernel {
    FORCED.with(Cell::get).or(from_env()).unwrap_or(if caps.is_cpu() { Kernel::Tiled } else { Kernel::Lean })
}

/// Keys of a tile (`BK`): 128 at head dims up to 64 (a thread a key), 64 above (two threads a
/// key, each with 64 columns).
pub fn tile_keys(d: u32) -> u32 {
    if d <= d64::DMAX {
        d64::BK
    } else {
        d128::BK
    }
}

/// Fewest keys a split of the lean kernel should own (its split policy is the tiled kernel's,
/// [`super::decode::splits`], with this floor): one tile of head dim `d`, or the multiple of the
/// tile nearest above `VKFORMERS_DECODE_LEAN_SPLIT_KEYS=N` (read once). Each split pays the
/// prologue's two round trips and, when split, the count and the merge's two; each further
/// tile of a split about one (its loads overlap the tile before), so whether a 640-key row is
/// best in 5 splits of one tile or fewer of several is for an H200 A/B to say (`vkformers bench
/// decode --kernel lean --splits 1,2,3,5` alone, this switch inside whole decode steps).
pub fn split_keys(d: u32) -> u32 {
    static KEYS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let env = *KEYS.get_or_init(|| std::env::var("VKFORMERS_DECODE_LEAN_SPLIT_KEYS").ok().and_then(|v| v.parse().ok()));
    let tile = tile_keys(d);
    env.map_or(tile, |n: u32| n.max(1).div_ceil(tile) * tile)
}

/// The variant for head dim `d` (≤ [`MAX_HEAD_DIM`]) over 16-bit pools of `dt`, with the fused
/// rope + store (`rope`) or not.
pub(crate) fn code(d: u32, dt: DType, rope: bool) -> Option<&'static KernelCode> {
    let table = match (dt, rope) {
        (DType::F16, false) => [&code::ATTENTION_DECODE_LEAN_D64_F16, &code::ATTENTION_DECODE_LEAN_D128_F16],
        (DType::BF16, false) => [&code::ATTENTION_DECODE_LEAN_D64_BF16, &code::ATTENTION_DECODE_LEAN_D128_BF16],
        (DType::F16, true) => [&code::ATTENTION_DECODE_LEAN_D64_F16_ROPE, &code::ATTENTION_DECODE_LEAN_D128_F16_ROPE],
        (DType::BF16, true) => {
            [&code::ATTENTION_DECODE_LEAN_D64_BF16_ROPE, &code::ATTENTION_DECODE_LEAN_D128_BF16_ROPE]
        }
        (DType::F32, _) => return None,
    };
    Some(table[usize::from(d > d64::DMAX)])
}

/// Most subgroups a workgroup may be split into (specialization constant `NSG`): the subgroup
/// size may vary per dispatch down to `subgroup_size_min` (0 when the device does not report one).
pub(crate) fn max_subgroups(caps: &Caps) -> u32 {
    THREADS / smallest_subgroup(caps).clamp(1, THREADS)
}

fn smallest_subgroup(caps: &Caps) -> u32 {
    match caps.subgroup_size_min {
        0 => caps.subgroup_size,
        s => s.min(caps.subgroup_size),
    }
}

/// Bytes of shared memory of the variant for head dim `d`: q [8, DMAX] f32, V [BK, DMAX]
/// 16-bit, p [8, BK] f32, the subgroup maxima [NSG, 8] f32, the flag of the last split, and the
/// rope variants' new key and value [DMAX] f32 each.
fn shared_bytes(d: u32, subgroups: u32) -> u32 {
    let (dmax, bk, rows) =
        if d <= d64::DMAX { (d64::DMAX, d64::BK, d64::BQ) } else { (d128::DMAX, d128::BK, d128::BQ) };
    rows * dmax * 4 + bk * dmax * 2 + rows * bk * 4 + subgroups * rows * 4 + 4 + 2 * dmax * 4
}

/// Why the lean kernel cannot run a call of `s` with `opt` on `caps` (`wide`: D % 8 == 0 and
/// both pools 16-byte aligned), or `None` when it can.
pub(crate) fn unsupported(caps: &Caps, s: &DecodeShape, opt: &DecodeOptions<'_>, wide: bool) -> Option<String> {
    if opt.dtype == DType::F32 || opt.act_dtype() != DType::F32 {
        return Some(format!("q/o of {:?} over pools of {:?}: f32 over 16-bit only", opt.act_dtype(), opt.dtype));
    }
    if s.d > MAX_HEAD_DIM || s.dv != s.d || s.v_row != s.d || !wide {
        let why = format!("head dims {}/{} (v rows {}): d = dv <= {MAX_HEAD_DIM}, 16-byte rows", s.d, s.dv, s.v_row);
        return Some(why);
    }
    let has = |op: &str| caps.subgroup_ops.iter().any(|o| o == op);
    // Shuffles pair the two threads of a d128 key, and add the sums of up to 8 lanes that share
    // an output row when a tile has few rows.
    if !(has("basic") && has("arithmetic") && has("shuffle")) || smallest_subgroup(caps) < MIN_SUBGROUP {
        return Some(format!("{}: no subgroup arithmetic and shuffles", caps.name));
    }
    let need = shared_bytes(s.d, max_subgroups(caps));
    (need > caps.max_shared_memory).then(|| format!("{need} bytes of shared memory"))
}

/// Whether the split policy should choose for the lean kernel when `kernel` is the preferred one:
/// it is the lean kernel and its head dims fit (the rest of [`unsupported`] is not known from the
/// shape; any split count runs on either kernel, so a wrong guess costs time only).
pub(crate) fn plans(s: &DecodeShape, kernel: Kernel) -> bool {
    kernel == Kernel::Lean && s.d <= MAX_HEAD_DIM && s.dv == s.d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(min: u32, size: u32, ops: &[&str]) -> Caps {
        Caps {
            name: "test".into(),
            subgroup_size: size,
            subgroup_size_min: min,
            subgroup_size_max: size,
            subgroup_ops: ops.iter().map(|s| s.to_string()).collect(),
            max_shared_memory: 32 * 1024,
            ..Caps::default()
        }
    }

    /// Lean on GPUs, tiled on CPU devices, unless forced (or the switch is set).
    #[test]
    fn the_default_kernel_follows_the_device_type() {
        let gpu = Caps { device_type: "discrete".into(), ..caps(32, 32, &[]) };
        let cpu = Caps { device_type: "cpu".into(), ..caps(8, 8, &[]) };
        if from_env().is_none() {
            assert_eq!((preferred_on(&gpu), preferred_on(&cpu)), (Kernel::Lean, Kernel::Tiled));
        }
        for k in [Kernel::Lean, Kernel::Tiled] {
            assert_eq!(with_kernel(k, || (preferred_on(&gpu), preferred_on(&cpu))), (k, k));
        }
    }

    #[test]
    fn shared_memory_fits_lavapipe_for_every_subgroup_size() {
        for min in [8, 16, 32, 64, 128] {
            let c = caps(min, min.max(32), &["basic", "arithmetic", "shuffle"]);
            for d in [64, 128] {
                assert!(shared_bytes(d, max_subgroups(&c)) <= 32 * 1024, "d {d}, subgroups of {min}");
            }
        }
    }

    /// Every variant was compiled with the tile, threads, rows and flag bits the launcher (and
    /// decode.rs, whose push block and grid it shares) assumes.
    #[test]
    fn launcher_sizes_are_the_shader_defines() {
        let define =
            |k: &KernelCode, d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
        let tiled = "attention/decode:d128";
        for (dt, rope, d) in [DType::F16, DType::BF16]
            .into_iter()
            .flat_map(|dt| [false, true].into_iter().flat_map(move |r| [64, 128].map(|d| (dt, r, d))))
        {
            let k = code(d, dt, rope).expect("a lean variant");
            assert_eq!(define(k, "BK"), tile_keys(d), "{}", k.name);
            assert_eq!(define(k, "DMAX"), d, "{}", k.name);
            assert_eq!(define(k, "NT"), THREADS, "{}", k.name);
            for name in ["BQ", "ATTN_CAUSAL", "ATTN_ALIBI", "ATTN_WIDE", "DECODE_SINKS", "DECODE_O16"] {
                let want = code::defines::value(tiled, name).expect("the tiled kernel's define");
                assert_eq!(define(k, name), want, "{}: {name}", k.name);
            }
        }
    }

    #[test]
    fn tiles_follow_the_head_dim() {
        assert_eq!(tile_keys(64), 128);
        assert_eq!(tile_keys(40), 128);
        assert_eq!(tile_keys(72), 64);
        assert_eq!(tile_keys(128), 64);
        assert_eq!(code(128, DType::BF16, true).map(|k| k.name), Some("attention/decode_lean:d128_bf16_rope"));
        assert_eq!(code(64, DType::F16, false).map(|k| k.name), Some("attention/decode_lean:d64_f16"));
        assert!(code(64, DType::F32, false).is_none());
    }

    #[test]
    fn devices_without_shuffles_take_the_tiled_kernel() {
        let s = DecodeShape {
            batch: 1,
            tq: 1,
            hq: 32,
            hkv: 4,
            d: 64,
            dv: 64,
            v_row: 64,
            block_size: 16,
            num_blocks: 64,
            max_blocks: 8,
        };
        let opt = DecodeOptions { dtype: DType::BF16, act: Some(DType::F32), ..DecodeOptions::new(64) };
        assert!(unsupported(&caps(32, 32, &["basic", "arithmetic", "shuffle"]), &s, &opt, true).is_none());
        assert!(unsupported(&caps(32, 32, &["basic", "arithmetic"]), &s, &opt, true).is_some());
        assert!(unsupported(&caps(32, 32, &["basic", "arithmetic", "shuffle"]), &s, &opt, false).is_some());
        let f32_pools = DecodeOptions { dtype: DType::F32, act: None, ..opt };
        assert!(unsupported(&caps(32, 32, &["basic", "arithmetic", "shuffle"]), &s, &f32_pools, true).is_some());
        let d256 = DecodeShape { d: 256, dv: 256, v_row: 256, ..s };
        assert!(unsupported(&caps(32, 32, &["basic", "arithmetic", "shuffle"]), &d256, &opt, true).is_some());
    }
}
