#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
#ifdef OUT16
#include "cast/twin.glsl"
#endif
// Gated activation: out[r, j] = f(gate[r, j]) * up[r, j], r < rows, j < inner; out [rows, inner].
// gate and up are rows of `stride` elements: stride = inner for separate [rows, inner] tensors;
// stride = 2 inner for a fused gate_up [rows, 2 inner] (gate = its first inner columns, up =
// the pointer advanced by inner elements). f = silu (SwiGLU) or gelu / gelu_tanh (GeGLU).
// Tensors are in the storage type (f32, or f16/bf16 with the `_f16`/`_bf16` variants); math f32.
// variant: swiglu ACT_F=silu_f
// variant: geglu ACT_F=gelu_f
// variant: geglu_tanh ACT_F=gelu_tanh_f
// variant: swiglu_twin ACT_F=silu_f OUT16
// variant: geglu_twin ACT_F=gelu_f OUT16
// variant: geglu_tanh_twin ACT_F=gelu_tanh_f OUT16
// `_twin` (f32): out is also written to out16 in f16/bf16 (cast/twin.glsl), the copy the down
// projection reads under autocast; with save != 0 gate and up are written to gate16 and up16
// too, the 16-bit inputs the backward keeps instead of f32 ones, in the inputs' layout (rows
// of `stride`: a fused gate_up is saved as one 16-bit gate_up, up16 = gate16 + inner).
// save bit 1 skips the f32 store (training when the down projection, reading out16, is out's
// only reader).
// variant: swiglu_f16 ACT_F=silu_f DT_F16
// variant: swiglu_bf16 ACT_F=silu_f DT_BF16
// variant: geglu_f16 ACT_F=gelu_f DT_F16
// variant: geglu_bf16 ACT_F=gelu_f DT_BF16
// variant: geglu_tanh_f16 ACT_F=gelu_tanh_f DT_F16
// variant: geglu_tanh_bf16 ACT_F=gelu_tanh_f DT_BF16
layout(local_size_x = 256) in;
#ifdef OUT16
layout(push_constant) uniform Push {
    DIn gate; DIn up; DBuf out_; TwinBuf out16; TwinBuf gate16; TwinBuf up16;
    uint rows; uint inner; uint stride; uint twin; uint save;
} pc;
#else
layout(push_constant) uniform Push { DIn gate; DIn up; DBuf out_; uint rows; uint inner; uint stride; } pc;
#endif
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner;
        uint s = r * pc.stride + (i - r * pc.inner);
        float g = ld(pc.gate, s);
        float u = ld(pc.up, s);
        float v = ACT_F(g) * u;
#ifdef OUT16
        if ((pc.save & 2u) == 0u) st(pc.out_, i, v);
        st_twin(pc.out16, i, v, pc.twin);
        if ((pc.save & 1u) != 0u) {
            st_twin(pc.gate16, s, g, pc.twin);
            st_twin(pc.up16, s, u, pc.twin);
        }
#else
        st(pc.out_, i, v);
#endif
    }
}
