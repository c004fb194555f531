#version 460
#include "common.glsl"
#include "loss/loss.glsl"
// count[0] = #{r < n : 0 <= labels[r] < vocab}, as a float (exact below 2^24 rows).
// labels [n] int32; count [1]. One workgroup; integer sums, so deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { I32In labels; F32Buf count; uint n; uint vocab; } pc;
shared uint part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    uint c = 0;
    for (uint r = t; r < pc.n; r += 256) {
        if (counted(pc.labels.v[r], pc.vocab)) c++;
    }
    part[t] = c;
    barrier();
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        barrier();
    }
    if (t == 0) pc.count.v[0] = float(part[0]);
}
