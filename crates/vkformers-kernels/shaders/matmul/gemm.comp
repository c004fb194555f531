#version 460
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "matmul/half_c.glsl"
// Batched, strided GEMM with f32 accumulation:
//   C[b] = alpha * op(A[b]) * op(B[b]) (+ bias) (+ beta * C[b])      for b in [0, batch)
//   op(A) [M, K]: A[m,k] at  a + b*sa + m*lda + k   (TRANS_A = 0, stored [M, K])
//                        or  a + b*sa + k*lda + m   (TRANS_A = 1, stored [K, M])
//   op(B) [K, N]: B[k,n] at  b + b*sb + k*ldb + n   (TRANS_B = 0, stored [K, N])
//                        or  b + b*sb + n*ldb + k   (TRANS_B = 1, stored [N, K], x * W^T)
//   C [M, N]:     C[m,n] at  c + b*sc + m*ldc + n (f32); bias [N] (f32) added to every row.
// Batch stride 0 broadcasts an operand. beta == 0 never reads C (so it may hold NaN).
// Element offsets are folded into the pointers by the launcher, except the parity of 16-bit
// operands (flags bits 1, 2), which are read as 32-bit words holding two values.
// 16-bit C (flags bits 3-4: 1 f16, 2 bf16; beta 0): the f32 value above, rounded to nearest
// even as the cast kernels round, stored as packed words (no 16-bit storage feature needed):
// see half_c.glsl. Bit 5: C starts at an odd 16-bit element.
//
// Tiling: a workgroup of NT = (BM/TM)*(BN/TN) threads computes a BM x BN tile of C, walking K
// in steps of BK with the A and B tiles in shared memory (k-major, padded against bank
// conflicts, double-buffered: the next tile is fetched into registers during the math). Each
// thread owns a TM x TN micro-tile made of 4x4 blocks spread BM/(TM/4) rows and BN/(TN/4)
// columns apart, so that its shared-memory reads are vec4s and those of a subgroup contiguous.
// Grid: x = ceil(N/BN), y = ceil(M/BM), z = batches (grid-stride over batch).
//
// variant: f32_128x128 BM=128 BN=128 BK=8 TM=8 TN=8 IN_F32
// variant: f32_128x128k16 BM=128 BN=128 BK=16 TM=8 TN=8 PAD=0 IN_F32
// variant: f32_128x64 BM=128 BN=64 BK=16 TM=8 TN=4 IN_F32
// variant: f32_64x64 BM=64 BN=64 BK=16 TM=4 TN=4 IN_F32
// variant: f16_128x128 BM=128 BN=128 BK=8 TM=8 TN=8 IN_F16
// variant: f16_128x128k16 BM=128 BN=128 BK=16 TM=8 TN=8 PAD=0 IN_F16
// variant: f16_128x64 BM=128 BN=64 BK=16 TM=8 TN=4 IN_F16
// variant: f16_64x64 BM=64 BN=64 BK=16 TM=4 TN=4 IN_F16
// variant: bf16_128x128 BM=128 BN=128 BK=8 TM=8 TN=8 IN_BF16
// variant: bf16_128x128k16 BM=128 BN=128 BK=16 TM=8 TN=8 PAD=0 IN_BF16
// variant: bf16_128x64 BM=128 BN=64 BK=16 TM=8 TN=4 IN_BF16
// variant: bf16_64x64 BM=64 BN=64 BK=16 TM=4 TN=4 IN_BF16

// VEC (specialization constant 2): every operand offset, leading dimension and batch stride
// is a multiple of 4 elements and the pointers are aligned to 4 elements, so runs of 4
// elements along the contiguous dimension are fetched with one vector load.
#ifndef PAD
#define PAD 1
#endif
#define TX (BN / TN)
#define TY (BM / TM)
#define NT (TX * TY)
layout(local_size_x = NT) in;

layout(constant_id = 0) const uint TRANS_A = 0;
layout(constant_id = 1) const uint TRANS_B = 0;
layout(constant_id = 2) const uint VEC = 0;

