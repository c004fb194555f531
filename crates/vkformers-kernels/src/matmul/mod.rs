//! General matrix multiply: `C = alpha · op(A) · op(B) (+ bias) (+ beta · C)`, batched and
//! strided, tiled in shared memory with register blocking (`shaders/matmul/gemm.comp`).
//!
//! Operands are described by element offset, leading dimension (row stride) and batch stride,
//! so transposed operands need no copy: `op(A)` is `[M, K]`, stored `[M, K]` or (`trans_a`)
//! `[K, M]`; `op(B)` is `[K, N]`, stored `[K, N]` or (`trans_b`) `[N, K]` — the `x · Wᵀ` of a
//! linear layer with `W [out, in]`. A batch stride of 0 broadcasts an operand across the batch.
//! The optional bias `[N]` is f32; A and B are f32, f16 or bf16 (f32 accumulation); C is f32,
//! or (`c_dtype`, beta 0) f16 / bf16: the f32 result rounded as the cast kernels round it, so a
//! product whose only reader takes a 16-bit copy writes that copy instead of f32 and a cast.
//!
//! The backward of `C = A · B` is two more GEMMs: `dA = dC · Bᵀ`, `dB = Aᵀ · dC`
//! (see [`reference::matmul_backward`]).

pub mod auto;
pub mod gemv;
pub mod reference;

use vkformers_vk::{read, read_write, write, BufferView, KernelCode, Recorder, Result};

use crate::code;
use crate::code::MatmulGemmPush;
use crate::launch::{dispatch, err_named as err, MAX_GROUPS_32};

/// Storage type of A and B (C and bias are always f32; accumulation is f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DType {
    #[default]
    F32,
    /// IEEE half, read as packed 32-bit words (no 16-bit storage feature needed).
    F16,
    /// bfloat16, read as packed 32-bit words and widened by a shift.
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }
}

/// Block tile of C computed by one workgroup of 256 threads (all fit in 32 KiB of shared
/// memory). `Auto` picks by problem size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Tile {
    #[default]
    Auto,
    /// 128×128, BK 8, 8×8 per thread: large problems.
    T128x128,
    /// 128×128, BK 16 (unpadded shared tiles: exactly 32 KiB), 8×8 per thread.
    T128x128K16,
    /// 128×64, BK 16, 8×4 per thread.
    T128x64,
    /// 64×64, BK 16, 4×4 per thread: small problems.
    T64x64,
}

impl Tile {
    /// (BM, BN) of a concrete tile: the f32 variant's defines in gemm.comp (every dtype's
    /// variant of a tile has the same, see the tests).
    fn dims(self) -> (u32, u32) {
        use code::defines::{matmul_gemm_f32_128x128 as t128, matmul_gemm_f32_128x128k16 as t128k16};
        use code::defines::{matmul_gemm_f32_128x64 as t128x64, matmul_gemm_f32_64x64 as t64};
        match self {
            Tile::T128x128 | Tile::Auto => (t128::BM, t128::BN),
            Tile::T128x128K16 => (t128k16::BM, t128k16::BN),
            Tile::T128x64 => (t128x64::BM, t128x64::BN),
            Tile::T64x64 => (t64::BM, t64::BN),
        }
    }
}

/// One (batched) GEMM. Offsets, leading dimensions and batch strides count elements of the
/// operand's dtype; C is row-major with leading dimension `ldc`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmDesc {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub batch: u32,
    /// A stored `[K, M]`: `A[m,k]` at `k·lda + m` (else `[M, K]`: `m·lda + k`).
    pub trans_a: bool,
    /// B stored `[N, K]`: `B[k,n]` at `n·ldb + k` (else `[K, N]`: `k·ldb + n`).
    pub trans_b: bool,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
    pub a_offset: u64,
    pub b_offset: u64,
    pub c_offset: u64,
    /// Batch strides; 0 broadcasts A or B (never C when batch > 1).
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
    pub alpha: f32,
    /// 0 (overwrite C, which is then never read) or any other value (accumulate).
    pub beta: f32,
    pub has_bias: bool,
    pub dtype: DType,
    /// Storage type of C: f32, or f16 / bf16 (then beta must be 0: C is only written).
    pub c_dtype: DType,
    pub tile: Tile,
}

