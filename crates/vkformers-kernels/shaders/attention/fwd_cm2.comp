#version 460
// Fused attention forward on tensor cores through NVIDIA cooperative matrix 2 (the FlashAttention-2
// scheme): the same semantics, buffers and push block as attention/fwd.comp, for f16 and bf16.
//
//   q [B, Tq, Hq, D], k, v [B, Tk, Hkv, D] -> o [B, Tq, Hq, D] (16-bit), lse [B, Hq, Tq] (f32)
//   query head h reads kv head h / G (G = Hq / Hkv); query i sits at qpos = i + Tk - Tq
//   S[i, j] = score(q_i . k_j) (scale, softcap, ALiBi: helpers.glsl), MASKED (-1e30) where masked
//   o_i = sum_j softmax_j(S[i, :]) v_j,   lse_i = log sum_j exp S[i, j]
//   A fully masked row gets o_i = 0 and lse_i = MASKED.
//   Sinks (flags & ATTN_SINKS): head h's logit s_h joins the denominator once after the last
//   key tile (fold_sink, as attn_fold_sink of fwd.comp), so lse includes it and the backward
//   kernels need no change.
//
// One workgroup of 128 invocations per (query tile of BR rows, query head, batch). Every matrix
// is workgroup scope: the driver spreads it over the 4 subgroups and stages loads through
// shared memory itself, so this file declares no shared memory. Per key tile of BC keys at k0:
//   S    = Q Kᵀ                       [BR, DMAX] x [DMAX, BC] -> [BR, BC], 16-bit in, f32 acc
//   S    = score(S) or MASKED          per element (row, column -> query i, key j)
//   m'   = max(m, rowmax(S))           row reduction; m, l are [BR, BC] with each row's value
//                                      repeated over its columns, so they combine with S
//                                      element by element
//   P    = exp(S - m') (0 while m' = MASKED: a row that has seen no visible key yet)
//   a    = exp(m - m');  l = a l + rowsum(P);  m = m'
//   O    = a O + P V                   a resized to [BR, DMAX] by a row reduction (all of a
//                                      row's values are equal, so max returns that value);
//                                      P rounded to the 16-bit type, V [BC, DMAX], f32 acc
// At the end O / l (0 where l = 0) is stored through a clamped layout and lse = m + log(l)
// (MASKED where l = 0) through a [Tq, 1] layout, so only column 0 of each row lands in lse.
//
// Layouts (2-D, row-major, element strides): Q and O rows at q_base + i * (Hq D) with
// q_base = b Tq Hq D + h D; K and V rows at kv_base + j * (Hkv D), kv_base = b Tk Hkv D + hk D.
// Their dimensions are (Tq, D) and (Tk, D) with clamp-to-zero, so query rows past Tq, key rows
// past Tk and columns D..DMAX read as 0 (they add 0 to every dot product) and are never
// stored: any Tq, Tk, and any D <= DMAX (e.g. D = 80 in the DMAX = 128 variant) work. K is
// loaded through a transposing view, giving the [DMAX, BC] B operand straight from [BC, D] rows.
//
// A tile wholly visible with plain scores (attn_tile_plain: most tiles of a causal or full
// attention without masks, ALiBi or softcap) scales S as a whole matrix instead of running the
// per-element score function (its visibility tests and branches for every element); FAST = 0
// (specialization constant 0) turns that off, to measure it.
//
// Key tiles: from attn_key_begin (window) rounded down to a multiple of BC, to attn_key_end
// (causal); tiles wholly outside the visible band are skipped, partial ones are masked per
// element. The bounds are uniform over the workgroup, as cooperative matrix operations need.
//
// Tiles and budgets (H200: 48 KiB shared memory, 255 registers per invocation; f32 per
// invocation = elements / 128):
//   d64, d128: BR = BC = 64. Live across the key loop: O [64, DMAX] f32 (32 / 64 registers), Q
//     [64, DMAX] 16-bit (16 / 32), m and l [64, 64] f32 (32 each); per tile S and P [64, 64]
//     (32 each), K or V [DMAX x 64] 16-bit (16 / 32). Peak of d128 ~ 64 + 32 + 64 + 96 ~ 256
//     at worst, before the compiler drops dead temporaries. Staging of one 16-bit operand is at
//     most 64 x 128 x 2 = 16 KiB. BR = 64 gives 16 rows per subgroup (the MMA row height), and
//     BC = 64 keeps the P V product's K dimension at 64.
//   d256: BR = BC = 32, so O [32, 256] f32 stays 64 registers, Q 32, K/V [256 x 32] 32, m, l,
//     S, P 8 each; each staged operand 32 x 256 x 2 = 16 KiB.
// Every dimension is a multiple of 16 (the flexible-dimension granularity at 128 invocations).
//
// variant: d64_f16 ELEM_F16 DMAX=64 BR=64 BC=64
// variant: d128_f16 ELEM_F16 DMAX=128 BR=64 BC=64
// variant: d256_f16 ELEM_F16 DMAX=256 BR=32 BC=32
// variant: d64_bf16 ELEM_BF16 DMAX=64 BR=64 BC=64
// variant: d128_bf16 ELEM_BF16 DMAX=128 BR=64 BC=64
// variant: d256_bf16 ELEM_BF16 DMAX=256 BR=32 BC=32
// Tile-shape candidates, chosen only by VKFORMERS_ATTENTION_TILE (sweeps on the H200):
// variant: d64_bf16_r128 ELEM_BF16 DMAX=64 BR=128 BC=64
// variant: d64_bf16_c128 ELEM_BF16 DMAX=64 BR=64 BC=128
// variant: d64_bf16_r128c128 ELEM_BF16 DMAX=64 BR=128 BC=128
// variant: d128_bf16_c128 ELEM_BF16 DMAX=128 BR=64 BC=128
#include "attention/cm2.glsl"

