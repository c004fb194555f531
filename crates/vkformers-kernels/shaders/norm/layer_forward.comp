#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
// LayerNorm forward over the last dim of x [rows, D] (biased variance, as PyTorch):
//   mean[r]  = sum_d x[r, d] / D                                    mean [rows]
//   rstd[r]  = 1 / sqrt(sum_d (x[r, d] - mean[r])^2 / D + eps)      rstd [rows]
//   y[r, d]  = (x[r, d] - mean[r]) * rstd[r] * w[d] + b[d]          y [rows, D]
// affine: 0 = no w, no b (elementwise_affine=False); 1 = w only; 2 = w and b (w, b [D]).
// One workgroup per row; the variance is a second pass over the row (no cancellation).
// x, w, b, y are in the variant's storage type; mean, rstd and all math are f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    DIn x;
    DIn w;
    DIn b;
    DBuf y;
    F32Buf mean;
    F32Buf rstd;
    uint rows;
    uint D;
    float eps;
    uint affine;
} pc;

void main() {
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float s = 0.0;
        FOR_EACH_COL(d, pc.D) {
            s += ld(pc.x, base + d);
        }
        float mu = norm_sum2(vec2(s, 0.0)).x / float(pc.D);
        float ss = 0.0;
        FOR_EACH_COL(d, pc.D) {
            float c = ld(pc.x, base + d) - mu;
            ss += c * c;
        }
        float r = inversesqrt(norm_sum2(vec2(ss, 0.0)).x / float(pc.D) + pc.eps);
        FOR_EACH_COL(d, pc.D) {
            float v = (ld(pc.x, base + d) - mu) * r;
            if (pc.affine >= 1u) {
                v *= ld(pc.w, d);
            }
            if (pc.affine >= 2u) {
                v += ld(pc.b, d);
            }
            st(pc.y, base + d, v);
        }
        if (gl_LocalInvocationID.x == 0) {
            pc.mean.v[row] = mu;
            pc.rstd.v[row] = r;
        }
    }
}
