#version 460
#include "common.glsl"
#include "dropout/philox.glsl"
// Dropout with a replayable mask, x and y [n]:
//   y[i] = x[i] * mask[i] * scale,  mask[i] = uniform(seed, offset + i) >= p,  scale = 1 / (1 - p)
// (scale = 0 when p == 1). The same kernel is the backward, dx = dy * mask * scale: it
// recomputes the mask from (seed, offset), so no mask is stored. seed and offset are 64-bit,
// each passed as (lo, hi) uints.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In x;
    F32Buf y;
    uint n;
    uint seed_lo;
    uint seed_hi;
    uint offset_lo;
    uint offset_hi;
    float p;
    float scale;
} pc;

void main() {
    FOR_EACH_RANDOM_WORD(pc.seed_lo, pc.seed_hi, pc.offset_lo, pc.offset_hi, pc.n,
        pc.y.v[i] = philox_uniform(w) >= pc.p ? pc.x.v[i] * pc.scale : 0.0;
    )
}
