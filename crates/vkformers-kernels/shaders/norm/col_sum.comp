#version 460
#include "common.glsl"
// Deterministic second stage of a partial-sum reduction (the norm backwards' weight gradients,
// split-K products, the GQA parts of attention's dk / dv):
//   out[d] = (accumulate ? out[d] : 0) + sum_{b < blocks} partial[b, d]     partial [blocks, D] f32, out [D]
// summed in increasing b, so the result does not depend on scheduling; out in the variant's
// storage type (f32, or rounded once to f16 / bf16 at the end).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In partial;
    DBuf out_;
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
        st(pc.out_, d, pc.accumulate != 0u ? ld(DIn(uint64_t(pc.out_)), d) + s : s);
    }
}
