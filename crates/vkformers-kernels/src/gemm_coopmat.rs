//! GEMM on cooperative matrices (tensor cores): f16 or bf16 operands, f32 accumulation and f32
//! C, or (`c_half`) C in the operands' 16-bit type, rounded as the cast kernels round. See `shaders/matmul/coopmat_gemm.comp` for the tiling. Chosen only when `supported` says
//! the device has the 16x16x16 shape for the operand type with an f32 accumulator, and
//! subgroups of 32 (the kernel's 2 x 4 subgroup grid assumes it).

use vkformers_vk::{read, read_write, write, BufferView, Caps, KernelCode, Recorder, Result};

use crate::code;
use crate::code::MatmulCoopmat2GemmPush;
use crate::launch::{dispatch, err_named as err};

/// Which tensor-core kernel runs a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The best one the device has (`choose_engine`).
    Auto,
    /// `VK_KHR_cooperative_matrix`, operands staged by hand in shared memory.
    Coopmat,
    /// `VK_NV_cooperative_matrix2`, workgroup-scope tiles of 128 x 128.
    Coopmat2,
    /// `VK_NV_cooperative_matrix2`, 128 x 256 tiles.
    Coopmat2Wide,
    /// `VK_NV_cooperative_matrix2`, 128 x 256 tiles, K slices of 64.
    Coopmat2Wide64,
    /// `VK_NV_cooperative_matrix2`, 256 x 128 tiles, K slices of 64.
    Coopmat2Tall64,
    /// `VK_NV_cooperative_matrix2`, 128 x 256 tiles, K slices of 16.
    Coopmat2Wide16,
    /// `VK_NV_cooperative_matrix2`, 64 x 128 tiles (thin products: more workgroups).
    Coopmat2Small,
    /// `VK_NV_cooperative_matrix2`, 64 x 128 tiles, K slices of 64.
    Coopmat2Small64,
    /// `VK_NV_cooperative_matrix2`, 256 x 128 tiles, K slices of 32.
    Coopmat2Tall,
    /// `VK_NV_cooperative_matrix2`, 128 x 128 tiles on 128 invocations.
    Coopmat2T128,
    /// `VK_NV_cooperative_matrix2`, 128 x 128 tiles on 128 invocations, K slices of 64.
    Coopmat2T128K64,
    /// `VK_NV_cooperative_matrix2`, 64 x 64 tiles on 128 invocations, K slices of 64 (few-row
    /// products such as a batch-64 decode step: twice the workgroups of 64 x 128).
    Coopmat2Skinny64,
    /// `VK_NV_cooperative_matrix2`, 64 x 32 tiles on 128 invocations, K slices of 64.
    Coopmat2Skinny32,
    /// Experiment (bench only, not in [`Engine::ALL`]): the 128 x 128 kernel on 128
    /// invocations, K slices of 32, whose interior blocks copy A and B to shared memory
    /// themselves (uvec4 loads a slice ahead, two buffers) and load the workgroup-scope matrices
    /// from there (`STAGED` in the shader).
    Coopmat2Staged,
}

impl Engine {
    /// Every concrete engine (for sweeps).
    pub const ALL: [Engine; 13] = [
        Engine::Coopmat,
        Engine::Coopmat2,
        Engine::Coopmat2Wide,
        Engine::Coopmat2Wide64,
        Engine::Coopmat2Tall64,
        Engine::Coopmat2Wide16,
        Engine::Coopmat2Small,
        Engine::Coopmat2Small64,
        Engine::Coopmat2Tall,
        Engine::Coopmat2T128,
        Engine::Coopmat2T128K64,
        Engine::Coopmat2Skinny64,
        Engine::Coopmat2Skinny32,
    ];

    /// True for the `VK_NV_cooperative_matrix2` kernels.
    pub fn is_coopmat2(self) -> bool {
        !matches!(self, Engine::Auto | Engine::Coopmat)
    }

    /// True for the `VK_KHR_cooperative_matrix` kernels (hand-staged; operands 8-aligned).
    pub fn is_khr(self) -> bool {
        self == Engine::Coopmat
    }
}