impl GemmDesc {
    /// Densely packed row-major operands (given the transposes), batch 1, alpha 1, beta 0,
    /// no bias, f32. Batch strides are the packed matrix sizes, so setting `batch` alone gives
    /// a packed batch.
    pub fn packed(m: u32, n: u32, k: u32, trans_a: bool, trans_b: bool) -> Self {
        GemmDesc {
            m,
            n,
            k,
            batch: 1,
            trans_a,
            trans_b,
            lda: if trans_a { m } else { k },
            ldb: if trans_b { k } else { n },
            ldc: n,
            a_offset: 0,
            b_offset: 0,
            c_offset: 0,
            stride_a: u64::from(m) * u64::from(k),
            stride_b: u64::from(k) * u64::from(n),
            stride_c: u64::from(m) * u64::from(n),
            alpha: 1.0,
            beta: 0.0,
            has_bias: false,
            dtype: DType::F32,
            c_dtype: DType::F32,
            tile: Tile::Auto,
        }
    }

    /// (rows, cols) of A as stored.
    fn a_stored(&self) -> (u32, u32) {
        if self.trans_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// (rows, cols) of B as stored.
    fn b_stored(&self) -> (u32, u32) {
        if self.trans_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }
}

/// Floating-point operations of the GEMM: `2·M·N·K·batch`.
pub fn flops(desc: &GemmDesc) -> f64 {
    2.0 * f64::from(desc.m) * f64::from(desc.n) * f64::from(desc.k) * f64::from(desc.batch)
}

/// The kernel variant for a dtype and concrete tile.
fn kernel_for(dtype: DType, tile: Tile) -> &'static KernelCode {
    match (dtype, tile) {
        (DType::F32, Tile::T128x128 | Tile::Auto) => &code::MATMUL_GEMM_F32_128X128,
        (DType::F32, Tile::T128x128K16) => &code::MATMUL_GEMM_F32_128X128K16,
        (DType::F32, Tile::T128x64) => &code::MATMUL_GEMM_F32_128X64,
        (DType::F32, Tile::T64x64) => &code::MATMUL_GEMM_F32_64X64,
        (DType::F16, Tile::T128x128 | Tile::Auto) => &code::MATMUL_GEMM_F16_128X128,
        (DType::F16, Tile::T128x128K16) => &code::MATMUL_GEMM_F16_128X128K16,
        (DType::F16, Tile::T128x64) => &code::MATMUL_GEMM_F16_128X64,
        (DType::F16, Tile::T64x64) => &code::MATMUL_GEMM_F16_64X64,
        (DType::BF16, Tile::T128x128 | Tile::Auto) => &code::MATMUL_GEMM_BF16_128X128,
        (DType::BF16, Tile::T128x128K16) => &code::MATMUL_GEMM_BF16_128X128K16,
        (DType::BF16, Tile::T128x64) => &code::MATMUL_GEMM_BF16_128X64,
        (DType::BF16, Tile::T64x64) => &code::MATMUL_GEMM_BF16_64X64,
    }
}

/// Workgroups a tile needs: ceil(M/BM)·ceil(N/BN)·batch.
fn groups_of(desc: &GemmDesc, tile: Tile) -> u64 {
    let (bm, bn) = tile.dims();
    u64::from(desc.m.div_ceil(bm)) * u64::from(desc.n.div_ceil(bn)) * u64::from(desc.batch)
}

/// The tile `Auto` resolves to. Measured on an H200 (f32, f16 and bf16 alike): 128×128 wins
/// once there are about 1000 such workgroups and K is not short; 128×64 when that tile still
/// gives about 500 workgroups; else 64×64 (small problems, short K as in attention scores,
/// and K ≫ M·N as in weight gradients, which fill the GPU better with small tiles).
pub fn choose_tile(desc: &GemmDesc) -> Tile {
    match desc.tile {
        Tile::Auto if desc.k >= 256 && groups_of(desc, Tile::T128x128) >= 1000 => Tile::T128x128,
        Tile::Auto if desc.k >= 256 && groups_of(desc, Tile::T128x64) >= 500 => Tile::T128x64,
        Tile::Auto => Tile::T64x64,
        t => t,
    }
}

