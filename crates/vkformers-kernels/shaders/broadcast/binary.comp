#version 460
#include "common.glsl"
#include "dtype.glsl"
// out[i0, i1, i2, i3] = a[i . sa] (op) b[i . sb] with numpy broadcasting; out [d0, d1, d2, d3]
// contiguous (shapes of fewer dims are padded with leading 1s), n = d0 d1 d2 d3. sa, sb are the
// operands' element strides per output dim, 0 where the operand is broadcast (its extent 1).
// a, b, out in the storage type (variants `op`, `op_f16`, `op_bf16`); the op in f32.
// variant: add OP_ADD
// variant: sub OP_SUB
// variant: mul OP_MUL
// variant: div OP_DIV
// variant: add_f16 OP_ADD DT_F16
// variant: add_bf16 OP_ADD DT_BF16
// variant: sub_f16 OP_SUB DT_F16
// variant: sub_bf16 OP_SUB DT_BF16
// variant: mul_f16 OP_MUL DT_F16
// variant: mul_bf16 OP_MUL DT_BF16
// variant: div_f16 OP_DIV DT_F16
// variant: div_bf16 OP_DIV DT_BF16
#if defined(OP_ADD)
#define OP(x, y) ((x) + (y))
#elif defined(OP_SUB)
#define OP(x, y) ((x) - (y))
#elif defined(OP_MUL)
#define OP(x, y) ((x) * (y))
#elif defined(OP_DIV)
#define OP(x, y) ((x) / (y))
#endif
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    DIn a; DIn b; DBuf out_;
    uint n; uint d1; uint d2; uint d3;
    uint sa0; uint sa1; uint sa2; uint sa3;
    uint sb0; uint sb1; uint sb2; uint sb3;
} pc;
void main() {
    FOR_EACH_INDEX(i, pc.n) {
        uint i3 = i % pc.d3;
        uint t = i / pc.d3;
        uint i2 = t % pc.d2;
        t /= pc.d2;
        uint i1 = t % pc.d1;
        uint i0 = t / pc.d1;
        uint ia = i0 * pc.sa0 + i1 * pc.sa1 + i2 * pc.sa2 + i3 * pc.sa3;
        uint ib = i0 * pc.sb0 + i1 * pc.sb1 + i2 * pc.sb2 + i3 * pc.sb3;
        st(pc.out_, i, OP(ld(pc.a, ia), ld(pc.b, ib)));
    }
}
