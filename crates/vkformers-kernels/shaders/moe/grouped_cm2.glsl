// Shared part of the grouped expert GEMMs on NVIDIA cooperative matrix 2
// (grouped_rows_cm2.comp, grouped_wgrad_cm2.comp), after matmul/coopmat2_gemm.comp:
// workgroup-scope matrices loaded straight from global memory through tensor layouts whose
// clamp-to-zero bounds end at the expert's last slot (so a tile never reads the next expert's
// rows, and stores past it are dropped); f16 or bf16 operands (both the same), f32
// accumulation, f32 output. The K loop is ascending: a fixed reduction order.
#include "cm2_elem.glsl"
#include "common.glsl"
#include "moe/moe.glsl"

layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer EIn { ELEM v[]; };
layout(local_size_x = 256) in;

#define MAT_A coopmat<ELEM, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<ELEM, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define CLAMPED tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV>
#define NEW_CLAMPED createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV)

// A row-major [rows, cols] layout with clamp-to-zero bounds.
CLAMPED row_major(uint rows, uint cols) {
    CLAMPED l = NEW_CLAMPED;
    l = setTensorLayoutDimensionNV(l, rows, cols);
    return setTensorLayoutStrideNV(l, cols, 1);
}