#if defined(IN_F32)
#define IN_T F32In
#define ELEM_BYTES 4
float ld(F32In p, uint i) { return p.v[i]; }
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4In { vec4 v[]; };
// Elements i..i+3 (i a multiple of 4).
vec4 ld4(F32In p, uint i) { return V4In(uint64_t(p)).v[i >> 2]; }
#else
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32In { uint v[]; };
#define IN_T U32In
#define ELEM_BYTES 2
// A 16-bit value i of a packed array: word i/2, low half first.
float ld(U32In p, uint i) {
    uint w = p.v[i >> 1];
    uint h = (i & 1u) != 0u ? (w >> 16) : (w & 0xffffu);
#if defined(IN_F16)
    return unpackHalf2x16(h).x;
#else
    return uintBitsToFloat(h << 16);
#endif
}
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer V2In { uvec2 v[]; };
// Elements i..i+3 (i a multiple of 4): two words of two values each.
vec4 ld4(U32In p, uint i) {
    uvec2 w = V2In(uint64_t(p)).v[i >> 2];
#if defined(IN_F16)
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
#else
    return uintBitsToFloat(uvec4(w.x << 16, w.x & 0xffff0000u, w.y << 16, w.y & 0xffff0000u));
#endif
}
#endif

layout(push_constant) uniform Push {
    IN_T a;
    IN_T b;
    F32In bias;
    F32Buf c;
    uint M, N, K;
    uint lda, ldb, ldc;
    uint sa, sb, sc;   // batch strides in elements
    uint batch;
    float alpha, beta;
    uint flags;        // bit 0: bias; bit 1: A starts at an odd 16-bit element; bit 2: same for B;
                       // bits 3-4: C's type (0 f32, 1 f16, 2 bf16); bit 5: C starts at an odd element
} pc;

// Shared tiles, k-major: [buffer][k][mn / 4] as vec4, padded by one vec4 per k row.
shared vec4 As[2][BK][BM / 4 + PAD];
shared vec4 Bs[2][BK][BN / 4 + PAD];

const uint LA = BM * BK / NT;   // A elements each thread fetches per K step
const uint LB = BN * BK / NT;

// Pointer to the start of batch bz of an operand, and the parity to add to its indices.
IN_T batch_ptr(IN_T p, uint par, uint stride, uint bz, out uint parity) {
    uint64_t e = uint64_t(par) + uint64_t(bz) * uint64_t(stride);
#if ELEM_BYTES == 4
    parity = 0u;
    return IN_T(uint64_t(p) + e * 4ul);
#else
    parity = uint(e & 1ul);
    return IN_T(uint64_t(p) + (e >> 1) * 4ul);
#endif
}

// Element l of a tile of [BMN rows of op(X)] x [BK], as (mn, k) within the tile. When the
// operand is contiguous along k (A not transposed, B transposed) consecutive threads walk k,
// else they walk mn, so that global reads coalesce.
uvec2 tile_pos(uint l, uint bmn, bool k_contig) {
    return k_contig ? uvec2(l / BK, l % BK) : uvec2(l % bmn, l / bmn);
}

// First element (mn, k) of run l4 of 4 elements along the contiguous dimension (VEC path).
uvec2 run_pos(uint l4, uint bmn, bool k_contig) {
    return k_contig ? uvec2(l4 / (BK / 4), (l4 % (BK / 4)) * 4) : uvec2((l4 % (bmn / 4)) * 4, l4 / (bmn / 4));
}

