#version 460
#include "common.glsl"
// Backward of the row reductions: dx[i] = scale * dy[i / d] for i in [0, n); dy [n / d],
// dx [n] (rows of d). scale = 1 for a sum, 1/d for a mean (1/n with d = n for everything).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In dy; F32Buf dx; uint n; uint d; float scale; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.dx.v[i] = pc.scale * pc.dy.v[i / pc.d]; }
}
