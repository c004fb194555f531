#version 460
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Numerically stable softmax over the last dim: x, y [rows, d];
//   m_r = max_j x[r, j],  s_r = sum_j exp(x[r, j] - m_r),  y[r, j] = exp(x[r, j] - m_r) / s_r.
// One workgroup per row (group-stride loop over rows), three passes over the row.
layout(push_constant) uniform Push { F32In x; F32Buf y; uint rows; uint d; } pc;
void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = r * pc.d;
        float m = -1.0 / 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            m = max(m, pc.x.v[base + j]);
        }
        m = wg_max(m);
        float s = 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            s += exp(pc.x.v[base + j] - m);
        }
        float inv = 1.0 / wg_sum(s);
        for (uint j = t; j < pc.d; j += WG) {
            pc.y.v[base + j] = exp(pc.x.v[base + j] - m) * inv;
        }
    }
}
