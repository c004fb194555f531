// Shared declarations of the attention kernels (design notes in attention/fwd.comp).
// Include before the push-constant block; include attention/helpers.glsl after it.

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer I32In { int v[]; };

// Bits of the `flags` push constant.
#define ATTN_CAUSAL 1u
#define ATTN_KMASK 2u
#define ATTN_ALIBI 4u
#define ATTN_SINKS 8u

// Score of a masked (query, key) pair, running max of a row that has seen no visible key yet,
// and the lse written for a fully masked query row. Finite, so `MASKED - MASKED` is 0, not NaN.
#define MASKED (-1.0e30)

// Padded row stride of [rows, D] tiles in shared memory: odd, so threads reading the same column
// of different rows hit different banks.
#define DS (DMAX + 1)

// Scalars shared by every attention push block, after its buffer pointers:
// tq, tk: query / key lengths; hq, hkv: query / kv heads (hq = G * hkv); d: head dim (<= DMAX);
// flags: ATTN_* bits; window: sliding window W (0 = off); scale: score scale;
// softcap: logit cap c (0 = off); dvh: value / output head dim (<= DMAX; MLA has dv != d, the
// q/k head dim: v, o, do, dv are [.., dv] while q, k, dq, dk are [.., d]); chunk: chunked
// attention C (Llama 4; 0 = off): qpos sees key j only when floor(j / C) == floor(qpos / C).
#define ATTN_SCALARS uint tq; uint tk; uint hq; uint hkv; uint d; uint flags; uint window; float scale; float softcap; uint dvh; uint chunk;

// Learned attention sink (gpt-oss, granite_swa): a per-head logit s that joins a row's softmax
// denominator and carries no value, o = sum_j e^(S_j) v_j / (sum_j e^(S_j) + e^s). Folds s into
// a row's running max m and sum l as one more key would (m' = max(m, s), l' = l e^(m - m') +
// e^(s - m')) and returns a = e^(m - m'), the factor the row's unnormalised accumulators take.
// A row that saw no key (m = MASKED, l = 0) gets m' = s, l' = 1, a = 0: o = 0, lse = s.
float attn_fold_sink(float s, inout float m, inout float l) {
    float m2 = max(m, s);
    float a = exp(m - m2);
    l = l * a + exp(s - m2);
    m = m2;
    return a;
}
