#version 460
#include "common.glsl"
// out[i] = x[i] (op) y[i] for i in [0, n); one variant per op.
// variant: add OP_ADD
// variant: mul OP_MUL
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32In y; F32Buf out_; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) {
#if defined(OP_ADD)
        pc.out_.v[i] = pc.x.v[i] + pc.y.v[i];
#elif defined(OP_MUL)
        pc.out_.v[i] = pc.x.v[i] * pc.y.v[i];
#endif
    }
}
