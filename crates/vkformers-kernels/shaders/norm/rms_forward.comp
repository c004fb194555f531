#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
#ifdef OUT16
#include "cast/twin.glsl"
#endif
// RMSNorm forward over the last dim of x [rows, D]:
//   rstd[r]  = 1 / sqrt(mean_d x[r, d]^2 + eps)                      rstd [rows] (for the backward)
//   y[r, d]  = x[r, d] * rstd[r] * g[d]                              y [rows, D]
// with g = 1 (mode 0), w (mode 1) or 1 + w (mode 2, Gemma); w [D] is read only when mode != 0.
// One workgroup per row. x, w, y are in the variant's storage type (f32, f16, bf16); rstd
// and all math are f32.
// ADD variants (inference: a residual add fused with the norm after it, one dispatch and one
// barrier fewer): h = x + r is written too and normalised, as rounded to the storage type, so
// h, y and rstd are those of broadcast/binary:add followed by the plain kernel.
// `_cpu` variants: one 8-lane workgroup per row (NORM_LOCAL=8).
// `twin` variants (f32 only, training under autocast): y is also written to y16 in f16/bf16
// (cast/twin.glsl), the copy the next 16-bit product reads (twin | 4: y16 only, y not written); `add_twin` fuses the residual add
// too (training: the tape still records the add and the norm as two ops).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f32_cpu NORM_LOCAL=8
// variant: f16_cpu DT_F16 NORM_LOCAL=8
// variant: bf16_cpu DT_BF16 NORM_LOCAL=8
// variant: twin_f32 OUT16
// variant: twin_f32_cpu OUT16 NORM_LOCAL=8
// variant: add_f32 ADD
// variant: add_twin_f32 ADD OUT16
// variant: add_twin_f32_cpu ADD OUT16 NORM_LOCAL=8
// variant: add_f16 DT_F16 ADD
// variant: add_bf16 DT_BF16 ADD
// variant: add_f32_cpu ADD NORM_LOCAL=8
// variant: add_f16_cpu DT_F16 ADD NORM_LOCAL=8
// variant: add_bf16_cpu DT_BF16 ADD NORM_LOCAL=8
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    DIn x;
#ifdef ADD
    DIn r;  // [rows, D]: added to x
    DBuf h; // [rows, D]: x + r
#endif
    DIn w;
    DBuf y;
    F32Buf rstd;
#ifdef OUT16
    TwinBuf y16; // [rows, D] in 16 bits
#endif
    uint rows;
    uint D;
    float eps;
    uint mode;
#ifdef OUT16
    uint twin;
#endif
} pc;

void main() {
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float ss = 0.0;
        FOR_EACH_COL(d, pc.D) {
#ifdef ADD
            // h as stored (rounded), kept in registers and recomputed in the second pass:
            // reading it back through the read-only view gave stale values on the H200.
            float v = rnd(ld(pc.x, base + d) + ld(pc.r, base + d));
            st(pc.h, base + d, v);
#else
            float v = ld(pc.x, base + d);
#endif
            ss += v * v;
        }
        float r = inversesqrt(norm_sum2(vec2(ss, 0.0)).x / float(pc.D) + pc.eps);
        FOR_EACH_COL(d, pc.D) {
#ifdef ADD
            float v = rnd(ld(pc.x, base + d) + ld(pc.r, base + d));
#else
            float v = ld(pc.x, base + d);
#endif
            float out_ = v * r * norm_gain(pc.w, pc.mode, d);
#ifdef OUT16
            // twin bit 2: y16 only (training, when products are y's only readers).
            if ((pc.twin & 4u) == 0u) st(pc.y, base + d, out_);
            st_twin(pc.y16, base + d, out_, pc.twin & 3u);
#else
            st(pc.y, base + d, out_);
#endif
        }
        if (gl_LocalInvocationID.x == 0) {
            pc.rstd.v[row] = r;
        }
    }
}