/// Knobs of the cooperative-matrix-2 kernel (its specialization constants; see the shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Unclamped, alignment-hinted loads for interior blocks.
    pub fast: bool,
    /// Block-rows per raster group (1: plain row-major order of blocks).
    pub raster: u32,
    /// K slices per unrolled step of the fast path.
    pub unroll: u32,
    /// KHR kernels: bench-only cost probes (see the shader; 0 computes the product).
    pub probe: u32,
    /// 1 passes lda/ldb/ldc as specialization constants (`SLDA`, `SLDB`, `SLDC`), so the driver
    /// compiles the fast path with constant strides (one pipeline per stride triple); 2 also
    /// gives the fast path's layouts constant dimensions (`SDIMS`); 0 neither; `None` (the
    /// default) by size: [`static_strides_by_size`].
    pub static_strides: Option<u32>,
    /// Experiment: the fast path loads A and B through `uvec4` pointers (`VEC16`); taken only
    /// where both pointers and every operand offset, batch stride and lda/ldb are 16-byte aligned.
    pub vec16: bool,
}

impl Tuning {
    /// `VKFORMERS_CM2_STATIC_STRIDES` (0, 1 or 2, as `static_strides`; unset: by size) and
    /// `VKFORMERS_CM2_VEC16` (1: on; default off); read once.
    fn env() -> (Option<u32>, bool) {
        static ENV: std::sync::OnceLock<(Option<u32>, bool)> = std::sync::OnceLock::new();
        *ENV.get_or_init(|| {
            let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
            (var("VKFORMERS_CM2_STATIC_STRIDES").map(|v| v.min(2)), var("VKFORMERS_CM2_VEC16") == Some(1))
        })
    }
}

/// Multiply-adds (`M · N · K · batch`) from which a product takes static strides by default.
const STATIC_STRIDES_MACS: u64 = 1 << 34;

/// Static strides (2: strides and layout dimensions constant) for products of at least
/// [`STATIC_STRIDES_MACS`] multiply-adds (4096 tokens through a 2048 x 2048 weight and up),
/// none below: each stride triple is a pipeline of its own (about a second to compile on NVIDIA,
/// kept in the pipeline cache), which pays only where the product runs long. H100, bf16
/// (`docs/bench/h100-2026-12-05-i`, `h100-2026-12-06-a`): 8192³ 3-17% faster in every
/// alternating pair; the 1.1B training step's forward products -4.5% to +5%, its whole step
/// (train.py) +1.2% in both alternating pairs.
pub fn static_strides_by_size(d: &CoopGemm) -> u32 {
    let macs = u64::from(d.m) * u64::from(d.n) * u64::from(d.k) * u64::from(d.batch.max(1));
    if macs >= STATIC_STRIDES_MACS {
        2
    } else {
        0
    }
}

impl Default for Tuning {
    fn default() -> Self {
        let (static_strides, vec16) = Tuning::env();
        Tuning { fast: true, raster: 1, unroll: 8, probe: 0, static_strides, vec16 }
    }
}

/// Operand element type of the tensor-core path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F16,
    Bf16,
}

impl Elem {
    fn name(self) -> &'static str {
        match self {
            Elem::F16 => "f16",
            Elem::Bf16 => "bf16",
        }
    }
}

/// One (batched) product `C = alpha * op(A) * op(B) (+ bias) (+ C)`; all offsets, leading
/// dimensions and batch strides in elements (see the shader header for the layouts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CoopGemm {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub batch: u32,
    pub trans_a: bool,
    pub trans_b: bool,
    pub lda: u32,
    pub ldb: u32,
    pub ldc: u32,
    pub a_off: u32,
    pub b_off: u32,
    pub c_off: u32,
    pub a_bstride: u32,
    pub b_bstride: u32,
    pub c_bstride: u32,
    pub alpha: f32,
    pub beta_one: bool,
    /// C stored in the operand type (`elem`) instead of f32: the f32 result rounded to nearest
    /// even, as a cast of the f32 C would give, bit for bit. Only written (not with `beta_one`).
    pub c_half: bool,
    pub elem: Elem,
    pub engine: Engine,
    pub tuning: Tuning,
}

