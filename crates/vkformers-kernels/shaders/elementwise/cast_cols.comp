#version 460
#include "common.glsl"
#include "cast/twin.glsl"
// out16 [rows, n] = x [rows, x_stride]'s first n columns, rounded to f16 (twin = 1) or bf16
// (twin = 2) as the cast kernels round: training reads v in 16 bits straight from its columns of
// the packed q/k/v product's f32 output (x: the view from v's first column), the copy attention
// reads, with no split and no cast of a contiguous f32 v. One thread per element of out16.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In x;
    TwinBuf out16;
    uint rows;
    uint n;
    uint x_stride;
    uint twin;
} pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.n) {
        uint r = i / pc.n;
        st_twin(pc.out16, i, pc.x.v[r * pc.x_stride + (i - r * pc.n)], pc.twin);
    }
}
