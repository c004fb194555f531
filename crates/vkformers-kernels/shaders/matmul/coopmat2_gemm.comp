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

#ifndef THREADS
#define THREADS 256
#endif
layout(local_size_x = THREADS) in;
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint FAST = 1;
layout(constant_id = 3) const uint RASTER = 1;
layout(constant_id = 4) const uint UNROLL = 4;

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

// Loads the BK-slice of A and B at k0 through the layouts la, lb (storage order, strides set).
#define LOAD_AB(la, lb, ma, mb, k0, aoff, boff)                                                   \
    if (TRANS_A == 0)                                                                           \
        coopMatLoadTensorNV(ma, pc.a.v, aoff, sliceTensorLayoutNV(la, m0, BM, k0, BK));         \
    else                                                                                        \
        coopMatLoadTensorNV(ma, pc.a.v, aoff, sliceTensorLayoutNV(la, k0, BK, m0, BM), transposed); \
    if (TRANS_B == 0)                                                                           \
        coopMatLoadTensorNV(mb, pc.b.v, boff, sliceTensorLayoutNV(lb, k0, BK, n0, BN));         \
    else                                                                                        \
        coopMatLoadTensorNV(mb, pc.b.v, boff, sliceTensorLayoutNV(lb, n0, BN, k0, BK), transposed);

#define SET_DIMS(la, lb)                                                                        \
    la = TRANS_A == 0 ? setTensorLayoutDimensionNV(la, pc.M, pc.K) : setTensorLayoutDimensionNV(la, pc.K, pc.M); \
    lb = TRANS_B == 0 ? setTensorLayoutDimensionNV(lb, pc.K, pc.N) : setTensorLayoutDimensionNV(lb, pc.N, pc.K);

void main() {
    uint batch = gl_WorkGroupID.z;
    uvec2 blk = block_of_workgroup();
    uint m0 = blk.x * BM, n0 = blk.y * BN;
    uint a_off = pc.a_off + batch * pc.a_bstride, b_off = pc.b_off + batch * pc.b_bstride;
    uint c_off = pc.c_off + batch * pc.c_bstride;
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    ACC acc = ACC(0.0);

    bool aligned = ((pc.lda | pc.ldb | a_off | b_off) & 7u) == 0;
    bool interior = m0 + BM <= pc.M && n0 + BN <= pc.N && pc.K % BK == 0;
    if (FAST != 0 && aligned && interior) {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        SET_DIMS(la, lb)
        la = setTensorLayoutStrideNV(la, pc.lda & ~7u, 1);
        lb = setTensorLayoutStrideNV(lb, pc.ldb & ~7u, 1);
        uint aoff = a_off & ~7u, boff = b_off & ~7u;
        uint k0 = 0;
        uint unrolled_end = pc.K - pc.K % (BK * UNROLL);
        [[dont_unroll]] for (; k0 < unrolled_end; k0 += BK * UNROLL) {
            [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
                MAT_A ma;
                MAT_B mb;
                LOAD_AB(la, lb, ma, mb, k0 + u * BK, aoff, boff)
                acc = coopMatMulAdd(ma, mb, acc);
            }
        }
        [[dont_unroll]] for (; k0 < pc.K; k0 += BK) {
            MAT_A ma;
            MAT_B mb;
            LOAD_AB(la, lb, ma, mb, k0, aoff, boff)
            acc = coopMatMulAdd(ma, mb, acc);
        }
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
    lc = setTensorLayoutStrideNV(lc, pc.ldc, 1);

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
