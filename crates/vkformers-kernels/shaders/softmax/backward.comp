#version 460
#include "common.glsl"
#include "dtype.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Backward of y = softmax(x) over the last dim: y, dy, dx [rows, d];
//   dx[r, j] = y[r, j] * (dy[r, j] - sum_k dy[r, k] y[r, k]).
// One workgroup per row (group-stride loop over rows). y, dy, dx in the storage type (variants
// f32 / f16 / bf16); the dot product in f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(push_constant) uniform Push { DIn y; DIn dy; DBuf dx; uint rows; uint d; } pc;
void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = r * pc.d;
        float acc = 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            acc += ld(pc.dy, base + j) * ld(pc.y, base + j);
        }
        float dot = wg_sum(acc);
        for (uint j = t; j < pc.d; j += WG) {
            float yv = ld(pc.y, base + j);
            st(pc.dx, base + j, yv * (ld(pc.dy, base + j) - dot));
        }
    }
}
