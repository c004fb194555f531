#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
// LayerNorm backward. Inputs x [rows, D], w [D] (read when has_w != 0), mean and rstd [rows]
// (from the forward), dy [rows, D]. Per row, with xh = (x - mean) r, r = rstd[row], g = w or 1:
//   a        = sum_d dy[d] g[d] / D,   c = sum_d dy[d] g[d] xh[d] / D
//   dx[d]    = r (dy[d] g[d] - a - xh[d] c)                          dx [rows, D]
// When want_dw != 0, workgroup b (of G <= rows) writes its shares of dw = sum_rows dy xh and
// db = sum_rows dy into partial [2, G, D]:
//   partial[0, b, d] = sum over rows b, b + G, ... of dy xh;   partial[1, b, d] = ... of dy
// and norm/col_sum adds the G rows of each.
// x, w, dy, dx are in the variant's storage type; mean, rstd, partial and all math are f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    DIn x;
    DIn w;
    F32In mean;
    F32In rstd;
    DIn dy;
    DBuf dx;
    F32Buf partial;
    uint rows;
    uint D;
    uint has_w;
    uint want_dw;
} pc;

void main() {
    bool first = true;
    uint pw = gl_WorkGroupID.x * pc.D;
    uint pb = (gl_NumWorkGroups.x + gl_WorkGroupID.x) * pc.D;
    uint mode = pc.has_w != 0u ? GAIN_WEIGHT : GAIN_NONE;
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float mu = pc.mean.v[row];
        float r = pc.rstd.v[row];
        vec2 s = vec2(0.0);
        FOR_EACH_COL(d, pc.D) {
            float gy = ld(pc.dy, base + d) * norm_gain(pc.w, mode, d);
            s += vec2(gy, gy * (ld(pc.x, base + d) - mu) * r);
        }
        s = norm_sum2(s) / float(pc.D);
        FOR_EACH_COL(d, pc.D) {
            float g = ld(pc.dy, base + d);
            float xh = (ld(pc.x, base + d) - mu) * r;
            st(pc.dx, base + d, r * (g * norm_gain(pc.w, mode, d) - s.x - xh * s.y));
            if (pc.want_dw != 0u) {
                pc.partial.v[pw + d] = first ? g * xh : pc.partial.v[pw + d] + g * xh;
                pc.partial.v[pb + d] = first ? g : pc.partial.v[pb + d] + g;
            }
        }
        first = false;
    }
}
