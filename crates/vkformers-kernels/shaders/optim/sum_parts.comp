#version 460
#include "common.glsl"
// Second stage of the gradient-norm reduction: contiguous chunks of the per-buffer partial sums
//   out[w] = sum of x[w * chunk .. min((w + 1) * chunk, n)],  w < gl_NumWorkGroups.x
// (x [n]: every buffer's `optim/sum_squares` partials, ~10^5 of them for a 1B model; one
// workgroup alone would read them serially). Fixed thread assignment and tree: deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf out_; uint n; uint chunk; } pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    uint begin = gl_WorkGroupID.x * pc.chunk;
    uint end = min(begin + pc.chunk, pc.n);
    float s = 0.0;
    for (uint i = begin + t; i < end; i += 256u) s += pc.x.v[i];
    part[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) pc.out_.v[gl_WorkGroupID.x] = part[0];
}