/// The byte range of `view` an operand touches, as a view whose first byte is the first
/// (4-byte aligned) word read, plus the parity of the first element within it (16-bit types).
/// `stored` is (rows, cols) of one matrix; `what` names the operand in errors.
#[allow(clippy::too_many_arguments)]
fn operand_view<'a>(
    kernel: &str,
    what: &str,
    view: BufferView<'a>,
    elem: u64,
    offset: u64,
    ld: u32,
    stored: (u32, u32),
    batch_stride: u64,
    batch: u32,
) -> Result<(BufferView<'a>, u32)> {
    let (rows, cols) = (u64::from(stored.0), u64::from(stored.1));
    if u64::from(ld) < cols {
        return Err(err(kernel, format!("{what}: leading dimension {ld} below its {cols} stored columns")));
    }
    if batch_stride > u64::from(u32::MAX) {
        return Err(err(kernel, format!("{what}: batch stride {batch_stride} above 2^32 - 1")));
    }
    let first = offset & !(4 / elem - 1); // element at the start of the first 4-byte word
    let parity = (offset - first) as u32;
    let within = (rows - 1) * u64::from(ld) + cols - 1 + u64::from(parity);
    if within > u64::from(u32::MAX) {
        return Err(err(kernel, format!("{what}: one matrix spans {within} elements, above 2^32 - 1")));
    }
    let last = offset + u64::from(batch - 1) * batch_stride + (rows - 1) * u64::from(ld) + cols - 1;
    let need = (last + 1) * elem;
    if need > view.len {
        return Err(err(
            kernel,
            format!("{what}: the GEMM reads up to byte {need} but the view holds {} bytes", view.len),
        ));
    }
    let start = view.offset + first * elem;
    let end = (view.offset + need).next_multiple_of(4);
    if !start.is_multiple_of(4) {
        return Err(err(kernel, format!("{what}: view starts at byte {} (not a multiple of 4)", view.offset)));
    }
    if end > view.buffer.size() {
        return Err(err(
            kernel,
            format!("{what}: 16-bit data read as 4-byte words; pad the buffer to a multiple of 4 bytes"),
        ));
    }
    Ok((view.buffer.slice(start, end - start), parity))
}

/// True when runs of 4 elements of A and B can be fetched as one vector: offsets, leading
/// dimensions and batch strides are multiples of 4 elements and both pointers are aligned to
/// 4 elements.
fn vectorizable(desc: &GemmDesc, a: &BufferView<'_>, b: &BufferView<'_>) -> bool {
    let align = 4 * desc.dtype.bytes();
    let fours = [desc.a_offset, desc.b_offset, desc.lda.into(), desc.ldb.into(), desc.stride_a, desc.stride_b];
    desc.k > 0
        && fours.iter().all(|x| x.is_multiple_of(4))
        && a.address().is_multiple_of(align)
        && b.address().is_multiple_of(align)
}

/// Checks C: `[M, N]` of `c_dtype` rows `ldc` apart, batches `stride_c` apart without overlap.
/// Returns the view from C's first element (a 16-bit C: from the 4-byte word holding it, the
/// whole words written) and the parity of that element within its word.
fn c_view<'a>(kernel: &str, desc: &GemmDesc, c: BufferView<'a>) -> Result<(BufferView<'a>, u32)> {
    let (m, n, ldc) = (u64::from(desc.m), u64::from(desc.n), u64::from(desc.ldc));
    if ldc < n {
        return Err(err(kernel, format!("C: ldc {ldc} below N {n}")));
    }
    let span = (m - 1) * ldc + n;
    if desc.batch > 1 && desc.stride_c < span {
        return Err(err(kernel, format!("C: batch stride {} overlaps matrices of {span} elements", desc.stride_c)));
    }
    if span > u64::from(u32::MAX) || desc.stride_c > u64::from(u32::MAX) {
        return Err(err(kernel, "C: matrix or batch stride above 2^32 - 1 elements".into()));
    }
    let elem = desc.c_dtype.bytes();
    if elem == 2 && desc.beta != 0.0 {
        return Err(err(kernel, format!("C: a {:?} C is only written (beta {}, need 0)", desc.c_dtype, desc.beta)));
    }
    let need = (desc.c_offset + u64::from(desc.batch - 1) * desc.stride_c + span) * elem;
    if need > c.len || !c.offset.is_multiple_of(4) {
        return Err(err(kernel, format!("C: the GEMM writes up to byte {need} of a view of {} bytes", c.len)));
    }
    // 16-bit C is written in whole words: the first and last may hold a value outside C,
    // which the kernel leaves as it is (atomics on its own half), but they must exist.
    let first = desc.c_offset & !(4 / elem - 1);
    let start = c.offset + first * elem;
    let end = (c.offset + need).next_multiple_of(4);
    if end > c.buffer.size() {
        return Err(err(
            kernel,
            "C: 16-bit C is written as 4-byte words; pad the buffer to a multiple of 4 bytes".into(),
        ));
    }
    Ok((c.buffer.slice(start, end - start), (desc.c_offset - first) as u32))
}

