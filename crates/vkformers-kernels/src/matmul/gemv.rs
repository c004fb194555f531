//! Few-row matrix product for decoding: `y [m, n] = x [m, k] · Wᵀ (+ bias [n])` for
//! m = 1..=16, with `W [n, k]` in the nn.Linear layout (`shaders/matmul/gemv.comp`).
//!
//! The tiled GEMM pads M to its 64- or 128-row tile, so one token through a 49152×576 LM head
//! costs as much as 64. This kernel reads each element of W once for all m rows of x, in
//! 16-byte loads, which makes decoding run at the memory bandwidth of streaming the weights.
//! x, bias and y are f32; W is f32, f16 or bf16 storage (f32 math).

use vkformers_vk::{read, write, Arg, BufferView, Caps, ChainLink, KernelCode, Recorder, Result};

use super::DType;
use crate::code;
use crate::code::MatmulGemvPush;
use crate::glu::Glu;
use crate::launch::{dispatch_chained, err_named as err, MAX_GROUPS_32};

/// Most rows of x one dispatch takes (`MB` of the widest variants).
pub const MAX_ROWS: u32 = code::defines::matmul_gemv_f32_m16::MB;

/// Rows of W each workgroup owns (`R` in gemv.comp; the same in every variant, see the tests).
const ROWS_PER_GROUP: u32 = code::defines::matmul_gemv_f32_m1::R;
/// Threads per workgroup of the GPU variants (`WG` in gemv.comp).
const THREADS: u32 = code::defines::matmul_gemv_f32_m1::WG;

/// One product `y = x · Wᵀ (+ bias)`. W is `[n, k]` packed (rows k elements apart); x rows
/// are `ldx` f32 apart, y rows `ldy` f32 apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvDesc {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub ldx: u32,
    pub ldy: u32,
    pub dtype: DType,
    pub has_bias: bool,
}

impl GemvDesc {
    /// Packed x `[m, k]` and y `[m, n]`, no bias.
    pub fn packed(m: u32, n: u32, k: u32, dtype: DType) -> Self {
        GemvDesc { m, n, k, ldx: k, ldy: n, dtype, has_bias: false }
    }

    /// Bytes of W the product reads: `n · k · sizeof(dtype)`.
    pub fn weight_bytes(&self) -> u64 {
        u64::from(self.n) * u64::from(self.k) * self.dtype.bytes()
    }
}

/// Whether `gemv` runs on this device and should be chosen over `matmul::gemm` for `m` rows
/// of x: 1 ≤ m ≤ [`row_limit`] and the device has subgroup arithmetic (for `subgroupAdd`).
pub fn gemv_applies(m: u32, caps: &Caps) -> bool {
    (1..=row_limit(caps)).contains(&m) && has_subgroup_arithmetic(caps)
}

/// Rows of x up to which the GEMV beats the GEMM on a device with cooperative matrix 2. H200,
/// 1.1B bf16 decode tokens/s with the GEMV up to 16 / 4 rows: batch 4 589 / 540, batch 8
/// 628 / 1,053, batch 16 1,218 / 2,091 (`docs/bench/h200-2026-12-04-i/log4-tests-bench.txt`:
/// the m8 and m16 variants stream W at ~400 GB/s, the tensor-core GEMM far faster).
const CM2_ROWS: u32 = 4;

/// Most rows of x the GEMV is chosen for: [`CM2_ROWS`] where the tensor-core GEMM runs, else
/// 16 (lavapipe and other devices: the portable GEMM pads few rows to a tile);
/// `VKFORMERS_GEMV_MAX_ROWS` (0 to 16, read once) overrides it, to compare the two on one binary.
fn row_limit(caps: &Caps) -> u32 {
    static OVERRIDE: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let set = *OVERRIDE.get_or_init(|| {
        std::env::var("VKFORMERS_GEMV_MAX_ROWS").ok().and_then(|v| v.parse().ok()).map(|v: u32| v.min(MAX_ROWS))
    });
    set.unwrap_or(if caps.cooperative_matrix2.is_some() { CM2_ROWS } else { MAX_ROWS })
}

/// Launch settings of the kernel that an A/B run or a test may change: `prefetch` (gemv.comp's
/// `PREFETCH`: W, gain, x/r and bias loads issued ahead of their use; the values are the same
/// bit for bit) and `max_groups` (a cap on the workgroups of a dispatch, so that each does
/// several row blocks through the grid-stride loop; None: one per block up to the device's
/// limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub prefetch: bool,
    pub max_groups: Option<u32>,
    /// gemv.comp's `PIPE`: a block's next chunk pair loaded while the current one is multiplied.
    pub pipe: bool,
    /// gemv.comp's `STAGE`: the input rows (x, f(gate) · up, or x̂) computed once per workgroup
    /// into shared memory, where they fit ([`staging`]); every row block reads them there. None:
    /// on devices other than CPUs (see [`Tuning::stages_on`]).
    pub stage: Option<bool>,
    /// gemv.comp's `PROBE`: bits that leave parts of the kernel out to time the rest (wrong
    /// results; `vkformers bench gemv --probe` only). 0: the kernel.
    pub probe: u32,
}

impl Tuning {
    /// `VKFORMERS_GEMV_PREFETCH` (0 or 1; default 1), `VKFORMERS_GEMV_MAX_GROUPS` (a positive
    /// count; default none, [`STAGED_GROUPS`] for staged products), `VKFORMERS_GEMV_PIPE` (0 or
    /// 1; default 0) and `VKFORMERS_GEMV_STAGE` (0 or 1; default: on GPUs), read once.
    pub fn from_env() -> Tuning {
        static ENV: std::sync::OnceLock<Tuning> = std::sync::OnceLock::new();
        *ENV.get_or_init(|| {
            let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
            Tuning {
                prefetch: var("VKFORMERS_GEMV_PREFETCH") != Some(0),
                max_groups: var("VKFORMERS_GEMV_MAX_GROUPS").filter(|&g| g > 0),
                pipe: var("VKFORMERS_GEMV_PIPE") == Some(1),
                stage: var("VKFORMERS_GEMV_STAGE").map(|v| v != 0),
                probe: 0,
            }
        })
    }

    /// Whether products on `caps`'s device stage their input (where it fits): as set, else on
    /// every device but CPUs. H100, 1.1B bf16 batch-1 decode, staged against not
    /// (`docs/bench/h100-2026-12-05-e`): 536 against 445 tokens/s; a normed 11264 × 2048 product
    /// 25.3 against 32.8 µs a call, at batch 4 87 against 261. On lavapipe it is untimed: llvmpipe
    /// reads x from the same memory either way.
    pub fn stages_on(&self, caps: &Caps) -> bool {
        self.stage.unwrap_or(!caps.is_cpu())
    }
}

