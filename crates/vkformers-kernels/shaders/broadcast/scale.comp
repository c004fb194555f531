#version 460
#include "common.glsl"
#include "dtype.glsl"
// out[i] = alpha * x[i] for i in [0, n); x, out [n] in the storage type (variants f32 / f16 /
// bf16); the product in f32.
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { DIn x; DBuf out_; uint n; float alpha; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { st(pc.out_, i, pc.alpha * ld(pc.x, i)); }
}
