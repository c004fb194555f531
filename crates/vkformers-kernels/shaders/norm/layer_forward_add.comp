#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
// A residual add fused with the LayerNorm after it, for inference in post-LN encoders (BERT's
// x' = LayerNorm(x + sublayer(x))): h = x + r is never stored (post-LN reads only y), and
//   y[r, d] = (h[r, d] - mean[r]) * rstd[r] * w[d] + b[d]
// with the sums of layer_forward in the same order, so y is bit for bit the add kernel then
// layer_forward (f32). The twin variants also write y rounded to the 16-bit type (as the cast
// kernels round) into `twin`: the operand the next products read, with no cast dispatch.
// x, r, y [rows, D] f32; w, b [D] f32 (affine: 0 none, 1 w, 2 w and b); twin [rows, D] 16-bit.
// One workgroup per row; h is recomputed in each pass (x + r in f32 gives the same value; the
// row is in cache after the first pass), never read back from memory this dispatch wrote.
// variant: f32
// variant: twin_f16 DT_F16 TWIN
// variant: twin_bf16 DT_BF16 TWIN
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    F32In x;
    F32In r;
    F32In w;
    F32In b;
    F32Buf y;
    DBuf twin;
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
            s += pc.x.v[base + d] + pc.r.v[base + d];
        }
        float mu = norm_sum2(vec2(s, 0.0)).x / float(pc.D);
        float ss = 0.0;
        FOR_EACH_COL(d, pc.D) {
            float c = (pc.x.v[base + d] + pc.r.v[base + d]) - mu;
            ss += c * c;
        }
        float rs = inversesqrt(norm_sum2(vec2(ss, 0.0)).x / float(pc.D) + pc.eps);
        FOR_EACH_COL(d, pc.D) {
            float v = ((pc.x.v[base + d] + pc.r.v[base + d]) - mu) * rs;
            if (pc.affine >= 1u) {
                v *= pc.w.v[d];
            }
            if (pc.affine >= 2u) {
                v += pc.b.v[d];
            }
            pc.y.v[base + d] = v;
#ifdef TWIN
            st(pc.twin, base + d, v);
#endif
        }
    }
}