// Loads run (mn, k) .. of an operand with MN rows of op(X) and K columns into r[4g..4g+3];
// a run that crosses the matrix edge is loaded element by element.
#define LOAD_RUN(r, g, X, par, ld_, kc, mn, k, MN)                                            \
    {                                                                                       \
        const uint idx = kc ? (mn) * (ld_) + (k) : (k) * (ld_) + (mn);                     \
        const bool row_in = kc ? (mn) < (MN) : (k) < pc.K;                                  \
        const uint along = kc ? (k) : (mn);                                                 \
        const uint lim = kc ? pc.K : (MN);                                                  \
        vec4 v = vec4(0.0);                                                                 \
        if (row_in && along + 3 < lim) {                                                    \
            v = ld4(X, idx);                                                                \
        } else if (row_in) {                                                                \
            [[unroll]] for (uint j = 0; j < 4; j++) v[j] = along + j < lim ? ld(X, idx + j) : 0.0; \
        }                                                                                   \
        r[4 * (g)] = v.x; r[4 * (g) + 1] = v.y; r[4 * (g) + 2] = v.z; r[4 * (g) + 3] = v.w;  \
    }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tx = tid % TX;
    const uint ty = tid / TX;
    const uint n0 = gl_WorkGroupID.x * BN;
    const uint m0 = gl_WorkGroupID.y * BM;
    const bool a_kc = TRANS_A == 0;   // A contiguous along k
    const bool b_kc = TRANS_B != 0;   // B contiguous along k
    const uint ntiles = max(1u, (pc.K + BK - 1) / BK);

    for (uint bz = gl_WorkGroupID.z; bz < pc.batch; bz += gl_NumWorkGroups.z) {
        uint pa, pb;
        IN_T A = batch_ptr(pc.a, (pc.flags >> 1) & 1u, pc.sa, bz, pa);
        IN_T B = batch_ptr(pc.b, (pc.flags >> 2) & 1u, pc.sb, bz, pb);

        float ra[LA];
        float rb[LB];
        vec4 acc[TM][TN / 4];
        [[unroll]] for (uint i = 0; i < TM; i++) {
            [[unroll]] for (uint j = 0; j < TN / 4; j++) acc[i][j] = vec4(0.0);
        }

        // Fetch K step t into registers (zeros outside the matrices).
#define FETCH(t)                                                                          \
        {                                                                                 \
            const uint k0 = (t) * BK;                                                     \
            if (VEC != 0) {                                                               \
                [[unroll]] for (uint g = 0; g < LA / 4; g++) {                            \
                    uvec2 p = run_pos(tid + g * NT, BM, a_kc);                            \
                    LOAD_RUN(ra, g, A, pa, pc.lda, a_kc, m0 + p.x, k0 + p.y, pc.M)        \
                }                                                                         \
                [[unroll]] for (uint g = 0; g < LB / 4; g++) {                            \
                    uvec2 p = run_pos(tid + g * NT, BN, b_kc);                            \
                    LOAD_RUN(rb, g, B, pb, pc.ldb, b_kc, n0 + p.x, k0 + p.y, pc.N)        \
                }                                                                         \
            } else {                                                                      \
                [[unroll]] for (uint i = 0; i < LA; i++) {                                \
                    uvec2 p = tile_pos(tid + i * NT, BM, a_kc);                           \
                    uint m = m0 + p.x, k = k0 + p.y;                                      \
                    uint idx = a_kc ? m * pc.lda + k : k * pc.lda + m;                    \
                    ra[i] = (m < pc.M && k < pc.K) ? ld(A, pa + idx) : 0.0;               \
                }                                                                         \
                [[unroll]] for (uint i = 0; i < LB; i++) {                                \
                    uvec2 p = tile_pos(tid + i * NT, BN, b_kc);                           \
                    uint n = n0 + p.x, k = k0 + p.y;                                      \
                    uint idx = b_kc ? n * pc.ldb + k : k * pc.ldb + n;                    \
                    rb[i] = (n < pc.N && k < pc.K) ? ld(B, pb + idx) : 0.0;               \
                }                                                                         \
            }                                                                             \
        }
        // Store the fetched registers into shared buffer s.
#define STORE_RUNS(S, s, r, L, bmn, kc)                                                   \
        [[unroll]] for (uint g = 0; g < (L) / 4; g++) {                                   \
            uvec2 p = run_pos(tid + g * NT, bmn, kc);                                     \
            if (kc) {                                                                     \
                [[unroll]] for (uint j = 0; j < 4; j++) S[s][p.y + j][p.x >> 2][p.x & 3u] = r[4 * g + j]; \
            } else {                                                                      \
                S[s][p.y][p.x >> 2] = vec4(r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]); \
            }                                                                             \
        }
