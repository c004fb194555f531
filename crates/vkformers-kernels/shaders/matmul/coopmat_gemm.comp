#version 460
// C[b] = alpha * op(A[b]) * op(B[b]) (+ bias) (+ C[b] when BETA_ONE), with f16 or bf16 operands,
// f32 accumulation on the tensor cores (VK_KHR_cooperative_matrix, 16x16x16 subgroup tiles), and
// an f32 C (or, flags bit 2, C in the operand type: each f32 result rounded to nearest even as
// the cast kernels round).
//
// Shapes (elements): op(A) is M x K, op(B) is K x N, C is M x N (row-major, row stride ldc).
//   A not transposed: A[m, k] at a_off + m*lda + k;   transposed (stored K x M): at a_off + k*lda + m.
//   B not transposed: B[k, n] at b_off + k*ldb + n;   transposed (stored N x K): at b_off + n*ldb + k.
// Batch b adds b * {a,b,c}_bstride (0 broadcasts an operand).
//
// Design: one workgroup of 256 invocations (8 subgroups of 32) computes a 128 x 128 block of C.
// Each K step stages a 128 x 32 slice of A and a 32 x 128 slice of B in shared memory, in the
// operand's own global layout (so global reads are contiguous 8-byte vectors, and the fragment
// loads pick row- or column-major), while the next slice is already being read into registers
// (16-byte vectors of 8 elements; shared memory holds raw bits as uvec4, the fragment loads
// reinterpret them as f16/bf16).
// The 8 subgroups form a 2 x 4 grid; each owns 64 x 32 of C = 4 x 2 accumulator fragments.
// The epilogue stages each fragment through shared memory so that edges, alpha, bias and beta
// are handled per element. Requirements (checked by the launcher): subgroup size 32; lda, ldb,
// a_off, b_off and the A/B batch strides multiples of 8.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
// variant: f16 ELEM_F16
// variant: bf16 ELEM_BF16
#ifdef ELEM_BF16
#extension GL_EXT_bfloat16 : require
#define ELEM bfloat16_t
#else
#define ELEM float16_t
#endif
#include "common.glsl"
#include "half_bits.glsl"

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4In { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Buf { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer U16In { uint16_t v[]; };

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
// Bench-only cost probes (`bench gemm --probe`; the result is not the product): bit 0 loads the
// fragments straight from global memory (no staging; A and B not transposed), bit 1 skips the
// global fetch of later slices, bit 2 drops the barriers. On the H200 every probe ran at 32-39
// TFLOP/s like the kernel itself (36) while chained multiply-adds on fragments loaded once run
// at 633 (`bench mma-peak`): per-slice fragment loads, from shared or global memory alike, are
// what is slow on that driver, so the cm2 kernel is the one chosen there.
layout(constant_id = 2) const uint PROBE = 0;
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer EIn { ELEM v[]; };

layout(push_constant) uniform Push {
    U4In a;
    U4In b;
    F32Buf c;
    F32In bias;
    uint M, N, K;
    uint lda, ldb, ldc;
    uint a_off, b_off, c_off;
    uint a_bstride, b_bstride, c_bstride;
    uint flags;  // bit 0: add bias[n]; bit 1: beta = 1 (accumulate into C); bit 2: C in ELEM
    float alpha;
} pc;

const uint BM = 128, BN = 128, BK = 32, PAD = 8;
const uint TM = 16, TN = 16, TK = 16;
const uint WM = 64, WN = 32;            // per-subgroup block of C
const uint FM = WM / TM, FN = WN / TN;  // fragments per subgroup: 4 x 2
const uint E = 8;                       // 16-bit elements per uvec4
// Shared tiles hold raw 16-bit elements, 8 per uvec4, rows padded by 8 elements (16 bytes) so
// that each fragment row starts 16-byte aligned and consecutive rows fall in different banks.
// A slice: 128 x (32+8) stored m-major, or 32 x (128+8) stored k-major: sized for the larger.
const uint A_VECS = BM * (BK + PAD) / E;
const uint B_VECS = BN * (BK + PAD) / E;
shared uvec4 sh_a[A_VECS];
shared uvec4 sh_b[B_VECS];
shared float sh_out[8][TM * TN];

// Each thread moves 2 vectors of A and 2 of B per K step (512 vectors = 4096 elements each).
const uint VEC_PER_THREAD = BM * BK / E / 256;
uvec4 reg_a[VEC_PER_THREAD];
uvec4 reg_b[VEC_PER_THREAD];

// Reads the 8 elements at (r, c..c+7) of a row-major global matrix (rows < R, cols < C) as one
// 16-byte vector when all are inside, else element by element with zeros outside.
uvec4 load8(uint64_t base, uint off, uint ld, uint r, uint c, uint R, uint C) {
    if (r >= R || c >= C) return uvec4(0);
    uint idx = off + r * ld + c;
    if (c + E <= C) return U4In(base).v[idx / E];
    U16In s = U16In(base);
    uint h[8] = uint[8](0, 0, 0, 0, 0, 0, 0, 0);
    [[unroll]] for (uint i = 0; i < E; i++) {
        if (c + i < C) h[i] = uint(s.v[idx + i]);
    }
    return uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16), h[6] | (h[7] << 16));
}

