#version 460
#include "common.glsl"
#include "moe/moe.glsl"
// Weight gradient of a grouped product: per expert e, over its contiguous slots
// s in [offsets[e], offsets[e + 1]):
//   D[e, i, j] = sum_s L[s, i] · R[s, j]          L [S, li], R [S, rj], D [E, li, rj] f32
// (dB_e = dC_eᵀ · A_e for B in the nn.Linear layout: L = dC, R = A). D is overwritten; an
// expert with no slots gets zeros. One invocation per element of D, s ascending.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In l;
    F32In r;
    F32Buf d;
    I32In offsets;
    uint experts;
    uint li;
    uint rj;
} pc;

void main() {
    FOR_EACH_INDEX(idx, pc.experts * pc.li * pc.rj) {
        uint e = idx / (pc.li * pc.rj);
        uint i = (idx / pc.rj) % pc.li;
        uint j = idx % pc.rj;
        float acc = 0.0;
        for (int s = pc.offsets.v[e]; s < pc.offsets.v[e + 1]; s++) {
            acc += pc.l.v[uint(s) * pc.li + i] * pc.r.v[uint(s) * pc.rj + j];
        }
        pc.d.v[idx] = acc;
    }
}