/// Flags bits 3-4 of the kernel: C's storage type.
fn c_type_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
    }
}

/// Records `C = alpha · op(A) · op(B) (+ bias) (+ beta · C)` for every batch.
///
/// `a`, `b`: views holding the operands (dtype `desc.dtype`) at the element offsets of `desc`;
/// `bias`: f32 `[N]`, given iff `desc.has_bias`; `c`: of `desc.c_dtype`. Every access is
/// checked to stay inside its view. Empty problems (M, N or batch 0) record nothing; K = 0 gives
/// `C = bias + beta · C`.
pub fn gemm(
    rec: &mut Recorder,
    desc: &GemmDesc,
    a: BufferView<'_>,
    b: BufferView<'_>,
    bias: Option<BufferView<'_>>,
    c: BufferView<'_>,
) -> Result<()> {
    let tile = choose_tile(desc);
    let kernel = kernel_for(desc.dtype, tile);
    let name = kernel.name;
    if desc.has_bias != bias.is_some() {
        return Err(err(
            name,
            format!(
                "has_bias is {} but a bias view was {}given",
                desc.has_bias,
                if bias.is_some() { "" } else { "not " }
            ),
        ));
    }
    if desc.m == 0 || desc.n == 0 || desc.batch == 0 {
        return Ok(());
    }
    let elem = desc.dtype.bytes();
    let (a_sub, pa, b_sub, pb) = if desc.k == 0 {
        (a, 0, b, 0) // pointers are pushed but nothing is read through them
    } else {
        let (a_sub, pa) =
            operand_view(name, "A", a, elem, desc.a_offset, desc.lda, desc.a_stored(), desc.stride_a, desc.batch)?;
        let (b_sub, pb) =
            operand_view(name, "B", b, elem, desc.b_offset, desc.ldb, desc.b_stored(), desc.stride_b, desc.batch)?;
        (a_sub, pa, b_sub, pb)
    };
    let (c_sub, pc) = c_view(name, desc, c)?;
    let bias_view = match bias {
        Some(v) if v.len < u64::from(desc.n) * 4 || !v.offset.is_multiple_of(4) => {
            return Err(err(name, format!("bias: {} bytes for N = {} f32 values", v.len, desc.n)));
        }
        Some(v) => v.buffer.slice(v.offset, u64::from(desc.n) * 4),
        None => a_sub,
    };
    let (bm, bn) = tile.dims();
    let groups = [desc.n.div_ceil(bn), desc.m.div_ceil(bm), desc.batch.min(MAX_GROUPS_32)];
    if groups[0] > MAX_GROUPS_32 || groups[1] > MAX_GROUPS_32 {
        return Err(err(name, format!("{}×{} too large for the workgroup grid {groups:?}", desc.m, desc.n)));
    }
    let flags = u32::from(desc.has_bias) | pa << 1 | pb << 2 | c_type_bits(desc.c_dtype) << 3 | pc << 5;
    let push = MatmulGemmPush {
        M: desc.m,
        N: desc.n,
        K: desc.k,
        lda: desc.lda,
        ldb: desc.ldb,
        ldc: desc.ldc,
        sa: desc.stride_a as u32,
        sb: desc.stride_b as u32,
        sc: desc.stride_c as u32,
        batch: desc.batch,
        alpha: desc.alpha,
        beta: desc.beta,
        flags,
    };
    let c_arg = if desc.beta != 0.0 { read_write(c_sub) } else { write(c_sub) };
    let spec = [u32::from(desc.trans_a), u32::from(desc.trans_b), u32::from(vectorizable(desc, &a_sub, &b_sub))];
    dispatch(rec, kernel, &spec, &[read(a_sub), read(b_sub), read(bias_view), c_arg], &push, groups)?;
    rec.set_flops(flops(desc));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant the launcher picks was compiled with the (BM, BN) it sizes the grid by.
    #[test]
    fn tile_dims_are_the_shader_defines() {
        let tiles = [Tile::Auto, Tile::T128x128, Tile::T128x128K16, Tile::T128x64, Tile::T64x64];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for tile in tiles {
                let k = kernel_for(dtype, tile);
                let define = |d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
                assert_eq!((define("BM"), define("BN")), tile.dims(), "{}", k.name);
            }
        }
    }
}