thread_local! {
    static TUNING: std::cell::Cell<Option<Tuning>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with the products this thread records launched with `tuning` instead of
/// [`Tuning::from_env`] (both sides of an A/B in one process: tests, `vkformers bench gemv`).
pub fn with_tuning<T>(tuning: Tuning, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Tuning>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TUNING.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(TUNING.with(|t| t.replace(Some(tuning))));
    f()
}

/// The tuning of the products recorded now on this thread.
fn tuning() -> Tuning {
    TUNING.with(|t| t.get()).unwrap_or_else(Tuning::from_env)
}

/// Workgroups of a staged dispatch whose tuning sets no cap: 4 per multiprocessor of an
/// H100/H200 (132), so a workgroup's one staging serves several row blocks. H100, 1.1B bf16
/// batch-1 decode staged (`docs/bench/h100-2026-12-05-e`): 517 tokens/s uncapped, 536 under 528,
/// 530 under 1056; the normed 32000 × 2048 LM head 61.9 / 52.7 / 54.8 µs a call.
pub const STAGED_GROUPS: u32 = 528;

/// Workgroups of a dispatch over `blocks` row blocks: one each, within the device's limit and
/// the tuning's cap ([`STAGED_GROUPS`] by default when `staged`). Under a cap the blocks are
/// shared out evenly (the grid-stride loop gives workgroup g the blocks g, g + groups, ...): 640
/// blocks under a cap of 528 run on 320 workgroups of 2 blocks each, not on 528 of which 112 do
/// a second block alone.
fn groups_for(caps: &Caps, blocks: u32, tuning: &Tuning, staged: bool) -> u32 {
    let default = if staged { STAGED_GROUPS } else { u32::MAX };
    let cap = caps.max_workgroup_count[0].min(MAX_GROUPS_32).min(tuning.max_groups.unwrap_or(default)).max(1);
    let blocks = blocks.max(1);
    blocks.div_ceil(blocks.div_ceil(cap))
}

/// Floats of gemv.comp's staged input `xs` come in multiples of this, so that a model's few k
/// share pipelines (`XS` is a specialization constant).
const STAGE_QUANTUM: u32 = 1024;

/// gemv.comp's (`STAGE`, `XS`) for `m` rows of `k` in `dtype`: the rows (k rounded up to whole
/// 16-byte chunks of W) staged in shared memory when the tuning stages on this device
/// ([`Tuning::stages_on`]) and they fit beside the partial sums `red`; else (0, 1).
fn staging(caps: &Caps, dtype: DType, m: u32, k: u32, subgroups: u32, tuning: &Tuning) -> (u32, u32) {
    let chunk = 16 / dtype.bytes();
    let quantum = u64::from(STAGE_QUANTUM);
    let slots = (u64::from(m) * u64::from(k).div_ceil(chunk) * chunk).next_multiple_of(quantum).max(quantum);
    let bytes = u64::from(shared_bytes(m, subgroups)) + slots * 4;
    match u32::try_from(slots) {
        Ok(slots) if tuning.stages_on(caps) && bytes <= u64::from(caps.max_shared_memory) => (1, slots),
        _ => (0, 1),
    }
}

/// gemv.comp's specialization constants (VEC, NSG, PREFETCH, PIPE, STAGE, XS); `stage` =
/// [`staging`]'s (STAGE, XS).
fn spec_constants(wide: bool, subgroups: u32, tuning: &Tuning, stage: (u32, u32)) -> [u32; 6] {
    [u32::from(wide), subgroups, u32::from(tuning.prefetch), u32::from(tuning.pipe), stage.0, stage.1]
}

/// gemv.comp's `PROBE` (constant 9, after the chain's) where a probe is on; none otherwise, so
/// the kernel's pipelines keep their constants (and their cache entries).
fn probe_constant(tuning: &Tuning) -> Vec<u32> {
    if tuning.probe == 0 {
        vec![]
    } else {
        vec![tuning.probe]
    }
}

fn has_subgroup_arithmetic(caps: &Caps) -> bool {
    caps.subgroup_ops.iter().any(|op| op == "arithmetic")
}

/// The bucket of m (1, ≤ 4, ≤ 8, ≤ 16) as (index, rows `MB` the variant is compiled for): each
/// thread keeps `MB × ROWS_PER_GROUP` partial sums.
fn row_bucket(m: u32) -> (usize, u32) {
    match m {
        0..=1 => (0, 1),
        2..=4 => (1, 4),
        5..=8 => (2, 8),
        _ => (3, 16),
    }
}

/// The variant for a W dtype, the bucket of m, and the workgroup: 128 threads, or (`cpu`) one
/// subgroup of 8 (`CPU_THREADS`), whose widest variant takes [`CPU_MAX_ROWS`] rows (more are
/// recorded as several dispatches, [`cpu_row_ranges`]; the last bucket repeats m8 for them).
fn kernel_for(dtype: DType, m: u32, cpu: bool) -> &'static KernelCode {
    let table: [[&'static KernelCode; 4]; 2] = match dtype {
        DType::F32 => [
            [
                &code::MATMUL_GEMV_F32_M1,
                &code::MATMUL_GEMV_F32_M4,
                &code::MATMUL_GEMV_F32_M8,
                &code::MATMUL_GEMV_F32_M16,
            ],
            [
                &code::MATMUL_GEMV_F32_M1_CPU,
                &code::MATMUL_GEMV_F32_M4_CPU,
                &code::MATMUL_GEMV_F32_M8_CPU,
                &code::MATMUL_GEMV_F32_M8_CPU,
            ],
        ],
        DType::F16 => [
            [
                &code::MATMUL_GEMV_F16_M1,
                &code::MATMUL_GEMV_F16_M4,
                &code::MATMUL_GEMV_F16_M8,
                &code::MATMUL_GEMV_F16_M16,
            ],
            [
                &code::MATMUL_GEMV_F16_M1_CPU,
                &code::MATMUL_GEMV_F16_M4_CPU,
                &code::MATMUL_GEMV_F16_M8_CPU,
                &code::MATMUL_GEMV_F16_M8_CPU,
            ],
        ],
        DType::BF16 => [
            [
                &code::MATMUL_GEMV_BF16_M1,
                &code::MATMUL_GEMV_BF16_M4,
                &code::MATMUL_GEMV_BF16_M8,
                &code::MATMUL_GEMV_BF16_M16,
            ],
            [
                &code::MATMUL_GEMV_BF16_M1_CPU,
                &code::MATMUL_GEMV_BF16_M4_CPU,
                &code::MATMUL_GEMV_BF16_M8_CPU,
                &code::MATMUL_GEMV_BF16_M8_CPU,
            ],
        ],
    };
    table[usize::from(cpu)][row_bucket(m).0]
}

/// Shared memory of the per-subgroup partial sums: `red[MB · R · NSG]` f32 in gemv.comp.
fn shared_bytes(m: u32, subgroups: u32) -> u32 {
    row_bucket(m).1 * ROWS_PER_GROUP * subgroups * 4
}

/// The most subgroups a workgroup can be split into: the subgroup size may vary per dispatch
/// down to `subgroup_size_min` (0 when the device does not report one).
fn max_subgroups(caps: &Caps) -> u32 {
    let smallest = match caps.subgroup_size_min {
        0 => caps.subgroup_size,
        s => s.min(caps.subgroup_size),
    };
    THREADS / smallest.clamp(1, THREADS)
}

/// Threads of the `_cpu` variants' workgroups (their `WG`): one llvmpipe subgroup.
const CPU_THREADS: u32 = code::defines::matmul_gemv_f32_m1_cpu::WG;

/// Rows one dispatch of the `_cpu` variants takes: their widest is m8. On lavapipe a product
/// costs the same a row at 4, 8 and 16 rows (a bf16 normed 2048 × 2048: ~1 ms a row), while an
/// m16 pipeline took llvmpipe ~35 s to compile from cold (m8 ~10 s, m4 ~6 s): 9 to 16 rows run
/// as two dispatches.
const CPU_MAX_ROWS: u32 = code::defines::matmul_gemv_f32_m8_cpu::MB;

/// The row ranges `(first, rows)` that a product of `m` rows is recorded as when the device runs
/// the `_cpu` variants and m is above [`CPU_MAX_ROWS`]; None: one dispatch.
fn cpu_row_ranges(caps: &Caps, m: u32) -> Option<Vec<(u32, u32)>> {
    (m > CPU_MAX_ROWS && one_subgroup(caps))
        .then(|| (0..m).step_by(CPU_MAX_ROWS as usize).map(|i| (i, CPU_MAX_ROWS.min(m - i))).collect())
}

/// Rows `first..` of an f32 matrix view whose rows are `ld` floats apart (the view from that
/// row's first element to the view's end).
fn rows_from(view: BufferView<'_>, first: u32, ld: u32) -> BufferView<'_> {
    let skip = (u64::from(first) * u64::from(ld) * 4).min(view.len);
    view.buffer.slice(view.offset + skip, view.len - skip)
}

/// Whether to run the `_cpu` variants: a CPU device whose subgroups are always `CPU_THREADS`
/// wide. llvmpipe runs the subgroups of a workgroup one after another as coroutines switched at
/// each barrier, which costs more than a 4-row block's loads; a workgroup of one subgroup needs
/// no barrier and no shared memory (NSG = 1).
/// `VKFORMERS_GEMV_CPU_VARIANTS=0` (read once) runs the 128-thread variants on CPU devices too, so
/// lavapipe tests the GPUs' code path (the shared-memory reductions across subgroups).
fn one_subgroup(caps: &Caps) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("VKFORMERS_GEMV_CPU_VARIANTS").as_deref() == Ok("0")) {
        return false;
    }
    let fixed = caps.subgroup_size_min == CPU_THREADS && caps.subgroup_size_max == CPU_THREADS;
    caps.is_cpu() && caps.subgroup_size == CPU_THREADS && fixed
}

