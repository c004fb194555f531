#version 460
#include "common.glsl"
#include "activation/act.glsl"
// dx[i] = dy[i] * f'(x[i]) for i in [0, n); x, dy, dx [n]. One variant per activation f.
// variant: silu ACT_D=silu_d
// variant: gelu ACT_D=gelu_d
// variant: gelu_tanh ACT_D=gelu_tanh_d
// variant: relu ACT_D=relu_d
// variant: relu2 ACT_D=relu2_d
// variant: sigmoid ACT_D=sigmoid_d
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In x; F32In dy; F32Buf dx; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { pc.dx.v[i] = pc.dy.v[i] * ACT_D(pc.x.v[i]); }
}
