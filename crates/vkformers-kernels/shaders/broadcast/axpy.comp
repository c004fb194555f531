#version 460
#include "common.glsl"
// y[i] += alpha * x[i] for i in [0, n), in place (gradient accumulation); x, y [n].
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf y; uint n; float alpha; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.y.v[i] += pc.alpha * pc.x.v[i]; }
}
