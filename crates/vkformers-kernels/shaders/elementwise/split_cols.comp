#version 460
#include "common.glsl"
// Splits the columns of x [rows, n0 + n1 + n2] into out0 [rows, n0], out1 [rows, n1] and
// out2 [rows, n2] (n2 may be 0: two parts): one packed product's q, k and v (or gate and up)
// as the contiguous tensors their readers take. One thread per element of x.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In x;
    F32Buf out0;
    F32Buf out1;
    F32Buf out2;
    uint rows;
    uint n0;
    uint n1;
    uint n2;
} pc;
void main() {
    uint width = pc.n0 + pc.n1 + pc.n2;
    FOR_EACH_INDEX(i, pc.rows * width) {
        uint r = i / width;
        uint c = i - r * width;
        float v = pc.x.v[i];
        if (c < pc.n0) {
            pc.out0.v[r * pc.n0 + c] = v;
        } else if (c < pc.n0 + pc.n1) {
            pc.out1.v[r * pc.n1 + (c - pc.n0)] = v;
        } else {
            pc.out2.v[r * pc.n2 + (c - pc.n0 - pc.n1)] = v;
        }
    }
}