/// Checks the shape fields: m within the kernel, leading dimensions, 32-bit indices.
fn check_desc(name: &str, d: &GemvDesc) -> Result<()> {
    if d.m > MAX_ROWS {
        return Err(err(name, format!("m = {} rows above the {MAX_ROWS} a GEMV takes; use matmul::gemm", d.m)));
    }
    if d.ldx < d.k {
        return Err(err(name, format!("x: ldx {} below k {}", d.ldx, d.k)));
    }
    if d.ldy < d.n {
        return Err(err(name, format!("y: ldy {} below n {}", d.ldy, d.n)));
    }
    if d.k > u32::MAX - 8 {
        return Err(err(name, format!("k = {} above 2^32 - 9", d.k)));
    }
    Ok(())
}

/// Checks that the device runs the kernel for m rows; returns the specialization `NSG`.
fn check_device(name: &str, m: u32, caps: &Caps) -> Result<u32> {
    if !has_subgroup_arithmetic(caps) {
        return Err(err(name, format!("{} has no subgroup arithmetic; use matmul::gemm", caps.name)));
    }
    let subgroups = if one_subgroup(caps) { 1 } else { max_subgroups(caps) };
    let need = shared_bytes(m, subgroups);
    if need > caps.max_shared_memory {
        let size = THREADS / subgroups;
        return Err(err(name, format!("needs {need} bytes of shared memory (subgroups of {size}); use matmul::gemm")));
    }
    Ok(subgroups)
}

/// The bytes of an f32 matrix `[rows, cols]` with rows `ld` apart at the start of `view`, as a
/// view of exactly those bytes. `what` names the operand in errors.
fn f32_matrix<'a>(
    name: &str,
    what: &str,
    view: BufferView<'a>,
    rows: u32,
    cols: u32,
    ld: u32,
) -> Result<BufferView<'a>> {
    let span = u64::from(rows - 1) * u64::from(ld) + u64::from(cols);
    if span > u64::from(u32::MAX) {
        return Err(err(name, format!("{what}: spans {span} elements, above 2^32 - 1")));
    }
    if !view.offset.is_multiple_of(4) {
        return Err(err(name, format!("{what}: view starts at byte {} (not a multiple of 4)", view.offset)));
    }
    if span * 4 > view.len {
        return Err(err(name, format!("{what}: needs {} bytes but the view holds {}", span * 4, view.len)));
    }
    Ok(view.buffer.slice(view.offset, span * 4))
}

/// W `[n, k]` at the start of `view`, as the view from its first 4-byte word to the end of its
/// last, plus whether it starts in the high half of that word (16-bit storage).
fn weight_view<'a>(name: &str, d: &GemvDesc, view: BufferView<'a>) -> Result<(BufferView<'a>, u32)> {
    let elem = d.dtype.bytes();
    let need = d.weight_bytes();
    if need > view.len {
        return Err(err(name, format!("W: needs {need} bytes for [{}, {}] but the view holds {}", d.n, d.k, view.len)));
    }
    if !view.offset.is_multiple_of(elem) {
        return Err(err(name, format!("W: view starts at byte {} (not a multiple of {elem})", view.offset)));
    }
    let start = view.offset & !3;
    let end = (view.offset + need).next_multiple_of(4);
    if end > view.buffer.size() {
        return Err(err(
            name,
            "W: 16-bit data is read as 4-byte words; pad the buffer to a multiple of 4 bytes".into(),
        ));
    }
    let parity = u32::from(view.offset != start);
    Ok((view.buffer.slice(start, end - start), parity))
}

