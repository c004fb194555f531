#version 460
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
// optim/adamw over many parameters in one dispatch (the same bits per element: both kernels
// run optim/adamw_math.glsl). The parameters are laid end to end and cut into chunks of
// `chunk` elements that never straddle two (a parameter's last chunk may be short); workgroups
// stride over the chunks. The table has one 64-byte entry per parameter, in increasing first
// chunk:
//   e[0] = (param address, grad address)        e[1] = (exp_avg address, exp_avg_sq address)
//   e[2] = (copy address or 0, n, first chunk)  e[3] = (decay as float bits, fresh, 0, 0)
// addresses as (low, high) words. `decay` = 1 - lr * wd is per parameter (the Trainer exempts
// biases and norm weights from weight decay); `fresh` as in optim/adamw (first step: the
// moments are taken as zero, not read). The variant `scaled` multiplies every gradient by
// grad_scale[0] (the clip coefficient) and skips the step when it is negative (an overflow
// under loss scaling); `copy_*` also stores the updated parameter in 16 bits where the entry
// has a copy address.
// Wide path: where a parameter's four f32 arrays start 16-byte aligned (and its copy 8-byte
// aligned), a thread moves whole vec4s, U of them per array in flight before any store: the
// scalar loop's stores to buffers the compiler cannot prove distinct kept each iteration's loads
// behind the previous one's stores, 16 bytes in flight per thread (the 1.1B step's AdamW at
// ~2.2 TB/s on an H200). The elements past the last whole vec4 take the scalar loop. Same
// per-element math (adamw_update), so the same bits.
// variant: plain
// variant: scaled GRAD_SCALE
// variant: plain_copy_bf16 DT_BF16 COPY
// variant: scaled_copy_bf16 GRAD_SCALE DT_BF16 COPY
// variant: plain_copy_f16 DT_F16 COPY
// variant: scaled_copy_f16 GRAD_SCALE DT_F16 COPY
#include "dtype.glsl"
#include "optim/adamw_math.glsl"
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Table { uvec4 e[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4Buf { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer U2Buf { uvec2 v[]; };
#define U 2 // vec4s of each array a thread loads before its first store (wide path)
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    Table table;
#ifdef GRAD_SCALE
    F32In grad_scale;
#endif
    uint tensors;
    uint chunks;
    uint chunk;
    float w1;
    float beta2;
    float omb2;
    float bc2_sqrt;
    float neg_step;
    float eps;
} pc;

// The index of the parameter holding chunk c: the last entry whose first chunk is <= c.
uint entry_of(uint c) {
    uint lo = 0, hi = pc.tensors - 1;
    while (lo < hi) {
        uint mid = (lo + hi + 1) >> 1;
        if (pc.table.e[4 * mid + 2].w <= c) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Whether the address `a` (low, high words) is a multiple of `align` bytes.
bool aligned(uvec2 a, uint align) {
    return (a.x & (align - 1u)) == 0u;
}

// Wide path over the vec4s [q0, q1) of one parameter: U vec4s of g, p, m, v a thread loaded
// before any store, then updated and stored element by element as the scalar loop does.
void update_wide(uvec4 e0, uvec4 e1, uvec4 e2, float decay, bool fresh, uint q0, uint q1, float gs) {
    V4Buf param = V4Buf(packUint2x32(e0.xy)), grad = V4Buf(packUint2x32(e0.zw));
    V4Buf exp_avg = V4Buf(packUint2x32(e1.xy)), exp_avg_sq = V4Buf(packUint2x32(e1.zw));
    for (uint q = q0 + gl_LocalInvocationID.x; q < q1; q += 256u * U) {
        vec4 g[U], p[U], m[U], v[U];
        [[unroll]] for (uint u = 0; u < U; u++) {
            const uint i = q + u * 256u;
            if (i < q1) {
                g[u] = grad.v[i];
                p[u] = param.v[i];
                m[u] = fresh ? vec4(0.0) : exp_avg.v[i];
                v[u] = fresh ? vec4(0.0) : exp_avg_sq.v[i];
            }
        }
        [[unroll]] for (uint u = 0; u < U; u++) {
            const uint i = q + u * 256u;
            if (i < q1) {
                [[unroll]] for (uint c = 0; c < 4; c++) {
                    precise float gc = g[u][c];
#ifdef GRAD_SCALE
                    gc = gc * gs;
#endif
                    float pc_ = p[u][c], mc = m[u][c], vc = v[u][c];
                    adamw_update(gc, pc_, mc, vc, decay, pc.w1, pc.beta2, pc.omb2, pc.bc2_sqrt, pc.neg_step, pc.eps);
                    p[u][c] = pc_;
                    m[u][c] = mc;
                    v[u][c] = vc;
                }
                param.v[i] = p[u];
#ifdef COPY
                if (e2.x != 0u || e2.y != 0u) {
                    U2Buf(packUint2x32(e2.xy)).v[i] = uvec2(st_bits(p[u].x) | (st_bits(p[u].y) << 16),
                                                            st_bits(p[u].z) | (st_bits(p[u].w) << 16));
                }
#endif
                exp_avg.v[i] = m[u];
                exp_avg_sq.v[i] = v[u];
            }
        }
    }
}

void main() {
#ifdef GRAD_SCALE
    float gs = pc.grad_scale.v[0];
#else
    const float gs = 1.0; // unused: update_wide scales only under GRAD_SCALE
#endif
    for (uint c = gl_WorkGroupID.x; c < pc.chunks; c += gl_NumWorkGroups.x) {
        uint t = entry_of(c);
        uvec4 e0 = pc.table.e[4 * t], e1 = pc.table.e[4 * t + 1], e2 = pc.table.e[4 * t + 2];
        uvec4 e3 = pc.table.e[4 * t + 3];
        F32Buf param = F32Buf(packUint2x32(e0.xy));
        F32In grad = F32In(packUint2x32(e0.zw));
        F32Buf exp_avg = F32Buf(packUint2x32(e1.xy));
        F32Buf exp_avg_sq = F32Buf(packUint2x32(e1.zw));
        float decay = uintBitsToFloat(e3.x);
        bool fresh = e3.y != 0u;
        uint begin = (c - e2.w) * pc.chunk;
        uint end = min(begin + pc.chunk, e2.z);
#ifdef GRAD_SCALE
        if (gs < 0.0) {
            // A skipped step: nothing changes, but fresh moments must hold zeros after it.
            if (fresh) {
                for (uint i = begin + gl_LocalInvocationID.x; i < end; i += 256u) {
                    exp_avg.v[i] = 0.0;
                    exp_avg_sq.v[i] = 0.0;
                }
            }
            continue;
        }
#endif
        // Wide path (16-byte aligned arrays; chunk starts are multiples of 4 elements).
        bool wide = aligned(e0.xy, 16u) && aligned(e0.zw, 16u) && aligned(e1.xy, 16u) && aligned(e1.zw, 16u);
#ifdef COPY
        wide = wide && aligned(e2.xy, 8u);
#endif
        uint first = begin;
        if (wide) {
            update_wide(e0, e1, e2, decay, fresh, begin / 4u, end / 4u, gs);
            first = end & ~3u;
        }
        for (uint i = first + gl_LocalInvocationID.x; i < end; i += 256u) {
            precise float g = grad.v[i];
#ifdef GRAD_SCALE
            g = g * gs;
#endif
            float p = param.v[i];
            float m = fresh ? 0.0 : exp_avg.v[i];
            float v = fresh ? 0.0 : exp_avg_sq.v[i];
            adamw_update(g, p, m, v, decay, pc.w1, pc.beta2, pc.omb2, pc.bc2_sqrt, pc.neg_step, pc.eps);
            param.v[i] = p;
#ifdef COPY
            if (e2.x != 0u || e2.y != 0u) {
                st(DBuf(packUint2x32(e2.xy)), i, p);
            }
#endif
            exp_avg.v[i] = m;
            exp_avg_sq.v[i] = v;
        }
    }
}