layout(local_size_x = CM2_THREADS) in;
layout(constant_id = 0) const uint FAST = 1;
// Specialization constant 1: cost probes for `vkformers bench attention --probe` (wrong results;
// never set otherwise): each bit drops one part of the key tile so its time can be measured.
layout(constant_id = 1) const uint PROBE = 0;
#define PROBE_NO_SOFTMAX 1u  // P = S: no row max, exp, row sum or rescale of O
#define PROBE_NO_PV 2u       // no V load and no P V product
#define PROBE_NO_QK 4u       // no K load and no Q Kᵀ product (S = 0)
layout(push_constant) uniform Push {
    EIn q;
    EIn k;
    EIn v;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    F32In sinks;   // [Hq] sink logits (read when flags & ATTN_SINKS)
    EBuf o;
    F32Buf lse;
    ATTN_SCALARS
} pc;
#include "attention/helpers.glsl"

#define MAT_Q MAT(ELEM, BR, DMAX, gl_MatrixUseA)
#define MAT_K MAT(ELEM, DMAX, BC, gl_MatrixUseB)
#define MAT_V MAT(ELEM, BC, DMAX, gl_MatrixUseB)
#define MAT_P MAT(ELEM, BR, BC, gl_MatrixUseA)
#define ACC_S ACC(BR, BC)
// Row statistics m, l and the rescale a are [BR, 16] (each row's value repeated over 16 columns,
// the smallest flexible dimension), not [BR, BC]: a quarter of their registers and of the exp()
// of the rescale, for one more row reduction a tile (m widened back to [BR, BC] for P). The
// kernels are register-bound: on the H200 this made the d64 forward 19% faster (0.202 -> 0.163
// ms on the 134M shape, `vkformers bench attention`).
#define RCOLS 16
#define ACC_R ACC(BR, RCOLS)
#define ACC_O ACC(BR, DMAX)
#define OUT_O MAT(ELEM, BR, DMAX, gl_MatrixUseAccumulator)
#include "attention/cm2_ops.glsl"

// P = exp(S - m); 0 in a row whose running max is still MASKED (exp(MASKED - MASKED) would be 1).
float prob(const in uint32_t r, const in uint32_t c, const in float s, const in float m) {
    return m <= MASKED ? 0.0 : exp(s - m);
}
// a = exp(m_old - m_new) <= 1 (0 when m_old is MASKED and m_new is not, 1 when both are).
float rescale(const in uint32_t r, const in uint32_t c, const in float m_old, const in float m_new) {
    return exp(m_old - m_new);
}
float normalize_row(const in uint32_t r, const in uint32_t c, const in float o, const in float l) {
    return l > 0.0 ? o / l : 0.0;
}
float lse_of(const in uint32_t r, const in uint32_t c, const in float m, const in float l) {
    return l > 0.0 ? m + log(l) : MASKED;
}

float sink_max(const in uint32_t r, const in uint32_t c, const in float m, const in float s) {
    return max(m, s);
}
float sink_exp(const in uint32_t r, const in uint32_t c, const in float m, const in float s) {
    return exp(s - m);
}

// Folds the sink logit s (uniform: one head per workgroup) into m, l and O as one more key of
// value 0: m' = max(m, s), a = exp(m - m'), l = a l + exp(s - m'), O = a O.
void fold_sink(float s, inout ACC_R m, inout ACC_R l, inout ACC_O o) {
    ACC_R m_new;
    coopMatPerElementNV(m_new, m, sink_max, s);
    ACC_R alpha;
    coopMatPerElementNV(alpha, m, rescale, m_new);
    ACC_R e;
    coopMatPerElementNV(e, m_new, sink_exp, s);
    l = alpha * l + e;
    m = m_new;
    ACC_O alpha_o;
    coopMatReduceNV(alpha_o, alpha, gl_CooperativeMatrixReduceRowNV, max_of);
    o = alpha_o * o;
}

