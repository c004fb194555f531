#version 460
#include "common.glsl"
// out[i] = sum_p parts[p n + i] for i < n, summed in order p = 0, 1, ... (deterministic) and
// stored in the variant's type: the partial dk / dv [parts, B, Tk, Hkv, D] of bwd_dkdv_cm2
// (query heads of a GQA group summed apart so more workgroups run) into dk / dv [B, Tk, Hkv, D].
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f32
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In parts; DBuf out_; uint n; uint count; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) {
        float acc = 0.0;
        for (uint p = 0; p < pc.count; p++) {
            acc += pc.parts.v[p * pc.n + i];
        }
        st(pc.out_, i, acc);
    }
}