impl CoopGemm {
    /// A dense `[m, k] x [k, n]` product (or `[m, k] x [n, k]ᵀ` with `trans_b`), batch 1.
    pub fn dense(m: u32, n: u32, k: u32, trans_b: bool, elem: Elem) -> Self {
        CoopGemm {
            m,
            n,
            k,
            batch: 1,
            trans_a: false,
            trans_b,
            lda: k,
            ldb: if trans_b { k } else { n },
            ldc: n,
            a_off: 0,
            b_off: 0,
            c_off: 0,
            a_bstride: 0,
            b_bstride: 0,
            c_bstride: 0,
            alpha: 1.0,
            beta_one: false,
            c_half: false,
            elem,
            engine: Engine::Auto,
            tuning: Tuning::default(),
        }
    }

    /// Floating-point operations: 2·M·N·K per batch.
    pub fn flops(&self) -> f64 {
        2.0 * f64::from(self.m) * f64::from(self.n) * f64::from(self.k) * f64::from(self.batch)
    }
}

/// True when this device can run the tensor-core GEMM for `elem` (a pure function of `Caps`).
pub fn supported(caps: &Caps, elem: Elem) -> bool {
    choose_engine(caps, elem, 1, 1, 1).is_some()
}

/// True when the device has NV cooperative matrix 2 with what `coopmat2_gemm.comp` uses.
fn has_coopmat2(caps: &Caps, elem: Elem) -> bool {
    let types = match elem {
        Elem::F16 => caps.fp16,
        Elem::Bf16 => caps.bf16 && caps.bf16_cooperative_matrix,
    };
    types
        && caps.cooperative_matrix2.as_ref().is_some_and(|c| {
            c.workgroup_scope
                && c.tensor_addressing
                && c.flexible_dimensions
                && c.workgroup_scope_max_workgroup_size >= 256
        })
}

/// Blocks of 128 x 128 a product must have for the 128 x 128 kernel to fill the device (an
/// H200 has 132 multiprocessors); thinner products take 64 x 128 blocks.
pub const FULL_GRID: u64 = 132;

/// Rows up to which a bf16 product takes the 64 x 64 blocks of [`Engine::Coopmat2Skinny64`].
pub const SKINNY_ROWS: u32 = 64;

/// The engine for a product of `batch` x `m` x `n` outputs: cooperative matrix 2 where present,
/// else the KHR kernel; `None` when the device has neither. Measured on an H200 (bf16,
/// docs/bench/h200-2026-12-03-d-gemm-variants.log): 128 x 128 blocks on 128 invocations with K
/// slices of 64 are fastest at 8192³ (311 TFLOP/s against 282 for 128 x 256 blocks) and on
/// nearly every product of the 134M and 1.1B training steps; products with fewer than
/// `FULL_GRID` such blocks (a 512-token prefill's q/o, a 4096-token k/v with 4 kv heads) run
/// faster on 64 x 128 blocks (e.g. 152 against 115 TFLOP/s for 512 x 2048 x 2048).
///
/// f16 differs: on the same driver its K-slice-64 kernels are 4-8x slower than its 32-slice
/// ones (8192³: t128k64 62.7, tall64 37.9 against 282.9 TFLOP/s for t128, which bf16 matches
/// at 311.9 with k64; `vkformers bench gemm --dtype f16`, docs/bench/h200-2026-12-04-c), so
/// f16 products take the 32-slice kernels of the same blocks.
///
/// Products of at most `SKINNY_ROWS` rows (a decode step of up to 64 sequences: M = tokens,
/// weights [N, K]) stream the weights once and are bandwidth-bound: 64 x 64 blocks, never the
/// 128-row ones, which spend half their tile on rows that do not exist (batch-64 step of the 1.1B
/// shape, `vkformers bench gemm --m 64 --trans-b --split-k S`,
/// docs/bench/h200-2026-12-04-j/log2: gate/up 11264 x 2048 0.032 ms against 0.059 for the 128 x
/// 128 kernel split 4 ways as chosen before, the LM head 32000 x 2048 0.068 against 0.108).
pub fn choose_engine(caps: &Caps, elem: Elem, m: u32, n: u32, batch: u32) -> Option<Engine> {
    if has_coopmat2(caps, elem) {
        use code::defines::matmul_coopmat2_gemm_bf16_t128k64 as full;
        let blocks = u64::from(m.div_ceil(full::BM)) * u64::from(n.div_ceil(full::BN)) * u64::from(batch.max(1));
        let full = blocks >= FULL_GRID;
        return Some(match elem {
            Elem::Bf16 if m <= SKINNY_ROWS => Engine::Coopmat2Skinny64,
            Elem::Bf16 if full => Engine::Coopmat2T128K64,
            Elem::Bf16 => Engine::Coopmat2Small64,
            Elem::F16 if full => Engine::Coopmat2T128,
            Elem::F16 => Engine::Coopmat2Small,
        });
    }
    has_khr_coopmat(caps, elem).then_some(Engine::Coopmat)
}

