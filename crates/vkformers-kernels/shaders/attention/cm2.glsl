// Shared declarations of the cooperative-matrix-2 attention kernels (fwd_cm2, bwd_dq_cm2,
// bwd_dkdv_cm2). Include first, with ELEM_F16 or ELEM_BF16 defined; then the push block, then
// attention/helpers.glsl and attention/cm2_ops.glsl.
//
// ELEM is the 16-bit storage type of q, k, v, o, do and the gradients, and the operand type of
// every matrix product; accumulators, softmax and lse/delta are f32.
#include "cm2_elem.glsl"
#include "common.glsl"
#include "attention/attention.glsl"

layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer EIn { ELEM v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer EBuf { ELEM v[]; };

// Every kernel runs 128 invocations (4 subgroups of 32 on NVIDIA): at that size the flexible
// dimension granularity is 16, which every tile size below is a multiple of.
#define CM2_THREADS 128

// Workgroup-scope matrices: MAT(type, rows, cols, use), f32 accumulators ACC(rows, cols).
#define MAT(T, R, C, U) coopmat<T, gl_ScopeWorkgroup, R, C, U>
#define ACC(R, C) coopmat<float, gl_ScopeWorkgroup, R, C, gl_MatrixUseAccumulator>

#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
// A clamp-to-zero layout of a [rows, D] tensor slice whose rows are `stride` elements apart (q,
// o, do, dq: stride Hq D; k, v, dk, dv: stride Hkv D). Reads past `rows` or D give 0, stores
// there are dropped.
#define CLAMPED_LAYOUT(name, rows, stride)                                           \
    CLAMPED name = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV); \
    name = setTensorLayoutDimensionNV(name, rows, pc.d);                             \
    name = setTensorLayoutStrideNV(name, stride, 1);
// A per-query vector v[n] (lse, delta: n = Tq) seen as a matrix: ROWS_LAYOUT repeats v[r] over
// the columns of row r (column stride 0; stores keep only column 0, the dimension being 1),
// COLS_LAYOUT repeats v[c] down the rows of column c (row stride 0; loads only). Entries past
// n read as 0.
#define ROWS_LAYOUT(name, n, cols)                                                   \
    CLAMPED name = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV); \
    name = setTensorLayoutDimensionNV(name, n, cols);                                \
    name = setTensorLayoutStrideNV(name, 1, 0);
#define COLS_LAYOUT(name, rows, n)                                                   \
    CLAMPED name = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV); \
    name = setTensorLayoutDimensionNV(name, rows, n);                                \
    name = setTensorLayoutStrideNV(name, 0, 1);