// One key tile at k0: folds S = Q Kᵀ into the running m, l and O (see the header).
// (The layouts are built here rather than passed in, so no function takes a tensor layout.)
void key_tile(uint k0, uint kv_base, MAT_Q qm, uint q0, uint b, uint h, inout ACC_R m, inout ACC_R l,
              inout ACC_O o) {
    uint kv_stride = pc.hkv * pc.d;
    ACC_S s = ACC_S(0.0);
    if ((PROBE & PROBE_NO_QK) == 0u) {
        MAT_K km;
        LOAD_ROWS_T(km, pc.k.v, kv_base, pc.tk, kv_stride, k0, BC)
        s = coopMatMulAdd(qm, km, s);
    }
    if (FAST != 0 && attn_tile_plain(q0, q0 + BR, k0, k0 + BC)) {
        s = s * pc.scale;
    } else {
        coopMatPerElementNV(s, s, score_of, q0, k0, b, h);
    }

    ACC_S p;
    if ((PROBE & PROBE_NO_SOFTMAX) == 0u) {
        ACC_R rowmax;
        coopMatReduceNV(rowmax, s, gl_CooperativeMatrixReduceRowNV, max_of);
        ACC_R m_new;
        coopMatPerElementNV(m_new, rowmax, max_elem, m);
        ACC_S m_wide;
        coopMatReduceNV(m_wide, m_new, gl_CooperativeMatrixReduceRowNV, max_of);
        coopMatPerElementNV(p, s, prob, m_wide);
        ACC_R alpha;
        coopMatPerElementNV(alpha, m, rescale, m_new);
        m = m_new;
        ACC_R psum;
        coopMatReduceNV(psum, p, gl_CooperativeMatrixReduceRowNV, sum_of);
        l = alpha * l + psum;
        ACC_O alpha_o;
        coopMatReduceNV(alpha_o, alpha, gl_CooperativeMatrixReduceRowNV, max_of);
        o = alpha_o * o;
    } else {
        p = s;
    }
    if ((PROBE & PROBE_NO_PV) == 0u) {
        MAT_V vm;
        LOAD_ROWS(vm, pc.v.v, kv_base, pc.tk, kv_stride, k0, BC)
        MAT_P p16 = MAT_P(p);
        o = coopMatMulAdd(p16, vm, o);
    }
}

void main() {
    uint q0 = gl_WorkGroupID.x * BR;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint hk = h / (pc.hq / pc.hkv);
    uint q_base = b * pc.tq * pc.hq * D + h * D;
    uint kv_base = b * pc.tk * pc.hkv * D + hk * D;

    CLAMPED_LAYOUT(lq, pc.tq, pc.hq * D)

    MAT_Q qm;
    LOAD_ROWS(qm, pc.q.v, q_base, pc.tq, pc.hq * D, q0, BR)
    ACC_R m = ACC_R(MASKED);
    ACC_R l = ACC_R(0.0);
    ACC_O o = ACC_O(0.0);

    uint kbeg = attn_key_begin(q0) / BC * BC;
    uint kend = attn_key_end(min(q0 + BR, pc.tq));
    [[dont_unroll]] for (uint k0 = kbeg; k0 < kend; k0 += BC) {
        key_tile(k0, kv_base, qm, q0, b, h, m, l, o);
    }
    if ((pc.flags & ATTN_SINKS) != 0u) {
        fold_sink(pc.sinks.v[h], m, l, o);
    }

    ACC_O l_o;
    coopMatReduceNV(l_o, l, gl_CooperativeMatrixReduceRowNV, max_of);
    coopMatPerElementNV(o, o, normalize_row, l_o);
    OUT_O o16 = OUT_O(o);
    coopMatStoreTensorNV(o16, pc.o.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));

    // lse [B, Hq, Tq]: row i of this (b, h) at (b Hq + h) Tq + i; dimension (Tq, 1) keeps only
    // column 0 of each row and drops rows past Tq.
    ROWS_LAYOUT(lrow, pc.tq, 1)
    ACC_R lse_m;
    coopMatPerElementNV(lse_m, m, lse_of, l);
    coopMatStoreTensorNV(lse_m, pc.lse.v, (b * pc.hq + h) * pc.tq, sliceTensorLayoutNV(lrow, q0, BR, 0, RCOLS));
}
