#version 460
#include "common.glsl"
// Global gradient norm and clip coefficient, as torch.nn.utils.clip_grad_norm_ (norm_type 2):
//   n       = sqrt(sum_k partials[k]),  k < count    (partials from optim/sum_parts)
//   norm[0] = n * inv_scale
//   coef[0] = min(1, max_norm / (n + 1e-6)) * inv_scale     (NaN norm gives NaN, as torch)
// Loss scaling (fp16, as torch.amp.GradScaler): the gradients hold S times the true ones; the
// host passes inv_scale = 1/S and max_norm * S, so norm[0] is the unscaled norm and coef[0]
// unscales and clips in one factor. With skip_nonfinite (GradScaler's overflow check), a
// non-finite n gives coef[0] = -1, which the AdamW kernel reads as "skip this step".
// One workgroup; fixed order, deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In partials;
    F32Buf norm;
    F32Buf coef;
    uint count;
    float max_norm;
    float inv_scale;
    uint skip_nonfinite;
} pc;
shared float part[256];
void main() {
    uint t = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint k = t; k < pc.count; k += 256) s += pc.partials.v[k];
    part[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
        if (t < h) part[t] += part[t + h];
        barrier();
    }
    if (t == 0) {
        float nrm = sqrt(part[0]);
        float c = pc.max_norm / (nrm + 1e-6);
        pc.norm.v[0] = nrm * pc.inv_scale;
        bool overflow = isnan(nrm) || isinf(nrm);
        if (pc.skip_nonfinite != 0 && overflow) {
            pc.coef.v[0] = -1.0;
        } else {
            pc.coef.v[0] = (isnan(c) ? c : min(c, 1.0)) * pc.inv_scale;
        }
    }
}
