// Reduction combiners and per-element operations of the cooperative-matrix-2 attention kernels
// (after the push block and attention/helpers.glsl). A per-element operation receives the
// element's (row, column) in its matrix, the element, then the extra operands (a matrix
// operand contributes its element at the same row and column).

float max_of(const in float x, const in float y) {
    return max(x, y);
}
float sum_of(const in float x, const in float y) {
    return x + y;
}

// Score of query i and key j from dot = q_i . k_j, or MASKED when the pair is not visible.
float score_at(int i, int j, float dot_qk, uint b, uint h) {
    if (!attn_visible(b, i, j)) {
        return MASKED;
    }
    float dcap;
    return attn_score(dot_qk, h, i, j, dcap);
}
// S[r, c] of a [queries, keys] tile: query q0 + r, key k0 + c.
float score_of(const in uint32_t r, const in uint32_t c, const in float dot_qk, const in uint32_t q0,
               const in uint32_t k0, const in uint32_t b, const in uint32_t h) {
    return score_at(int(q0 + r), int(k0 + c), dot_qk, b, h);
}
// Sᵀ[r, c] of a [keys, queries] tile: key k0 + r, query q0 + c.
float score_t(const in uint32_t r, const in uint32_t c, const in float dot_qk, const in uint32_t k0,
              const in uint32_t q0, const in uint32_t b, const in uint32_t h) {
    return score_at(int(q0 + c), int(k0 + r), dot_qk, b, h);
}
float max_elem(const in uint32_t r, const in uint32_t c, const in float x, const in float y) {
    return max(x, y);
}
// P = exp(S - lse) (backward), 0 where masked (also in a fully masked row, whose lse is MASKED).
float prob_lse(const in uint32_t r, const in uint32_t c, const in float s, const in float lse) {
    return s <= MASKED ? 0.0 : exp(s - lse);
}
// dS = P (dP - delta) ds/du, with ds/du = 1 - tanh^2(scale dot / c) under softcap c, else 1.
float dscore(const in uint32_t r, const in uint32_t c, const in float p, const in float dp, const in float delta,
             const in float dot_qk) {
    float g = p * (dp - delta);
    if (pc.softcap > 0.0) {
        float t = attn_tanh(pc.scale * dot_qk / pc.softcap);
        g *= 1.0 - t * t;
    }
    return g;
}

// dS = P (dP - delta) without softcap.
float dscore_plain(const in uint32_t r, const in uint32_t c, const in float p, const in float dp, const in float delta) {
    return p * (dp - delta);
}

// Loads rows [r0, r0 + R) and columns [0, DMAX) of a [rows, D] slice whose rows are `stride`
// elements apart, at element `base`, into `mat` (LOAD_ROWS_T: through a transposing view, as
// the [DMAX, R] operand). When the rows lie wholly inside, D = DMAX and every offset and
// stride is a multiple of 8 elements (16 bytes), the layout is unclamped and the values are
// masked with `& ~7u` (no-ops that tell the compiler), so the driver may use wide loads
// without bounds checks (1.7x on the GEMM, see matmul/coopmat2_gemm.comp); otherwise the
// clamp-to-zero layout. The condition is uniform over the workgroup when its inputs are.
bool rows_unclamped(uint r0, uint R, uint rows, uint base, uint stride) {
    return r0 + R <= rows && pc.d == DMAX && ((base | stride) & 7u) == 0u;
}
#define LOAD_ROWS_VIEW(mat, buf, base, rows, stride, r0, R, VIEW)                                        \
    if (rows_unclamped(r0, R, rows, base, stride)) {                                                     \
        tensorLayoutNV<2> lf_ = createTensorLayoutNV(2);                                                 \
        lf_ = setTensorLayoutDimensionNV(lf_, rows, DMAX);                                               \
        lf_ = setTensorLayoutStrideNV(lf_, (stride) & ~7u, 1);                                           \
        coopMatLoadTensorNV(mat, buf, (base) & ~7u, sliceTensorLayoutNV(lf_, r0, R, 0, DMAX) VIEW);      \
    } else {                                                                                             \
        CLAMPED lc_ = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);                  \
        lc_ = setTensorLayoutDimensionNV(lc_, rows, pc.d);                                               \
        lc_ = setTensorLayoutStrideNV(lc_, stride, 1);                                                   \
        coopMatLoadTensorNV(mat, buf, base, sliceTensorLayoutNV(lc_, r0, R, 0, DMAX) VIEW);              \
    }
#define NO_VIEW
#define LOAD_ROWS(mat, buf, base, rows, stride, r0, R) LOAD_ROWS_VIEW(mat, buf, base, rows, stride, r0, R, NO_VIEW)
#define LOAD_ROWS_T(mat, buf, base, rows, stride, r0, R) \
    LOAD_ROWS_VIEW(mat, buf, base, rows, stride, r0, R, COMMA_TRANSPOSED)
#define COMMA_TRANSPOSED , createTensorViewNV(2, false, 1, 0)
