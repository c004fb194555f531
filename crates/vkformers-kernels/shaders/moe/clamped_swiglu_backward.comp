#version 460
#include "common.glsl"
#include "moe/clamped_swiglu.glsl"
// Backward of gpt-oss's clamped SwiGLU (moe/clamped_swiglu.glsl), dout [rows, inner] ->
// dgate_up [rows, 2·inner], as torch's clamp passes the gradient (1 where min ≤ x ≤ max, else 0):
//   dg = dout · (uc + 1) · (s + alpha · gc · s · (1 − s)) · [g ≤ limit],  s = sigmoid(alpha · gc)
//   du = dout · gc · s · [−limit ≤ u ≤ limit]
// One invocation per (row, column): it writes both of that column's gradients.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In gate_up;
    F32In dout;
    F32Buf dgate_up;
    uint rows;
    uint inner;
    uint interleaved;
    float alpha;
    float limit;
} pc;

void main() {
    FOR_EACH_INDEX(i, pc.rows * pc.inner) {
        uint r = i / pc.inner, j = i - r * pc.inner;
        uint gi = gate_at(r, j, pc.inner, pc.interleaved), ui = up_at(r, j, pc.inner, pc.interleaved);
        float g = pc.gate_up.v[gi], u = pc.gate_up.v[ui], d = pc.dout.v[i];
        float gc = min(g, pc.limit), uc = clamp(u, -pc.limit, pc.limit);
        float s = sigmoid_f(pc.alpha * gc);
        float dact = s + pc.alpha * gc * s * (1.0 - s);
        pc.dgate_up.v[gi] = g <= pc.limit ? d * (uc + 1.0) * dact : 0.0;
        pc.dgate_up.v[ui] = abs(u) <= pc.limit ? d * gc * s : 0.0;
    }
}
