#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
// Gated activation: out[r, j] = f(gate[r, j]) * up[r, j], r < rows, j < inner; out [rows, inner].
// gate and up are rows of `stride` elements: stride = inner for separate [rows, inner] tensors;
// stride = 2 inner for a fused gate_up [rows, 2 inner] (gate = its first inner columns, up =
// the pointer advanced by inner elements). f = silu (SwiGLU) or gelu / gelu_tanh (GeGLU).
// Tensors are in the storage type (f32, or f16/bf16 with the `_f16`/`_bf16` variants); math f32.
// variant: swiglu ACT_F=silu_f
// variant: geglu ACT_F=gelu_f
// variant: geglu_tanh ACT_F=gelu_tanh_f
// variant: swiglu_f16 ACT_F=silu_f DT_F16
// variant: swiglu_bf16 ACT_F=silu_f DT_BF16
// variant: geglu_f16 ACT_F=gelu_f DT_F16
// variant: geglu_bf16 ACT_F=gelu_f DT_BF16
// variant: geglu_tanh_f16 ACT_F=gelu_tanh_f DT_F16
// variant: geglu_tanh_bf16 ACT_F=gelu_tanh_f DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { DIn gate; DIn up; DBuf out_; uint rows; uint inner; uint stride; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner;
        uint s = r * pc.stride + (i - r * pc.inner);
        st(pc.out_, i, ACT_F(ld(pc.gate, s)) * ld(pc.up, s));
    }
}
