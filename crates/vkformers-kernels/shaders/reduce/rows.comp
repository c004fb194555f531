#version 460
#include "common.glsl"
#include "dtype.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Row sums: x [n] seen as rows of d elements, row r = x[r d .. min(r d + d, n)) (the last row
// may be short); out[r] = scale * sum(row r), out [rows]. scale = 1 for a sum, 1/d for a mean.
// A multi-stage reduction of everything runs this with d = a fixed chunk, stage after stage.
// One workgroup per row (group-stride loop), each thread sums a strided slice in order, then a
// fixed tree combines them: deterministic.
// x in the storage type (variants f32 / f16 / bf16), sums in f32, out in the storage type too,
// or f32 with OUT_F32 (`f16_to_f32`, `bf16_to_f32`: first stage of a full reduction, whose
// scratch and result stay f32).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f16_to_f32 DT_F16 OUT_F32
// variant: bf16_to_f32 DT_BF16 OUT_F32
#if defined(OUT_F32)
layout(push_constant) uniform Push { DIn x; F32Buf out_; uint rows; uint d; uint n; float scale; } pc;
void store(uint r, float s) { pc.out_.v[r] = s; }
#else
layout(push_constant) uniform Push { DIn x; DBuf out_; uint rows; uint d; uint n; float scale; } pc;
void store(uint r, float s) { st(pc.out_, r, s); }
#endif
void main() {
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint start = r * pc.d;
        uint len = min(pc.d, pc.n - min(start, pc.n));
        float acc = 0.0;
        for (uint j = gl_LocalInvocationID.x; j < len; j += WG) {
            acc += ld(pc.x, start + j);
        }
        float s = wg_sum(acc);
        if (gl_LocalInvocationID.x == 0) {
            store(r, s * pc.scale);
        }
    }
}
