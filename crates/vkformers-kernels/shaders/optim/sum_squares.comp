#version 460
#include "common.glsl"
// Partial sums of squares of one buffer x [n] for the global gradient norm:
//   partials[w] = sum over the elements of workgroup w of x[i]^2,  w < gl_NumWorkGroups.x
// The launcher picks the workgroup count from n alone (`optim::parts`: up to 1024 groups, so one
// large gradient fills a big GPU by itself) and passes that many floats of the partials buffer.
// A fixed element-to-thread assignment (thread g reads g, g + stride, ... into four
// accumulators in turn) and a shared-memory tree keep the result independent of the device,
// its subgroup size and the run: deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf partials; uint n; } pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * 256u;
    uint i = gl_GlobalInvocationID.x;
    // Four independent loads in flight per thread (memory-bound: latency hiding, not FLOPs).
    float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (; i + 3u * stride < pc.n; i += 4u * stride) {
        float a = pc.x.v[i], b = pc.x.v[i + stride], c = pc.x.v[i + 2u * stride], d = pc.x.v[i + 3u * stride];
        s0 += a * a;
        s1 += b * b;
        s2 += c * c;
        s3 += d * d;
    }
    for (; i < pc.n; i += stride) {
        float a = pc.x.v[i];
        s0 += a * a;
    }
    part[t] = (s0 + s1) + (s2 + s3);
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) pc.partials.v[gl_WorkGroupID.x] = part[0];
}
