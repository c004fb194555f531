//! The tensor-core multiply-add ceiling of the driver (`shaders/matmul/mma_peak.comp`): the
//! rate a GEMM would reach if its operands cost nothing, so a GEMM's TFLOP/s can be read as a
//! fraction of what this device's cooperative matrices give through Vulkan (not of the
//! datasheet). `vkformers bench mma-peak` runs it.

use vkformers_vk::{read, write, BufferView, Caps, KernelCode, Recorder, Result};

use crate::code;
use crate::code::MatmulMmaPeakPush;
use crate::launch::{dispatch, err_named as err};

/// One probe: its kernel, multiply-add FLOPs a workgroup does per iteration, f32 outputs a
/// workgroup writes, and bf16 operand elements it reads.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub name: &'static str,
    pub code: &'static KernelCode,
    pub flops_per_iter: f64,
    pub out_per_group: u64,
    pub operand_elems: u64,
    cm2: bool,
}

const fn cm2(name: &'static str, code: &'static KernelCode, bm: u64, bn: u64, bk: u64) -> Probe {
    Probe {
        name,
        code,
        flops_per_iter: (2 * bm * bn * bk) as f64,
        out_per_group: bm * bn,
        operand_elems: 256 * 64,
        cm2: true,
    }
}

/// 8 subgroups of `fm x fn_` 16x16x16 fragments each.
const fn khr(name: &'static str, code: &'static KernelCode, fm: u64, fn_: u64) -> Probe {
    let frags = 8 * fm * fn_;
    Probe {
        name,
        code,
        flops_per_iter: (frags * 2 * 4096) as f64,
        out_per_group: frags * 256,
        operand_elems: 256 * 64,
        cm2: false,
    }
}

// A probe of kernel `$code` with the sizes its variant defines (`$d`: its `code::defines` module).
macro_rules! probe {
    (cm2 $name:literal, $code:ident, $d:ident) => {
        cm2(
            $name,
            &code::$code,
            code::defines::$d::BM as u64,
            code::defines::$d::BN as u64,
            code::defines::$d::BK as u64,
        )
    };
    (khr $name:literal, $code:ident, $d:ident) => {
        khr($name, &code::$code, code::defines::$d::FM as u64, code::defines::$d::FN as u64)
    };
}

/// Every probe (the shader's variants; the tests check each name states its variant's sizes).
pub const PROBES: [Probe; 5] = [
    probe!(cm2 "cm2 128x128x32, 256 invocations", MATMUL_MMA_PEAK_CM2, matmul_mma_peak_cm2),
    probe!(cm2 "cm2 128x128x64, 128 invocations", MATMUL_MMA_PEAK_CM2_T128, matmul_mma_peak_cm2_t128),
    probe!(cm2 "cm2 128x256x32, 256 invocations", MATMUL_MMA_PEAK_CM2_WIDE, matmul_mma_peak_cm2_wide),
    probe!(khr "khr 16x16x16, 4x2 fragments a subgroup", MATMUL_MMA_PEAK_KHR, matmul_mma_peak_khr),
    probe!(khr "khr 16x16x16, 4x4 fragments a subgroup", MATMUL_MMA_PEAK_KHR44, matmul_mma_peak_khr44),
];

/// Whether the device can run `p` (bf16 cooperative matrices; cooperative matrix 2 for cm2).
pub fn runs_on(caps: &Caps, p: &Probe) -> bool {
    let bf16 = caps.bf16 && caps.bf16_cooperative_matrix && caps.subgroup_size == 32;
    bf16 && (!p.cm2 || caps.cooperative_matrix2.as_ref().is_some_and(|c| c.workgroup_scope && c.flexible_dimensions))
}

/// Records `groups` workgroups of `p` chaining `iters` multiply-adds; `a` holds at least
/// `p.operand_elems` bf16 values, `c` at least `groups * p.out_per_group` f32.
pub fn record(
    rec: &mut Recorder,
    p: &Probe,
    groups: u32,
    iters: u32,
    a: BufferView<'_>,
    c: BufferView<'_>,
) -> Result<()> {
    if a.len < p.operand_elems * 2 || c.len < u64::from(groups) * p.out_per_group * 4 {
        return Err(err(
            p.code.name,
            format!("views of {} / {} bytes are too small for {groups} groups", a.len, c.len),
        ));
    }
    dispatch(rec, p.code, &[], &[read(a), write(c)], &MatmulMmaPeakPush { iters }, [groups, 1, 1])?;
    rec.set_flops(p.flops_per_iter * f64::from(groups) * f64::from(iters));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each probe's label states the sizes of the variant it runs.
    #[test]
    fn names_state_the_variant_sizes() {
        for p in PROBES {
            let d = |n: &str| code::defines::value(p.code.name, n).unwrap_or_else(|| panic!("{}: {n}", p.code.name));
            let want = if p.cm2 {
                format!("{}x{}x{}, {} invocations", d("BM"), d("BN"), d("BK"), d("THREADS"))
            } else {
                format!("{}x{} fragments", d("FM"), d("FN"))
            };
            assert!(p.name.contains(&want), "{}: {want}", p.name);
        }
    }
}