/// The bias `[n]` f32, or (without one) any view to push in its place; it is never read.
fn bias_view<'a>(name: &str, n: u32, bias: Option<BufferView<'a>>, fallback: BufferView<'a>) -> Result<BufferView<'a>> {
    match bias {
        Some(v) if v.len < u64::from(n) * 4 || !v.offset.is_multiple_of(4) => {
            Err(err(name, format!("bias: {} bytes at byte {} for n = {n} f32 values", v.len, v.offset)))
        }
        Some(v) => Ok(v.buffer.slice(v.offset, u64::from(n) * 4)),
        None => Ok(fallback),
    }
}

/// True when every chunk of 16 bytes of W and the matching K-slices of x are aligned vectors:
/// k a multiple of 16 bytes of W, W and x on 16-byte boundaries, ldx a multiple of 4.
/// `w_addr`, `x_addr`: device addresses of the first word of W and of x.
fn wide_loads(d: &GemvDesc, w_addr: u64, parity: u32, x_addr: u64) -> bool {
    let chunk = 16 / d.dtype.bytes() as u32;
    d.k > 0
        && d.k.is_multiple_of(chunk)
        && parity == 0
        && w_addr.is_multiple_of(16)
        && x_addr.is_multiple_of(16)
        && d.ldx.is_multiple_of(4)
}

/// Records `y = x · Wᵀ (+ bias)`.
///
/// `x`: f32 `[m, k]`, rows `ldx` apart; `w`: `[n, k]` packed in `desc.dtype` (may start at an
/// odd 16-bit element); `bias`: f32 `[n]`, given iff `desc.has_bias`; `y`: f32 `[m, n]`, rows
/// `ldy` apart. Every access is checked to stay inside its view. m = 0 or n = 0 records
/// nothing; k = 0 gives `y = bias` (or 0).
pub fn gemv(
    rec: &mut Recorder,
    desc: &GemvDesc,
    x: BufferView<'_>,
    w: BufferView<'_>,
    bias: Option<BufferView<'_>>,
    y: BufferView<'_>,
) -> Result<()> {
    let (kernel, subgroups) = checked_kernel(rec, desc, bias.is_some())?;
    let name = kernel.name;
    if desc.m == 0 || desc.n == 0 {
        return Ok(());
    }
    let (x_sub, w_sub, parity) = if desc.k == 0 {
        (x, w, 0) // pointers are pushed but nothing is read through them
    } else {
        let x_sub = f32_matrix(name, "x", x, desc.m, desc.k, desc.ldx)?;
        let (w_sub, parity) = weight_view(name, desc, w)?;
        (x_sub, w_sub, parity)
    };
    let y_sub = f32_matrix(name, "y", y, desc.m, desc.n, desc.ldy)?;
    let bias_sub = bias_view(name, desc.n, bias, x_sub)?;
    if let Some(ranges) = cpu_row_ranges(rec.caps(), desc.m) {
        for (first, rows) in ranges {
            let (x_rows, y_rows) = (rows_from(x_sub, first, desc.ldx), rows_from(y_sub, first, desc.ldy));
            gemv(rec, &GemvDesc { m: rows, ..*desc }, x_rows, w, bias, y_rows)?;
        }
        return Ok(());
    }
    let flags = u32::from(desc.has_bias) | parity << 1;
    let wide = wide_loads(desc, w_sub.address(), parity, x_sub.address());
    // Products 1 and 2 absent (n1 = n2 = 0): their pointers repeat product 0's, never read; so
    // do the normed input's (flags bit 6 clear).
    let args = [
        read(w_sub),
        read(x_sub),
        read(bias_sub),
        write(y_sub),
        read(w_sub),
        read(w_sub),
        write(y_sub),
        write(y_sub),
        read(x_sub),
        write(y_sub),
        write(y_sub),
    ];
    dispatch_single(rec, kernel, desc, flags, (wide, subgroups), &args)
}

/// The kernel of a single product (`gemv`, `gemv_glu`) and its subgroups per workgroup, after
/// the checks both share: a bias view given exactly when `desc.has_bias`, the description, and
/// the device.
fn checked_kernel(rec: &Recorder, desc: &GemvDesc, bias_given: bool) -> Result<(&'static KernelCode, u32)> {
    let kernel = kernel_for(desc.dtype, desc.m, one_subgroup(rec.caps()));
    let name = kernel.name;
    if desc.has_bias != bias_given {
        let given = if bias_given { "" } else { "not " };
        return Err(err(name, format!("has_bias is {} but a bias view was {given}given", desc.has_bias)));
    }
    check_desc(name, desc)?;
    Ok((kernel, check_device(name, desc.m, rec.caps())?))
}

/// Buffer pointers of gemv.comp's push block but the chain's counters (the last, added by
/// [`dispatch_chained`]).
const POINTERS: usize = 11;

/// Puts a chain link into gemv.comp's push scalars.
fn link_into(push: &mut MatmulGemvPush, link: ChainLink) {
    (push.chain_wait, push.chain_count, push.chain_signal) = (link.wait_slot, link.wait_count, link.signal_slot);
}

