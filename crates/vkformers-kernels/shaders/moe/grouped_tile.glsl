// Shared-memory tile of the grouped expert GEMMs (grouped_rows.comp, grouped_wgrad.comp), after
// matmul/gemm.comp: a workgroup of NT = (BM/TM)·(BN/TN) threads owns a BM×BN tile of C and walks
// the inner dimension in steps of BK, the op(A) [BM, BK] and op(B) [BK, BN] tiles staged
// k-major in shared memory (padded by one against bank conflicts). Thread (tx, ty) owns the
// TM×TN elements (ty + i·TY, tx + j·TX), so a subgroup's shared reads are broadcasts (A) and
// contiguous (B). Accumulation is f32, k ascending within a tile and tiles in order: a fixed
// reduction order, so results are deterministic.
//
// Storage: A as f32 (default), A_F16 or A_BF16; B likewise (B_F16, B_BF16). `lda_(p, i)` /
// `ldb_(p, i)` widen element i to f32; `a_at(base, e)` is the A pointer moved by e elements.
#extension GL_EXT_control_flow_attributes : require
#if defined(A_F16) || defined(A_BF16) || defined(B_F16) || defined(B_BF16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#endif
#if defined(A_F16) || defined(B_F16)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

// A read-only input buffer type T of one storage type (f16, bf16 or f32), LD(p, i) its element
// i widened to f32, and BYTES its element size.
#define IN_F16(T, LD, BYTES) \
    layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer T { float16_t v[]; }; \
    float LD(T p, uint i) { return float(p.v[i]); } \
    const uint BYTES = 2;
#define IN_BF16(T, LD, BYTES) \
    layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer T { uint16_t v[]; }; \
    float LD(T p, uint i) { return uintBitsToFloat(uint(p.v[i]) << 16); } \
    const uint BYTES = 2;
#define IN_F32(T, LD, BYTES) \
    layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer T { float v[]; }; \
    float LD(T p, uint i) { return p.v[i]; } \
    const uint BYTES = 4;

#if defined(A_F16)
IN_F16(AIn, lda_, A_BYTES)
#elif defined(A_BF16)
IN_BF16(AIn, lda_, A_BYTES)
#else
IN_F32(AIn, lda_, A_BYTES)
#endif
#if defined(B_F16)
IN_F16(BIn, ldb_, B_BYTES)
#elif defined(B_BF16)
IN_BF16(BIn, ldb_, B_BYTES)
#else
IN_F32(BIn, ldb_, B_BYTES)
#endif
AIn a_at(AIn p, uint64_t e) { return AIn(uint64_t(p) + e * uint64_t(A_BYTES)); }
BIn b_at(BIn p, uint64_t e) { return BIn(uint64_t(p) + e * uint64_t(B_BYTES)); }

#define TX (BN / TN)
#define TY (BM / TM)
#define NT (TX * TY)
layout(local_size_x = NT) in;

shared float As[BK][BM + 1];
shared float Bs[BK][BN + 1];
float acc[TM][TN];

const uint LA = BM * BK / NT; // op(A) elements each thread stages per K step
const uint LB = BN * BK / NT;

// Position (mn, k) of staged element l of a [BMN, BK] tile: consecutive threads walk the
// operand's contiguous dimension (k when `k_contig`, else mn) so global reads coalesce.
uvec2 tile_pos(uint l, uint bmn, bool k_contig) {
    return k_contig ? uvec2(l / BK, l % BK) : uvec2(l % bmn, l / bmn);
}

void zero_acc() {
    [[unroll]] for (uint i = 0; i < TM; i++) {
        [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = 0.0;
    }
}

// acc += As[:, ty + i·TY]ᵀ · Bs[:, tx + j·TX] over the BK staged k (zeros past the edge).
void mma_step(uint tx, uint ty) {
    [[unroll]] for (uint kk = 0; kk < BK; kk++) {
        float av[TM];
        float bv[TN];
        [[unroll]] for (uint i = 0; i < TM; i++) av[i] = As[kk][ty + i * TY];
        [[unroll]] for (uint j = 0; j < TN; j++) bv[j] = Bs[kk][tx + j * TX];
        [[unroll]] for (uint i = 0; i < TM; i++) {
            [[unroll]] for (uint j = 0; j < TN; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
        }
    }
}
