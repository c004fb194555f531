#version 460
#include "common.glsl"
#include "dtype.glsl"
#include "activation/act.glsl"
#ifdef OUT16
#include "cast/twin.glsl"
#endif
// Backward of out = f(gate) * up (see forward.comp), dout [rows, inner]:
//   dgate[r, j] = dout[r, j] * up[r, j] * f'(gate[r, j]),  dup[r, j] = dout[r, j] * f(gate[r, j]).
// gate, up, dgate, dup are rows of `stride` elements (inner: separate tensors; 2 inner: fused
// gate_up and its fused gradient, the up pointers advanced by inner elements). Every tensor is
// in the storage type (f32, or f16/bf16 with the `_f16`/`_bf16` variants); math f32.
// variant: swiglu ACT_F=silu_f ACT_D=silu_d
// variant: geglu ACT_F=gelu_f ACT_D=gelu_d
// variant: geglu_tanh ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d
// variant: swiglu_twin ACT_F=silu_f ACT_D=silu_d OUT16
// variant: geglu_twin ACT_F=gelu_f ACT_D=gelu_d OUT16
// variant: geglu_tanh_twin ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d OUT16
// `_twin` (f32): dgate and dup are also written to dgate16 and dup16 in f16/bf16
// (cast/twin.glsl), the copies the gate and up projections' backward products read.
// `_saved16` (IN16): gate and up are 16-bit (the copies the `_twin` forward saved: f16 when
// twin = 1, bf16 when 2), dout, dgate, dup f32, and dgate, dup are written to their twins too.
// With stride = 2 inner (a fused gate_up, the training forward's packed gate/up product) the
// saved 16-bit gate_up, dgate_up and its twin are all rows of 2 inner: the gradient lands in
// the packed product's layout, which one backward product reads.
// variant: swiglu_saved16 ACT_F=silu_f ACT_D=silu_d OUT16 IN16
// variant: geglu_saved16 ACT_F=gelu_f ACT_D=gelu_d OUT16 IN16
// variant: geglu_tanh_saved16 ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d OUT16 IN16
// variant: swiglu_f16 ACT_F=silu_f ACT_D=silu_d DT_F16
// variant: swiglu_bf16 ACT_F=silu_f ACT_D=silu_d DT_BF16
// variant: geglu_f16 ACT_F=gelu_f ACT_D=gelu_d DT_F16
// variant: geglu_bf16 ACT_F=gelu_f ACT_D=gelu_d DT_BF16
// variant: geglu_tanh_f16 ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d DT_F16
// variant: geglu_tanh_bf16 ACT_F=gelu_tanh_f ACT_D=gelu_tanh_d DT_BF16
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
#ifdef IN16
    TwinIn gate; TwinIn up;
#else
    DIn gate; DIn up;
#endif
    DIn dout; DBuf dgate; DBuf dup;
#ifdef OUT16
    TwinBuf dgate16; TwinBuf dup16;
#endif
    uint rows; uint inner; uint stride;
#ifdef OUT16
    uint twin;
#endif
} pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner;
        uint s = r * pc.stride + (i - r * pc.inner);
#ifdef IN16
        float g = ld_twin(pc.gate, s, pc.twin & 3u);
        float u = ld_twin(pc.up, s, pc.twin & 3u);
#else
        float g = ld(pc.gate, s);
        float u = ld(pc.up, s);
#endif
        float d = ld(pc.dout, i);
        float dg = d * u * ACT_D(g);
        float du = d * ACT_F(g);
#ifdef OUT16
        // twin bit 2: the 16-bit gradients only (their products' backward reads nothing else).
        if ((pc.twin & 4u) == 0u) {
            st(pc.dgate, s, dg);
            st(pc.dup, s, du);
        }
        st_twin(pc.dgate16, s, dg, pc.twin & 3u);
        st_twin(pc.dup16, s, du, pc.twin & 3u);
#else
        st(pc.dgate, s, dg);
        st(pc.dup, s, du);
#endif
    }
}
