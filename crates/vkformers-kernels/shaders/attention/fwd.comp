#version 460
#include "common.glsl"
#include "dtype.glsl"
// Fused attention forward (flash style). q, k, v, o in the variant's storage type (f32, or
// f16 / bf16: the `_f16` / `_bf16` variants), widened into f32 shared tiles; scores, softmax,
// accumulators and lse are f32.
//
//   q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv] -> o [B, Tq, Hq, Dv], lse [B, Hq, Tq]
//   (Dv = pc.dvh, the value head dim; D, Dv <= DMAX)
//   query head h reads kv head h / G (G = Hq / Hkv: MHA G = 1, GQA, MQA Hkv = 1)
//   S[i, j] = score(q_i . k_j) (scale, softcap, ALiBi; see helpers.glsl), -inf where masked
//   o_i = sum_j softmax_j(S[i, :]) v_j,   lse_i = log sum_j exp S[i, j]
//   A fully masked query row gets o_i = 0 and lse_i = MASKED (-1e30), never NaN.
//   Sinks (flags & ATTN_SINKS): head h's learned logit s_h joins every row's denominator after
//   the last key tile (attn_fold_sink): o_i = sum_j e^(S_ij) v_j / (sum_j e^(S_ij) + e^(s_h)),
//   lse_i = log(sum_j e^(S_ij) + e^(s_h)). The backward kernels read this lse as it is: their
//   P = e^(S - lse) is then the sink-aware softmax, and delta = rowsum(do o) is unchanged in form
//   (the sink's value is 0), so only ds_h needs its own kernel (sink_grad.comp).
//
// Design (shared by bwd_dq/bwd_dkdv): one workgroup of NT threads per (query tile of BQ rows,
// query head, batch). The Q tile sits in shared memory ([BQ, D], rows padded to DMAX + 1 floats);
// key/value tiles of BK rows are staged one at a time through one shared buffer, so the full
// [Tq, Tk] score matrix never exists: only a [BQ, BK] score tile in shared memory.
// Per key tile:
//   1. load K tile; 2. threads compute the BQ*BK dots (thread e -> row e / BK, key e % BK),
//      apply scale/softcap/masks/ALiBi, store S tile;
//   3. one thread per row updates the running max m (online softmax) and alpha = exp(m_old - m),
//      while all threads load the V tile over K;
//   4. S tile -> P = exp(S - m);
//   5. one thread per row: l = l * alpha + rowsum(P); every thread updates its output slots
//      acc[r, d] = acc[r, d] * alpha_r + sum_c P[r, c] V[c, d] (slot o = tid + NT*s, r = o / Dv,
//      d = o % Dv: the output tile is spread evenly over threads for any Dv <= DMAX).
// Key tiles no query of the tile can see (causal, sliding window) are skipped.
// No subgroup operations: any subgroup size works. Variants by DMAX keep shared memory under
// 32 KiB (lavapipe): d64 ~20 KiB, d128 ~27 KiB, d256 ~25 KiB, d576 (heads 257..576, e.g.
// MLA's absorbed 512 + 64) ~28 KiB with BQ = 8, BK = 4 (tiles of 577 floats a row).
//
// variant: d64 DMAX=64 BQ=32 BK=32 NT=256
// variant: d128 DMAX=128 BQ=32 BK=16 NT=256
// variant: d256 DMAX=256 BQ=16 BK=8 NT=128
// variant: d64_f16 DMAX=64 BQ=32 BK=32 NT=256 DT_F16
// variant: d128_f16 DMAX=128 BQ=32 BK=16 NT=256 DT_F16
// variant: d256_f16 DMAX=256 BQ=16 BK=8 NT=128 DT_F16
// variant: d64_bf16 DMAX=64 BQ=32 BK=32 NT=256 DT_BF16
// variant: d128_bf16 DMAX=128 BQ=32 BK=16 NT=256 DT_BF16
// variant: d256_bf16 DMAX=256 BQ=16 BK=8 NT=128 DT_BF16
// variant: d576 DMAX=576 BQ=8 BK=4 NT=64
// variant: d576_f16 DMAX=576 BQ=8 BK=4 NT=64 DT_F16
// variant: d576_bf16 DMAX=576 BQ=8 BK=4 NT=64 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    DIn q;
    DIn k;
    DIn v;
    I32In kmask;   // [B, Tk], 1 keep / 0 masked (read when flags & ATTN_KMASK)
    F32In slopes;  // [Hq] ALiBi slopes (read when flags & ATTN_ALIBI)
    F32In sinks;   // [Hq] sink logits (read when flags & ATTN_SINKS)
    DBuf o;
    F32Buf lse;
    ATTN_SCALARS
} pc;
#include "attention/helpers.glsl"