fn has_khr_coopmat(caps: &Caps, elem: Elem) -> bool {
    let shape = caps.cooperative_matrix.iter().any(|s| {
        (s.m, s.n, s.k) == (16, 16, 16)
            && s.a == elem.name()
            && s.b == elem.name()
            && s.c == "f32"
            && s.result == "f32"
            && s.scope == "subgroup"
    });
    let types = match elem {
        Elem::F16 => caps.fp16,
        Elem::Bf16 => caps.bf16 && caps.bf16_cooperative_matrix,
    };
    shape && types && caps.subgroup_size == 32 && caps.max_shared_memory >= 40 * 1024
}

/// The kernel of an engine and its block of C (rows, columns).
fn kernel(engine: Engine, elem: Elem) -> (&'static KernelCode, u32, u32) {
    use Elem::{Bf16, F16};
    // A kernel with the block (BM, BN) its shader is compiled for.
    macro_rules! tile {
        ($code:ident, $defines:ident) => {
            (&code::$code, code::defines::$defines::BM, code::defines::$defines::BN)
        };
    }
    match (engine, elem) {
        (Engine::Coopmat2, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16, matmul_coopmat2_gemm_f16),
        (Engine::Coopmat2, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16, matmul_coopmat2_gemm_bf16),
        (Engine::Coopmat2Wide, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_WIDE, matmul_coopmat2_gemm_f16_wide),
        (Engine::Coopmat2Wide, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_WIDE, matmul_coopmat2_gemm_bf16_wide),
        (Engine::Coopmat2Wide64, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_WIDE64, matmul_coopmat2_gemm_f16_wide64),
        (Engine::Coopmat2Wide64, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_WIDE64, matmul_coopmat2_gemm_bf16_wide64),
        (Engine::Coopmat2Tall64, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_TALL64, matmul_coopmat2_gemm_f16_tall64),
        (Engine::Coopmat2Tall64, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_TALL64, matmul_coopmat2_gemm_bf16_tall64),
        (Engine::Coopmat2Wide16, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_WIDE16, matmul_coopmat2_gemm_f16_wide16),
        (Engine::Coopmat2Wide16, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_WIDE16, matmul_coopmat2_gemm_bf16_wide16),
        (Engine::Coopmat2Small, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_SMALL, matmul_coopmat2_gemm_f16_small),
        (Engine::Coopmat2Small, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_SMALL, matmul_coopmat2_gemm_bf16_small),
        (Engine::Coopmat2Small64, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_SMALL64, matmul_coopmat2_gemm_f16_small64),
        (Engine::Coopmat2Small64, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_SMALL64, matmul_coopmat2_gemm_bf16_small64),
        (Engine::Coopmat2Tall, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_TALL, matmul_coopmat2_gemm_f16_tall),
        (Engine::Coopmat2Tall, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_TALL, matmul_coopmat2_gemm_bf16_tall),
        (Engine::Coopmat2T128, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_T128, matmul_coopmat2_gemm_f16_t128),
        (Engine::Coopmat2T128, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_T128, matmul_coopmat2_gemm_bf16_t128),
        (Engine::Coopmat2T128K64, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_T128K64, matmul_coopmat2_gemm_f16_t128k64),
        (Engine::Coopmat2T128K64, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_T128K64, matmul_coopmat2_gemm_bf16_t128k64),
        (Engine::Coopmat2Skinny64, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_SKINNY64, matmul_coopmat2_gemm_f16_skinny64),
        (Engine::Coopmat2Skinny64, Bf16) => {
            tile!(MATMUL_COOPMAT2_GEMM_BF16_SKINNY64, matmul_coopmat2_gemm_bf16_skinny64)
        }
        (Engine::Coopmat2Staged, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_STAGED, matmul_coopmat2_gemm_f16_staged),
        (Engine::Coopmat2Staged, Bf16) => tile!(MATMUL_COOPMAT2_GEMM_BF16_STAGED, matmul_coopmat2_gemm_bf16_staged),
        (Engine::Coopmat2Skinny32, F16) => tile!(MATMUL_COOPMAT2_GEMM_F16_SKINNY32, matmul_coopmat2_gemm_f16_skinny32),
        (Engine::Coopmat2Skinny32, Bf16) => {
            tile!(MATMUL_COOPMAT2_GEMM_BF16_SKINNY32, matmul_coopmat2_gemm_bf16_skinny32)
        }
        (_, F16) => tile!(MATMUL_COOPMAT_GEMM_F16, matmul_coopmat_gemm_f16),
        (_, Bf16) => tile!(MATMUL_COOPMAT_GEMM_BF16, matmul_coopmat_gemm_bf16),
    }
}

