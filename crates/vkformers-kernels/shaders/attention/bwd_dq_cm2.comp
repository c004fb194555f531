#version 460
// Fused attention backward on NVIDIA cooperative matrix 2, part 1 of 2: dq and delta, with the
// semantics, buffers and push block of attention/bwd_dq.comp, for f16 and bf16.
//
//   q, do, o [B, Tq, Hq, D], k, v [B, Tk, Hkv, D], lse [B, Hq, Tq] (from the forward)
//   -> dq [B, Tq, Hq, D], delta [B, Hq, Tq]
//   delta_i = sum_d do[i, d] o[i, d]   (of the stored 16-bit o; read by bwd_dkdv_cm2)
//   P = exp(S - lse) (0 where masked), dP = dO Vᵀ, dS = P (dP - delta) ds/du, dq = scale dS K
//
// One workgroup of 128 invocations per (query tile of BR rows, query head, batch); it owns its
// dq rows (no atomics, deterministic). Held across the key loop: Q and dO [BR, DMAX] (A
// operands), dq [BR, DMAX] f32. Per key tile, lse and delta are loaded as [BR, BC] (each row's
// value repeated over its columns, so they combine with the score tile element by element) from
// L1 rather than held: the kernel is register-bound. Per key tile of BC keys:
//   dot = Q Kᵀ [BR, BC] (K through a transposing view), S = score(dot) or MASKED
//   P = exp(S - lse);  dP = dO Vᵀ (V transposed likewise);  dS = P (dP - delta) ds/du
//   dq += dS K     (dS rounded to the 16-bit type, K [BC, DMAX] loaded again untransposed)
// Key tiles: as fwd_cm2.comp (window start rounded down to BC, causal end). Layouts: as
// fwd_cm2.comp (clamp-to-zero, so any Tq, Tk and D <= DMAX); lse is read and delta written
// through the [Tq, 1]-style layouts of cm2.glsl.
//
// Budgets (f32 registers per invocation = elements / 128; staged operands <= 16 KiB):
//   d64: BR = BC = 64: held Q, dO 16 each, dq 32; per tile K, V 16 each, lse, delta,
//     dot/S/P/dP/dS 32 each (short-lived).
//   d128: BR = 32, BC = 64: held Q, dO 16 each, dq 32; per tile lse, delta 16 each, Kᵀ, Vᵀ, K
//     32 each, tiles [32, 64] 16 each.
//   d256: BR = BC = 32: held Q, dO 32 each, dq 64; per tile lse, delta 8 each, K operands 32
//     each (may spill: correct, slower).
//
// variant: d64_f16 ELEM_F16 DMAX=64 BR=64 BC=64
// variant: d128_f16 ELEM_F16 DMAX=128 BR=32 BC=64
// variant: d256_f16 ELEM_F16 DMAX=256 BR=32 BC=32
// variant: d64_bf16 ELEM_BF16 DMAX=64 BR=64 BC=64
// variant: d128_bf16 ELEM_BF16 DMAX=128 BR=32 BC=64
// variant: d256_bf16 ELEM_BF16 DMAX=256 BR=32 BC=32
// variant: d64_f16_plain ELEM_F16 DMAX=64 BR=64 BC=64 PLAIN_DS
// variant: d128_f16_plain ELEM_F16 DMAX=128 BR=32 BC=64 PLAIN_DS
// variant: d256_f16_plain ELEM_F16 DMAX=256 BR=32 BC=32 PLAIN_DS
// variant: d64_bf16_plain ELEM_BF16 DMAX=64 BR=64 BC=64 PLAIN_DS
// variant: d128_bf16_plain ELEM_BF16 DMAX=128 BR=32 BC=64 PLAIN_DS
// variant: d256_bf16_plain ELEM_BF16 DMAX=256 BR=32 BC=32 PLAIN_DS
// Tile-shape candidates, chosen only by VKFORMERS_ATTENTION_TILE (sweeps on the H200):
// variant: d64_bf16_plain_r128 ELEM_BF16 DMAX=64 BR=128 BC=64 PLAIN_DS
// variant: d64_bf16_plain_c128 ELEM_BF16 DMAX=64 BR=64 BC=128 PLAIN_DS
// variant: d64_bf16_plain_c32 ELEM_BF16 DMAX=64 BR=64 BC=32 PLAIN_DS
#include "attention/cm2.glsl"

layout(local_size_x = CM2_THREADS) in;
layout(constant_id = 0) const uint FAST = 1;  // plain tiles scale S whole (see fwd_cm2.comp)
layout(push_constant) uniform Push {
    EIn q;
    EIn k;
    EIn v;
    EIn o;
    EIn do_;
    F32In lse;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    F32Buf delta;
    EBuf dq;
    ATTN_SCALARS
} pc;
#include "attention/helpers.glsl"

