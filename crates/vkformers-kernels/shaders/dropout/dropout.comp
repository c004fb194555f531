#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "dropout/philox.glsl"
// Dropout with a replayable mask, x and y [n]:
//   y[i] = x[i] * mask[i] * scale,  mask[i] = uniform(seed, offset + i) >= p,  scale = 1 / (1 - p)
// (scale = 0 when p == 1). The same kernel is the backward, dx = dy * mask * scale: it
// recomputes the mask from (seed, offset), so no mask is stored. seed and offset are 64-bit,
// each passed as (lo, hi) uints. x, y in the storage type (variants f32 / f16 / bf16; the mask
// does not depend on it), the product in f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn x;
    DBuf y;
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
        st(pc.y, i, philox_uniform(w) >= pc.p ? ld(pc.x, i) * pc.scale : 0.0);
    )
}
