#version 460
#include "common.glsl"
// Gradient of the learned attention sinks (see fwd.comp): with the forward's sink-aware
// lse' [B, Hq, Tq] and delta = rowsum(do o) [B, Hq, Tq] (written by either bwd_dq kernel),
//   ds_h = -sum_{b, i} delta[b, h, i] * e^(s_h - lse'[b, h, i])
// Why: the sink is one more softmax entry with probability P_s = e^(s - lse') and value 0, so
// dP_s = do . 0 = 0 and dS_s = P_s (dP_s - sum_k P_k dP_k) = -P_s delta. lse' >= s, so the
// exponent is <= 0. A row written as fully masked (lse' = MASKED: only without sinks) adds 0.
// One workgroup per head h (grid [Hq]); each thread sums a strided slice of the B * Tq rows in
// order, then a fixed tree: deterministic, no atomics. ds is overwritten, not accumulated.
#define WG 64
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
#include "attention/attention.glsl"

layout(push_constant) uniform Push {
    F32In lse;    // [B, Hq, Tq]
    F32In delta;  // [B, Hq, Tq]
    F32In sinks;  // [Hq]
    F32Buf ds;    // [Hq]
    uint batch;
    uint hq;
    uint tq;
} pc;

void main() {
    uint h = gl_WorkGroupID.x;
    float s = pc.sinks.v[h];
    float part = 0.0;
    for (uint e = gl_LocalInvocationID.x; e < pc.batch * pc.tq; e += WG) {
        uint b = e / pc.tq;
        uint row = (b * pc.hq + h) * pc.tq + (e - b * pc.tq);
        float l = pc.lse.v[row];
        part += l <= MASKED ? 0.0 : pc.delta.v[row] * exp(s - l);
    }
    float total = wg_sum(part);
    if (gl_LocalInvocationID.x == 0u) {
        pc.ds.v[h] = -total;
    }
}
