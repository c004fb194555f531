// Declarations shared by the loss kernels.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };

// -infinity as a float constant.
#define NEG_INF uintBitsToFloat(0xff800000u)

// A row counts toward the loss iff 0 <= label < vocab; -100 (PyTorch's ignore_index) and every
// other out-of-range label are ignored (PyTorch raises for the latter; a kernel cannot).
bool counted(int label, uint vocab) { return label >= 0 && uint(label) < vocab; }

// The f32 view starting `elems` floats past `base`: rows of large [N, V] tensors can lie
// beyond 2^32 elements, so rows are addressed by pointer arithmetic, not by index.
F32In f32_in_at(F32In base, uint64_t elems) { return F32In(uint64_t(base) + elems * 4ul); }
F32Buf f32_buf_at(F32Buf base, uint64_t elems) { return F32Buf(uint64_t(base) + elems * 4ul); }
