// Masking and score helpers of the attention kernels; they read the push block `pc`.

// First position of pos's attention chunk, floor(pos / C) * C (chunk C > 0; pos may be < 0
// when tq > tk). Monotone in pos, so tile bounds take it at a tile's first or last row.
int attn_chunk_start(int pos) {
    int c = int(pc.chunk);
    return (pos >= 0 ? pos / c : -((c - 1 - pos) / c)) * c;
}

// Query i (0-based within tq) sits at absolute position qpos = i + tk - tq; key j is visible
// when j < tk, i < tq, and (causal) j <= qpos, (window W > 0) qpos - j < W, (chunk C > 0)
// j in qpos's chunk [floor(qpos / C) C, + C), (kmask) kmask[b, j] != 0.
bool attn_visible(uint b, int i, int j) {
    if (i >= int(pc.tq) || j >= int(pc.tk)) {
        return false;
    }
    int qpos = i + int(pc.tk) - int(pc.tq);
    if ((pc.flags & ATTN_CAUSAL) != 0u && j > qpos) {
        return false;
    }
    if (pc.window != 0u && qpos - j >= int(pc.window)) {
        return false;
    }
    if (pc.chunk != 0u && attn_chunk_start(qpos) != attn_chunk_start(j)) {
        return false;
    }
    if ((pc.flags & ATTN_KMASK) != 0u && pc.kmask.v[b * pc.tk + uint(j)] == 0) {
        return false;
    }
    return true;
}

// tanh without overflow for any x (exp of a non-positive argument only).
float attn_tanh(float x) {
    float e = exp(-2.0 * abs(x));
    float t = (1.0 - e) / (1.0 + e);
    return x < 0.0 ? -t : t;
}

// Score of a visible pair from dot = q_i . k_j:
//   u = scale * dot;  s = softcap > 0 ? c * tanh(u / c) : u;  s += slope_h * (j - qpos) (ALiBi).
// dcap = ds/du = 1 - tanh^2 (1 without softcap), for the backward.
float attn_score(float dot_qk, uint h, int i, int j, out float dcap) {
    float s = pc.scale * dot_qk;
    dcap = 1.0;
    if (pc.softcap > 0.0) {
        float t = attn_tanh(s / pc.softcap);
        s = pc.softcap * t;
        dcap = 1.0 - t * t;
    }
    if ((pc.flags & ATTN_ALIBI) != 0u) {
        int qpos = i + int(pc.tk) - int(pc.tq);
        s += pc.slopes.v[h] * float(j - qpos);
    }
    return s;
}

// First key a query tile [i0, i1) (non-empty, i1 <= tq) can see, and one past the last.
// Uniform over the workgroup, so loops over key tiles between them may hold barriers.
// The window and the chunk are lower bounds on keys (the chunk also an upper one).
uint attn_key_begin(uint i0) {
    int qpos = int(i0) + int(pc.tk) - int(pc.tq);
    int first = pc.window == 0u ? 0 : qpos - int(pc.window) + 1;
    if (pc.chunk != 0u) {
        first = max(first, attn_chunk_start(qpos));
    }
    return uint(clamp(first, 0, int(pc.tk)));
}
uint attn_key_end(uint i1) {
    int last = int(i1) - 1 + int(pc.tk) - int(pc.tq);
    int end = (pc.flags & ATTN_CAUSAL) == 0u ? int(pc.tk) : last + 1;
    if (pc.chunk != 0u) {
        end = min(end, attn_chunk_start(last) + int(pc.chunk));
    }
    return uint(clamp(end, 0, int(pc.tk)));
}

// First query a key tile [j0, j1) (non-empty, j1 <= tk) can be seen by, and one past the last.
uint attn_query_begin(uint j0) {
    int shift = int(pc.tk) - int(pc.tq);  // qpos = i + shift
    // qpos >= j0  <=>  i >= j0 - shift (causal); qpos >= chunk start of j0 (chunk)
    int first = (pc.flags & ATTN_CAUSAL) == 0u ? 0 : int(j0) - shift;
    if (pc.chunk != 0u) {
        first = max(first, attn_chunk_start(int(j0)) - shift);
    }
    return uint(clamp(first, 0, int(pc.tq)));
}
uint attn_query_end(uint j1) {
    int shift = int(pc.tk) - int(pc.tq);
    // qpos - (j1 - 1) < W  <=>  i < j1 - 1 + W - shift; qpos < chunk end of j1 - 1 (chunk)
    int end = pc.window == 0u ? int(pc.tq) : int(j1) - 1 + int(pc.window) - shift;
    if (pc.chunk != 0u) {
        end = min(end, attn_chunk_start(int(j1) - 1) + int(pc.chunk) - shift);
    }
    return uint(clamp(end, 0, int(pc.tq)));
}

// True when every pair of queries [i0, i1) and keys [j0, j1) is visible and scores plainly
// (s = scale * dot): rows and columns in range, no key mask, ALiBi or softcap, and the tile
// lies wholly on the visible side of the causal diagonal (its last key at or before its first
// query's position) and inside the window (its last query less than W past its first key).
// Uniform over the workgroup when its arguments are, so a tile can pick its path with it.
bool attn_tile_plain(uint i0, uint i1, uint j0, uint j1) {
    if ((pc.flags & (ATTN_KMASK | ATTN_ALIBI)) != 0u || pc.softcap > 0.0) {
        return false;
    }
    if (i1 > pc.tq || j1 > pc.tk) {
        return false;
    }
    int shift = int(pc.tk) - int(pc.tq);  // qpos = i + shift
    if ((pc.flags & ATTN_CAUSAL) != 0u && int(j1) - 1 > int(i0) + shift) {
        return false;
    }
    // One chunk for the whole tile: chunk starts are monotone, so the first query's chunk is the
    // last key's and the last query's is the first key's.
    if (pc.chunk != 0u && (attn_chunk_start(int(i0) + shift) != attn_chunk_start(int(j1) - 1)
                           || attn_chunk_start(int(i1) - 1 + shift) != attn_chunk_start(int(j0)))) {
        return false;
    }
    return pc.window == 0u || int(i1) - 1 + shift - int(j0) < int(pc.window);
}
