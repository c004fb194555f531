#version 460
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
#include "reduce/tree.glsl"
// Row sums: x [n] seen as rows of d elements, row r = x[r d .. min(r d + d, n)) (the last row
// may be short); out[r] = scale * sum(row r), out [rows]. scale = 1 for a sum, 1/d for a mean.
// A multi-stage reduction of everything runs this with d = a fixed chunk, stage after stage.
// One workgroup per row (group-stride loop), each thread sums a strided slice in order, then a
// fixed tree combines them: deterministic.
layout(push_constant) uniform Push { F32In x; F32Buf out_; uint rows; uint d; uint n; float scale; } pc;
void main() {
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint start = r * pc.d;
        uint len = min(pc.d, pc.n - min(start, pc.n));
        float acc = 0.0;
        for (uint j = gl_LocalInvocationID.x; j < len; j += WG) {
            acc += pc.x.v[start + j];
        }
        float s = wg_sum(acc);
        if (gl_LocalInvocationID.x == 0) {
            pc.out_.v[r] = s * pc.scale;
        }
    }
}