/// Highest element index (+1) a strided operand of `rows x cols` (row stride `ld`) touches over
/// all batches.
fn extent(off: u32, ld: u32, rows: u32, cols: u32, bstride: u32, batch: u32) -> u64 {
    if rows == 0 || cols == 0 {
        return 0;
    }
    u64::from(off) + u64::from(batch - 1) * u64::from(bstride) + u64::from(rows - 1) * u64::from(ld) + u64::from(cols)
}

fn check(
    d: &CoopGemm,
    engine: Engine,
    a: &BufferView<'_>,
    b: &BufferView<'_>,
    c: &BufferView<'_>,
    name: &str,
) -> Result<()> {
    if d.m == 0 || d.n == 0 || d.k == 0 || d.batch == 0 {
        return Err(err(name, format!("empty product {}x{}x{} (batch {})", d.m, d.n, d.k, d.batch)));
    }
    if engine.is_khr()
        && (!d.lda.is_multiple_of(8)
            || !d.ldb.is_multiple_of(8)
            || !d.a_off.is_multiple_of(8)
            || !d.b_off.is_multiple_of(8)
            || !d.a_bstride.is_multiple_of(8)
            || !d.b_bstride.is_multiple_of(8))
    {
        return Err(err(name, "lda, ldb, operand offsets and batch strides must be multiples of 8".into()));
    }
    let (ar, ac) = if d.trans_a { (d.k, d.m) } else { (d.m, d.k) };
    let (br, bc) = if d.trans_b { (d.n, d.k) } else { (d.k, d.n) };
    if d.lda < ac || d.ldb < bc || d.ldc < d.n {
        return Err(err(
            name,
            format!("leading dimensions {}/{}/{} below row lengths {ac}/{bc}/{}", d.lda, d.ldb, d.ldc, d.n),
        ));
    }
    if d.c_half && d.beta_one {
        return Err(err(name, "a 16-bit C is only written (beta_one with c_half)".into()));
    }
    let c_bytes = if d.c_half { 2 } else { 4 };
    let need = [
        ("A", extent(d.a_off, d.lda, ar, ac, d.a_bstride, d.batch) * 2, a.len),
        ("B", extent(d.b_off, d.ldb, br, bc, d.b_bstride, d.batch) * 2, b.len),
        ("C", extent(d.c_off, d.ldc, d.m, d.n, d.c_bstride, d.batch) * c_bytes, c.len),
    ];
    for (what, bytes, have) in need {
        if bytes > have {
            return Err(err(name, format!("{what} needs {bytes} bytes, its view has {have}")));
        }
    }
    Ok(())
}

