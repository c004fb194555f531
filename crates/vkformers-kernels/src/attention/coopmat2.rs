//! Attention on tensor cores through `VK_NV_cooperative_matrix2` (the FlashAttention-2 scheme;
//! see `shaders/attention/{fwd,bwd_dq,bwd_dkdv}_cm2.comp`): [`forward_cm2`] and [`backward_cm2`]
//! have the same semantics, buffers, options and checks as [`super::forward`] and
//! [`super::backward`], for f16 and bf16 storage only. [`supported`] says whether a device can
//! run them; which kernels `attention::forward`/`backward` run is decided there, not here.

use vkformers_vk::{write, BufferView, Caps, KernelCode, Recorder, Result};

use super::{
    backward_args, check_backward, check_forward, dim_class, fail, forward_args, grid, params, Grads, Options, Qkv,
    Saved, Shape,
};
use crate::code::{self, AttentionBwdDkdvCm2Push};
use crate::dtype::DType;
use crate::launch::dispatch;

/// Invocations per workgroup of every variant (`CM2_THREADS` of `shaders/attention/cm2.glsl`).
const THREADS: u32 = code::defines::attention_fwd_cm2_d64_f16::CM2_THREADS;

/// True when this device can run [`forward_cm2`] and [`backward_cm2`] for `dtype` and head dim
/// `d` (a pure function of `Caps`): cooperative matrix 2 with what the shaders use —
/// workgroup-scope matrices, tensor addressing (clamped, strided and transposed loads), flexible
/// dimensions, per-element operations (masks, exp), row reductions (max, sum, resizing) and use
/// conversions (f32 accumulators P and dS become 16-bit A operands) — plus 16-bit storage, and
/// for bf16 the bfloat16 type in cooperative matrices. f32 storage has no tensor-core path.
pub fn supported(caps: &Caps, dtype: DType, d: u32) -> bool {
    let types = match dtype {
        DType::F32 => false,
        DType::F16 => caps.fp16,
        DType::BF16 => caps.fp16 && caps.bf16 && caps.bf16_cooperative_matrix,
    };
    // The same bits `gemm_coopmat` asks for (including its 256-invocation workgroup limit, which
    // every cm2 device we know of has), plus those of the softmax.
    let cm2 = caps.cooperative_matrix2.as_ref().is_some_and(|c| {
        c.workgroup_scope
            && c.tensor_addressing
            && c.flexible_dimensions
            && c.workgroup_scope_max_workgroup_size >= THREADS.max(256)
            && c.per_element_operations
            && c.reductions
            && c.conversions
    });
    types && cm2 && cm2_dim_class("attention/fwd_cm2", d).is_ok()
}

/// Largest head dimension of the cm2 kernels (the FMA ones go to [`super::MAX_HEAD_DIM`]).
const MAX_CM2_HEAD_DIM: u32 = code::defines::attention_fwd_cm2_d256_f16::DMAX;

/// Variant index by head dimension: d64, d128, d256 (no d576 tiles on tensor cores yet).
fn cm2_dim_class(kernel: &str, d: u32) -> Result<usize> {
    match d {
        1..=MAX_CM2_HEAD_DIM => dim_class(kernel, d),
        _ => Err(fail(kernel, format!("head dim {d} outside 1..={MAX_CM2_HEAD_DIM}"))),
    }
}

