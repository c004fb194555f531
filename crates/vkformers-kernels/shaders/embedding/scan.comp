#version 460
#include "common.glsl"
#include "embedding/embedding.glsl"
// Embedding backward, step 2: exclusive prefix sum of the histogram, then zero it for use as
// the per-id cursor of step 3. One workgroup; invocation t owns a contiguous slice of ids.
//   offsets[v] = sum_{u < v} counts[u] for v <= V (offsets[V] = number of valid tokens)
//   counts[v]  = 0                                     counts [V], offsets [V + 1] uint32
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    U32Buf counts;
    U32Buf offsets;
    uint vocab;
} pc;

shared uint part[256];

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint chunk = (pc.vocab + 255) / 256;
    uint lo = min(lid * chunk, pc.vocab);
    uint hi = min(lo + chunk, pc.vocab);
    uint own = 0;
    for (uint v = lo; v < hi; v++) {
        own += pc.counts.v[v];
    }
    part[lid] = own;
    barrier();
    // Inclusive Hillis-Steele scan of the 256 slice totals.
    for (uint off = 1; off < 256; off <<= 1) {
        uint t = lid >= off ? part[lid - off] : 0u;
        barrier();
        part[lid] += t;
        barrier();
    }
    uint run = part[lid] - own;
    for (uint v = lo; v < hi; v++) {
        uint c = pc.counts.v[v];
        pc.offsets.v[v] = run;
        run += c;
        pc.counts.v[v] = 0u;
    }
    if (lid == 255) {
        pc.offsets.v[pc.vocab] = part[255];
    }
}
