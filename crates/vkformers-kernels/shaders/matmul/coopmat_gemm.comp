#version 460
// C[b] = alpha * op(A[b]) * op(B[b]) (+ bias) (+ C[b] when BETA_ONE), with f16 or bf16 operands,
// f32 accumulation on the tensor cores (VK_KHR_cooperative_matrix, 16x16x16 subgroup tiles), and
// an f32 C.
//
// Shapes (elements): op(A) is M x K, op(B) is K x N, C is M x N (row-major, row stride ldc).
//   A not transposed: A[m, k] at a_off + m*lda + k;   transposed (stored K x M): at a_off + k*lda + m.
//   B not transposed: B[k, n] at b_off + k*ldb + n;   transposed (stored N x K): at b_off + n*ldb + k.
// Batch b adds b * {a,b,c}_bstride (0 broadcasts an operand).
//
// Design: one workgroup of 256 invocations (8 subgroups of 32) computes a 128 x 128 block of C.
// Each K step stages a 128 x 32 slice of A and a 32 x 128 slice of B in shared memory, in the
// operand's own global layout (so global reads are contiguous 8-byte vectors, and the fragment
// loads pick row- or column-major), while the next slice is already being read into registers.
// The 8 subgroups form a 2 x 4 grid; each owns 64 x 32 of C = 4 x 2 accumulator fragments.
// The epilogue stages each fragment through shared memory so that edges, alpha, bias and beta
// are handled per element. Requirements (checked by the launcher): subgroup size 32; lda, ldb,
// a_off, b_off multiples of 4.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
// variant: f16 ELEM_F16
// variant: bf16 ELEM_BF16
#ifdef ELEM_BF16
#extension GL_EXT_bfloat16 : require
#define ELEM bfloat16_t
#define ELEMV4 bf16vec4
#else
#define ELEM float16_t
#define ELEMV4 f16vec4
#endif
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer V4In { ELEMV4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer S1In { ELEM v[]; };

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;

layout(push_constant) uniform Push {
    V4In a;
    V4In b;
    F32Buf c;
    F32In bias;
    uint M, N, K;
    uint lda, ldb, ldc;
    uint a_off, b_off, c_off;
    uint a_bstride, b_bstride, c_bstride;
    uint flags;  // bit 0: add bias[n]; bit 1: beta = 1 (accumulate into C)
    float alpha;
} pc;

const uint BM = 128, BN = 128, BK = 32, PAD = 8;
const uint TM = 16, TN = 16, TK = 16;
const uint WM = 64, WN = 32;            // per-subgroup block of C
const uint FM = WM / TM, FN = WN / TN;  // fragments per subgroup: 4 x 2
// A slice: 128 rows x (32+8) when stored m-major, 32 x (128+8) when k-major; size for the larger.
const uint A_ELEMS = BM * (BK + PAD);
const uint B_ELEMS = BN * (BK + PAD);
shared ELEMV4 sh_a[A_ELEMS / 4];
shared ELEMV4 sh_b[B_ELEMS / 4];
shared float sh_out[8][TM * TN];

// Each thread moves 4 vectors of A and 4 of B per K step (1024 vectors = 4096 elements each).
const uint VEC_PER_THREAD = 4;
ELEMV4 reg_a[VEC_PER_THREAD];
ELEMV4 reg_b[VEC_PER_THREAD];

// Reads the 4 elements at (r, c..c+3) of a row-major global matrix (rows < R, cols < C) as one
// vector when all are inside, else element by element with zeros outside.
ELEMV4 load4(uint64_t base, uint off, uint ld, uint r, uint c, uint R, uint C) {
    if (r >= R || c >= C) return ELEMV4(ELEM(0.0));
    uint idx = off + r * ld + c;
    if (c + 4 <= C) return V4In(base).v[idx / 4];
    S1In s = S1In(base);
    ELEMV4 out4 = ELEMV4(ELEM(0.0));
    for (uint i = 0; i < 4 && c + i < C; i++) out4[i] = s.v[idx + i];
    return out4;
}

// Global -> registers for the K slice starting at k0. Tile geometry in the operand's layout:
// rows x cols with `cols` contiguous; vector v of the tile sits at (v / (cols/4), 4 * (v % (cols/4))).
void fetch(uint k0, uint m0, uint n0, uint64_t a_base, uint a_off, uint64_t b_base, uint b_off) {
    for (uint i = 0; i < VEC_PER_THREAD; i++) {
        uint v = gl_LocalInvocationIndex + i * 256;
        if (TRANS_A == 0) {  // tile BM x BK, k contiguous
            uint r = v / (BK / 4), c = 4 * (v % (BK / 4));
            reg_a[i] = load4(a_base, a_off, pc.lda, m0 + r, k0 + c, pc.M, pc.K);
        } else {  // tile BK x BM, m contiguous
            uint r = v / (BM / 4), c = 4 * (v % (BM / 4));
            reg_a[i] = load4(a_base, a_off, pc.lda, k0 + r, m0 + c, pc.K, pc.M);
        }
        if (TRANS_B == 0) {  // tile BK x BN, n contiguous
            uint r = v / (BN / 4), c = 4 * (v % (BN / 4));
            reg_b[i] = load4(b_base, b_off, pc.ldb, k0 + r, n0 + c, pc.K, pc.N);
        } else {  // tile BN x BK, k contiguous
            uint r = v / (BK / 4), c = 4 * (v % (BK / 4));
            reg_b[i] = load4(b_base, b_off, pc.ldb, n0 + r, k0 + c, pc.N, pc.K);
        }
    }
}

// Registers -> shared, with the padded row strides used by the fragment loads.
void stash() {
    for (uint i = 0; i < VEC_PER_THREAD; i++) {
        uint v = gl_LocalInvocationIndex + i * 256;
        if (TRANS_A == 0) {
            uint r = v / (BK / 4), c4 = v % (BK / 4);
            sh_a[r * ((BK + PAD) / 4) + c4] = reg_a[i];
        } else {
            uint r = v / (BM / 4), c4 = v % (BM / 4);
            sh_a[r * ((BM + PAD) / 4) + c4] = reg_a[i];
        }
        if (TRANS_B == 0) {
            uint r = v / (BN / 4), c4 = v % (BN / 4);
            sh_b[r * ((BN + PAD) / 4) + c4] = reg_b[i];
        } else {
            uint r = v / (BK / 4), c4 = v % (BK / 4);
            sh_b[r * ((BK + PAD) / 4) + c4] = reg_b[i];
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
    for (uint i = 0; i < FM; i++)
        for (uint j = 0; j < FN; j++) acc[i][j] = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);

    fetch(0, m0, n0, a_base, a_off, b_base, b_off);
    for (uint k0 = 0; k0 < pc.K; k0 += BK) {
        stash();
        barrier();
        if (k0 + BK < pc.K) fetch(k0 + BK, m0, n0, a_base, a_off, b_base, b_off);
        for (uint kk = 0; kk < BK; kk += TK) {
            coopmat<ELEM, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> fa[FM];
            coopmat<ELEM, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> fb[FN];
            for (uint i = 0; i < FM; i++) {
                uint m = wm + i * TM;
                if (TRANS_A == 0)
                    coopMatLoad(fa[i], sh_a, (m * (BK + PAD) + kk) / 4, (BK + PAD) / 4, gl_CooperativeMatrixLayoutRowMajor);
                else
                    coopMatLoad(fa[i], sh_a, (kk * (BM + PAD) + m) / 4, (BM + PAD) / 4, gl_CooperativeMatrixLayoutColumnMajor);
            }
            for (uint j = 0; j < FN; j++) {
                uint n = wn + j * TN;
                if (TRANS_B == 0)
                    coopMatLoad(fb[j], sh_b, (kk * (BN + PAD) + n) / 4, (BN + PAD) / 4, gl_CooperativeMatrixLayoutRowMajor);
                else
                    coopMatLoad(fb[j], sh_b, (n * (BK + PAD) + kk) / 4, (BK + PAD) / 4, gl_CooperativeMatrixLayoutColumnMajor);
            }
            for (uint i = 0; i < FM; i++)
                for (uint j = 0; j < FN; j++) acc[i][j] = coopMatMulAdd(fa[i], fb[j], acc[i][j]);
        }
        barrier();
    }

    // Epilogue: C = alpha * acc (+ bias[n]) (+ C), element by element inside the matrix.
    bool has_bias = (pc.flags & 1u) != 0, beta_one = (pc.flags & 2u) != 0;
    uint c_off = pc.c_off + batch * pc.c_bstride;
    for (uint i = 0; i < FM; i++) {
        for (uint j = 0; j < FN; j++) {
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
                    pc.c.v[idx] = val;
                }
            }
            subgroupBarrier();
        }
    }
}
