#version 460
#include "common.glsl"
#include "embedding/embedding.glsl"
// Embedding backward, step 3: stable scatter of the token positions into id order,
//   perm[offsets[id] + k] = the k-th position n (increasing) with ids[n] == id    perm [N]
// One workgroup walks the tokens in chunks of 256, in order: within a chunk an invocation's
// rank is the number of earlier invocations with the same id; cursor[id] (zeroed by step 2)
// counts the positions of id placed by earlier chunks. Fully deterministic.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    I32In ids;
    U32In offsets;
    U32Buf cursor;
    U32Buf perm;
    uint n_tokens;
    uint vocab;
} pc;

shared int chunk_ids[256];

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint base = 0; base < pc.n_tokens; base += 256) {
        uint n = base + lid;
        int id = n < pc.n_tokens ? valid_id(pc.ids, n, pc.vocab) : -1;
        chunk_ids[lid] = id;
        barrier();
        uint rank = 0;
        bool last = true;
        uint cur = 0;
        if (id >= 0) {
            for (uint j = 0; j < 256; j++) {
                if (chunk_ids[j] == id) {
                    rank += j < lid ? 1u : 0u;
                    last = last && j <= lid;
                }
            }
            cur = pc.cursor.v[id];
            pc.perm.v[pc.offsets.v[id] + cur + rank] = n;
        }
        barrier();
        if (id >= 0 && last) {
            pc.cursor.v[id] = cur + rank + 1;
        }
        memoryBarrierBuffer();
        barrier();
    }
}