#define MAT_Q MAT(ELEM, BR, DMAX, gl_MatrixUseA)
#define MAT_KT MAT(ELEM, DMAX, BC, gl_MatrixUseB)
#define MAT_K MAT(ELEM, BC, DMAX, gl_MatrixUseB)
#define MAT_S16 MAT(ELEM, BR, BC, gl_MatrixUseA)
#define ROW16 MAT(ELEM, BR, DMAX, gl_MatrixUseAccumulator)
#define ACC_S ACC(BR, BC)
#define ACC_Q ACC(BR, DMAX)
#include "attention/cm2_ops.glsl"

// delta [BR, BC] (rows repeated) = rowsum(dO ⊙ O) of the rows at q0, stored to delta [B, Hq, Tq].
void delta_rows(uint q_base, uint q0, uint vec_base) {
    CLAMPED_LAYOUT(lq, pc.tq, pc.hq * pc.d)
    ROW16 o16;
    ROW16 do16;
    coopMatLoadTensorNV(o16, pc.o.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));
    coopMatLoadTensorNV(do16, pc.do_.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));
    ACC_Q prod = ACC_Q(o16) * ACC_Q(do16);
    ACC_S delta;
    coopMatReduceNV(delta, prod, gl_CooperativeMatrixReduceRowNV, sum_of);
    ROWS_LAYOUT(lvec, pc.tq, 1)
    coopMatStoreTensorNV(delta, pc.delta.v, vec_base, sliceTensorLayoutNV(lvec, q0, BR, 0, BC));
}

// One key tile at k0: dq += dS K (see the header).
void key_tile(uint k0, uint kv_base, MAT_Q qm, MAT_Q dom, ACC_S lse, ACC_S delta, uint q0, uint b, uint h,
              inout ACC_Q dq) {
    uint kv_stride = pc.hkv * pc.d;
    MAT_KT kt;
    LOAD_ROWS_T(kt, pc.k.v, kv_base, pc.tk, kv_stride, k0, BC)
    ACC_S dot = ACC_S(0.0);
    dot = coopMatMulAdd(qm, kt, dot);
    ACC_S s;
    if (FAST != 0 && attn_tile_plain(q0, q0 + BR, k0, k0 + BC)) {
        s = dot * pc.scale;
    } else {
        coopMatPerElementNV(s, dot, score_of, q0, k0, b, h);
    }
    ACC_S p;
    coopMatPerElementNV(p, s, prob_lse, lse);

    MAT_KT vt;
    LOAD_ROWS_T(vt, pc.v.v, kv_base, pc.tk, kv_stride, k0, BC)
    ACC_S dp = ACC_S(0.0);
    dp = coopMatMulAdd(dom, vt, dp);
    ACC_S ds;
#ifdef PLAIN_DS
    // The `_plain` variants, chosen without softcap: dS = P (dP - delta), so Q Kᵀ is dead once S
    // exists (its registers free for the rest of the tile: 8-10% faster on the H200).
    coopMatPerElementNV(ds, p, dscore_plain, dp, delta);
#else
    coopMatPerElementNV(ds, p, dscore, dp, delta, dot);
#endif

    MAT_K km;
    LOAD_ROWS(km, pc.k.v, kv_base, pc.tk, kv_stride, k0, BC)
    dq = coopMatMulAdd(MAT_S16(ds), km, dq);
}

void main() {
    uint q0 = gl_WorkGroupID.x * BR;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint hk = h / (pc.hq / pc.hkv);
    uint q_base = b * pc.tq * pc.hq * D + h * D;
    uint kv_base = b * pc.tk * pc.hkv * D + hk * D;
    uint vec_base = (b * pc.hq + h) * pc.tq;

    CLAMPED_LAYOUT(lq, pc.tq, pc.hq * D)
    MAT_Q qm;
    MAT_Q dom;
    LOAD_ROWS(qm, pc.q.v, q_base, pc.tq, pc.hq * D, q0, BR)
    LOAD_ROWS(dom, pc.do_.v, q_base, pc.tq, pc.hq * D, q0, BR)
    ROWS_LAYOUT(lvec, pc.tq, BC)
    // lse and delta [BR, BC] would be 64 registers an invocation held across the key loop: they
    // are reloaded each tile instead (from L1: BR values repeated), once delta is visible to the
    // whole workgroup.
    delta_rows(q_base, q0, vec_base);
    memoryBarrierBuffer();
    barrier();
    ACC_Q dq = ACC_Q(0.0);

    uint kbeg = attn_key_begin(q0) / BC * BC;
    uint kend = attn_key_end(min(q0 + BR, pc.tq));
    [[dont_unroll]] for (uint k0 = kbeg; k0 < kend; k0 += BC) {
        ACC_S lse;
        ACC_S delta;
        coopMatLoadTensorNV(lse, pc.lse.v, vec_base, sliceTensorLayoutNV(lvec, q0, BR, 0, BC));
        coopMatLoadTensorNV(delta, pc.delta.v, vec_base, sliceTensorLayoutNV(lvec, q0, BR, 0, BC));
        key_tile(k0, kv_base, qm, dom, lse, delta, q0, b, h, dq);
    }
    dq = dq * pc.scale;
    ROW16 dq16 = ROW16(dq);
    coopMatStoreTensorNV(dq16, pc.dq.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));
}
