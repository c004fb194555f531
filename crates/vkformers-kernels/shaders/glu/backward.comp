#version 460
#include "common.glsl"
#include "activation/act.glsl"
// Backward of out = f(gate) * up (see forward.comp), dout [rows, inner]:
//   dgate[r, j] = dout[r, j] * up[r, j] * f'(gate[r, j]),  dup[r, j] = dout[r, j] * f(gate[r, j]).
// gate, up, dgate, dup are rows of `stride` floats (inner: separate tensors; 2 inner: fused
// gate_up and its fused gradient, the up pointers advanced by inner floats).
// variant: swiglu ACT_F=silu_f ACT_D=silu_d
// variant: geglu ACT_F=gelu_f ACT_D=gelu_d
// variant: geglu_tanh ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In gate; F32In up; F32In dout; F32Buf dgate; F32Buf dup; uint rows; uint inner; uint stride;
} pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner;
        uint s = r * pc.stride + (i - r * pc.inner);
        float g = pc.gate.v[s];
        float u = pc.up.v[s];
        float d = pc.dout.v[i];
        pc.dgate.v[s] = d * u * ACT_D(g);
        pc.dup.v[s] = d * ACT_F(g);
    }
}
