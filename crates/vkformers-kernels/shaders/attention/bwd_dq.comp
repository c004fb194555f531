#version 460
#include "common.glsl"
#include "dtype.glsl"
// Fused attention backward, part 1 of 2: dq and delta (flash-attention-2 style). q, k, v,
// o, do, dq in the variant's storage type (f32, f16, bf16); lse, delta and all math are f32.
//
//   q [B, Tq, Hq, D], do_, o [B, Tq, Hq, Dv], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv],
//   lse [B, Hq, Tq] (from fwd) -> dq [B, Tq, Hq, D], delta [B, Hq, Tq]   (Dv = pc.dvh)
//   delta_i = sum_d do[i, d] * o[i, d]             (written here, read by bwd_dkdv)
//   P[i, j] = exp(S[i, j] - lse_i) (0 where masked: a fully masked row gets zero gradients)
//   dP[i, j] = do_i . v_j;  dS[i, j] = P[i, j] * (dP[i, j] - delta_i) * (1 - tanh^2 if softcap)
//   dq_i = scale * sum_j dS[i, j] k_j
//
// Design: as fwd.comp, one workgroup of NT threads per (query tile of BQ rows, query head,
// batch); Q and dO tiles in shared memory; per key tile the V tile is staged first (dP tile),
// then the K tile over it (S, P, dS tile), then dq[r, d] += sum_c dS[r, c] K[c, d] in per-thread
// slots. The workgroup owns its dq rows: no atomics, deterministic.
//
// d576 (heads 257..576): sq + sdo + skv = (2·4 + 4)·577 floats ~28 KiB.
// variant: d64 DMAX=64 BQ=32 BK=16 NT=256
// variant: d128 DMAX=128 BQ=16 BK=16 NT=256
// variant: d256 DMAX=256 BQ=8 BK=8 NT=64
// variant: d64_f16 DMAX=64 BQ=32 BK=16 NT=256 DT_F16
// variant: d128_f16 DMAX=128 BQ=16 BK=16 NT=256 DT_F16
// variant: d256_f16 DMAX=256 BQ=8 BK=8 NT=64 DT_F16
// variant: d64_bf16 DMAX=64 BQ=32 BK=16 NT=256 DT_BF16
// variant: d128_bf16 DMAX=128 BQ=16 BK=16 NT=256 DT_BF16
// variant: d256_bf16 DMAX=256 BQ=8 BK=8 NT=64 DT_BF16
// variant: d576 DMAX=576 BQ=4 BK=4 NT=64
// variant: d576_f16 DMAX=576 BQ=4 BK=4 NT=64 DT_F16
// variant: d576_bf16 DMAX=576 BQ=4 BK=4 NT=64 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    DIn q;
    DIn k;
    DIn v;
    DIn o;
    DIn do_;
    F32In lse;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    F32Buf delta;
    DBuf dq;
    ATTN_SCALARS
} pc;
#include "attention/helpers.glsl"

const uint SLOTS = (BQ * DMAX + NT - 1) / NT;

shared float sq[BQ * DS];
shared float sdo[BQ * DS];
shared float skv[BK * DS];
shared float ss[BQ * BK];
shared float slse[BQ];
shared float sdelta[BQ];

// Rows [j0, j0 + BK) of a kv tensor of head width D into skv, zeros past tk.
void load_kv_tile(DIn src, uint kvbase, uint kstride, uint j0, uint D) {
    for (uint e = gl_LocalInvocationID.x; e < BK * D; e += NT) {
        uint c = e / D;
        uint dd = e - c * D;
        uint j = j0 + c;
        skv[c * DS + dd] = j < pc.tk ? ld(src, kvbase + j * kstride + dd) : 0.0;
    }
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint q0 = gl_WorkGroupID.x * BQ;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint D = pc.d;
    uint hk = h / (pc.hq / pc.hkv);
    uint qstride = pc.hq * D;
    uint kstride = pc.hkv * D;
    uint qbase = b * pc.tq * qstride + h * D;
    uint kvbase = b * pc.tk * kstride + hk * D;
    uint DV = pc.dvh;
    uint ostride = pc.hq * DV;
    uint vstride = pc.hkv * DV;
    uint obase = b * pc.tq * ostride + h * DV;
    uint vbase = b * pc.tk * vstride + hk * DV;
    uint rowbase = (b * pc.hq + h) * pc.tq;

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
    barrier();
    for (uint r = tid; r < BQ; r += NT) {
        uint i = q0 + r;
        float di = 0.0;
        float l = 0.0;
        if (i < pc.tq) {
            for (uint dd = 0; dd < DV; dd++) {
                di += sdo[r * DS + dd] * ld(pc.o, obase + i * ostride + dd);
            }
            l = pc.lse.v[rowbase + i];
            pc.delta.v[rowbase + i] = di;
        }
        sdelta[r] = di;
        slse[r] = l;
    }
    float acc[SLOTS];
    for (uint s = 0; s < SLOTS; s++) {
        acc[s] = 0.0;
    }

    uint kbeg = attn_key_begin(q0);
    uint kend = attn_key_end(min(q0 + BQ, pc.tq));
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier();
        load_kv_tile(pc.v, vbase, vstride, k0, DV);
        barrier();
        // dP tile
        for (uint e = tid; e < BQ * BK; e += NT) {
            uint r = e / BK;
            uint c = e - r * BK;
            float dp = 0.0;
            for (uint dd = 0; dd < DV; dd++) {
                dp += sdo[r * DS + dd] * skv[c * DS + dd];
            }
            ss[e] = dp;
        }
        barrier();
        load_kv_tile(pc.k, kvbase, kstride, k0, D);
        barrier();
        // dS tile (each thread rewrites only its own dP entries)
        for (uint e = tid; e < BQ * BK; e += NT) {
            uint r = e / BK;
            uint c = e - r * BK;
            int i = int(q0 + r);
            int j = int(k0 + c);
            float ds = 0.0;
            if (attn_visible(b, i, j)) {
                float dot_qk = 0.0;
                for (uint dd = 0; dd < D; dd++) {
                    dot_qk += sq[r * DS + dd] * skv[c * DS + dd];
                }
                float dcap;
                float s = attn_score(dot_qk, h, i, j, dcap);
                float p = exp(s - slse[r]);
                ds = p * (ss[e] - sdelta[r]) * dcap;
            }
            ss[e] = ds;
        }
        barrier();
        for (uint s = 0; s < SLOTS; s++) {
            uint o = tid + NT * s;
            if (o < BQ * D) {
                uint r = o / D;
                uint dd = o - r * D;
                float a = acc[s];
                for (uint c = 0; c < BK; c++) {
                    a += ss[r * BK + c] * skv[c * DS + dd];
                }
                acc[s] = a;
            }
        }
    }
    for (uint s = 0; s < SLOTS; s++) {
        uint o = tid + NT * s;
        if (o < BQ * D) {
            uint r = o / D;
            uint dd = o - r * D;
            uint i = q0 + r;
            if (i < pc.tq) {
                st(pc.dq, qbase + i * qstride + dd, pc.scale * acc[s]);
            }
        }
    }
}
