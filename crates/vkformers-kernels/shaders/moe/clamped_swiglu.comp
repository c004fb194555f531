#version 460
#include "common.glsl"
#include "moe/clamped_swiglu.glsl"
// Forward of gpt-oss's clamped SwiGLU (moe/clamped_swiglu.glsl): gate_up [rows, 2·inner] f32 ->
// out [rows, inner] f32. One invocation per output element.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In gate_up;
    F32Buf out_;
    uint rows;
    uint inner;
    uint interleaved;
    float alpha;
    float limit;
} pc;

void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner, j = i - r * pc.inner;
        float g = min(pc.gate_up.v[gate_at(r, j, pc.inner, pc.interleaved)], pc.limit);
        float u = clamp(pc.gate_up.v[up_at(r, j, pc.inner, pc.interleaved)], -pc.limit, pc.limit);
        pc.out_.v[i] = (u + 1.0) * g * sigmoid_f(pc.alpha * g);
    }
}