/// Variants of one kernel: `[f16, bf16][d64, d128, d256]`, and the rows of the tile a workgroup
/// owns (grid x) per head-dim class.
struct Kernel {
    codes: [[&'static KernelCode; 3]; 2],
    rows: [u32; 3],
    /// The `_plain` variants `[f16, bf16][d64, d128, d256]` run without softcap (dS = P (dP −
    /// delta), Q Kᵀ dead once the scores exist: fewer registers), where the kernel has them.
    plain: Option<[[&'static KernelCode; 3]; 2]>,
}

/// The f16 variants' tile rows (the tests check every variant of a class has the same).
mod fwd {
    pub use crate::code::defines::{
        attention_fwd_cm2_d128_f16 as d128_f16, attention_fwd_cm2_d256_f16 as d256_f16,
        attention_fwd_cm2_d64_f16 as d64_f16,
    };
}
mod dq {
    pub use crate::code::defines::{
        attention_bwd_dq_cm2_d128_f16 as d128_f16, attention_bwd_dq_cm2_d256_f16 as d256_f16,
        attention_bwd_dq_cm2_d64_f16 as d64_f16,
    };
}
mod dkdv {
    pub use crate::code::defines::{
        attention_bwd_dkdv_cm2_d128_f16 as d128_f16, attention_bwd_dkdv_cm2_d256_f16 as d256_f16,
        attention_bwd_dkdv_cm2_d64_f16 as d64_f16,
    };
}

/// Query rows per workgroup.
const FWD: Kernel = Kernel {
    codes: [
        [&code::ATTENTION_FWD_CM2_D64_F16, &code::ATTENTION_FWD_CM2_D128_F16, &code::ATTENTION_FWD_CM2_D256_F16],
        [&code::ATTENTION_FWD_CM2_D64_BF16, &code::ATTENTION_FWD_CM2_D128_BF16, &code::ATTENTION_FWD_CM2_D256_BF16],
    ],
    rows: [fwd::d64_f16::BR, fwd::d128_f16::BR, fwd::d256_f16::BR],
    plain: None,
};

/// Query rows per workgroup.
const DQ: Kernel = Kernel {
    codes: [
        [
            &code::ATTENTION_BWD_DQ_CM2_D64_F16,
            &code::ATTENTION_BWD_DQ_CM2_D128_F16,
            &code::ATTENTION_BWD_DQ_CM2_D256_F16,
        ],
        [
            &code::ATTENTION_BWD_DQ_CM2_D64_BF16,
            &code::ATTENTION_BWD_DQ_CM2_D128_BF16,
            &code::ATTENTION_BWD_DQ_CM2_D256_BF16,
        ],
    ],
    rows: [dq::d64_f16::BR, dq::d128_f16::BR, dq::d256_f16::BR],
    plain: Some([
        [
            &code::ATTENTION_BWD_DQ_CM2_D64_F16_PLAIN,
            &code::ATTENTION_BWD_DQ_CM2_D128_F16_PLAIN,
            &code::ATTENTION_BWD_DQ_CM2_D256_F16_PLAIN,
        ],
        [
            &code::ATTENTION_BWD_DQ_CM2_D64_BF16_PLAIN,
            &code::ATTENTION_BWD_DQ_CM2_D128_BF16_PLAIN,
            &code::ATTENTION_BWD_DQ_CM2_D256_BF16_PLAIN,
        ],
    ]),
};

/// Key rows per workgroup.
const DKDV: Kernel = Kernel {
    codes: [
        [
            &code::ATTENTION_BWD_DKDV_CM2_D64_F16,
            &code::ATTENTION_BWD_DKDV_CM2_D128_F16,
            &code::ATTENTION_BWD_DKDV_CM2_D256_F16,
        ],
        [
            &code::ATTENTION_BWD_DKDV_CM2_D64_BF16,
            &code::ATTENTION_BWD_DKDV_CM2_D128_BF16,
            &code::ATTENTION_BWD_DKDV_CM2_D256_BF16,
        ],
    ],
    rows: [dkdv::d64_f16::BC, dkdv::d128_f16::BC, dkdv::d256_f16::BC],
    plain: Some([
        [
            &code::ATTENTION_BWD_DKDV_CM2_D64_F16_PLAIN,
            &code::ATTENTION_BWD_DKDV_CM2_D128_F16_PLAIN,
            &code::ATTENTION_BWD_DKDV_CM2_D256_F16_PLAIN,
        ],
        [
            &code::ATTENTION_BWD_DKDV_CM2_D64_BF16_PLAIN,
            &code::ATTENTION_BWD_DKDV_CM2_D128_BF16_PLAIN,
            &code::ATTENTION_BWD_DKDV_CM2_D256_BF16_PLAIN,
        ],
    ]),
};

/// Kernel and tile rows of `k` for `dtype` and head dim `d` (its `_plain` variant when
/// `no_softcap` and it has one).
fn variant(k: &Kernel, d: u32, dtype: DType, no_softcap: bool) -> Result<(&'static KernelCode, u32)> {
    let family = k.codes[0][0].name.split(':').next().unwrap_or("attention");
    let class = cm2_dim_class(family, d)?;
    let at = match dtype {
        DType::F16 => 0,
        DType::BF16 => 1,
        DType::F32 => return Err(fail(family, "f32 storage has no tensor-core attention (use f16 or bf16)".into())),
    };
    let chosen = match k.plain {
        Some(plain) if no_softcap => (plain[at][class], k.rows[class]),
        _ => (k.codes[at][class], k.rows[class]),
    };
    Ok(tile_override(family, chosen).unwrap_or(chosen))
}

/// A tile-shape candidate in place of `chosen` when `VKFORMERS_ATTENTION_TILE` names one for this
/// kernel family (`fwd=r128,dq=c128,dkdv=r128`: the `_r128`/`_c128`/... variants of the shader,
/// BR/BC 128 or 32 instead of 64), for sweeps with `vkformers bench attention`. The rows a
/// workgroup owns follow the variant: BR for the forward and dq kernels, BC for dk/dv.
fn tile_override(family: &str, chosen: (&'static KernelCode, u32)) -> Option<(&'static KernelCode, u32)> {
    // Read once: this runs on every attention dispatch of a training step.
    static WANT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let want = WANT.get_or_init(|| std::env::var("VKFORMERS_ATTENTION_TILE").ok()).as_deref()?;
    let kind = family.strip_prefix("attention/")?.trim_end_matches("_cm2").trim_start_matches("bwd_");
    let suffix = want.split(',').find_map(|kv| kv.strip_prefix(kind)?.strip_prefix('='))?;
    let name = format!("{}_{suffix}", chosen.0.name);
    let code = code::ALL.iter().find(|c| c.name == name)?;
    let rows = code::defines::value(&name, if kind == "dkdv" { "BC" } else { "BR" })?;
    Some((code, rows))
}

/// Specialization constant 1 of the forward kernel: `VKFORMERS_ATTENTION_PROBE` bits drop parts
/// of its key tile (1 softmax, 2 P V, 4 Q Kᵀ) to time them; wrong results, for `vkformers bench
/// attention` only. 0 (no probe) unless set.
fn probe() -> u32 {
    static PROBE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| std::env::var("VKFORMERS_ATTENTION_PROBE").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Specialization constant 0 of the cm2 kernels: 1 (default) scales wholly visible tiles as one
/// matrix; `VKFORMERS_ATTENTION_TILES=masked` runs every tile through the per-element score
/// function instead, to measure the difference (`vkformers bench attention`).
fn fast_tiles() -> u32 {
    static FAST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *FAST.get_or_init(|| u32::from(std::env::var("VKFORMERS_ATTENTION_TILES").map_or(true, |v| v != "masked")))
}

/// The typed error of a device that cannot run the kernel `name`.
fn require(rec: &Recorder, name: &str, dtype: DType, d: u32) -> Result<()> {
    if supported(rec.caps(), dtype, d) {
        return Ok(());
    }
    Err(fail(
        name,
        format!("{} lacks cooperative matrix 2 (with reductions, per-element ops, conversions)", rec.caps().name),
    ))
}

/// The typed error of a value head dim other than the q/k head dim: the cm2 tiles are `[.., D]`
/// for q, k, v and o alike (multi-head latent attention runs the FMA kernels).
fn require_same_dims(name: &str, s: &Shape) -> Result<()> {
    if s.dv == s.d {
        return Ok(());
    }
    Err(fail(name, format!("value head dim {} != q/k head dim {}: not on cooperative matrix 2", s.dv, s.d)))
}

/// Forward on cooperative matrix 2: `o = softmax(score(q kᵀ) + masks) v` and `lse`, from q
/// [B, Tq, Hq, D], k, v [B, Tk, Hkv, D] into o [B, Tq, Hq, D], lse [B, Hq, Tq], exactly as
/// [`super::forward`] (same arguments). Fails with a typed error naming the kernel when the
/// device lacks what [`supported`] checks.
pub fn forward_cm2(rec: &mut Recorder, x: &Qkv<'_>, out: &Saved<'_>, s: &Shape, opt: &Options<'_>) -> Result<()> {
    let (kernel, rows) = variant(&FWD, s.d, opt.dtype, true)?;
    let name = kernel.name;
    require(rec, name, opt.dtype, s.d)?;
    require_same_dims(name, s)?;
    check_forward(name, (x, out), s, opt)?;
    let groups = grid(name, s.tq, rows, s.hq, s.batch)?;
    dispatch(rec, kernel, &[fast_tiles(), probe()], &forward_args(x, out, opt), &params(s, opt), groups)
}

/// Backward of [`forward_cm2`] on cooperative matrix 2, exactly as [`super::backward`] (same
/// arguments): from q, k, v, the forward's o and lse, and `d_o` = dL/do [B, Tq, Hq, D], writes
/// dq [B, Tq, Hq, D], dk, dv [B, Tk, Hkv, D] (summed over the query heads of each kv head) and
/// delta [B, Hq, Tq]. Two dispatches: `bwd_dq_cm2` (dq, delta), then `bwd_dkdv_cm2` (reads delta).
///
/// With GQA and few workgroups ([`dkdv_parts`] > 1) dk and dv are summed in parts: `scratch`
/// must then hold [`backward_scratch_len`] f32 (two [parts, B, Tk, Hkv, D] partials), and a
/// third and fourth dispatch (`norm/col_sum`) add the parts in order.
#[allow(clippy::too_many_arguments)]
pub fn backward_cm2(
    rec: &mut Recorder,
    x: &Qkv<'_>,
    saved: &Saved<'_>,
    d_o: BufferView<'_>,
    g: &Grads<'_>,
    scratch: Option<BufferView<'_>>,
    s: &Shape,
    opt: &Options<'_>,
) -> Result<()> {
    let dt = opt.dtype;
    let (dq_code, dq_rows) = variant(&DQ, s.d, dt, opt.softcap == 0.0)?;
    let (dkdv_code, dkdv_rows) = variant(&DKDV, s.d, dt, opt.softcap == 0.0)?;
    for name in [dq_code.name, dkdv_code.name] {
        require(rec, name, dt, s.d)?;
        require_same_dims(name, s)?;
        check_backward(name, (x, saved, &d_o), g, s, opt, ("do [B, Tq, Hq, D]", "dv [B, Tk, Hkv, D]"))?;
    }
    let parts = dkdv_parts(s, dt)?;
    let part_len = s.kv_len() * 4;
    let (part_dk, part_dv) = match (parts, scratch) {
        (1, _) => (x.q, x.q), // never written: q stands in for the pointers
        (_, Some(v)) if v.len >= 2 * u64::from(parts) * part_len => {
            let n = u64::from(parts) * part_len;
            (v.buffer.slice(v.offset, n), v.buffer.slice(v.offset + n, n))
        }
        (_, v) => {
            return Err(fail(
                dkdv_code.name,
                format!(
                    "GQA in {parts} parts needs a scratch of {} f32, got {} bytes",
                    backward_scratch_len(s, dt)?,
                    v.map_or(0, |v| v.len)
                ),
            ))
        }
    };
    let spec = [fast_tiles()];
    let p = params(s, opt);
    let dq_groups = grid(dq_code.name, s.tq, dq_rows, s.hq, s.batch)?;
    let dkdv_groups = grid(dkdv_code.name, s.tk, dkdv_rows, s.hkv * parts, s.batch)?;
    // Buffer order of the push blocks (the same as bwd_dq.comp / bwd_dkdv.comp, then the
    // dk/dv partials).
    let (dq_args, dkdv_base) = backward_args(x, (saved, d_o), g, opt);
    dispatch(rec, dq_code, &spec, &dq_args, &p, dq_groups)?;
    let dkdv_args = [&dkdv_base[..], &[write(part_dk), write(part_dv)]].concat();
    let p = AttentionBwdDkdvCm2Push { base: p, parts };
    dispatch(rec, dkdv_code, &spec, &dkdv_args, &p, dkdv_groups)?;
    if parts > 1 {
        let n = s.kv_len() as u32; // < 2^32: check_shape refuses larger tensors
        crate::norm::col_sum(rec, part_dk, g.dk, parts, n, false, dt)?;
        crate::norm::col_sum(rec, part_dv, g.dv, parts, n, false, dt)?;
    }
    Ok(())
}

/// Workgroups the dk/dv kernel should fill the device with at least (an H200 has 132
/// multiprocessors; a few workgroups each hide each other's latency).
const DKDV_TARGET_GROUPS: u32 = 1024;

/// Parts the query heads of each GQA group are summed in by the dk/dv kernel: the smallest
/// divisor of G = Hq / Hkv that brings the grid to [`DKDV_TARGET_GROUPS`] (G itself at most),
/// 1 without GQA. The 1.1B Llama shape (Tk 1024 in 64-key tiles, 4 kv heads, batch 4: 256
/// workgroups, each summing 8 heads) gets 4.
pub fn dkdv_parts(s: &Shape, dtype: DType) -> Result<u32> {
    let (_, rows) = variant(&DKDV, s.d, dtype, true)?;
    let groups = s.tk.div_ceil(rows).max(1) * s.hkv * s.batch;
    let g = s.hq / s.hkv.max(1);
    Ok((1..=g).find(|p| g.is_multiple_of(*p) && groups * p >= DKDV_TARGET_GROUPS).unwrap_or(g.max(1)))
}

/// f32 elements of the scratch [`backward_cm2`] needs (0 when it sums dk/dv whole).
pub fn backward_scratch_len(s: &Shape, dtype: DType) -> Result<u64> {
    let parts = dkdv_parts(s, dtype)?;
    Ok(if parts > 1 { 2 * u64::from(parts) * s.kv_len() } else { 0 })
}

#[cfg(test)]
mod tests {
    use vkformers_vk::CoopMat2;

    use super::*;

    /// Every variant a table holds (plain or not, f16 or bf16) owns the rows per workgroup the
    /// table sizes the grid by: BR for the forward and dq kernels, BC for dk/dv.
    #[test]
    fn tile_rows_are_the_shader_defines() {
        for (k, define) in [(&FWD, "BR"), (&DQ, "BR"), (&DKDV, "BC")] {
            let sets = std::iter::once(&k.codes).chain(k.plain.as_ref());
            for code in sets.flat_map(|s| s.iter().flatten()) {
                let class = [64, 128, 256].iter().position(|&d| code::defines::value(code.name, "DMAX") == Some(d));
                let class = class.unwrap_or_else(|| panic!("{}: DMAX", code.name));
                assert_eq!(code::defines::value(code.name, define), Some(k.rows[class]), "{}", code.name);
                assert_eq!(code::defines::value(code.name, "CM2_THREADS"), Some(THREADS), "{}", code.name);
                let flags = [("ATTN_CAUSAL", super::super::FLAG_CAUSAL), ("ATTN_KMASK", super::super::FLAG_KMASK)];
                let flags = flags.into_iter().chain([("ATTN_ALIBI", super::super::FLAG_ALIBI)]);
                for (name, bit) in flags.chain([("ATTN_SINKS", super::super::FLAG_SINKS)]) {
                    assert_eq!(code::defines::value(code.name, name), Some(bit), "{}: {name}", code.name);
                }
            }
        }
    }

    fn h200() -> Caps {
        Caps {
            name: "fake H200".into(),
            fp16: true,
            bf16: true,
            bf16_cooperative_matrix: true,
            subgroup_size: 32,
            max_shared_memory: 48 * 1024,
            cooperative_matrix2: Some(CoopMat2 {
                workgroup_scope: true,
                flexible_dimensions: true,
                reductions: true,
                conversions: true,
                per_element_operations: true,
                tensor_addressing: true,
                block_loads: true,
                workgroup_scope_max_workgroup_size: 256,
                flexible_dimensions_max_dimension: 65_535,
            }),
            ..Caps::default()
        }
    }

    #[test]
    fn supported_is_a_function_of_caps() {
        let caps = h200();
        for d in [1, 64, 80, 128, 200, 256] {
            assert!(supported(&caps, DType::F16, d), "f16 d{d}");
            assert!(supported(&caps, DType::BF16, d), "bf16 d{d}");
            assert!(!supported(&caps, DType::F32, d), "f32 has no tensor-core path");
        }
        assert!(!supported(&caps, DType::F16, 0), "d 0");
        assert!(!supported(&caps, DType::F16, 257), "d above 256");
        assert!(!supported(&Caps::default(), DType::F16, 64), "no cooperative matrix 2 (lavapipe)");

        let mut no_bf16 = h200();
        no_bf16.bf16_cooperative_matrix = false;
        assert!(!supported(&no_bf16, DType::BF16, 64), "bf16 needs bfloat16 cooperative matrices");
        assert!(supported(&no_bf16, DType::F16, 64), "f16 does not");
        let mut no_storage = h200();
        no_storage.fp16 = false;
        assert!(!supported(&no_storage, DType::F16, 64) && !supported(&no_storage, DType::BF16, 64));

        // Each cm2 feature the shader uses is required on its own.
        let without: [fn(&mut CoopMat2); 7] = [
            |c| c.workgroup_scope = false,
            |c| c.tensor_addressing = false,
            |c| c.flexible_dimensions = false,
            |c| c.per_element_operations = false,
            |c| c.reductions = false,
            |c| c.conversions = false,
            |c| c.workgroup_scope_max_workgroup_size = 128,
        ];
        for (n, off) in without.iter().enumerate() {
            let mut caps = h200();
            off(caps.cooperative_matrix2.as_mut().expect("cm2"));
            assert!(!supported(&caps, DType::F16, 64), "feature {n} turned off");
        }
    }

    #[test]
    fn gqa_dkdv_is_split_until_the_grid_fills_the_device() {
        let shape = |batch, tk, hq, hkv, d| Shape { batch, tq: tk, tk, hq, hkv, d, dv: d };
        let parts = |s: Shape| dkdv_parts(&s, DType::BF16).unwrap();
        // TinyLlama 1.1B at batch 4 x 1024: 16 key tiles x 4 kv heads x 4 = 256 groups, G = 8.
        assert_eq!(parts(shape(4, 1024, 32, 4, 64)), 4);
        assert_eq!(parts(shape(8, 1024, 12, 12, 64)), 1, "no GQA");
        assert_eq!(parts(shape(64, 1024, 32, 4, 64)), 1, "enough workgroups already");
        assert_eq!(parts(shape(1, 100, 12, 4, 64)), 3, "G itself when the grid stays small");
        assert_eq!(parts(shape(2, 64, 12, 2, 128)), 6, "a divisor of G = 6");
        let s = shape(4, 1024, 32, 4, 64);
        assert_eq!(backward_scratch_len(&s, DType::BF16).unwrap(), 2 * 4 * 4 * 1024 * 4 * 64);
        assert_eq!(backward_scratch_len(&shape(8, 1024, 12, 12, 64), DType::F16).unwrap(), 0);
    }

    #[test]
    fn variants_by_head_dim() {
        let pick = |k: &Kernel, d: u32, dt: DType| variant(k, d, dt, false).map(|(c, r)| (c.name, r)).ok();
        assert_eq!(pick(&FWD, 64, DType::F16), Some(("attention/fwd_cm2:d64_f16", 64)));
        assert_eq!(pick(&FWD, 80, DType::BF16), Some(("attention/fwd_cm2:d128_bf16", 64)));
        assert_eq!(pick(&FWD, 256, DType::F16), Some(("attention/fwd_cm2:d256_f16", 32)));
        assert_eq!(pick(&DQ, 128, DType::F16), Some(("attention/bwd_dq_cm2:d128_f16", 32)));
        assert_eq!(pick(&DKDV, 33, DType::BF16), Some(("attention/bwd_dkdv_cm2:d64_bf16", 64)));
        assert_eq!(pick(&DKDV, 200, DType::F16), Some(("attention/bwd_dkdv_cm2:d256_f16", 32)));
        // Without softcap the backward kernels run their `_plain` variants; the forward has none.
        let plain = |k: &Kernel, d: u32| variant(k, d, DType::BF16, true).map(|(c, _)| c.name).ok();
        assert_eq!(plain(&DQ, 64), Some("attention/bwd_dq_cm2:d64_bf16_plain"));
        assert_eq!(plain(&DKDV, 128), Some("attention/bwd_dkdv_cm2:d128_bf16_plain"));
        assert_eq!(plain(&FWD, 64), Some("attention/fwd_cm2:d64_bf16"));
        let e = variant(&FWD, 64, DType::F32, true).unwrap_err().to_string();
        assert!(e.contains("attention/fwd_cm2") && e.contains("f32"), "{e}");
        let e = variant(&DQ, 300, DType::F16, true).unwrap_err().to_string();
        assert!(e.contains("attention/bwd_dq_cm2") && e.contains("head dim"), "{e}");
    }
}
