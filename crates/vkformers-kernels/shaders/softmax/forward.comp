#version 460
#include "common.glsl"
#include "dtype.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Numerically stable softmax over the last dim: x, y [rows, d];
//   m_r = max_j x[r, j],  s_r = sum_j exp(x[r, j] - m_r),  y[r, j] = exp(x[r, j] - m_r) / s_r.
// One workgroup per row (group-stride loop over rows), three passes over the row. x, y in the
// storage type (variants f32 / f16 / bf16); max, sum and exp in f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(push_constant) uniform Push { DIn x; DBuf y; uint rows; uint d; } pc;
void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint base = r * pc.d;
        float m = -1.0 / 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            m = max(m, ld(pc.x, base + j));
        }
        m = wg_max(m);
        float s = 0.0;
        for (uint j = t; j < pc.d; j += WG) {
            s += exp(ld(pc.x, base + j) - m);
        }
        float inv = 1.0 / wg_sum(s);
        for (uint j = t; j < pc.d; j += WG) {
            st(pc.y, base + j, exp(ld(pc.x, base + j) - m) * inv);
        }
    }
}
