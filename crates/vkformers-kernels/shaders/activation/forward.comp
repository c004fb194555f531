#version 460
#include "common.glsl"
#include "activation/act.glsl"
// y[i] = f(x[i]) for i in [0, n); x, y [n]. One variant per activation f.
// variant: silu ACT_F=silu_f
// variant: gelu ACT_F=gelu_f
// variant: gelu_tanh ACT_F=gelu_tanh_f
// variant: relu ACT_F=relu_f
// variant: relu2 ACT_F=relu2_f
// variant: sigmoid ACT_F=sigmoid_f
// variant: erf ACT_F=erf_f32
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32Buf y; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.y.v[i] = ACT_F(pc.x.v[i]); }
}
