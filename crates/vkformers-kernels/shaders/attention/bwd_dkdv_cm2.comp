#version 460
// Fused attention backward on NVIDIA cooperative matrix 2, part 2 of 2: dk and dv, with the
// semantics, buffers and push block of attention/bwd_dkdv.comp, for f16 and bf16.
//
//   q, do [B, Tq, Hq, D], k, v [B, Tk, Hkv, D], lse, delta [B, Hq, Tq] (delta from bwd_dq_cm2)
//   -> dk, dv [B, Tk, Hkv, D]
//   dv_j = sum_{h in group} sum_i P[i, j] do_i;   dk_j = scale sum_{h in group} sum_i dS[i, j] q_i
//
// One workgroup of 128 invocations per (key tile of BC rows, kv head and part, batch): with
// parts = 1 it owns its dk/dv rows and sums the G query heads of its group; with GQA and few
// workgroups (the host picks parts, a divisor of G, so the grid fills the device) each of the
// parts sums G / parts heads into an f32 partial [parts, B, Tk, Hkv, D] and norm/col_sum
// adds the parts in order after it. No atomics: the sums have a fixed order (deterministic). Everything is computed transposed, keys as rows, so the products
// need no transposed operand in a multiply by P or dS:
//   dotᵀ = K Qᵀ [BC, BR] (K [BC, DMAX] A operand held; Qᵀ through a transposing view)
//   Sᵀ = score(dotᵀ) or MASKED;  Pᵀ = exp(Sᵀ - lse) with lse [BC, BR] repeating lse[q0 + c]
//     down column c (COLS_LAYOUT);  dPᵀ = V dOᵀ;  dSᵀ = Pᵀ (dPᵀ - delta) ds/du
//   dv += Pᵀ dO,  dk += dSᵀ Q   (Pᵀ, dSᵀ rounded to the 16-bit type; dO, Q [BR, DMAX] loaded
//     untransposed as B operands), dk scaled by `scale` at the end.
// Query tiles: from attn_query_begin (causal) rounded down to BR, to attn_query_end (window).
// Layouts: as fwd_cm2.comp (clamp-to-zero, so any Tq, Tk and D <= DMAX).
//
// Budgets (f32 registers per invocation = elements / 128; staged operands <= 16 KiB):
//   d64: BC = BR = 64: held K, V 16 each, dk, dv 32 each; per tile Qᵀ, dOᵀ, Q, dO 16 each,
//     [64, 64] tiles 32 each (short-lived).
//   d128: BC = 32, BR = 64: held K, V 16 each, dk, dv 32 each; per tile operands 32 each,
//     [32, 64] tiles 16 each.
//   d256: BC = BR = 32: held K, V 32 each, dk, dv 64 each (may spill: correct, slower).
//
// variant: d64_f16 ELEM_F16 DMAX=64 BR=64 BC=64
// variant: d128_f16 ELEM_F16 DMAX=128 BR=64 BC=32
// variant: d256_f16 ELEM_F16 DMAX=256 BR=32 BC=32
// variant: d64_bf16 ELEM_BF16 DMAX=64 BR=64 BC=64
// variant: d128_bf16 ELEM_BF16 DMAX=128 BR=64 BC=32
// variant: d256_bf16 ELEM_BF16 DMAX=256 BR=32 BC=32
// variant: d64_f16_plain ELEM_F16 DMAX=64 BR=64 BC=64 PLAIN_DS
// variant: d128_f16_plain ELEM_F16 DMAX=128 BR=64 BC=32 PLAIN_DS
// variant: d256_f16_plain ELEM_F16 DMAX=256 BR=32 BC=32 PLAIN_DS
// variant: d64_bf16_plain ELEM_BF16 DMAX=64 BR=64 BC=64 PLAIN_DS
// variant: d128_bf16_plain ELEM_BF16 DMAX=128 BR=64 BC=32 PLAIN_DS
// variant: d256_bf16_plain ELEM_BF16 DMAX=256 BR=32 BC=32 PLAIN_DS
// Tile-shape candidates, chosen only by VKFORMERS_ATTENTION_TILE (sweeps on the H200):
// variant: d64_bf16_plain_r128 ELEM_BF16 DMAX=64 BR=128 BC=64 PLAIN_DS
// variant: d64_bf16_plain_c128 ELEM_BF16 DMAX=64 BR=64 BC=128 PLAIN_DS
// variant: d64_bf16_plain_r32 ELEM_BF16 DMAX=64 BR=32 BC=64 PLAIN_DS
#include "attention/cm2.glsl"

layout(local_size_x = CM2_THREADS) in;
layout(constant_id = 0) const uint FAST = 1;  // plain tiles scale S whole (see fwd_cm2.comp)
layout(push_constant) uniform Push {
    EIn q;
    EIn k;
    EIn v;
    EIn do_;
    F32In lse;
    F32In delta;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    EBuf dk;
    EBuf dv;
    F32Buf part_dk;  // [parts, B, Tk, Hkv, D] f32 partial sums (parts > 1 only)
    F32Buf part_dv;
    ATTN_SCALARS
    uint parts;      // query-head groups summed apart (divides Hq / Hkv)
} pc;
#include "attention/helpers.glsl"

