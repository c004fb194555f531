#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
// dx[i] = dy[i] * f'(x[i]) for i in [0, n); x, dy, dx [n] in the storage type (f32, or f16/bf16
// with the `_f16`/`_bf16` variants; math in f32). One variant per activation f and storage type.
// variant: silu ACT_D=silu_d
// variant: gelu ACT_D=gelu_d
// variant: gelu_tanh ACT_D=gelu_tanh_d
// variant: relu ACT_D=relu_d
// variant: relu2 ACT_D=relu2_d
// variant: sigmoid ACT_D=sigmoid_d
// variant: silu_f16 ACT_D=silu_d DT_F16
// variant: silu_bf16 ACT_D=silu_d DT_BF16
// variant: gelu_f16 ACT_D=gelu_d DT_F16
// variant: gelu_bf16 ACT_D=gelu_d DT_BF16
// variant: gelu_tanh_f16 ACT_D=gelu_tanh_d DT_F16
// variant: gelu_tanh_bf16 ACT_D=gelu_tanh_d DT_BF16
// variant: relu_f16 ACT_D=relu_d DT_F16
// variant: relu_bf16 ACT_D=relu_d DT_BF16
// variant: relu2_f16 ACT_D=relu2_d DT_F16
// variant: relu2_bf16 ACT_D=relu2_d DT_BF16
// variant: sigmoid_f16 ACT_D=sigmoid_d DT_F16
// variant: sigmoid_bf16 ACT_D=sigmoid_d DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { DIn x; DIn dy; DBuf dx; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { st(pc.dx, i, ld(pc.dy, i) * ACT_D(ld(pc.x, i))); }
}
