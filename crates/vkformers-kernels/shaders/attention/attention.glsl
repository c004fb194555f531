// Shared declarations of the attention kernels (design notes in attention/fwd.comp).
// Include before the push-constant block; include attention/helpers.glsl after it.

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };

// Bits of the `flags` push constant.
#define ATTN_CAUSAL 1u
#define ATTN_KMASK 2u
#define ATTN_ALIBI 4u

// Score of a masked (query, key) pair, running max of a row that has seen no visible key yet,
// and the lse written for a fully masked query row. Finite, so `MASKED - MASKED` is 0, not NaN.
#define MASKED (-1.0e30)

// Padded row stride of [rows, D] tiles in shared memory: odd, so threads reading the same column
// of different rows hit different banks.
#define DS (DMAX + 1)

// Scalars shared by every attention push block, after its buffer pointers:
// tq, tk: query / key lengths; hq, hkv: query / kv heads (hq = G * hkv); d: head dim (<= DMAX);
// flags: ATTN_* bits; window: sliding window W (0 = off); scale: score scale;
// softcap: logit cap c (0 = off).
#define ATTN_SCALARS uint tq; uint tk; uint hq; uint hkv; uint d; uint flags; uint window; float scale; float softcap;