const uint SLOTS = (BQ * DMAX + NT - 1) / NT;

shared float sq[BQ * DS];
shared float skv[BK * DS];
shared float ss[BQ * BK];
shared float sm[BQ];
shared float sl[BQ];
shared float salpha[BQ];

// Loads rows [j0, j0 + BK) of a kv tensor of head width D (kv head hk, batch b) into skv,
// zeros past tk.
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

    for (uint e = tid; e < BQ * D; e += NT) {
        uint r = e / D;
        uint dd = e - r * D;
        uint i = q0 + r;
        sq[r * DS + dd] = i < pc.tq ? ld(pc.q, qbase + i * qstride + dd) : 0.0;
    }
    for (uint r = tid; r < BQ; r += NT) {
        sm[r] = MASKED;
        sl[r] = 0.0;
    }
    float acc[SLOTS];
    for (uint s = 0; s < SLOTS; s++) {
        acc[s] = 0.0;
    }

    uint kbeg = attn_key_begin(q0);
    uint kend = attn_key_end(min(q0 + BQ, pc.tq));
    for (uint k0 = kbeg; k0 < kend; k0 += BK) {
        barrier();
        load_kv_tile(pc.k, kvbase, kstride, k0, D);
        barrier();
        // 2. score tile
        for (uint e = tid; e < BQ * BK; e += NT) {
            uint r = e / BK;
            uint c = e - r * BK;
            int i = int(q0 + r);
            int j = int(k0 + c);
            float s = MASKED;
            if (attn_visible(b, i, j)) {
                float dot_qk = 0.0;
                for (uint dd = 0; dd < D; dd++) {
                    dot_qk += sq[r * DS + dd] * skv[c * DS + dd];
                }
                float dcap;
                s = attn_score(dot_qk, h, i, j, dcap);
            }
            ss[e] = s;
        }
        barrier();
        // 3. running max, and V over K
        for (uint r = tid; r < BQ; r += NT) {
            float m_old = sm[r];
            float m = m_old;
            for (uint c = 0; c < BK; c++) {
                m = max(m, ss[r * BK + c]);
            }
            salpha[r] = exp(m_old - m);
            sm[r] = m;
        }
        load_kv_tile(pc.v, vbase, vstride, k0, DV);
        barrier();
        // 4. probabilities (a row that saw no visible key keeps m = MASKED and P = 0)
        for (uint e = tid; e < BQ * BK; e += NT) {
            float m = sm[e / BK];
            ss[e] = m <= MASKED ? 0.0 : exp(ss[e] - m);
        }
        barrier();
        // 5. running sums and output accumulators
        for (uint r = tid; r < BQ; r += NT) {
            float sum = 0.0;
            for (uint c = 0; c < BK; c++) {
                sum += ss[r * BK + c];
            }
            sl[r] = sl[r] * salpha[r] + sum;
        }
        for (uint s = 0; s < SLOTS; s++) {
            uint o = tid + NT * s;
            if (o < BQ * DV) {
                uint r = o / DV;
                uint dd = o - r * DV;
                float a = acc[s] * salpha[r];
                for (uint c = 0; c < BK; c++) {
                    a += ss[r * BK + c] * skv[c * DS + dd];
                }
                acc[s] = a;
            }
        }
    }
    barrier();
    // The sink joins each row's denominator once; salpha rescales its accumulators.
    for (uint r = tid; r < BQ; r += NT) {
        salpha[r] = (pc.flags & ATTN_SINKS) != 0u ? attn_fold_sink(pc.sinks.v[h], sm[r], sl[r]) : 1.0;
    }
    barrier();
    for (uint s = 0; s < SLOTS; s++) {
        uint o = tid + NT * s;
        if (o < BQ * DV) {
            uint r = o / DV;
            uint dd = o - r * DV;
            uint i = q0 + r;
            float l = sl[r];
            if (i < pc.tq) {
                st(pc.o, obase + i * ostride + dd, l > 0.0 ? acc[s] * salpha[r] / l : 0.0);
            }
        }
    }
    for (uint r = tid; r < BQ; r += NT) {
        uint i = q0 + r;
        float l = sl[r];
        if (i < pc.tq) {
            pc.lse.v[(b * pc.hq + h) * pc.tq + i] = l > 0.0 ? sm[r] + log(l) : MASKED;
        }
    }
}
