// Declarations shared by the loss kernels (the cross-entropy kernels include dtype.glsl first).
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };

// -infinity as a float constant.
#define NEG_INF uintBitsToFloat(0xff800000u)

// A row counts toward the loss iff 0 <= label < vocab; -100 (PyTorch's ignore_index) and every
// other out-of-range label are ignored (PyTorch raises for the latter; a kernel cannot).
bool counted(int label, uint vocab) { return label >= 0 && uint(label) < vocab; }

#ifdef LOSS_STORAGE
// Bytes of one element of the storage type (dtype.glsl).
#if defined(DT_F16) || defined(DT_BF16)
#define DT_BYTES 2ul
#else
#define DT_BYTES 4ul
#endif
// The view of the storage type starting `elems` elements past `base`: rows of large [N, V]
// tensors can lie beyond 2^32 elements, so rows are addressed by pointer arithmetic, not by index.
DIn d_in_at(DIn base, uint64_t elems) { return DIn(uint64_t(base) + elems * DT_BYTES); }
DBuf d_buf_at(DBuf base, uint64_t elems) { return DBuf(uint64_t(base) + elems * DT_BYTES); }
#endif
