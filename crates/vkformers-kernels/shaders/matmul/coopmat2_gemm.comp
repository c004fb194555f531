#version 460
// C[b] = alpha * op(A[b]) * op(B[b]) (+ bias) (+ C[b] when BETA_ONE) on NVIDIA cooperative
// matrix 2: workgroup-scope matrices loaded straight from global memory through tensor layouts
// (the driver stages them; out-of-range elements read as 0, so any M, N, K works), f16 or bf16
// operands, f32 accumulation, f32 C (or, flags bit 2, C in the operand type: each f32 result
// rounded to nearest even in integer code as the cast kernels round, then converted, which is
// exact). Same operand conventions as coopmat_gemm.comp:
//   A not transposed: A[m, k] at a_off + m*lda + k;   transposed (stored K x M): at a_off + k*lda + m.
//   B not transposed: B[k, n] at b_off + k*ldb + n;   transposed (stored N x K): at b_off + n*ldb + k.
// One workgroup computes a BM x BN block of C, stepping through K in BK slices.
//
// Two refinements, each a specialization constant so they can be measured apart:
// - FAST: a block lying wholly inside C, with K a multiple of BK and every stride and offset a
//   multiple of 8 elements (16 bytes), loads through layouts without clamping and with strides
//   the compiler can see are 16-byte multiples (`& ~7u` is a no-op on the values but tells it),
//   so the driver may use vector loads; the K loop is unrolled UNROLL slices at a time.
// - RASTER: blocks are visited in groups of RASTER block-rows (column by column inside a
//   group), so the workgroups resident at once share A rows and B columns in L2 instead of
//   sweeping all of B for every block-row.
//
// Switches (0 compiles the plain kernel; static strides are the launcher's default for large
// products, gemm_coopmat.rs `static_strides_by_size`; VEC16 is bench-only):
// - SLDA/SLDB/SLDC (static strides): NVIDIA's cm2 sample specialises its strides. Nonzero, they
//   replace lda/ldb in the FAST path's layouts and ldc in C's, so the driver compiles constant
//   strides; the launcher passes the call's own values (one pipeline per stride triple), never a
//   value that differs from the push block's. SDIMS (with them) also gives the FAST path's
//   layouts constant dimensions (rows 2^30, columns the stride), so the whole layout is constant
//   as in the sample, whose M/N/K are constants: the fast path's layouts do not clamp, so their
//   dimensions only set the implicit stride, which is the same.
// - VEC16: the FAST path loads A and B through `uvec4 v[]` pointers (16-byte element type, base
//   known 16-byte aligned) as NVIDIA's sample does. Per GLSL_NV_cooperative_matrix2, the layout's
//   index is in units of the matrix component (bf16/f16: strides unchanged) and is a byte offset
//   from &buf[elementOffset], elementOffset in units of the array element: a_off / 8. The launcher
//   sets it only when both pointers, offsets, batch strides and lda/ldb are 16-byte aligned.
// - STAGED (variants *_staged, engine coopmat2-staged): the FAST path copies each BM x BK slice of
//   A and BK x BN of B itself: global -> registers (uvec4, issued one slice ahead) -> shared
//   memory (two buffers, rows padded by 8 elements against bank conflicts), and loads the
//   workgroup-scope matrices from shared memory with coopMatLoadTensorNV. 128 x 128, BK = 32:
//   2 x (10 + 10) KiB of shared memory (each buffer sized for either storage order). Edge
//   blocks keep the clamped path.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
// variant: f16 ELEM_F16 BM=128 BN=128 BK=32
// variant: bf16 ELEM_BF16 BM=128 BN=128 BK=32
// variant: f16_wide ELEM_F16 BM=128 BN=256 BK=32
// variant: bf16_wide ELEM_BF16 BM=128 BN=256 BK=32
// variant: f16_wide64 ELEM_F16 BM=128 BN=256 BK=64
// variant: bf16_wide64 ELEM_BF16 BM=128 BN=256 BK=64
// variant: f16_tall64 ELEM_F16 BM=256 BN=128 BK=64
// variant: bf16_tall64 ELEM_BF16 BM=256 BN=128 BK=64
// variant: f16_wide16 ELEM_F16 BM=128 BN=256 BK=16
// variant: bf16_wide16 ELEM_BF16 BM=128 BN=256 BK=16
// variant: f16_small ELEM_F16 BM=64 BN=128 BK=32
// variant: bf16_small ELEM_BF16 BM=64 BN=128 BK=32
// variant: f16_small64 ELEM_F16 BM=64 BN=128 BK=64
// variant: bf16_small64 ELEM_BF16 BM=64 BN=128 BK=64
// variant: f16_tall ELEM_F16 BM=256 BN=128 BK=32
// variant: bf16_tall ELEM_BF16 BM=256 BN=128 BK=32
// variant: f16_t128 ELEM_F16 BM=128 BN=128 BK=32 THREADS=128
// variant: bf16_t128 ELEM_BF16 BM=128 BN=128 BK=32 THREADS=128
// variant: f16_t128k64 ELEM_F16 BM=128 BN=128 BK=64 THREADS=128
// variant: bf16_t128k64 ELEM_BF16 BM=128 BN=128 BK=64 THREADS=128
// variant: f16_skinny64 ELEM_F16 BM=64 BN=64 BK=64 THREADS=128
// variant: bf16_skinny64 ELEM_BF16 BM=64 BN=64 BK=64 THREADS=128
// variant: f16_skinny32 ELEM_F16 BM=64 BN=32 BK=64 THREADS=128
// variant: bf16_skinny32 ELEM_BF16 BM=64 BN=32 BK=64 THREADS=128
// variant: f16_staged ELEM_F16 BM=128 BN=128 BK=32 THREADS=128 STAGED
// variant: bf16_staged ELEM_BF16 BM=128 BN=128 BK=32 THREADS=128 STAGED
// (THREADS: invocations per workgroup, 256 unless given; 128 gives each invocation twice the
// accumulator registers and may let more workgroups share a multiprocessor.)
#ifdef ELEM_BF16
#extension GL_EXT_bfloat16 : require
#define ELEM bfloat16_t
#else
#define ELEM float16_t
#endif
#include "common.glsl"
#include "half_bits.glsl"

layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer EIn { ELEM v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer EBuf { ELEM v[]; };
// A or B as 16-byte elements (VEC16, STAGED): only for 16-byte aligned pointers.
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4In { uvec4 v[]; };

#ifndef THREADS
#define THREADS 256
#endif
layout(local_size_x = THREADS) in;
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint FAST = 1;
layout(constant_id = 3) const uint RASTER = 1;
layout(constant_id = 4) const uint UNROLL = 4;
// Experiments (see the header): 0 keeps the push-constant stride / the ELEM pointers.
layout(constant_id = 5) const uint SLDA = 0;
layout(constant_id = 6) const uint SLDB = 0;
layout(constant_id = 7) const uint SLDC = 0;
layout(constant_id = 8) const uint VEC16 = 0;
layout(constant_id = 9) const uint SDIMS = 0;

layout(push_constant) uniform Push {
    EIn a;
    EIn b;
    F32Buf c;
    F32In bias;
    uint M, N, K;
    uint lda, ldb, ldc;
    uint a_off, b_off, c_off;
    uint a_bstride, b_bstride, c_bstride;
    uint flags;  // bit 0: add bias[n]; bit 1: beta = 1 (accumulate into C); bit 2: C in ELEM
    float alpha;
} pc;

// x rounded to ELEM (to nearest even, NaN quieted as bf16_code / f16_code do), as an f32 that
// ELEM holds exactly: the conversion after it cannot round again, whatever the device's mode.
float round_to_elem(const in uint32_t r, const in uint32_t c, const in float x) {
#ifdef ELEM_BF16
    return uintBitsToFloat(bf16_code(x) << 16);
#else
    return unpackHalf2x16(f16_code(x)).x;
#endif
}

#define MAT_A coopmat<ELEM, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<ELEM, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

// The block (row, column) of C this workgroup computes: grid (x = column blocks, y = row
// blocks) renumbered so consecutive workgroups walk down a group of RASTER block-rows.
uvec2 block_of_workgroup() {
    uint cols = gl_NumWorkGroups.x, rows = gl_NumWorkGroups.y;
    if (RASTER <= 1) {
        return uvec2(gl_WorkGroupID.y, gl_WorkGroupID.x);
    }
    uint id = gl_WorkGroupID.y * cols + gl_WorkGroupID.x;
    uint group = id / (RASTER * cols);
    uint first = group * RASTER;
    uint height = min(rows - first, RASTER);
    uint inside = id - group * RASTER * cols;
    return uvec2(first + inside % height, inside / height);
}

// Loads the BK-slice of A and B at k0 through the layouts la, lb (storage order, strides set)
// from the element pointers pa, pb (ELEM or, VEC16, uvec4 arrays; aoff, boff in their units).
#define LOAD_AB_P(pa, pb, la, lb, ma, mb, k0, aoff, boff)                                         \
    if (TRANS_A == 0)                                                                           \
        coopMatLoadTensorNV(ma, pa, aoff, sliceTensorLayoutNV(la, m0, BM, k0, BK));             \
    else                                                                                        \
        coopMatLoadTensorNV(ma, pa, aoff, sliceTensorLayoutNV(la, k0, BK, m0, BM), transposed);  \
    if (TRANS_B == 0)                                                                           \
        coopMatLoadTensorNV(mb, pb, boff, sliceTensorLayoutNV(lb, k0, BK, n0, BN));             \
    else                                                                                        \
        coopMatLoadTensorNV(mb, pb, boff, sliceTensorLayoutNV(lb, n0, BN, k0, BK), transposed);
#define LOAD_AB(la, lb, ma, mb, k0, aoff, boff) LOAD_AB_P(pc.a.v, pc.b.v, la, lb, ma, mb, k0, aoff, boff)
// The FAST path's loads: VEC16 (a specialization constant, so the branch is resolved when the
// pipeline is created) reads through the uvec4 pointers with offsets in 16-byte units.
#define LOAD_AB_FAST(la, lb, ma, mb, k0, aoff, boff)                                              \
    if (VEC16 != 0) {                                                                           \
        LOAD_AB_P(V4In(uint64_t(pc.a)).v, V4In(uint64_t(pc.b)).v, la, lb, ma, mb, k0, aoff >> 3, boff >> 3) \
    } else {                                                                                    \
        LOAD_AB(la, lb, ma, mb, k0, aoff, boff)                                                 \
    }

#define SET_DIMS(la, lb)                                                                        \
    la = TRANS_A == 0 ? setTensorLayoutDimensionNV(la, pc.M, pc.K) : setTensorLayoutDimensionNV(la, pc.K, pc.M); \
    lb = TRANS_B == 0 ? setTensorLayoutDimensionNV(lb, pc.K, pc.N) : setTensorLayoutDimensionNV(lb, pc.N, pc.K);

#ifdef STAGED
// Hand-staged K loop of the FAST path. A slice is stored as it lies in memory: A is BM rows of
// BK (TRANS_A: BK rows of BM), B is BK rows of BN (TRANS_B: BN rows of BK); each row padded by
// SPAD elements in shared memory so that the rows of an 8 x 16-byte fetch fall in distinct banks.
#define SPAD 8
#define A_R (TRANS_A == 0 ? BM : BK)
#define A_C (TRANS_A == 0 ? BK : BM)
#define B_R (TRANS_B == 0 ? BK : BN)
#define B_C (TRANS_B == 0 ? BN : BK)
// One buffer of a slice in uvec4 (8 elements), the larger of its two storage orders.
const uint A_V4 = max(BM * (BK + SPAD), BK * (BM + SPAD)) / 8;
const uint B_V4 = max(BN * (BK + SPAD), BK * (BN + SPAD)) / 8;
// uvec4 copies per invocation per slice.
const uint NA = BM * BK / 8 / THREADS, NB = BK * BN / 8 / THREADS;
shared uvec4 sh_a[2 * A_V4];
shared uvec4 sh_b[2 * B_V4];

// Global -> registers: this invocation's uvec4s of the slice at k0 (issued a slice ahead).
#define STAGE_FETCH(k0)                                                                         \
    [[unroll]] for (uint i = 0; i < NA; ++i) {                                                  \
        uint idx = i * THREADS + gl_LocalInvocationIndex;                                       \
        uint r = idx / (A_C / 8), c4 = idx % (A_C / 8);                                         \
        uint row = (TRANS_A == 0 ? m0 : (k0)) + r, col = TRANS_A == 0 ? (k0) : m0;                 \
        ra[i] = ga.v[(aoff + row * lda_f + col) / 8 + c4];                                      \
    }                                                                                           \
    [[unroll]] for (uint i = 0; i < NB; ++i) {                                                  \
        uint idx = i * THREADS + gl_LocalInvocationIndex;                                       \
        uint r = idx / (B_C / 8), c4 = idx % (B_C / 8);                                         \
        uint row = (TRANS_B == 0 ? (k0) : n0) + r, col = TRANS_B == 0 ? n0 : (k0);                 \
        rb[i] = gb.v[(boff + row * ldb_f + col) / 8 + c4];                                      \
    }

// Registers -> shared buffer `stage`.
#define STAGE_STORE(stage)                                                                      \
    [[unroll]] for (uint i = 0; i < NA; ++i) {                                                  \
        uint idx = i * THREADS + gl_LocalInvocationIndex;                                       \
        uint r = idx / (A_C / 8), c4 = idx % (A_C / 8);                                         \
        sh_a[(stage) * A_V4 + r * ((A_C + SPAD) / 8) + c4] = ra[i];                             \
    }                                                                                           \
    [[unroll]] for (uint i = 0; i < NB; ++i) {                                                  \
        uint idx = i * THREADS + gl_LocalInvocationIndex;                                       \
        uint r = idx / (B_C / 8), c4 = idx % (B_C / 8);                                         \
        sh_b[(stage) * B_V4 + r * ((B_C + SPAD) / 8) + c4] = rb[i];                             \
    }

// Slice k0 is fetched while slice k0 - BK is multiplied from shared memory; one barrier a slice
// (the buffer written at step i was last read at step i - 1, before that step's barrier).
#define STAGED_K_LOOP                                                                           \
    V4In ga = V4In(uint64_t(pc.a)), gb = V4In(uint64_t(pc.b));                                  \
    uvec4 ra[NA], rb[NB];                                                                       \
    tensorLayoutNV<2> las = createTensorLayoutNV(2);                                            \
    tensorLayoutNV<2> lbs = createTensorLayoutNV(2);                                            \
    las = setTensorLayoutDimensionNV(las, A_R, A_C);                                            \
    las = setTensorLayoutStrideNV(las, A_C + SPAD, 1);                                          \
    lbs = setTensorLayoutDimensionNV(lbs, B_R, B_C);                                            \
    lbs = setTensorLayoutStrideNV(lbs, B_C + SPAD, 1);                                          \
    STAGE_FETCH(0u)                                                                             \
    STAGE_STORE(0u)                                                                             \
    barrier();                                                                                  \
    uint stage = 0;                                                                             \
    [[dont_unroll]] for (uint k0 = 0; k0 < pc.K; k0 += BK) {                                    \
        bool more = k0 + BK < pc.K;                                                             \
        if (more) {                                                                             \
            STAGE_FETCH(k0 + BK)                                                                \
        }                                                                                       \
        MAT_A ma;                                                                               \
        MAT_B mb;                                                                               \
        if (TRANS_A == 0)                                                                       \
            coopMatLoadTensorNV(ma, sh_a, stage * A_V4, sliceTensorLayoutNV(las, 0, BM, 0, BK)); \
        else                                                                                    \
            coopMatLoadTensorNV(ma, sh_a, stage * A_V4, sliceTensorLayoutNV(las, 0, BK, 0, BM), transposed); \
        if (TRANS_B == 0)                                                                       \
            coopMatLoadTensorNV(mb, sh_b, stage * B_V4, sliceTensorLayoutNV(lbs, 0, BK, 0, BN)); \
        else                                                                                    \
            coopMatLoadTensorNV(mb, sh_b, stage * B_V4, sliceTensorLayoutNV(lbs, 0, BN, 0, BK), transposed); \
        acc = coopMatMulAdd(ma, mb, acc);                                                       \
        if (more) {                                                                             \
            STAGE_STORE(stage ^ 1u)                                                             \
        }                                                                                       \
        barrier();                                                                              \
        stage ^= 1u;                                                                            \
    }
#endif

void main() {
    uint batch = gl_WorkGroupID.z;
    uvec2 blk = block_of_workgroup();
    uint m0 = blk.x * BM, n0 = blk.y * BN;
    uint a_off = pc.a_off + batch * pc.a_bstride, b_off = pc.b_off + batch * pc.b_bstride;
    uint c_off = pc.c_off + batch * pc.c_bstride;
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    ACC acc = ACC(0.0);

    bool aligned = ((pc.lda | pc.ldb | a_off | b_off) & 7u) == 0;
#ifdef STAGED
    // The staged copies read A and B as uvec4: their pointers must be 16-byte aligned too.
    aligned = aligned && ((uint(uint64_t(pc.a)) | uint(uint64_t(pc.b))) & 15u) == 0;
#endif
    bool interior = m0 + BM <= pc.M && n0 + BN <= pc.N && pc.K % BK == 0;
    if (FAST != 0 && aligned && interior) {
        // Strides: the specialised ones where the launcher gave them (static strides), else the
        // push block's, masked so the compiler sees 16-byte multiples.
        uint lda_f = SLDA != 0 ? SLDA : pc.lda & ~7u;
        uint ldb_f = SLDB != 0 ? SLDB : pc.ldb & ~7u;
        uint aoff = a_off & ~7u, boff = b_off & ~7u;
#ifdef STAGED
        STAGED_K_LOOP
#else
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        SET_DIMS(la, lb)
        if (SDIMS != 0 && SLDA != 0 && SLDB != 0) {
            // Constant dimensions (no clamping here: rows only bound the accesses, columns = stride).
            la = setTensorLayoutDimensionNV(la, 1u << 30, SLDA);
            lb = setTensorLayoutDimensionNV(lb, 1u << 30, SLDB);
        }
        la = setTensorLayoutStrideNV(la, lda_f, 1);
        lb = setTensorLayoutStrideNV(lb, ldb_f, 1);
        uint k0 = 0;
        uint unrolled_end = pc.K - pc.K % (BK * UNROLL);
        [[dont_unroll]] for (; k0 < unrolled_end; k0 += BK * UNROLL) {
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                MAT_A ma;
                MAT_B mb;
                LOAD_AB_FAST(la, lb, ma, mb, k0 + u * BK, aoff, boff)
                acc = coopMatMulAdd(ma, mb, acc);
            }
        }
        [[dont_unroll]] for (; k0 < pc.K; k0 += BK) {
            MAT_A ma;
            MAT_B mb;
            LOAD_AB_FAST(la, lb, ma, mb, k0, aoff, boff)
            acc = coopMatMulAdd(ma, mb, acc);
        }
#endif
    } else {
        // Edge blocks (and unaligned operands): clamp-to-zero layouts make any M, N, K work.
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        SET_DIMS(la, lb)
        la = setTensorLayoutStrideNV(la, pc.lda, 1);
        lb = setTensorLayoutStrideNV(lb, pc.ldb, 1);
        [[dont_unroll]] for (uint k0 = 0; k0 < pc.K; k0 += BK) {
            MAT_A ma;
            MAT_B mb;
            LOAD_AB(la, lb, ma, mb, k0, a_off, b_off)
            acc = coopMatMulAdd(ma, mb, acc);
        }
    }
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lc = setTensorLayoutDimensionNV(lc, pc.M, pc.N);
    lc = setTensorLayoutStrideNV(lc, SLDC != 0 ? SLDC : pc.ldc, 1);

    // Epilogue: C = alpha * acc (+ bias broadcast over rows) (+ C).
    acc = acc * pc.alpha;
    if ((pc.flags & 1u) != 0) {
        // A row-stride-0 layout repeats bias[n] on every row.
        tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lbias = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
        lbias = setTensorLayoutDimensionNV(lbias, pc.M, pc.N);
        lbias = setTensorLayoutStrideNV(lbias, 0, 1);
        ACC mbias;
        coopMatLoadTensorNV(mbias, pc.bias.v, 0, sliceTensorLayoutNV(lbias, m0, BM, n0, BN));
        acc = acc + mbias;
    }
    if ((pc.flags & 2u) != 0) {
        ACC old;
        coopMatLoadTensorNV(old, pc.c.v, c_off, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
        acc = acc + old;
    }
    if ((pc.flags & 4u) != 0) {
        coopMatPerElementNV(acc, acc, round_to_elem);
        coopmat<ELEM, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> c16 =
            coopmat<ELEM, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
        coopMatStoreTensorNV(c16, EBuf(uint64_t(pc.c)).v, c_off, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    } else {
        coopMatStoreTensorNV(acc, pc.c.v, c_off, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
    }
}