#define STORE(s)                                                                          \
        if (VEC != 0) {                                                                   \
            STORE_RUNS(As, s, ra, LA, BM, a_kc)                                           \
            STORE_RUNS(Bs, s, rb, LB, BN, b_kc)                                           \
        } else {                                                                          \
            [[unroll]] for (uint i = 0; i < LA; i++) {                                    \
                uvec2 p = tile_pos(tid + i * NT, BM, a_kc);                               \
                As[s][p.y][p.x >> 2][p.x & 3u] = ra[i];                                   \
            }                                                                             \
            [[unroll]] for (uint i = 0; i < LB; i++) {                                    \
                uvec2 p = tile_pos(tid + i * NT, BN, b_kc);                               \
                Bs[s][p.y][p.x >> 2][p.x & 3u] = rb[i];                                   \
            }                                                                             \
        }

        FETCH(0u)
        STORE(0u)
        barrier();
        for (uint t = 0; t < ntiles; t++) {
            const uint cur = t & 1u;
            const bool more = t + 1 < ntiles;
            if (more) FETCH(t + 1)
            [[unroll]] for (uint kk = 0; kk < BK; kk++) {
                vec4 av[TM / 4];
                vec4 bv[TN / 4];
                [[unroll]] for (uint g = 0; g < TM / 4; g++) av[g] = As[cur][kk][g * TY + ty];
                [[unroll]] for (uint g = 0; g < TN / 4; g++) bv[g] = Bs[cur][kk][g * TX + tx];
                [[unroll]] for (uint i = 0; i < TM; i++) {
                    [[unroll]] for (uint j = 0; j < TN / 4; j++) {
                        acc[i][j] = fma(vec4(av[i >> 2][i & 3u]), bv[j], acc[i][j]);
                    }
                }
            }
            if (more) STORE(cur ^ 1u)
            barrier();
        }

        // C = alpha * acc (+ bias[n]) (+ beta * C), guarded at the edges.
        const uint64_t cbase = uint64_t(bz) * uint64_t(pc.sc);
        F32Buf C = F32Buf(uint64_t(pc.c) + cbase * 4ul);
        const bool has_bias = (pc.flags & 1u) != 0u;
        const uint c_half = (pc.flags >> 3) & 3u;
        // 16-bit C: this batch's matrix starts at 16-bit element c_par of the word at C16.
        const uint64_t c_e = uint64_t((pc.flags >> 5) & 1u) + cbase;
        U32Words C16 = U32Words(uint64_t(pc.c) + (c_e >> 1) * 4ul);
        const uint c_par = uint(c_e & 1ul);
        [[unroll]] for (uint i = 0; i < TM; i++) {
            const uint m = m0 + (i >> 2) * (TY * 4) + ty * 4 + (i & 3u);
            if (m >= pc.M) continue;
            [[unroll]] for (uint jr = 0; jr < TN / 4; jr++) {
                // A run of 4 adjacent columns n0r .. n0r + 3 of row m.
                const uint n0r = n0 + jr * (TX * 4) + tx * 4;
                vec4 run;
                [[unroll]] for (uint q = 0; q < 4; q++) {
                    const uint n = n0r + q;
                    float v = pc.alpha * acc[i][jr][q];
                    if (n < pc.N) {
                        if (has_bias) v += pc.bias.v[n];
                        if (pc.beta != 0.0) v += pc.beta * C.v[m * pc.ldc + n];
                        if (c_half == 0u) C.v[m * pc.ldc + n] = v;
                    }
                    run[q] = v;
                }
                if (c_half != 0u && n0r < pc.N) {
                    store_half_run(C16, c_par + m * pc.ldc + n0r, run, min(pc.N - n0r, 4u), c_half);
                }
            }
        }
    }
}