// Global -> registers for the K slice starting at k0. Tile geometry in the operand's layout:
// rows x cols with `cols` contiguous; vector v sits at (v / (cols/8), 8 * (v % (cols/8))).
void fetch(uint k0, uint m0, uint n0, uint64_t a_base, uint a_off, uint64_t b_base, uint b_off) {
    [[unroll]] for (uint i = 0; i < VEC_PER_THREAD; i++) {
        uint v = gl_LocalInvocationIndex + i * 256;
        if (TRANS_A == 0) {  // tile BM x BK, k contiguous
            uint r = v / (BK / E), c = E * (v % (BK / E));
            reg_a[i] = load8(a_base, a_off, pc.lda, m0 + r, k0 + c, pc.M, pc.K);
        } else {  // tile BK x BM, m contiguous
            uint r = v / (BM / E), c = E * (v % (BM / E));
            reg_a[i] = load8(a_base, a_off, pc.lda, k0 + r, m0 + c, pc.K, pc.M);
        }
        if (TRANS_B == 0) {  // tile BK x BN, n contiguous
            uint r = v / (BN / E), c = E * (v % (BN / E));
            reg_b[i] = load8(b_base, b_off, pc.ldb, k0 + r, n0 + c, pc.K, pc.N);
        } else {  // tile BN x BK, k contiguous
            uint r = v / (BK / E), c = E * (v % (BK / E));
            reg_b[i] = load8(b_base, b_off, pc.ldb, n0 + r, k0 + c, pc.N, pc.K);
        }
    }
}

// Registers -> shared, with the padded row strides used by the fragment loads.
void stash() {
    [[unroll]] for (uint i = 0; i < VEC_PER_THREAD; i++) {
        uint v = gl_LocalInvocationIndex + i * 256;
        if (TRANS_A == 0) {
            sh_a[(v / (BK / E)) * ((BK + PAD) / E) + v % (BK / E)] = reg_a[i];
        } else {
            sh_a[(v / (BM / E)) * ((BM + PAD) / E) + v % (BM / E)] = reg_a[i];
        }
        if (TRANS_B == 0) {
            sh_b[(v / (BN / E)) * ((BN + PAD) / E) + v % (BN / E)] = reg_b[i];
        } else {
            sh_b[(v / (BK / E)) * ((BK + PAD) / E) + v % (BK / E)] = reg_b[i];
        }
    }
}

