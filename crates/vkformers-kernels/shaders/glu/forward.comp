#version 460
#include "common.glsl"
#include "activation/act.glsl"
// Gated activation: out[r, j] = f(gate[r, j]) * up[r, j], r < rows, j < inner; out [rows, inner].
// gate and up are rows of `stride` floats: stride = inner for separate [rows, inner] tensors;
// stride = 2 inner for a fused gate_up [rows, 2 inner] (gate = its first inner columns, up =
// the pointer advanced by inner floats). f = silu (SwiGLU) or gelu / gelu_tanh (GeGLU).
// variant: swiglu ACT_F=silu_f
// variant: geglu ACT_F=gelu_f
// variant: geglu_tanh ACT_F=gelu_tanh_f
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { F32In gate; F32In up; F32Buf out_; uint rows; uint inner; uint stride; } pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner;
        uint s = r * pc.stride + (i - r * pc.inner);
        pc.out_.v[i] = ACT_F(pc.gate.v[s]) * pc.up.v[s];
    }
}
