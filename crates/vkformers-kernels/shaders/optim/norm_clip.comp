#version 460
#include "common.glsl"
#include "optim/optim.glsl"
// Global gradient norm and clip coefficient, as torch.nn.utils.clip_grad_norm_ (norm_type 2):
//   norm[0] = sqrt(sum_k partials[k]),  k < slots * PARTS   (partials from optim/sum_squares)
//   coef[0] = min(1, max_norm / (norm[0] + 1e-6))            (NaN norm gives NaN, as torch)
// One workgroup; fixed order, deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In partials; F32Buf norm; F32Buf coef; uint slots; float max_norm; } pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint k = t; k < pc.slots * PARTS; k += 256) s += pc.partials.v[k];
    part[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) {
        float nrm = sqrt(part[0]);
        float c = pc.max_norm / (nrm + 1e-6);
        pc.norm.v[0] = nrm;
        pc.coef.v[0] = isnan(c) ? c : min(c, 1.0);
    }
}
