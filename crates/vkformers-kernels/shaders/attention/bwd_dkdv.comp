#version 460
#include "common.glsl"
#include "dtype.glsl"
// Fused attention backward, part 2 of 2: dk and dv (flash-attention-2 style). q, k, v,
// do, dk, dv in the variant's storage type (f32, f16, bf16); lse, delta and all math are f32.
//
//   q [B, Tq, Hq, D], do_ [B, Tq, Hq, Dv], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv],
//   lse, delta [B, Hq, Tq] (delta from bwd_dq) -> dk [B, Tk, Hkv, D], dv [B, Tk, Hkv, Dv]
//   P[i, j] = exp(S[i, j] - lse_i) (0 where masked);  dS as in bwd_dq.comp
//   dv_j = sum_{h in group} sum_i P[i, j] do_i;   dk_j = scale * sum_{h in group} sum_i dS[i, j] q_i
//
// Design: one workgroup of NT threads per (key tile of BK rows, kv head, batch), so each
// workgroup owns its dk/dv rows (deterministic, no atomics, GQA sums in a fixed order). K and V
// tiles stay in shared memory; the workgroup loops over the G query heads of its kv head and
// over the query tiles (BQ rows) that can see the key tile (causal, sliding window), staging Q,
// dO, lse and delta per tile. Per query tile: P and dS tiles ([BK, BQ], thread e -> key e / BQ,
// query e % BQ), then dv[c, d] += sum_r P[c, r] dO[r, d], dk[c, d] += sum_r dS[c, r] Q[r, d] in
// per-thread slots spread over the [BK, D] output tile.
//
// d576 (heads 257..576): sk + sv + sq + sdo = (2·4 + 2·2)·577 floats ~28 KiB.
// variant: d64 DMAX=64 BQ=16 BK=32 NT=256
// variant: d128 DMAX=128 BQ=8 BK=16 NT=128
// variant: d256 DMAX=256 BQ=4 BK=8 NT=128
// variant: d64_f16 DMAX=64 BQ=16 BK=32 NT=256 DT_F16
// variant: d128_f16 DMAX=128 BQ=8 BK=16 NT=128 DT_F16
// variant: d256_f16 DMAX=256 BQ=4 BK=8 NT=128 DT_F16
// variant: d64_bf16 DMAX=64 BQ=16 BK=32 NT=256 DT_BF16
// variant: d128_bf16 DMAX=128 BQ=8 BK=16 NT=128 DT_BF16
// variant: d256_bf16 DMAX=256 BQ=4 BK=8 NT=128 DT_BF16
// variant: d576 DMAX=576 BQ=2 BK=4 NT=64
// variant: d576_f16 DMAX=576 BQ=2 BK=4 NT=64 DT_F16
// variant: d576_bf16 DMAX=576 BQ=2 BK=4 NT=64 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    DIn q;
    DIn k;
    DIn v;
    DIn do_;
    F32In lse;
    F32In delta;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    DBuf dk;
    DBuf dv;
    ATTN_SCALARS
} pc;
#include "attention/helpers.glsl"

const uint SLOTS = (BK * DMAX + NT - 1) / NT;

