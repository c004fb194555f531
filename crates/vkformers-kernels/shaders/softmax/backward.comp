#version 460
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Backward of y = softmax(x) over the last dim: y, dy, dx [rows, d];
//   dx[r, j] = y[r, j] * (dy[r, j] - sum_k dy[r, k] y[r, k]).
// One workgroup per row (group-stride loop over rows).
layout(push_constant) uniform Push { F32In y; F32In dy; F32Buf dx; uint rows; uint d; } pc;
void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = r * pc.d;
        float acc = 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            acc += pc.dy.v[base + j] * pc.y.v[base + j];
        }
        float dot = wg_sum(acc);
        for (uint j = t; j < pc.d; j += WG) {
            float yv = pc.y.v[base + j];
            pc.dx.v[base + j] = yv * (pc.dy.v[base + j] - dot);
        }
    }
}