/// Records one product of `desc` (n1 = n2 = 0) with `flags` and the pointers `args` of
/// gemv.comp's push block, on one workgroup per `ROWS_PER_GROUP` rows of W (grid-stride beyond
/// the device's limit or the tuning's cap); `(wide, subgroups)` = (VEC, NSG).
fn dispatch_single(
    rec: &mut Recorder,
    kernel: &KernelCode,
    desc: &GemvDesc,
    flags: u32,
    (wide, subgroups): (bool, u32),
    args: &[Arg<'_>; POINTERS],
) -> Result<()> {
    let (m, n, k, ldx, ldy) = (desc.m, desc.n, desc.k, desc.ldx, desc.ldy);
    let push = MatmulGemvPush { M: m, N: n, K: k, ldx, ldy, flags, ..Default::default() };
    let tuning = tuning();
    let stage = staging(rec.caps(), desc.dtype, m, k, subgroups, &tuning);
    let groups = groups_for(rec.caps(), desc.n.div_ceil(ROWS_PER_GROUP), &tuning, stage.0 != 0);
    let spec = spec_constants(wide, subgroups, &tuning, stage);
    dispatch_chained(rec, kernel, (&spec, &probe_constant(&tuning)), args, push, link_into, [groups, 1, 1])?;
    rec.set_flops(2.0 * f64::from(desc.m) * f64::from(desc.n) * f64::from(desc.k));
    Ok(())
}

/// Whether [`gemv_glu`] should replace a GLU dispatch and a [`gemv`] on this device: not on CPU
/// devices that run the one-subgroup variants, where every 4-row workgroup recomputing f over
/// all of K costs more than the separate GLU pass.
pub fn glu_fusion_pays(caps: &Caps) -> bool {
    !one_subgroup(caps)
}

/// Whether [`gemv_group_normed`] should replace an RMSNorm dispatch and a [`gemv_group`] on this
/// device: as [`glu_fusion_pays`], not on CPU devices of one-subgroup workgroups, where every
/// 4-row workgroup summing the squares of all of x costs more than the norm's own pass.
pub fn norm_fusion_pays(caps: &Caps) -> bool {
    !one_subgroup(caps)
}

/// Code of a GLU kind in the flags of gemv.comp (bits 4-5).
fn glu_flag(kind: Glu) -> u32 {
    let code = match kind {
        Glu::SwiGlu => 1,
        Glu::GeGlu => 2,
        Glu::GeGluTanh => 3,
    };
    code << 4
}

/// Records `y = f(gate) · up · Wᵀ (+ bias)`: [`gemv`] of the GLU `x = f(gate) ⊙ up`
/// (`glu::forward` of `kind`), computed while x is loaded instead of by a dispatch of its own.
/// `gate`, `up`: f32 `[m, k]`, rows `desc.ldx` apart; the rest as [`gemv`], and the values are
/// its values on the GLU's output (the same f, the same products and order).
pub fn gemv_glu(
    rec: &mut Recorder,
    desc: &GemvDesc,
    (gate, up, kind): (BufferView<'_>, BufferView<'_>, Glu),
    w: BufferView<'_>,
    bias: Option<BufferView<'_>>,
    y: BufferView<'_>,
) -> Result<()> {
    let (kernel, subgroups) = checked_kernel(rec, desc, bias.is_some())?;
    let name = kernel.name;
    if desc.m == 0 || desc.n == 0 || desc.k == 0 {
        return Err(err(name, format!("gated input of an empty product m {} n {} k {}", desc.m, desc.n, desc.k)));
    }
    let g_sub = f32_matrix(name, "gate", gate, desc.m, desc.k, desc.ldx)?;
    let u_sub = f32_matrix(name, "up", up, desc.m, desc.k, desc.ldx)?;
    let (w_sub, parity) = weight_view(name, desc, w)?;
    let y_sub = f32_matrix(name, "y", y, desc.m, desc.n, desc.ldy)?;
    let bias_sub = bias_view(name, desc.n, bias, g_sub)?;
    if let Some(ranges) = cpu_row_ranges(rec.caps(), desc.m) {
        for (first, rows) in ranges {
            let gated = (rows_from(g_sub, first, desc.ldx), rows_from(u_sub, first, desc.ldx), kind);
            let y_rows = rows_from(y_sub, first, desc.ldy);
            gemv_glu(rec, &GemvDesc { m: rows, ..*desc }, gated, w, bias, y_rows)?;
        }
        return Ok(());
    }
    let flags = u32::from(desc.has_bias) | parity << 1 | glu_flag(kind);
    let wide = wide_loads(desc, w_sub.address(), parity, g_sub.address()) && u_sub.address().is_multiple_of(16);
    // w1 carries up (n1 = n2 = 0: no second product); w2, y1, y2 and the normed input's
    // pointers repeat others, never read.
    let args = [
        read(w_sub),
        read(g_sub),
        read(bias_sub),
        write(y_sub),
        read(u_sub),
        read(w_sub),
        write(y_sub),
        write(y_sub),
        read(g_sub),
        write(y_sub),
        write(y_sub),
    ];
    dispatch_single(rec, kernel, desc, flags, (wide, subgroups), &args)
}

/// Records `y_p = x · W_pᵀ` for two or three weights of the same x in one dispatch (a layer's
/// q, k and v projections, or gate and up): `parts[p] = (n_p, W_p, y_p)`, W_p `[n_p, k]` packed in
/// `desc.dtype`, y_p f32 `[m, n_p]` packed. `desc` gives m, k, ldx and the dtype (its n, ldy and
/// `has_bias` are ignored: no bias). The values are those of one [`gemv`] per
/// weight, bit for bit (the same chunks, order and reductions per output).
pub fn gemv_group(
    rec: &mut Recorder,
    desc: &GemvDesc,
    x: BufferView<'_>,
    parts: &[(u32, BufferView<'_>, BufferView<'_>)],
) -> Result<()> {
    let (kernel, subgroups, mut d) = checked_group(rec, desc, parts.len())?;
    if d.m == 0 || d.k == 0 || parts.iter().any(|p| p.0 == 0) {
        // Degenerate shapes: one product at a time (y = 0, or nothing to do).
        for &(n, w, y) in parts {
            (d.n, d.ldy) = (n, n);
            gemv(rec, &d, x, w, None, y)?;
        }
        return Ok(());
    }
    let x_sub = f32_matrix(kernel.name, "x", x, d.m, d.k, d.ldx)?;
    let none = Prologue { flags: 0, eps: 0.0, r: x_sub, gain: x_sub, hs: None, xn: None, wide: true };
    dispatch_group(rec, (kernel, subgroups), &d, x_sub, &none, parts)
}

/// The RMSNorm a normed product ([`gemv_group_normed`]) applies to its x while loading it, as
/// `norm::rms_norm_forward` (or, with a residual, `add_rms_norm_forward`) computes it:
/// `h = x (+ r)`, `x̂ = h · rstd · g`, `rstd = 1 / sqrt(mean_k h² + eps)`, g = 1, w or
/// (`unit_offset`) 1 + w.
#[derive(Clone, Copy, Debug)]
pub struct NormedInput<'a> {
    /// w `[k]` f32, or None for g = 1.
    pub gain: Option<BufferView<'a>>,
    pub unit_offset: bool,
    pub eps: f32,
    /// `(r, hs)`: the residual f32 `[m, k]` added to x before the norm, and where the sum
    /// `hs = x + r` f32 `[m, k]` is written (both rows `ldx` apart, as x).
    pub residual: Option<(BufferView<'a>, BufferView<'a>)>,
    /// Where x̂ f32 `[m, k]` (rows `ldx` apart) is written, for readers of the norm other than
    /// the products; None: x̂ lives in registers only.
    pub normed: Option<BufferView<'a>>,
}

/// Records `y_p = x̂ · W_pᵀ` as [`gemv_group`] (one to three products, no bias) where x̂ is the
/// RMSNorm `norm` of x (plus a residual), computed by every workgroup while it loads x: the
/// norm (and the add before it) needs no dispatch of its own. Workgroup 0 writes `hs = x + r`
/// and x̂ where `norm` asks; they must not overlap x, r, w or each other (no workgroup reads them
/// back). m, k and every n_p must be positive. f32 math; the sum of squares runs in another
/// order than the norm kernels' (values within f32 rounding of theirs, not bit for bit).
pub fn gemv_group_normed(
    rec: &mut Recorder,
    desc: &GemvDesc,
    x: BufferView<'_>,
    norm: &NormedInput<'_>,
    parts: &[(u32, BufferView<'_>, BufferView<'_>)],
) -> Result<()> {
    let (kernel, subgroups, d) = checked_group(rec, desc, parts.len())?;
    let name = kernel.name;
    if d.m == 0 || d.k == 0 || parts.iter().any(|p| p.0 == 0) {
        let ns: Vec<u32> = parts.iter().map(|p| p.0).collect();
        return Err(err(name, format!("normed input of an empty product: m {} k {} n {ns:?}", d.m, d.k)));
    }
    let x_sub = f32_matrix(name, "x", x, d.m, d.k, d.ldx)?;
    let pro = prologue(name, &d, x_sub, norm)?;
    dispatch_group(rec, (kernel, subgroups), &d, x_sub, &pro, parts)
}