#define MAT_KV MAT(ELEM, BC, DMAX, gl_MatrixUseA)
#define MAT_QT MAT(ELEM, DMAX, BR, gl_MatrixUseB)
#define MAT_Q MAT(ELEM, BR, DMAX, gl_MatrixUseB)
#define MAT_T16 MAT(ELEM, BC, BR, gl_MatrixUseA)
#define ROW16 MAT(ELEM, BC, DMAX, gl_MatrixUseAccumulator)
#define ACC_T ACC(BC, BR)
#define ACC_KV ACC(BC, DMAX)
#include "attention/cm2_ops.glsl"

// One query tile at q0 of query head h: dv += Pᵀ dO, dk += dSᵀ Q (dk unscaled; see the header).
void query_tile(uint q0, uint h, uint b, uint k0, MAT_KV km, MAT_KV vm, inout ACC_KV dk, inout ACC_KV dv) {
    uint q_base = b * pc.tq * pc.hq * pc.d + h * pc.d;
    uint vec_base = (b * pc.hq + h) * pc.tq;
    uint q_stride = pc.hq * pc.d;
    COLS_LAYOUT(lvec, BC, pc.tq)

    MAT_QT qt;
    LOAD_ROWS_T(qt, pc.q.v, q_base, pc.tq, q_stride, q0, BR)
    ACC_T dot = ACC_T(0.0);
    dot = coopMatMulAdd(km, qt, dot);
    ACC_T s;
    if (FAST != 0 && attn_tile_plain(q0, q0 + BR, k0, k0 + BC)) {
        s = dot * pc.scale;
    } else {
        coopMatPerElementNV(s, dot, score_t, k0, q0, b, h);
    }
    ACC_T lse;
    coopMatLoadTensorNV(lse, pc.lse.v, vec_base, sliceTensorLayoutNV(lvec, 0, BC, q0, BR));
    ACC_T p;
    coopMatPerElementNV(p, s, prob_lse, lse);

    MAT_QT dot_t;
    LOAD_ROWS_T(dot_t, pc.do_.v, q_base, pc.tq, q_stride, q0, BR)
    ACC_T dp = ACC_T(0.0);
    dp = coopMatMulAdd(vm, dot_t, dp);
    ACC_T delta;
    coopMatLoadTensorNV(delta, pc.delta.v, vec_base, sliceTensorLayoutNV(lvec, 0, BC, q0, BR));
    ACC_T ds;
#ifdef PLAIN_DS
    // The `_plain` variants, chosen without softcap: dS = P (dP - delta), so Q Kᵀ is dead once S
    // exists (its registers free for the rest of the tile: 8-10% faster on the H200).
    coopMatPerElementNV(ds, p, dscore_plain, dp, delta);
#else
    coopMatPerElementNV(ds, p, dscore, dp, delta, dot);
#endif

    MAT_Q dom;
    LOAD_ROWS(dom, pc.do_.v, q_base, pc.tq, q_stride, q0, BR)
    dv = coopMatMulAdd(MAT_T16(p), dom, dv);
    MAT_Q qm;
    LOAD_ROWS(qm, pc.q.v, q_base, pc.tq, q_stride, q0, BR)
    dk = coopMatMulAdd(MAT_T16(ds), qm, dk);
}

void main() {
    uint k0 = gl_WorkGroupID.x * BC;
    uint hk = gl_WorkGroupID.y / pc.parts;
    uint part = gl_WorkGroupID.y % pc.parts;
    uint b = gl_WorkGroupID.z;
    uint heads = pc.hq / pc.hkv / pc.parts;  // query heads summed by this workgroup
    uint h0 = hk * (pc.hq / pc.hkv) + part * heads;
    uint kv_base = b * pc.tk * pc.hkv * pc.d + hk * pc.d;

    CLAMPED_LAYOUT(lkv, pc.tk, pc.hkv * pc.d)
    MAT_KV km;
    MAT_KV vm;
    LOAD_ROWS(km, pc.k.v, kv_base, pc.tk, pc.hkv * pc.d, k0, BC)
    LOAD_ROWS(vm, pc.v.v, kv_base, pc.tk, pc.hkv * pc.d, k0, BC)
    ACC_KV dk = ACC_KV(0.0);
    ACC_KV dv = ACC_KV(0.0);

    uint qbeg = attn_query_begin(k0) / BR * BR;
    uint qend = attn_query_end(min(k0 + BC, pc.tk));
    [[dont_unroll]] for (uint h = h0; h < h0 + heads; h++) {
        [[dont_unroll]] for (uint q0 = qbeg; q0 < qend; q0 += BR) {
            query_tile(q0, h, b, k0, km, vm, dk, dv);
        }
    }
    dk = dk * pc.scale;
    if (pc.parts == 1) {
        ROW16 dk16 = ROW16(dk);
        ROW16 dv16 = ROW16(dv);
        coopMatStoreTensorNV(dk16, pc.dk.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
        coopMatStoreTensorNV(dv16, pc.dv.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
    } else {
        // Part `part` of [parts, B, Tk, Hkv, D]; norm/col_sum adds the parts in order.
        uint part_base = part * (gl_NumWorkGroups.z * pc.tk * pc.hkv * pc.d) + kv_base;
        coopMatStoreTensorNV(dk, pc.part_dk.v, part_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
        coopMatStoreTensorNV(dv, pc.part_dv.v, part_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
    }
}
