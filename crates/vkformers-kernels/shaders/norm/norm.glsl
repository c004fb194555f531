// Shared by the norm kernels (include after dtype.glsl): workgroup size, a deterministic shared-memory tree sum, and the
// gain g[d] applied after normalising (1, w[d], or 1 + w[d] for Gemma's unit offset).
// Threads per workgroup: 256, or one 8-lane subgroup in the `_cpu` variants (llvmpipe runs the
// subgroups of a workgroup as coroutines switched at every barrier of the tree sum).
#ifndef NORM_LOCAL
#define NORM_LOCAL 256
#endif

// Gain modes (push constant `mode`).
#define GAIN_NONE 0u
#define GAIN_WEIGHT 1u
#define GAIN_UNIT_OFFSET 2u

shared vec2 norm_red[NORM_LOCAL];

// Sum of v over the workgroup, the same on every invocation; fixed order, so deterministic.
// Must be reached by every invocation of the workgroup (uniform control flow).
vec2 norm_sum2(vec2 v) {
    uint lid = gl_LocalInvocationID.x;
    norm_red[lid] = v;
    barrier();
    for (uint s = NORM_LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) {
            norm_red[lid] += norm_red[lid + s];
        }
        barrier();
    }
    vec2 total = norm_red[0];
    barrier();
    return total;
}

// w [D] is in the storage type (include dtype.glsl first).
float norm_gain(DIn w, uint mode, uint d) {
    if (mode == GAIN_NONE) {
        return 1.0;
    }
    float wd = ld(w, d);
    return mode == GAIN_UNIT_OFFSET ? 1.0 + wd : wd;
}

// Rows are spread over the grid: workgroup b handles rows b, b + G, b + 2G, ... (G workgroups).
#define FOR_EACH_ROW(row, rows) for (uint row = gl_WorkGroupID.x; row < (rows); row += gl_NumWorkGroups.x)
#define FOR_EACH_COL(d, D) for (uint d = gl_LocalInvocationID.x; d < (D); d += NORM_LOCAL)
