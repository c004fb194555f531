//! Attention forward on tensor cores through `VK_NV_cooperative_matrix2` (the FlashAttention-2
//! scheme; see `shaders/attention/fwd_cm2.comp`): the same semantics, buffers, options and
//! checks as [`super::forward`], for f16 and bf16 storage only. [`supported`] says whether a
//! device can run it; which kernel `attention::forward` runs is decided there, not here.

use vkformers_vk::{read, write, Caps, KernelCode, Recorder, Result};

use super::{check_qkv, check_saved, check_shape, dim_class, fail, grid, params, Options, Qkv, Saved, Shape};
use crate::code;
use crate::dtype::DType;

/// Invocations per workgroup of every variant (`local_size_x` of the shader).
const THREADS: u32 = 128;

/// True when this device can run [`forward_cm2`] for `dtype` and head dim `d` (a pure function
/// of `Caps`): cooperative matrix 2 with what `fwd_cm2.comp` uses — workgroup-scope matrices,
/// tensor addressing (clamped, strided and transposed loads), flexible dimensions, per-element
/// operations (masks, exp), row reductions (max, sum, resizing) and use conversions (the f32
/// accumulator P becomes a 16-bit A operand) — plus 16-bit storage, and for bf16 the bfloat16
/// type in cooperative matrices. f32 storage has no tensor-core path.
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
    types && cm2 && dim_class("attention/fwd_cm2", d).is_ok()
}

/// Kernel and query rows per workgroup for `dtype` and head dim `d` (variants d64, d128, d256;
/// see the shader for the tile sizes).
fn variant(d: u32, dtype: DType) -> Result<(&'static KernelCode, u32)> {
    const CODES: [[&KernelCode; 3]; 2] = [
        [&code::ATTENTION_FWD_CM2_D64_F16, &code::ATTENTION_FWD_CM2_D128_F16, &code::ATTENTION_FWD_CM2_D256_F16],
        [&code::ATTENTION_FWD_CM2_D64_BF16, &code::ATTENTION_FWD_CM2_D128_BF16, &code::ATTENTION_FWD_CM2_D256_BF16],
    ];
    const ROWS: [u32; 3] = [64, 64, 32];
    let class = dim_class("attention/fwd_cm2", d)?;
    let by_dtype = match dtype {
        DType::F16 => &CODES[0],
        DType::BF16 => &CODES[1],
        DType::F32 => {
            return Err(fail("attention/fwd_cm2", "f32 storage has no tensor-core attention (use f16 or bf16)".into()))
        }
    };
    Ok((by_dtype[class], ROWS[class]))
}

/// Forward on cooperative matrix 2: `o = softmax(score(q kᵀ) + masks) v` and `lse`, from q
/// [B, Tq, Hq, D], k, v [B, Tk, Hkv, D] into o [B, Tq, Hq, D], lse [B, Hq, Tq], exactly as
/// [`super::forward`] (same arguments). Fails with a typed error naming the kernel when the
/// device lacks what [`supported`] checks.
pub fn forward_cm2(rec: &mut Recorder, x: &Qkv<'_>, out: &Saved<'_>, s: &Shape, opt: &Options<'_>) -> Result<()> {
    let (kernel, rows) = variant(s.d, opt.dtype)?;
    let name = kernel.name;
    if !supported(rec.caps(), opt.dtype, s.d) {
        return Err(fail(
            name,
            format!("{} lacks cooperative matrix 2 (with reductions, per-element ops, conversions)", rec.caps().name),
        ));
    }
    check_shape(name, s, opt)?;
    check_qkv(name, s, x, opt.dtype)?;
    check_saved(name, s, out, opt.dtype)?;
    let groups = grid(name, s.tq, rows, s.hq, s.batch)?;
    // Unused optional buffers are never read; q stands in for their pointer.
    let args = [
        read(x.q),
        read(x.k),
        read(x.v),
        read(opt.kmask.unwrap_or(x.q)),
        read(opt.alibi.unwrap_or(x.q)),
        write(out.o),
        write(out.lse),
    ];
    rec.dispatch(kernel, &[], &args, &params(s, opt), groups)
}

#[cfg(test)]
mod tests {
    use vkformers_vk::CoopMat2;

    use super::*;

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
    fn variants_by_head_dim() {
        assert_eq!(variant(64, DType::F16).map(|(k, r)| (k.name, r)).ok(), Some(("attention/fwd_cm2:d64_f16", 64)));
        assert_eq!(variant(80, DType::BF16).map(|(k, r)| (k.name, r)).ok(), Some(("attention/fwd_cm2:d128_bf16", 64)));
        assert_eq!(variant(256, DType::F16).map(|(k, r)| (k.name, r)).ok(), Some(("attention/fwd_cm2:d256_f16", 32)));
        assert!(variant(64, DType::F32).is_err());
        assert!(variant(300, DType::F16).is_err());
    }
}
