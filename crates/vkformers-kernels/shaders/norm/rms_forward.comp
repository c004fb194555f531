#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
#extension GL_EXT_control_flow_attributes : require
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
// (cast/twin.glsl), the copy the next 16-bit product reads; `add_twin` fuses the residual add
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

// Columns a thread handles per pass step: their loads are issued together (a row of D = 2048
// on 256 invocations is one step, not eight dependent loads: the single-row decode norm took
// ~10 us on the H200 with a column at a time), and kept in registers for the second pass when
// the whole row fits in one step. The sum runs over the columns in the same order as a column
// at a time did (d = lid, lid + L, lid + 2L, ...), so results are unchanged.
#define NU 8

// x[i] (+ r[i], rounded to the storage type, when ADD).
float input_at(uint i) {
#ifdef ADD
    return rnd(ld(pc.x, i) + ld(pc.r, i));
#else
    return ld(pc.x, i);
#endif
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    const uint STEP = NORM_LOCAL * NU;
    bool kept = pc.D <= STEP;
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float ss = 0.0;
        float keep[NU];
        for (uint d0 = 0; d0 < pc.D; d0 += STEP) {
            [[unroll]] for (uint u = 0; u < NU; u++) {
                uint d = d0 + u * NORM_LOCAL + lid;
                keep[u] = d < pc.D ? input_at(base + d) : 0.0;
            }
            [[unroll]] for (uint u = 0; u < NU; u++) {
                uint d = d0 + u * NORM_LOCAL + lid;
                if (d < pc.D) {
#ifdef ADD
                    // h as stored (rounded); the second pass uses the registers or recomputes
                    // x + r: reading h back through the read-only view gave stale values on
                    // the H200.
                    st(pc.h, base + d, keep[u]);
#endif
                    ss += keep[u] * keep[u];
                }
            }
        }
        float r = inversesqrt(norm_sum2(vec2(ss, 0.0)).x / float(pc.D) + pc.eps);
        for (uint d0 = 0; d0 < pc.D; d0 += STEP) {
            [[unroll]] for (uint u = 0; u < NU; u++) {
                uint d = d0 + u * NORM_LOCAL + lid;
                if (d < pc.D) {
                    float v = kept ? keep[u] : input_at(base + d);
                    float out_ = v * r * norm_gain(pc.w, pc.mode, d);
                    st(pc.y, base + d, out_);
#ifdef OUT16
                    st_twin(pc.y16, base + d, out_, pc.twin);
#endif
                }
            }
        }
        if (lid == 0) {
            pc.rstd.v[row] = r;
        }
    }
}
