#version 460
#include "common.glsl"
#include "dtype.glsl"
// Second pass of split-KV decode attention (decode.comp): merges the S partial softmaxes of each
// query row (b, h, i) into o [B, Tq, Hq, D] and lse [B, Hq, Tq] (D here: decode.comp's Dv). With partial s holding
// acc_s [D] = sum_j e^(S_j - m_s) v_j, m_s and l_s = sum_j e^(S_j - m_s) over its keys:
//   M = max_s m_s;  w_s = e^(m_s - M);  L = sum_s l_s w_s;  o = sum_s acc_s w_s / L;  lse = M + log L
// A row no split saw a key of (every m_s = MASKED, L = 0) gets o = 0, lse = MASKED.
// Learned sinks (has_sinks != 0, [Hq] f32, see fwd.comp): head h's logit joins the denominator
// once, as one more partial with m = s_h, l = 1 and acc = 0 (attn_fold_sink after the merge);
// a row no split saw a key of then gets o = 0, lse = s_h.
// One workgroup per query row: grid [Tq, Hq, B]; threads stride over D.
//
// variant: f32 NT=64
// variant: f16 NT=64 DT_F16
// variant: bf16 NT=64 DT_BF16
#include "attention/attention.glsl"

layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
    F32In work;  // acc [B, Hq, Tq, S, D], then (m, l) [B, Hq, Tq, S, 2]
    DBuf o;
    F32Buf lse;
    F32In sinks;  // [Hq] (read when has_sinks != 0)
    uint tq;
    uint hq;
    uint d;
    uint splits;
    uint has_sinks;
} pc;

void main() {
    uint i = gl_WorkGroupID.x;
    uint h = gl_WorkGroupID.y;
    uint b = gl_WorkGroupID.z;
    uint S = pc.splits;
    uint qrow = (b * pc.hq + h) * pc.tq + i;
    uint ml = gl_NumWorkGroups.z * pc.hq * pc.tq * S * pc.d + 2u * qrow * S;
    float big = MASKED;
    for (uint s = 0; s < S; s++) {
        big = max(big, pc.work.v[ml + 2u * s]);
    }
    float total = 0.0;
    float big0 = big;  // the max the partials are scaled against
    for (uint s = 0; s < S; s++) {
        float m = pc.work.v[ml + 2u * s];
        total += m <= MASKED ? 0.0 : pc.work.v[ml + 2u * s + 1u] * exp(m - big0);
    }
    // Partials are scaled by e^(m_s - big0); the sink rescales them all by a = e^(big0 - big).
    float a = pc.has_sinks != 0u ? attn_fold_sink(pc.sinks.v[h], big, total) : 1.0;
    for (uint dd = gl_LocalInvocationID.x; dd < pc.d; dd += NT) {
        float acc = 0.0;
        for (uint s = 0; s < S; s++) {
            float m = pc.work.v[ml + 2u * s];
            acc += m <= MASKED ? 0.0 : pc.work.v[(qrow * S + s) * pc.d + dd] * exp(m - big0);
        }
        st(pc.o, ((b * pc.tq + i) * pc.hq + h) * pc.d + dd, total > 0.0 ? acc * a / total : 0.0);
    }
    if (gl_LocalInvocationID.x == 0u) {
        pc.lse.v[qrow] = total > 0.0 ? big + log(total) : MASKED;
    }
}
