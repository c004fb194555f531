#version 460
#include "common.glsl"
// Partial sums of squares of many f32 buffers in one dispatch, for the global gradient norm:
// the buffers are laid end to end and cut into chunks of `chunk` elements that never straddle
// two buffers (a buffer's last chunk may be short), and
//   partials[c] = sum over the elements x of chunk c of x^2,   c < chunks.
// The table has one entry per buffer, uvec4(address low, address high, n, first chunk), in
// increasing first chunk; a workgroup finds its chunk's buffer by binary search. Workgroups
// stride over the chunks (any count of chunks runs within the workgroup-count limit).
// Deterministic: the partial of a chunk depends only on its elements (a fixed
// element-to-thread assignment, four accumulators, a fixed shared-memory tree), never on the
// workgroup that ran it or the device. `optim/norm_clip` then sums the partials in order.
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Table { uvec4 e[]; };
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Table table; F32Buf partials; uint tensors; uint chunks; uint chunk; } pc;
shared float part[256];

// The entry of the buffer holding chunk c: the last one whose first chunk is <= c.
uvec4 entry_of(uint c) {
    uint lo = 0, hi = pc.tensors - 1;
    while (lo < hi) {
        uint mid = (lo + hi + 1) >> 1;
        if (pc.table.e[mid].w <= c) lo = mid; else hi = mid - 1;
    }
    return pc.table.e[lo];
}

void main() {
    uint t = gl_LocalInvocationID.x;
    for (uint c = gl_WorkGroupID.x; c < pc.chunks; c += gl_NumWorkGroups.x) {
        uvec4 e = entry_of(c);
        F32In x = F32In(packUint2x32(e.xy));
        uint begin = (c - e.w) * pc.chunk;
        uint end = min(begin + pc.chunk, e.z);
        uint i = begin + t;
        // Four independent loads in flight per thread (memory-bound: latency hiding).
        float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (; i + 768u < end; i += 1024u) {
            float a = x.v[i], b = x.v[i + 256u], d = x.v[i + 512u], f = x.v[i + 768u];
            s0 += a * a;
            s1 += b * b;
            s2 += d * d;
            s3 += f * f;
        }
        for (; i < end; i += 256u) {
            float a = x.v[i];
            s0 += a * a;
        }
        barrier(); // the previous chunk's tree is done with part[]
        part[t] = (s0 + s1) + (s2 + s3);
        barrier();
        for (uint h = 128; h > 0; h >>= 1) {
            if (t < h) part[t] += part[t + h];
            barrier();
        }
        if (t == 0) pc.partials.v[c] = part[0];
    }
}
