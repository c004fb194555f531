// Deterministic workgroup reductions through shared memory (no subgroup ops, so any subgroup
// size works). Include after `#define WG <power of two>` and `layout(local_size_x = WG) in;`.
// Call from uniform control flow: every invocation of the workgroup must call, in the same
// order. The result is the same for every invocation and depends only on the inputs (a fixed
// pairwise tree), never on scheduling. Uses WG * 4 bytes of shared memory.

shared float tree_buf[WG];

// Sum of v over the workgroup.
float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    barrier(); // the previous call's readers of tree_buf[0] are done
    tree_buf[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) {
            tree_buf[t] += tree_buf[t + s];
        }
        barrier();
    }
    return tree_buf[0];
}

// Maximum of v over the workgroup.
float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    barrier();
    tree_buf[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) {
            tree_buf[t] = max(tree_buf[t], tree_buf[t + s]);
        }
        barrier();
    }
    return tree_buf[0];
}
