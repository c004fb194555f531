#version 460
#include "common.glsl"
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
// Copies x [rows, n] into columns [col0, col0 + n) of out [rows, stride] (a block of a packed
// tensor's rows): the gradient of q, k or v written into its place in the packed q/k/v
// product's gradient [rows, nq + nk + nv], which one backward product then reads. Bits are
// copied as they are (`w32`: 4-byte elements, f32; `w16`: 2-byte elements, bf16 or f16).
// One thread per element of x.
// variant: w32
// variant: w16 W16
layout(local_size_x = 256) in;
#ifdef W16
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer WIn { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer WBuf { uint16_t v[]; };
#else
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer WIn { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer WBuf { uint v[]; };
#endif
layout(push_constant) uniform Push {
    WIn x;
    WBuf out_;
    uint rows;
    uint n;
    uint stride;
    uint col0;
} pc;
void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.n) {
        uint r = i / pc.n;
        pc.out_.v[r * pc.stride + pc.col0 + (i - r * pc.n)] = pc.x.v[i];
    }
}
