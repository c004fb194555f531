#version 460
#include "common.glsl"
// Second stage of the deterministic weight-gradient reduction of the norm backwards:
//   out[d] = (accumulate ? out[d] : 0) + sum_{b < blocks} partial[b, d]     partial [blocks, D], out [D]
// summed in increasing b, so the result does not depend on scheduling.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In partial;
    F32Buf out_;
    uint blocks;
    uint D;
    uint accumulate;
} pc;

void main() {
    FOR_EACH_INDEX(d, pc.D) {
        float s = 0.0;
        for (uint b = 0; b < pc.blocks; b++) {
            s += pc.partial.v[b * pc.D + d];
        }
        pc.out_.v[d] = pc.accumulate != 0u ? pc.out_.v[d] + s : s;
    }
}
