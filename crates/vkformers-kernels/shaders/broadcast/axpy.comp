#version 460
#include "common.glsl"
#include "dtype.glsl"
// y[i] += alpha * x[i] for i in [0, n), in place (gradient accumulation); x, y [n]. The
// accumulator y is always f32; x is in the storage type (variants f32 / f16 / bf16).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { DIn x; F32Buf y; uint n; float alpha; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.y.v[i] += pc.alpha * ld(pc.x, i); }
}