/// True when the `VEC16` loads may read A and B as `uvec4`: both views start 16-byte aligned
/// and every element offset, batch stride and leading dimension of A and B is a multiple of 8.
fn vec16_aligned(d: &CoopGemm, a: &BufferView<'_>, b: &BufferView<'_>) -> bool {
    a.address().is_multiple_of(16)
        && b.address().is_multiple_of(16)
        && [d.lda, d.ldb, d.a_off, d.b_off, d.a_bstride, d.b_bstride].iter().all(|v| v.is_multiple_of(8))
}

/// Records `C = alpha * op(A) * op(B) (+ bias) (+ C)`. `bias` is `[n]` f32; C is f32, or the
/// operand type with `c_half`.
pub fn gemm_coopmat(
    rec: &mut Recorder,
    d: &CoopGemm,
    a: BufferView<'_>,
    b: BufferView<'_>,
    bias: Option<BufferView<'_>>,
    c: BufferView<'_>,
) -> Result<()> {
    let engine = match d.engine {
        Engine::Auto => choose_engine(rec.caps(), d.elem, d.m, d.n, d.batch)
            .ok_or_else(|| err("matmul/coopmat", format!("no {:?} cooperative-matrix GEMM on this device", d.elem)))?,
        e => e,
    };
    let (k, block_m, block_n) = kernel(engine, d.elem);
    check(d, engine, &a, &b, &c, k.name)?;
    if let Some(bv) = &bias {
        if bv.len < u64::from(d.n) * 4 {
            return Err(err(k.name, format!("bias of {} bytes for n = {}", bv.len, d.n)));
        }
    }
    let flags = u32::from(bias.is_some()) | (u32::from(d.beta_one) << 1) | (u32::from(d.c_half) << 2);
    // coopmat_gemm.comp (KHR) declares the same block as coopmat2_gemm.comp (one struct, aliased).
    let push = MatmulCoopmat2GemmPush {
        M: d.m,
        N: d.n,
        K: d.k,
        lda: d.lda,
        ldb: d.ldb,
        ldc: d.ldc,
        a_off: d.a_off,
        b_off: d.b_off,
        c_off: d.c_off,
        a_bstride: d.a_bstride,
        b_bstride: d.b_bstride,
        c_bstride: d.c_bstride,
        flags,
        alpha: d.alpha,
    };
    let c_arg = if d.beta_one { read_write(c) } else { write(c) };
    let bias_view = bias.unwrap_or(a);
    let groups = [d.n.div_ceil(block_n), d.m.div_ceil(block_m), d.batch];
    let spec: Vec<u32> = if engine.is_khr() {
        vec![u32::from(d.trans_a), u32::from(d.trans_b), d.tuning.probe]
    } else {
        let t = d.tuning;
        let mut spec =
            vec![u32::from(d.trans_a), u32::from(d.trans_b), u32::from(t.fast), t.raster.max(1), t.unroll.max(1)];
        // The experiments' constants (ids 5-9) only when one is on: the shipped pipelines keep
        // their five constants (and their cache entries).
        let vec16 = t.vec16 && vec16_aligned(d, &a, &b);
        let static_strides = t.static_strides.unwrap_or_else(|| static_strides_by_size(d));
        if static_strides > 0 || vec16 {
            let (sa, sb, sc) = if static_strides > 0 { (d.lda, d.ldb, d.ldc) } else { (0, 0, 0) };
            spec.extend([sa, sb, sc, u32::from(vec16), u32::from(static_strides >= 2)]);
        }
        spec
    };
    dispatch(rec, k, &spec, &[read(a), read(b), c_arg, read(bias_view)], &push, groups)?;
    rec.set_flops(d.flops());
    Ok(())
}

