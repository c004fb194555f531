#version 460
#include "common.glsl"
// out[i] = value for i in [0, n).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32Buf out_; uint n; float value; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.out_.v[i] = pc.value; }
}
