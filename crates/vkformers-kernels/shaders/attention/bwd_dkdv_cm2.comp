#version 460
// Fused attention backward on NVIDIA cooperative matrix 2, part 2 of 2: dk and dv, with the
// semantics, buffers and push block of attention/bwd_dkdv.comp, for f16 and bf16.
//
//   q, do [B, Tq, Hq, D], k, v [B, Tk, Hkv, D], lse, delta [B, Hq, Tq] (delta from bwd_dq_cm2)
//   -> dk, dv [B, Tk, Hkv, D]
//   dv_j = sum_{h in group} sum_i P[i, j] do_i;   dk_j = scale sum_{h in group} sum_i dS[i, j] q_i
//
// One workgroup of 128 invocations per (key tile of BC rows, kv head, batch); it owns its dk/dv
// rows (no atomics; the G query heads of the group and the query tiles are summed in a fixed
// order: deterministic). Everything is computed transposed, keys as rows, so the products
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
#include "attention/cm2.glsl"

layout(local_size_x = CM2_THREADS) in;
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
    ATTN_SCALARS
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
    CLAMPED_LAYOUT(lq, pc.tq, pc.hq * pc.d)
    COLS_LAYOUT(lvec, BC, pc.tq)
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);

    MAT_QT qt;
    coopMatLoadTensorNV(qt, pc.q.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX), transposed);
    ACC_T dot = ACC_T(0.0);
    dot = coopMatMulAdd(km, qt, dot);
    ACC_T s;
    coopMatPerElementNV(s, dot, score_t, k0, q0, b, h);
    ACC_T lse;
    coopMatLoadTensorNV(lse, pc.lse.v, vec_base, sliceTensorLayoutNV(lvec, 0, BC, q0, BR));
    ACC_T p;
    coopMatPerElementNV(p, s, prob_lse, lse);

    MAT_QT dot_t;
    coopMatLoadTensorNV(dot_t, pc.do_.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX), transposed);
    ACC_T dp = ACC_T(0.0);
    dp = coopMatMulAdd(vm, dot_t, dp);
    ACC_T delta;
    coopMatLoadTensorNV(delta, pc.delta.v, vec_base, sliceTensorLayoutNV(lvec, 0, BC, q0, BR));
    ACC_T ds;
    coopMatPerElementNV(ds, p, dscore, dp, delta, dot);

    MAT_Q dom;
    coopMatLoadTensorNV(dom, pc.do_.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));
    dv = coopMatMulAdd(MAT_T16(p), dom, dv);
    MAT_Q qm;
    coopMatLoadTensorNV(qm, pc.q.v, q_base, sliceTensorLayoutNV(lq, q0, BR, 0, DMAX));
    dk = coopMatMulAdd(MAT_T16(ds), qm, dk);
}

void main() {
    uint k0 = gl_WorkGroupID.x * BC;
    uint hk = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint g = pc.hq / pc.hkv;
    uint kv_base = b * pc.tk * pc.hkv * pc.d + hk * pc.d;

    CLAMPED_LAYOUT(lkv, pc.tk, pc.hkv * pc.d)
    MAT_KV km;
    MAT_KV vm;
    coopMatLoadTensorNV(km, pc.k.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
    coopMatLoadTensorNV(vm, pc.v.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
    ACC_KV dk = ACC_KV(0.0);
    ACC_KV dv = ACC_KV(0.0);

    uint qbeg = attn_query_begin(k0) / BR * BR;
    uint qend = attn_query_end(min(k0 + BC, pc.tk));
    [[dont_unroll]] for (uint h = hk * g; h < hk * g + g; h++) {
        [[dont_unroll]] for (uint q0 = qbeg; q0 < qend; q0 += BR) {
            query_tile(q0, h, b, k0, km, vm, dk, dv);
        }
    }
    dk = dk * pc.scale;
    ROW16 dk16 = ROW16(dk);
    ROW16 dv16 = ROW16(dv);
    coopMatStoreTensorNV(dk16, pc.dk.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
    coopMatStoreTensorNV(dv16, pc.dv.v, kv_base, sliceTensorLayoutNV(lkv, k0, BC, 0, DMAX));
}
