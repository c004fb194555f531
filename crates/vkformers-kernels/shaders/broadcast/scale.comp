#version 460
#include "common.glsl"
// out[i] = alpha * x[i] for i in [0, n); x, out [n].
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf out_; uint n; float alpha; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.out_.v[i] = pc.alpha * pc.x.v[i]; }
}
