#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "norm/norm.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifdef ACC
#include "cast/twin.glsl"
#endif
// RMSNorm backward. Inputs x [rows, D], w [D] (read when mode != 0), rstd [rows] (from the
// forward), dy [rows, D]; g = 1, w or 1 + w as in the forward. Per row, with r = rstd[row]:
//   c        = sum_d dy[d] g[d] x[d]
//   dx[d]    = r g[d] dy[d] - x[d] r^3 c / D                         dx [rows, D]
// When want_dw != 0, workgroup b (of G) also writes its share of dw = sum_rows dy x r:
//   partial[b, d] = sum over rows b, b + G, ... of dy[row, d] x[row, d] r     partial [G, D]
// (G <= rows, so every workgroup owns at least one row), then norm/col_sum adds the G rows.
// x, w, dy, dx are in the variant's storage type; rstd, partial and all math are f32.
// `acc_f32` (f32 only): dx also adds prev [rows, D] when has_prev != 0 (the gradient of x
// already gathered from its other readers, e.g. the residual branch: dx = prev + the above, in
// place of an add dispatch after), and is also written to dx16 in f16/bf16 when twin != 0
// (cast/twin.glsl: the copy the backward products reading the gradient take).
// variant: f32
// variant: acc_f32 ACC
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = NORM_LOCAL) in;
layout(push_constant) uniform Push {
    DIn x;
    DIn w;
    F32In rstd;
    DIn dy;
    DBuf dx;
    F32Buf partial;
#ifdef ACC
    F32In prev;
    TwinBuf dx16;
#endif
    uint rows;
    uint D;
    uint mode;
    uint want_dw;
#ifdef ACC
    uint has_prev;
    uint twin;
#endif
} pc;

// Columns per thread held in registers (the row's x and dy between the two passes, and this
// workgroup's dw partials across its rows): rows of D <= REG_COLS * NORM_LOCAL take the
// register path, which reads x and dy once and writes each partial once (the memory path
// re-reads x and dy, and reads and writes the partial row for every row: 3x the traffic of a
// [4096, 2048] backward on the H200, where it ran at ~1 TB/s). Same sums in the same order.
#define REG_COLS 16

void dx_store(uint i, float dxv) {
#ifdef ACC
    if (pc.has_prev != 0u) {
        dxv = pc.prev.v[i] + dxv;
    }
    if (pc.twin != 0u) {
        st_twin(pc.dx16, i, dxv, pc.twin);
    }
#endif
    st(pc.dx, i, dxv);
}

void rows_in_registers() {
    uint lid = gl_LocalInvocationID.x;
    uint pbase = gl_WorkGroupID.x * pc.D;
    float dw[REG_COLS];
    [[unroll]] for (uint j = 0; j < REG_COLS; j++) {
        dw[j] = 0.0;
    }
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float r = pc.rstd.v[row];
        float xs[REG_COLS];
        float gs[REG_COLS];
        float c = 0.0;
        [[unroll]] for (uint j = 0; j < REG_COLS; j++) {
            uint d = lid + j * NORM_LOCAL;
            xs[j] = d < pc.D ? ld(pc.x, base + d) : 0.0;
            gs[j] = d < pc.D ? ld(pc.dy, base + d) : 0.0;
        }
        [[unroll]] for (uint j = 0; j < REG_COLS; j++) {
            uint d = lid + j * NORM_LOCAL;
            if (d < pc.D) {
                c += gs[j] * norm_gain(pc.w, pc.mode, d) * xs[j];
            }
        }
        c = norm_sum2(vec2(c, 0.0)).x;
        float k = r * r * r * c / float(pc.D);
        [[unroll]] for (uint j = 0; j < REG_COLS; j++) {
            uint d = lid + j * NORM_LOCAL;
            if (d < pc.D) {
                dx_store(base + d, r * norm_gain(pc.w, pc.mode, d) * gs[j] - xs[j] * k);
                dw[j] += gs[j] * xs[j] * r;
            }
        }
    }
    if (pc.want_dw != 0u) {
        [[unroll]] for (uint j = 0; j < REG_COLS; j++) {
            uint d = lid + j * NORM_LOCAL;
            if (d < pc.D) {
                pc.partial.v[pbase + d] = dw[j];
            }
        }
    }
}

void rows_in_memory() {
    bool first = true;
    uint pbase = gl_WorkGroupID.x * pc.D;
    FOR_EACH_ROW(row, pc.rows) {
        uint base = row * pc.D;
        float r = pc.rstd.v[row];
        float c = 0.0;
        FOR_EACH_COL(d, pc.D) {
            c += ld(pc.dy, base + d) * norm_gain(pc.w, pc.mode, d) * ld(pc.x, base + d);
        }
        c = norm_sum2(vec2(c, 0.0)).x;
        float k = r * r * r * c / float(pc.D);
        FOR_EACH_COL(d, pc.D) {
            float xv = ld(pc.x, base + d);
            float g = ld(pc.dy, base + d);
            dx_store(base + d, r * norm_gain(pc.w, pc.mode, d) * g - xv * k);
            if (pc.want_dw != 0u) {
                float contrib = g * xv * r;
                pc.partial.v[pbase + d] = first ? contrib : pc.partial.v[pbase + d] + contrib;
            }
        }
        first = false;
    }
}

void main() {
    if (pc.D <= REG_COLS * NORM_LOCAL) {
        rows_in_registers();
    } else {
        rows_in_memory();
    }
}
