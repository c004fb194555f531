#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
// y[i] = f(x[i]) stored in the 16-bit type; x [n] f32 (a product's output), y [n] f16/bf16
// (the next product's operand): the activation and the cast to the product's type in one pass,
// for inference under autocast (no f32 y written and read back by a cast). f in f32 on the f32
// x, rounded by `st` as the cast kernels round, so y is bit for bit cast(forward_f32(x)).
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
layout(push_constant) uniform Push { F32In x; DBuf y; uint n; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) { st(pc.y, i, ACT_F(pc.x.v[i])); }
}
