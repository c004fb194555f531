#version 460
#include "common.glsl"
#include "embedding/embedding.glsl"
// Embedding backward, step 1 of a stable counting sort of the token positions by id:
//   counts[v] += number of n < N with ids[n] == v          counts [V] uint32, zeroed before
// Integer atomics only (portable; the result does not depend on their order).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    I32In ids;
    U32Buf counts;
    uint n_tokens;
    uint vocab;
} pc;

void main() {
    FOR_EACH_INDEX(n, pc.n_tokens) {
        int id = valid_id(pc.ids, n, pc.vocab);
        if (id >= 0) {
            atomicAdd(pc.counts.v[id], 1u);
        }
    }
}