#[cfg(test)]
mod tests {
    use vkformers_vk::{CoopMat2, CoopMatShape};

    use super::*;

    /// Every engine's kernel is paired with the block its shader was compiled for (the grid and
    /// the split checks size by it).
    #[test]
    fn blocks_are_the_shader_defines() {
        for engine in Engine::ALL.into_iter().chain([Engine::Coopmat2Staged]) {
            for elem in [Elem::F16, Elem::Bf16] {
                let (k, bm, bn) = kernel(engine, elem);
                let define = |d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
                assert_eq!((define("BM"), define("BN")), (bm, bn), "{}", k.name);
            }
        }
    }

    fn shape(t: &str) -> CoopMatShape {
        CoopMatShape {
            m: 16,
            n: 16,
            k: 16,
            a: t.into(),
            b: t.into(),
            c: "f32".into(),
            result: "f32".into(),
            saturating: false,
            scope: "subgroup".into(),
        }
    }

    fn caps(coopmat: bool, cm2: bool, bf16: bool) -> Caps {
        Caps {
            fp16: true,
            bf16,
            bf16_cooperative_matrix: bf16,
            subgroup_size: 32,
            max_shared_memory: 48 * 1024,
            cooperative_matrix: if coopmat { vec![shape("f16"), shape("bf16")] } else { vec![] },
            cooperative_matrix2: cm2.then(|| CoopMat2 {
                workgroup_scope: true,
                tensor_addressing: true,
                flexible_dimensions: true,
                workgroup_scope_max_workgroup_size: 256,
                ..CoopMat2::default()
            }),
            ..Caps::default()
        }
    }

    #[test]
    fn engine_choice_is_a_function_of_caps() {
        let big = (4096, 4096, 1);
        let pick = |c: &Caps, e: Elem, (m, n, b): (u32, u32, u32)| choose_engine(c, e, m, n, b);
        assert_eq!(pick(&caps(false, false, false), Elem::F16, big), None);
        assert_eq!(pick(&caps(true, false, false), Elem::F16, big), Some(Engine::Coopmat));
        assert_eq!(pick(&caps(true, false, false), Elem::Bf16, big), None, "bf16 needs the bf16 feature");
        assert_eq!(pick(&caps(true, true, true), Elem::Bf16, big), Some(Engine::Coopmat2T128K64));
        assert_eq!(pick(&caps(true, true, true), Elem::Bf16, (512, 2048, 1)), Some(Engine::Coopmat2Small64));
        // A batch-64 decode step's products (and their split-K batches) on 64 x 64 blocks.
        assert_eq!(pick(&caps(true, true, true), Elem::Bf16, (64, 11264, 1)), Some(Engine::Coopmat2Skinny64));
        assert_eq!(pick(&caps(true, true, true), Elem::Bf16, (16, 2048, 4)), Some(Engine::Coopmat2Skinny64));
        assert_eq!(pick(&caps(true, true, true), Elem::F16, (64, 11264, 1)), Some(Engine::Coopmat2Small));
        assert_eq!(pick(&caps(true, true, true), Elem::Bf16, (65, 11264, 1)), Some(Engine::Coopmat2Small64));
        assert_eq!(pick(&caps(true, true, true), Elem::F16, (512, 2048, 1)), Some(Engine::Coopmat2Small));
        assert_eq!(pick(&caps(true, true, true), Elem::F16, (512, 5632, 1)), Some(Engine::Coopmat2T128));
        assert_eq!(
            pick(&caps(true, true, true), Elem::Bf16, (768, 768, 16)),
            Some(Engine::Coopmat2T128K64),
            "split-K batches count"
        );
        assert_eq!(
            pick(&caps(true, true, true), Elem::F16, (768, 768, 16)),
            Some(Engine::Coopmat2T128),
            "f16: 32-slices"
        );
        let mut amd = caps(true, false, false);
        amd.subgroup_size = 64;
        assert_eq!(pick(&amd, Elem::F16, big), None, "the KHR kernel assumes subgroups of 32");
    }
}