shared float sk[BK * DS];
shared float sv[BK * DS];
shared float sq[BQ * DS];
shared float sdo[BQ * DS];
shared float sp[BK * BQ];
shared float sds[BK * BQ];
shared float slse[BQ];
shared float sdelta[BQ];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint k0 = gl_WorkGroupID.x * BK;
    uint hk = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint G = pc.hq / pc.hkv;
    uint qstride = pc.hq * D;
    uint kstride = pc.hkv * D;
    uint kvbase = b * pc.tk * kstride + hk * D;
    uint DV = pc.dvh;
    uint ostride = pc.hq * DV;
    uint vstride = pc.hkv * DV;
    uint vbase = b * pc.tk * vstride + hk * DV;

    for (uint e = tid; e < BK * D; e += NT) {
        uint c = e / D;
        uint dd = e - c * D;
        uint j = k0 + c;
        sk[c * DS + dd] = j < pc.tk ? ld(pc.k, kvbase + j * kstride + dd) : 0.0;
    }
    for (uint e = tid; e < BK * DV; e += NT) {
        uint c = e / DV;
        uint dd = e - c * DV;
        uint j = k0 + c;
        sv[c * DS + dd] = j < pc.tk ? ld(pc.v, vbase + j * vstride + dd) : 0.0;
    }
    float dk_acc[SLOTS];
    float dv_acc[SLOTS];
    for (uint s = 0; s < SLOTS; s++) {
        dk_acc[s] = 0.0;
        dv_acc[s] = 0.0;
    }

    uint ibeg = attn_query_begin(k0);
    uint iend = attn_query_end(min(k0 + BK, pc.tk));
    for (uint g = 0; g < G; g++) {
        uint h = hk * G + g;
        uint qbase = b * pc.tq * qstride + h * D;
        uint obase = b * pc.tq * ostride + h * DV;
        uint rowbase = (b * pc.hq + h) * pc.tq;
        for (uint q0 = ibeg; q0 < iend; q0 += BQ) {
            barrier();
            for (uint e = tid; e < BQ * D; e += NT) {
                uint r = e / D;
                uint dd = e - r * D;
                uint i = q0 + r;
                sq[r * DS + dd] = i < pc.tq ? ld(pc.q, qbase + i * qstride + dd) : 0.0;
            }
            for (uint e = tid; e < BQ * DV; e += NT) {
                uint r = e / DV;
                uint dd = e - r * DV;
                uint i = q0 + r;
                sdo[r * DS + dd] = i < pc.tq ? ld(pc.do_, obase + i * ostride + dd) : 0.0;
            }
            for (uint r = tid; r < BQ; r += NT) {
                uint i = q0 + r;
                bool in_range = i < pc.tq;
                slse[r] = in_range ? pc.lse.v[rowbase + i] : 0.0;
                sdelta[r] = in_range ? pc.delta.v[rowbase + i] : 0.0;
            }
            barrier();
            // P and dS tiles
            for (uint e = tid; e < BK * BQ; e += NT) {
                uint c = e / BQ;
                uint r = e - c * BQ;
                int i = int(q0 + r);
                int j = int(k0 + c);
                float p = 0.0;
                float ds = 0.0;
                if (attn_visible(b, i, j)) {
                    float dot_qk = 0.0;
                    float dp = 0.0;
                    for (uint dd = 0; dd < D; dd++) {
                        dot_qk += sq[r * DS + dd] * sk[c * DS + dd];
                    }
                    for (uint dd = 0; dd < DV; dd++) {
                        dp += sdo[r * DS + dd] * sv[c * DS + dd];
                    }
                    float dcap;
                    float s = attn_score(dot_qk, h, i, j, dcap);
                    p = exp(s - slse[r]);
                    ds = p * (dp - sdelta[r]) * dcap;
                }
                sp[e] = p;
                sds[e] = ds;
            }
            barrier();
            for (uint s = 0; s < SLOTS; s++) {
                uint o = tid + NT * s;
                if (o < BK * DV) {
                    uint c = o / DV;
                    uint dd = o - c * DV;
                    float a = dv_acc[s];
                    for (uint r = 0; r < BQ; r++) {
                        a += sp[c * BQ + r] * sdo[r * DS + dd];
                    }
                    dv_acc[s] = a;
                }
                if (o < BK * D) {
                    uint c = o / D;
                    uint dd = o - c * D;
                    float bk = dk_acc[s];
                    for (uint r = 0; r < BQ; r++) {
                        bk += sds[c * BQ + r] * sq[r * DS + dd];
                    }
                    dk_acc[s] = bk;
                }
            }
        }
    }
    for (uint s = 0; s < SLOTS; s++) {
        uint o = tid + NT * s;
        if (o < BK * DV) {
            uint c = o / DV;
            uint j = k0 + c;
            if (j < pc.tk) {
                st(pc.dv, vbase + j * vstride + o - c * DV, dv_acc[s]);
            }
        }
        if (o < BK * D) {
            uint c = o / D;
            uint j = k0 + c;
            if (j < pc.tk) {
                st(pc.dk, kvbase + j * kstride + o - c * D, pc.scale * dk_acc[s]);
            }
        }
    }
}
