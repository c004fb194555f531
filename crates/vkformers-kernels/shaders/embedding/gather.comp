#version 460
#include "common.glsl"
#include "embedding/embedding.glsl"
// Embedding forward (gather): out[n, d] = W[ids[n], d]     W [V, D], ids [N] int32, out [N, D]
// An id outside [0, V) gives a row of zeros (nothing out of bounds is read).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    F32In w;
    I32In ids;
    F32Buf out_;
    uint n_tokens;
    uint vocab;
    uint D;
} pc;

void main() {
    FOR_EACH_INDEX(e, pc.n_tokens * pc.D) {
        uint n = e / pc.D;
        uint d = e - n * pc.D;
        int id = valid_id(pc.ids, n, pc.vocab);
        pc.out_.v[e] = id >= 0 ? pc.w.v[uint(id) * pc.D + d] : 0.0;
    }
}
