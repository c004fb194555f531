// Visibility and score of one (query, key) pair of the paged decode kernels; reads the push
// block `pc` (flags, window, scale, softcap, slopes). Positions are the row's own: query at
// qpos, key at j (the index of the key in the row's cache).

// Causal: j <= qpos; sliding window W > 0: qpos - j < W; chunk C > 0: floor(j / C) ==
// floor(qpos / C) (a query before the cache, qpos < 0, sees no chunk). (j < lens[b] is the
// caller's bound.)
bool dec_visible(int qpos, int j) {
    if ((pc.flags & ATTN_CAUSAL) != 0u && j > qpos) {
        return false;
    }
    if (pc.chunk != 0u && (qpos < 0 || uint(qpos) / pc.chunk != uint(j) / pc.chunk)) {
        return false;
    }
    return pc.window == 0u || qpos - j < int(pc.window);
}

// tanh without overflow for any x (exp of a non-positive argument only).
float dec_tanh(float x) {
    float e = exp(-2.0 * abs(x));
    float t = (1.0 - e) / (1.0 + e);
    return x < 0.0 ? -t : t;
}

// u = scale * dot;  s = softcap > 0 ? c * tanh(u / c) : u;  s += slope_h * (j - qpos) (ALiBi).
float dec_score(float dot_qk, uint h, int qpos, int j) {
    float s = pc.scale * dot_qk;
    if (pc.softcap > 0.0) {
        s = pc.softcap * dec_tanh(s / pc.softcap);
    }
    if ((pc.flags & ATTN_ALIBI) != 0u) {
        s += pc.slopes.v[h] * float(j - qpos);
    }
    return s;
}