/// The kernel of a group of `count` products, its subgroups per workgroup and `desc` without
/// bias, after the checks every group shares.
fn checked_group(rec: &Recorder, desc: &GemvDesc, count: usize) -> Result<(&'static KernelCode, u32, GemvDesc)> {
    let kernel = kernel_for(desc.dtype, desc.m, one_subgroup(rec.caps()));
    if !(1..=3).contains(&count) {
        return Err(err(kernel.name, format!("{count} products in a group: 1 to 3")));
    }
    let d = GemvDesc { has_bias: false, n: 0, ldy: 0, ..*desc };
    check_desc(kernel.name, &d)?;
    Ok((kernel, check_device(kernel.name, d.m, rec.caps())?, d))
}

/// The input prologue of a group's dispatch: its flags (bits 6-10 of gemv.comp), eps, the
/// pointers r, gain (in the bias slot), hs and x̂ (r and gain repeat x when unused; hs and x̂
/// absent repeat y_0), and whether r and the gain allow the wide loads.
#[derive(Clone, Copy)]
struct Prologue<'a> {
    flags: u32,
    eps: f32,
    r: BufferView<'a>,
    gain: BufferView<'a>,
    hs: Option<BufferView<'a>>,
    xn: Option<BufferView<'a>>,
    wide: bool,
}

/// Flag bits of a normed input in gemv.comp (the same in every variant, see the tests).
const NORMED: u32 = code::defines::matmul_gemv_f32_m1::NORMED_BIT;
const RESIDUAL: u32 = code::defines::matmul_gemv_f32_m1::RESIDUAL_BIT;
const WRITE_NORMED: u32 = code::defines::matmul_gemv_f32_m1::WRITE_XN_BIT;

/// Checks the views of a normed input (each inside its buffer) and makes its prologue.
fn prologue<'a>(name: &str, d: &GemvDesc, x: BufferView<'a>, norm: &NormedInput<'a>) -> Result<Prologue<'a>> {
    let mode = match (norm.gain, norm.unit_offset) {
        (None, _) => 0,
        (Some(_), false) => 1,
        (Some(_), true) => 2,
    };
    let gain = norm.gain.map(|g| f32_matrix(name, "gain", g, 1, d.k, d.k)).transpose()?;
    let (r, hs) = match norm.residual {
        Some((r, hs)) => {
            (Some(f32_matrix(name, "r", r, d.m, d.k, d.ldx)?), Some(f32_matrix(name, "hs", hs, d.m, d.k, d.ldx)?))
        }
        None => (None, None),
    };
    let xn = norm.normed.map(|v| f32_matrix(name, "normed", v, d.m, d.k, d.ldx)).transpose()?;
    let aligned = |v: &Option<BufferView<'_>>| v.is_none_or(|v| v.address().is_multiple_of(16));
    let (residual, write_normed) =
        (if r.is_some() { RESIDUAL } else { 0 }, if xn.is_some() { WRITE_NORMED } else { 0 });
    let flags = NORMED | mode << 7 | residual | write_normed;
    let wide = aligned(&r) && aligned(&gain);
    Ok(Prologue { flags, eps: norm.eps, r: r.unwrap_or(x), gain: gain.unwrap_or(x), hs, xn, wide })
}

/// Whether two views share a byte (device addresses are unique across buffers).
fn overlaps(a: &BufferView<'_>, b: &BufferView<'_>) -> bool {
    let (a0, b0) = (a.address(), b.address());
    a0 < b0 + b.len && b0 < a0 + a.len && a.len > 0 && b.len > 0
}

