#version 460
#include "common.glsl"
#include "dtype.glsl"
// Backward of the row reductions: dx[i] = scale * dy[i / d] for i in [0, n); dy [n / d],
// dx [n] (rows of d). scale = 1 for a sum, 1/d for a mean (1/n with d = n for everything).
// dx in the storage type (variants f32 / f16 / bf16), the product in f32; dy in the storage type
// too, or f32 with IN_F32 (`f32_to_f16`, `f32_to_bf16`: the gradient of a full reduction's f32
// output).
// variant: f32
// variant: f16 DT_F16
// variant: bf16 DT_BF16
// variant: f32_to_f16 DT_F16 IN_F32
// variant: f32_to_bf16 DT_BF16 IN_F32
layout(local_size_x = 256) in;
#if defined(IN_F32)
layout(push_constant) uniform Push { F32In dy; DBuf dx; uint n; uint d; float scale; } pc;
float load_dy(uint r) { return pc.dy.v[r]; }
#else
layout(push_constant) uniform Push { DIn dy; DBuf dx; uint n; uint d; float scale; } pc;
float load_dy(uint r) { return ld(pc.dy, r); }
#endif
void main() {
    FOR_EACH_INDEX(i, pc.n) { st(pc.dx, i, pc.scale * load_dy(i / pc.d)); }
}
