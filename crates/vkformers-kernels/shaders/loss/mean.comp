#version 460
#include "common.glsl"
// out[0] = sum_r loss[r] / count[0], or 0 when count[0] == 0 (PyTorch: NaN).
// loss [n] (0 on ignored rows), count [1], out [1]. One workgroup; fixed summation order
// (strided per-thread sums, then a shared-memory tree), so the result is deterministic and the
// same on every device.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In loss; F32In count; F32Buf out_; uint n; } pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint r = t; r < pc.n; r += 256) s += pc.loss.v[r];
    part[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) {
        float cnt = pc.count.v[0];
        pc.out_.v[0] = cnt > 0.0 ? part[0] / cnt : 0.0;
    }
}
