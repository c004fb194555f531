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
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In partial;
    DBuf out_;
    uint blocks;
    uint D;
    uint accumulate;
} pc;

// Blocks whose values are loaded before any is added: the adds stay in increasing b (the same
// sum, bit for bit), but a thread has LOADS reads in flight instead of one. With one thread per
// column and D ~ 2048 there are only a few thousand threads, so a serial chain of dependent
// loads was the kernel's time (37 µs for 1024 blocks on the H200).
#define LOADS 8

void main() {
    FOR_EACH_INDEX(d, pc.D) {
        float s = 0.0;
        uint b = 0;
        for (; b + LOADS <= pc.blocks; b += LOADS) {
            float x[LOADS];
            [[unroll]] for (uint u = 0; u < LOADS; u++) {
                x[u] = pc.partial.v[(b + u) * pc.D + d];
            }
            [[unroll]] for (uint u = 0; u < LOADS; u++) {
                s += x[u];
            }
        }
        for (; b < pc.blocks; b++) {
            s += pc.partial.v[b * pc.D + d];
        }
        st(pc.out_, d, pc.accumulate != 0u ? ld(DIn(uint64_t(pc.out_)), d) + s : s);
    }
}
