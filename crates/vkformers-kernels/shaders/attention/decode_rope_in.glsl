// decode.comp's ROPE variants: a decode step (Tq = 1) whose q and new k, v come unrotated (f32),
// so the dispatch of decode_rope_store.comp before the attention does not run.
//   q: row r of the tile (head h of token b) is rope(q[b * q_stride + h D ..]) at pos[b], rotated
//      as it is read into shared memory;
//   the new key of row b (position lens[b] - 1, pool row slots[b]) for kv head hk: rope(kn) and
//      vn, stored into the pools by one workgroup of (b, hk) only: split 0 of row tile 0 (every
//      call has one); and not when slots[b] < 0 or >= pool_rows, as decode_rope_store.comp.
// The rotation is decode_rope_store.comp's expression for expression (theta = float(pos) *
// inv_freq[u], sincos_f32, c = mscale cos, s = mscale sin, (a, b) -> (a c - b s, b c + a s)), so
// the pools get its bytes and q its values.
// No workgroup reads the new key from the pools (another workgroup of this dispatch may be
// writing it, and the pools are read through non-coherent loads: see dtype.glsl): the workgroup
// whose split owns key lens[b] - 1 rotates it too and keeps it, and v, rounded to the pools' type
// (`rnd`, the value a load of the stored element gives) in shared memory; its score and value
// passes read them there (pool row NEW_ROW). The result is the unfused pair's bit for bit, as
// long as slots[b] is the pool row the block table gives key lens[b] - 1 (the cache's contract).

// Marks the new key in srow (not a pool row; NO_ROW is the other marker).
const uint NEW_ROW = 0xfffffffeu;
shared float snk[DMAX]; // the new key rounded to the pools' type, zero past D
shared float snv[DMAX]; // its value, likewise
// Index of the new key in this workgroup's keys, NO_ROW when it has none.
uint new_key = NO_ROW;

// Element dd of the rotated head row that starts at element `base` of x, at position pos.
float rope_elem(F32In x, uint base, uint dd, int pos) {
    if (dd >= pc.rot_dim) {
        return x.v[base + dd];
    }
    uint half_r = pc.rot_dim / 2u;
    bool il = pc.interleaved != 0u;
    uint u = il ? dd / 2u : (dd < half_r ? dd : dd - half_r);
    uint da = il ? 2u * u : u;
    uint db = il ? da + 1u : da + half_r;
    precise float theta = float(pos) * pc.inv_freq.v[u];
    float sn, cs;
    sincos_f32(theta, sn, cs);
    cs *= pc.mscale;
    sn *= pc.mscale;
    float a = x.v[base + da];
    float b = x.v[base + db];
    float ra = a * cs - b * sn;
    float rb = b * cs + a * sn;
    return dd == da ? ra : rb;
}

// Row b's new key of kv head hk: stored when `storer` (and its slot is in the pools), kept in
// snk/snv when this workgroup's keys [kbeg, kend) hold it. Returns its key index, or NO_ROW.
// Every thread writes its elements of snk/snv before the tile loop's first barrier.
uint take_new_key(uint b, uint hk, bool storer, uint kbeg, uint kend) {
    int len = pc.lens.v[b];
    int slot = pc.slots.v[b];
    bool kept = len > 0 && slot >= 0 && uint(slot) < pc.pool_rows;
    uint j = uint(len - 1);
    bool owns = kept && kbeg <= j && j < kend;
    bool writes = kept && storer;
    if (!owns && !writes) {
        return NO_ROW;
    }
    uint base = b * pc.kv_stride + hk * pc.d;
    int pos = pc.pos.v[b];
    DBuf kp = DBuf(uint64_t(pc.k));
    DBuf vp = DBuf(uint64_t(pc.v));
    for (uint dd = gl_LocalInvocationID.x; dd < DMAX; dd += NT) {
        float x = 0.0;
        float y = 0.0;
        if (dd < pc.d) {
            x = rope_elem(pc.kn, base, dd, pos);
            y = pc.vn.v[base + dd];
            if (writes) {
                uint dst = (uint(slot) * pc.hkv + hk) * pc.d + dd;
                st(kp, dst, x);
                st(vp, dst, y);
            }
        }
        snk[dd] = rnd(x);
        snv[dd] = rnd(y);
    }
    return owns ? j : NO_ROW;
}
