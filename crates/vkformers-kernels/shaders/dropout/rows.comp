#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "dropout/philox.glsl"
// Row-keyed dropout, x and y [rows, cols], keys [rows, 3] uint32:
//   y[r, c] = x[r, c] * mask[r, c] * scale,   scale = 1 / (1 - p)  (0 when p == 1)
//   mask[r, c] = uniform(word c & 3 of philox4x32_10(
//                    counter = (c >> 2, keys[r, 0], keys[r, 1], keys[r, 2]), key = seed)) >= p
// A row's mask depends on its own key alone (the caller's (position, sample lo, sample hi)),
// not on where the row sits in the batch: a sample draws the same mask in any batch, on any
// rank. The same kernel is the backward (dx = dy * mask * scale, the mask replayed).
// x, y in the storage type (variants f32 / f16 / bf16; the mask does not depend on it).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn x;
    U32Buf keys;
    DBuf y;
    uint rows;
    uint cols;
    uint seed_lo;
    uint seed_hi;
    float p;
    float scale;
} pc;

void main() {
    // One invocation per (row, 4-column block), grid-stride; rows * blocks < 2^32 (launcher).
    uint blocks = (pc.cols + 3u) / 4u;
    uint total = pc.rows * blocks;
    for (uint b = gl_GlobalInvocationID.x; b < total; b += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint r = b / blocks;
        uint cb = b - r * blocks;
        uvec4 ctr = uvec4(cb, pc.keys.v[3u * r], pc.keys.v[3u * r + 1u], pc.keys.v[3u * r + 2u]);
        uvec4 w = philox4x32_10(ctr, uvec2(pc.seed_lo, pc.seed_hi));
        for (uint k = 0u; k < 4u; k++) {
            uint c = cb * 4u + k;
            if (c >= pc.cols) break;
            uint i = r * pc.cols + c;
            st(pc.y, i, philox_uniform(w[k]) >= pc.p ? ld(pc.x, i) * pc.scale : 0.0);
        }
    }
}