void main() {
    uint batch = gl_WorkGroupID.z;
    uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
    uint sg = gl_SubgroupID;
    uint wm = (sg / (BN / WN)) * WM, wn = (sg % (BN / WN)) * WN;
    uint64_t a_base = uint64_t(pc.a), b_base = uint64_t(pc.b);
    uint a_off = pc.a_off + batch * pc.a_bstride, b_off = pc.b_off + batch * pc.b_bstride;

    coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> acc[FM][FN];
    [[unroll]] for (uint i = 0; i < FM; i++)
        [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);

    fetch(0, m0, n0, a_base, a_off, b_base, b_off);
    for (uint k0 = 0; k0 < pc.K; k0 += BK) {
        if ((PROBE & 1u) != 0) {
            [[unroll]] for (uint kk = 0; kk < BK; kk += TK) {
                coopmat<ELEM, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> ga[FM];
                coopmat<ELEM, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> gb[FN];
                [[unroll]] for (uint i = 0; i < FM; i++)
                    coopMatLoad(ga[i], EIn(a_base).v, a_off + (m0 + wm + i * TM) * pc.lda + k0 + kk, pc.lda, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint j = 0; j < FN; j++)
                    coopMatLoad(gb[j], EIn(b_base).v, b_off + (k0 + kk) * pc.ldb + n0 + wn + j * TN, pc.ldb, gl_CooperativeMatrixLayoutRowMajor);
                [[unroll]] for (uint i = 0; i < FM; i++)
                    [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopMatMulAdd(ga[i], gb[j], acc[i][j]);
            }
            continue;
        }
        stash();
        if ((PROBE & 4u) == 0) barrier();
        if (k0 + BK < pc.K && (PROBE & 2u) == 0) fetch(k0 + BK, m0, n0, a_base, a_off, b_base, b_off);
        [[unroll]] for (uint kk = 0; kk < BK; kk += TK) {
            coopmat<ELEM, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> fa[FM];
            coopmat<ELEM, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> fb[FN];
            [[unroll]] for (uint i = 0; i < FM; i++) {
                uint m = wm + i * TM;
                if (TRANS_A == 0)
                    coopMatLoad(fa[i], sh_a, (m * (BK + PAD) + kk) / E, (BK + PAD) / E, gl_CooperativeMatrixLayoutRowMajor);
                else
                    coopMatLoad(fa[i], sh_a, (kk * (BM + PAD) + m) / E, (BM + PAD) / E, gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint j = 0; j < FN; j++) {
                uint n = wn + j * TN;
                if (TRANS_B == 0)
                    coopMatLoad(fb[j], sh_b, (kk * (BN + PAD) + n) / E, (BN + PAD) / E, gl_CooperativeMatrixLayoutRowMajor);
                else
                    coopMatLoad(fb[j], sh_b, (n * (BK + PAD) + kk) / E, (BK + PAD) / E, gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint i = 0; i < FM; i++)
                [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
        }
        if ((PROBE & 4u) == 0) barrier();
    }

    // Epilogue: C = alpha * acc (+ bias[n]) (+ C), element by element inside the matrix.
    bool has_bias = (pc.flags & 1u) != 0, beta_one = (pc.flags & 2u) != 0, c_half = (pc.flags & 4u) != 0;
    uint c_off = pc.c_off + batch * pc.c_bstride;
    [[unroll]] for (uint i = 0; i < FM; i++) {
        [[unroll]] for (uint j = 0; j < FN; j++) {
            coopMatStore(acc[i][j], sh_out[sg], 0, TN, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = gl_SubgroupInvocationID; e < TM * TN; e += gl_SubgroupSize) {
                uint m = m0 + wm + i * TM + e / TN, n = n0 + wn + j * TN + e % TN;
                if (m < pc.M && n < pc.N) {
                    float val = pc.alpha * sh_out[sg][e];
                    if (has_bias) val += pc.bias.v[n];
                    uint idx = c_off + m * pc.ldc + n;
                    if (beta_one) val += pc.c.v[idx];
                    if (c_half) {
#ifdef ELEM_BF16
                        U16Buf(uint64_t(pc.c)).v[idx] = uint16_t(bf16_code(val));
#else
                        U16Buf(uint64_t(pc.c)).v[idx] = uint16_t(f16_code(val));
#endif
                    } else {
                        pc.c.v[idx] = val;
                    }
                }
            }
            subgroupBarrier();
        }
    }
}