/// Records a group's dispatch: `parts` as in [`gemv_group`], x already checked (`x_sub`), the
/// input prologue `pro`.
fn dispatch_group(
    rec: &mut Recorder,
    (kernel, subgroups): (&KernelCode, u32),
    d: &GemvDesc,
    x_sub: BufferView<'_>,
    pro: &Prologue<'_>,
    parts: &[(u32, BufferView<'_>, BufferView<'_>)],
) -> Result<()> {
    let name = kernel.name;
    let (mut d, mut ws, mut ys, mut ns, mut flags, mut wide) =
        (*d, Vec::new(), Vec::new(), Vec::new(), pro.flags, pro.wide);
    for (p, &(n, w, y)) in parts.iter().enumerate() {
        (d.n, d.ldy) = (n, n);
        let (w_sub, parity) = weight_view(name, &d, w)?;
        ys.push(f32_matrix(name, "y", y, d.m, n, n)?);
        wide &= wide_loads(&d, w_sub.address(), parity, x_sub.address());
        flags |= parity << (1 + p);
        ws.push(w_sub);
        ns.push(n);
    }
    // hs and x̂ are written by workgroup 0 while the others read x, r, gain and W and write y.
    let others: Vec<&BufferView<'_>> = [&x_sub, &pro.r, &pro.gain].into_iter().chain(&ws).chain(&ys).collect();
    let outs: Vec<(&str, BufferView<'_>)> =
        [("hs", pro.hs), ("normed", pro.xn)].into_iter().filter_map(|(s, v)| Some((s, v?))).collect();
    for (i, (what, out)) in outs.iter().enumerate() {
        if others.iter().copied().chain(outs[i + 1..].iter().map(|o| &o.1)).any(|v| overlaps(v, out)) {
            return Err(err(name, format!("{what}: the view overlaps an operand or the other output")));
        }
    }
    if let Some(ranges) = cpu_row_ranges(rec.caps(), d.m) {
        return dispatch_group_rows(rec, subgroups, &d, (x_sub, pro), parts, &ranges);
    }
    let (n1, n2) = (ns.get(1).copied().unwrap_or(0), ns.get(2).copied().unwrap_or(0));
    let push = MatmulGemvPush {
        M: d.m,
        N: ns[0],
        K: d.k,
        ldx: d.ldx,
        ldy: ns[0],
        flags,
        n1,
        n2,
        eps: pro.eps,
        ..Default::default()
    };
    let blocks: u32 = ns.iter().map(|n| n.div_ceil(ROWS_PER_GROUP)).sum();
    let tuning = tuning();
    let stage = staging(rec.caps(), d.dtype, d.m, d.k, subgroups, &tuning);
    let groups = groups_for(rec.caps(), blocks, &tuning, stage.0 != 0);
    let (w1, w2) = (*ws.get(1).unwrap_or(&ws[0]), *ws.get(2).unwrap_or(&ws[0]));
    let (y1, y2) = (*ys.get(1).unwrap_or(&ys[0]), *ys.get(2).unwrap_or(&ys[0]));
    let (hs, xn) = (pro.hs.unwrap_or(ys[0]), pro.xn.unwrap_or(ys[0]));
    let args = [
        read(ws[0]),
        read(x_sub),
        read(pro.gain),
        write(ys[0]),
        read(w1),
        read(w2),
        write(y1),
        write(y2),
        read(pro.r),
        write(hs),
        write(xn),
    ];
    let spec = spec_constants(wide, subgroups, &tuning, stage);
    dispatch_chained(rec, kernel, (&spec, &probe_constant(&tuning)), &args, push, link_into, [groups, 1, 1])?;
    let total: u32 = ns.iter().sum();
    rec.set_flops(2.0 * f64::from(d.m) * f64::from(total) * f64::from(d.k));
    Ok(())
}

/// [`dispatch_group`] of the row ranges `ranges` one after another (CPU devices, above
/// [`CPU_MAX_ROWS`] rows): x and the prologue's row operands (r, hs, x̂: rows `ldx` apart) and
/// each y_p (packed, rows n_p apart) from each range's first row; W and the gain whole.
fn dispatch_group_rows<'a>(
    rec: &mut Recorder,
    subgroups: u32,
    d: &GemvDesc,
    (x_sub, pro): (BufferView<'a>, &Prologue<'a>),
    parts: &[(u32, BufferView<'a>, BufferView<'a>)],
    ranges: &[(u32, u32)],
) -> Result<()> {
    for &(first, rows) in ranges {
        let at = |v: BufferView<'a>| rows_from(v, first, d.ldx);
        let sub = Prologue { r: at(pro.r), hs: pro.hs.map(at), xn: pro.xn.map(at), ..*pro };
        let sub_parts: Vec<(u32, BufferView<'_>, BufferView<'_>)> =
            parts.iter().map(|&(n, w, y)| (n, w, rows_from(y, first, n))).collect();
        let rd = GemvDesc { m: rows, ..*d };
        let kernel = kernel_for(d.dtype, rows, true);
        dispatch_group(rec, (kernel, subgroups), &rd, at(x_sub), &sub, &sub_parts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(ops: &[&str], size: u32, min: u32) -> Caps {
        Caps {
            subgroup_ops: ops.iter().map(|s| s.to_string()).collect(),
            subgroup_size: size,
            subgroup_size_min: min,
            ..Caps::default()
        }
    }

    /// Every variant the launcher picks was compiled with the `MB`, `R` and `WG` it sizes the
    /// grid, the partial sums and the subgroup count by.
    #[test]
    fn launcher_sizes_are_the_shader_defines() {
        let define =
            |k: &KernelCode, d: &str| code::defines::value(k.name, d).unwrap_or_else(|| panic!("{}: {d}", k.name));
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for m in [1, 3, 8, 16] {
                for cpu in [false, true] {
                    let k = kernel_for(dtype, m, cpu);
                    // A CPU device's dispatch takes at most CPU_MAX_ROWS rows (cpu_row_ranges).
                    let rows = if cpu { m.min(CPU_MAX_ROWS) } else { m };
                    assert_eq!(define(k, "MB"), row_bucket(rows).1, "{}", k.name);
                    assert_eq!(define(k, "R"), ROWS_PER_GROUP, "{}", k.name);
                    assert_eq!(define(k, "WG"), if cpu { CPU_THREADS } else { THREADS }, "{}", k.name);
                    let bits = [("NORMED_BIT", NORMED), ("RESIDUAL_BIT", RESIDUAL), ("WRITE_XN_BIT", WRITE_NORMED)];
                    for (name, bit) in bits {
                        assert_eq!(define(k, name), bit, "{}: {name}", k.name);
                    }
                }
            }
        }
    }

    /// `with_tuning` changes the specialization and grid of products recorded inside it only.
    #[test]
    fn tuning_override_is_scoped_and_caps_the_grid() {
        let env = Tuning::from_env();
        let t = Tuning { prefetch: !env.prefetch, max_groups: Some(3), pipe: !env.pipe, stage: Some(false), probe: 0 };
        with_tuning(t, || {
            assert_eq!(tuning(), t);
            let want = [1, 4, u32::from(t.prefetch), u32::from(t.pipe), 1, 2048];
            assert_eq!(spec_constants(true, 4, &tuning(), (1, 2048)), want);
        });
        assert_eq!(tuning(), env);
        let caps = Caps { max_workgroup_count: [65_535, 1, 1], ..Caps::default() };
        assert_eq!(groups_for(&caps, 640, &t, false), 3);
        assert_eq!(groups_for(&caps, 2, &t, false), 2);
        assert_eq!(groups_for(&caps, 640, &Tuning { max_groups: None, ..t }, false), 640);
        assert_eq!(groups_for(&caps, 1 << 20, &Tuning { max_groups: None, ..t }, false), 61_681, "17 blocks each");
        let cap = |g| Tuning { max_groups: Some(g), ..t };
        assert_eq!(groups_for(&caps, 640, &cap(528), false), 320, "two blocks each, not 112 doing two alone");
        assert_eq!(groups_for(&caps, 2816, &cap(528), false), 470);
        assert_eq!(groups_for(&caps, 0, &cap(528), false), 1);
        // Staged products default to STAGED_GROUPS; a set cap wins.
        let unset = Tuning { max_groups: None, ..t };
        assert_eq!(groups_for(&caps, 2816, &unset, true), 470);
        assert_eq!(groups_for(&caps, 512, &unset, true), 512);
        assert_eq!(groups_for(&caps, 2816, &cap(1056), true), 939);
    }

    /// Staging takes the rows (k whole chunks, in multiples of 1024 floats) only where they fit
    /// beside the partial sums, and only when the tuning asks.
    #[test]
    fn staging_fits_in_shared_memory() {
        let caps = Caps { max_shared_memory: 49_152, ..Caps::default() };
        let on = Tuning { prefetch: true, max_groups: None, pipe: false, stage: Some(true), probe: 0 };
        assert_eq!(staging(&caps, DType::BF16, 1, 2048, 4, &on), (1, 2048));
        assert_eq!(staging(&caps, DType::BF16, 1, 5632, 4, &on), (1, 6144));
        assert_eq!(staging(&caps, DType::BF16, 1, 577, 4, &on), (1, 1024), "577 is 73 chunks of 8");
        assert_eq!(staging(&caps, DType::F32, 2, 5, 4, &on), (1, 1024), "2 rows of 2 chunks of 4");
        assert_eq!(staging(&caps, DType::BF16, 4, 5632, 4, &on), (0, 1), "88 KiB does not fit");
        assert_eq!(staging(&caps, DType::BF16, 2, 5632, 4, &on), (1, 11_264), "44 KiB and 256 bytes of sums");
        let tight = Caps { max_shared_memory: 11_264 * 4 + 255, ..caps.clone() };
        assert_eq!(staging(&tight, DType::BF16, 2, 5632, 4, &on), (0, 1), "the partial sums need room too");
        assert_eq!(staging(&caps, DType::BF16, 2, 2048, 4, &on), (1, 4096));
        let small = Caps { max_shared_memory: 4096 * 4, ..caps.clone() };
        assert_eq!(staging(&small, DType::BF16, 2, 2048, 4, &on), (0, 1), "the partial sums need room too");
        assert_eq!(staging(&caps, DType::BF16, 1, 2048, 4, &Tuning { stage: Some(false), ..on }), (0, 1));
        // Unset: GPUs stage, CPU devices do not.
        let auto = Tuning { stage: None, ..on };
        let gpu = Caps { device_type: "discrete-gpu".into(), ..caps.clone() };
        assert_eq!(staging(&gpu, DType::BF16, 1, 2048, 4, &auto), (1, 2048));
        let cpu = Caps { device_type: "cpu".into(), ..caps.clone() };
        assert_eq!(staging(&cpu, DType::BF16, 1, 2048, 4, &auto), (0, 1));
        assert_eq!(staging(&caps, DType::BF16, 16, u32::MAX - 8, 4, &on), (0, 1));
    }

    #[test]
    fn applies_to_1_through_16_rows_with_subgroup_arithmetic() {
        let nv = caps(&["basic", "arithmetic"], 32, 32);
        assert!(!gemv_applies(0, &nv));
        assert!((1..=16).all(|m| gemv_applies(m, &nv)));
        assert!(!gemv_applies(17, &nv));
        assert!(!gemv_applies(1, &caps(&["basic", "vote"], 32, 32)), "subgroupAdd needs arithmetic");
        let cm2 = Caps { cooperative_matrix2: Some(Default::default()), ..nv };
        assert!((1..=CM2_ROWS).all(|m| gemv_applies(m, &cm2)) && !gemv_applies(CM2_ROWS + 1, &cm2));
    }

    #[test]
    fn cpu_devices_with_a_fixed_subgroup_size_get_one_subgroup_per_workgroup() {
        let lavapipe = Caps { device_type: "cpu".into(), subgroup_size_max: 8, ..caps(&["arithmetic"], 8, 8) };
        assert!(one_subgroup(&lavapipe));
        let varying = Caps { subgroup_size_min: 4, ..lavapipe.clone() };
        assert!(!one_subgroup(&varying), "a varying subgroup size keeps the shared reduction");
        let gpu = Caps { device_type: "discrete-gpu".into(), subgroup_size_max: 32, ..caps(&["arithmetic"], 32, 32) };
        assert!(!one_subgroup(&gpu));
        assert_eq!(kernel_for(DType::F32, 1, true).name, "matmul/gemv:f32_m1_cpu");
    }

    #[test]
    fn variant_follows_the_row_bucket() {
        let names: Vec<&str> = [1, 2, 4, 5, 8, 9, 16].iter().map(|&m| kernel_for(DType::BF16, m, false).name).collect();
        assert_eq!(
            names,
            ["bf16_m1", "bf16_m4", "bf16_m4", "bf16_m8", "bf16_m8", "bf16_m16", "bf16_m16"]
                .map(|s| format!("matmul/gemv:{s}"))
        );
        assert_eq!(kernel_for(DType::F16, 3, false).name, "matmul/gemv:f16_m4");
        assert_eq!(kernel_for(DType::F32, 16, false).name, "matmul/gemv:f32_m16");
    }

    /// CPU devices of one-subgroup workgroups take 9 to 16 rows as dispatches of at most 8
    /// rows; other devices, and 8 rows or fewer, as one.
    #[test]
    fn cpu_devices_split_rows_past_the_widest_cpu_variant() {
        let lavapipe = Caps { device_type: "cpu".into(), subgroup_size_max: 8, ..caps(&["arithmetic"], 8, 8) };
        assert!(one_subgroup(&lavapipe));
        assert_eq!(CPU_MAX_ROWS, 8);
        assert_eq!(cpu_row_ranges(&lavapipe, 8), None);
        assert_eq!(cpu_row_ranges(&lavapipe, 9), Some(vec![(0, 8), (8, 1)]));
        assert_eq!(cpu_row_ranges(&lavapipe, 16), Some(vec![(0, 8), (8, 8)]));
        let gpu = Caps { device_type: "discrete-gpu".into(), subgroup_size_max: 32, ..caps(&["arithmetic"], 32, 32) };
        assert_eq!(cpu_row_ranges(&gpu, 16), None);
    }

    #[test]
    fn wide_loads_need_whole_aligned_chunks() {
        let bf = GemvDesc::packed(2, 5, 576, DType::BF16);
        assert!(wide_loads(&bf, 64, 0, 128));
        assert!(!wide_loads(&GemvDesc { k: 580, ldx: 580, ..bf }, 64, 0, 128), "k not a multiple of 8");
        assert!(!wide_loads(&bf, 64, 1, 128), "W at an odd element");
        assert!(!wide_loads(&bf, 72, 0, 128), "W not 16-byte aligned");
        assert!(!wide_loads(&bf, 64, 0, 132), "x not 16-byte aligned");
        assert!(!wide_loads(&GemvDesc { ldx: 578, ..bf }, 64, 0, 128), "x rows not 16-byte aligned");
        let f = GemvDesc::packed(2, 5, 580, DType::F32);
        assert!(wide_loads(&f, 64, 0, 128), "f32 chunks are 4 elements");
        assert!(!wide_loads(&GemvDesc { k: 0, ldx: 0, ..f }, 64, 0, 128));
    }

    #[test]
    fn shared_partials_cover_the_smallest_subgroup_size() {
        assert_eq!(max_subgroups(&caps(&[], 32, 32)), 4);
        assert_eq!(max_subgroups(&caps(&[], 64, 32)), 4, "AMD: wave32 or wave64");
        assert_eq!(max_subgroups(&caps(&[], 8, 0)), 16, "no size control reported");
        assert_eq!(max_subgroups(&caps(&[], 32, 8)), 16);
        assert_eq!(shared_bytes(16, 16), 16 * 4 * 16 * 4, "4 KiB for m = 16 on subgroups of 8");
        assert_eq!(shared_bytes(3, 4), 4 * 4 * 4 * 4);
    }

    /// The probe constant is passed only when a probe is on: the kernel's own pipelines keep
    /// their specialization (and their pipeline-cache entries).
    #[test]
    fn probes_add_a_constant_only_when_on() {
        let t = Tuning { prefetch: true, max_groups: None, pipe: false, stage: None, probe: 0 };
        assert!(probe_constant(&t).is_empty());
        assert_eq!(probe_constant(&Tuning { probe: 5, ..t }), vec![5]);
    }
}
