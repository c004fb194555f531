#version 460
#include "common.glsl"
#include "optim/optim.glsl"
// Partial sums of squares of one buffer x [n] for the global gradient norm:
//   partials[w] = sum over the elements of workgroup w of x[i]^2,  w < PARTS
// (the launcher passes the PARTS-float range of one buffer's slot).
// Always exactly PARTS workgroups of 256 threads with a fixed element-to-thread assignment and
// shared-memory trees, so the result does not depend on the device or its subgroup size.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf partials; uint n; } pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += PARTS * 256) {
        float v = pc.x.v[i];
        s += v * v;
    }
    part[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) pc.partials.v[gl_WorkGroupID.x] = part[0];
}
