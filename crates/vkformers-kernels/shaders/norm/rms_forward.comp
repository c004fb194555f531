#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
// RMSNorm forward over the last dim of x [rows, D]:
//   rstd[r]  = 1 / sqrt(mean_d x[r, d]^2 + eps)                      rstd [rows] (for the backward)
//   y[r, d]  = x[r, d] * rstd[r] * g[d]                              y [rows, D]
// with g = 1 (mode 0), w (mode 1) or 1 + w (mode 2, Gemma); w [D] is read only when mode != 0.
// One workgroup per row. x, w, y are in the variant's storage type (f32, f16, bf16); rstd
// and all math are f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    DIn x;
    DIn w;
    DBuf y;
    F32Buf rstd;
    uint rows;
    uint D;
    float eps;
    uint mode;
} pc;

void main() {
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float ss = 0.0;
        FOR_EACH_COL(d, pc.D) {
            float v = ld(pc.x, base + d);
            ss += v * v;
        }
        float r = inversesqrt(norm_sum2(vec2(ss, 0.0)).x / float(pc.D) + pc.eps);
        FOR_EACH_COL(d, pc.D) {
            st(pc.y, base + d, ld(pc.x, base + d) * r * norm_gain(pc.w, pc.mode, d));
        }
        if (gl_LocalInvocationID.x == 0) {
            pc.rstd.v[row] = r;
        }
    }
}
