// One element of an AdamW step, in the order of operations of torch.optim.AdamW (see
// optim/adamw.comp for the formulas): g is the (scaled) gradient, p, m, v the stored parameter
// and moments (m, v zero on a parameter's first step), updated in place. `precise` keeps the
// compiler from fusing into FMAs, so every kernel that includes this gives the same bits.
void adamw_update(float g, inout float p, inout float m, inout float v, float decay, float w1, float beta2,
                  float omb2, float bc2_sqrt, float neg_step, float eps) {
    precise float pp = p * decay;
    precise float mm = m;
    // torch lerp: weight < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w)
    if (abs(w1) < 0.5) {
        mm = mm + w1 * (g - mm);
    } else {
        mm = g - (g - mm) * (1.0 - w1);
    }
    precise float vv = v * beta2;
    vv = vv + omb2 * g * g;
    precise float denom = sqrt(vv) / bc2_sqrt + eps;
    pp = pp + neg_step * mm / denom;
    p = pp;
    m = mm;
    v = vv;
}
