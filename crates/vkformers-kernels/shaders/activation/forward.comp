#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
// y[i] = f(x[i]) for i in [0, n); x, y [n] in the storage type (f32, or f16/bf16 with the
// `_f16`/`_bf16` variants; f computed in f32). One variant per activation f and storage type.
// variant: silu ACT_F=silu_f
// variant: gelu ACT_F=gelu_f
// variant: gelu_tanh ACT_F=gelu_tanh_f
// variant: relu ACT_F=relu_f
// variant: relu2 ACT_F=relu2_f
// variant: sigmoid ACT_F=sigmoid_f
// variant: erf ACT_F=erf_f32
// variant: silu_f16 ACT_F=silu_f DT_F16
// variant: silu_bf16 ACT_F=silu_f DT_BF16
// variant: gelu_f16 ACT_F=gelu_f DT_F16
// variant: gelu_bf16 ACT_F=gelu_f DT_BF16
// variant: gelu_tanh_f16 ACT_F=gelu_tanh_f DT_F16
// variant: gelu_tanh_bf16 ACT_F=gelu_tanh_f DT_BF16
// variant: relu_f16 ACT_F=relu_f DT_F16
// variant: relu_bf16 ACT_F=relu_f DT_BF16
// variant: relu2_f16 ACT_F=relu2_f DT_F16
// variant: relu2_bf16 ACT_F=relu2_f DT_BF16
// variant: sigmoid_f16 ACT_F=sigmoid_f DT_F16
// variant: sigmoid_bf16 ACT_F=sigmoid_f DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { DIn x; DBuf y; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { st(pc.y, i, ACT_F(ld(pc.x, i))); }
}
