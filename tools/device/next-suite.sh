# The device calls of issues 13 and 14 (training and inference speed on the H200): the must-show
# tables beside PyTorch, and the A/Bs a session queues for the next one with a device. Parts run
# before 2026-12-06 (chain, chain2, chain3, gemmexp, stage, rows, ss, s1, f1, key, ab, ...) are in
# this file's history (`git log -p tools/device/next-suite.sh`); their results in docs/bench/.
#
# Pack and stage (here), then call with carry [".gl", ".dev/ny"]:
#   tools/device/pack.sh .dev/ny vkformers-kernels:gemm_coopmat vkformers-kernels:attention_decode \
#     vkformers-kernels:adamw_multi \
#     vkformers-kernels:attention_decode_rope_in vkformers-generate:greedy \
#     vkformers-generate:lean_decode vkformers-generate:replay
#   cp tools/device/next-suite.sh .dev/ny/
#   tools/device/stage.sh out llama qwen2 mistral gemma gemma2 gptj qwen3 gpt_oss olmo cohere \
#     gpt_neox bloom gpt2 deepseek_v2 qwen3_moe phi3     # the families the generate tests load
#   command: `export PACK=.dev/ny; source .dev/ny/prelude.sh; PART=f2 timeout 570 bash .dev/ny/next-suite.sh`
# After: `tools/device/stage.sh back` (then `git status` clean), $OUT to docs/bench/<card>-DATE-X/
# with a README.
#
# Parts (each under 600 s; most important first):
#   (f3-f6, 2026-12-06's second session, are in this file's history: rows summed by one
#          subgroup, neutral and dropped; the wide AdamW's test; the GEMV's and the lean
#          attention's cost probes: docs/bench/h100-2026-12-06-b.)
#   f2     queued 2026-12-06 (again: run `final` first, on an H200, for the wide AdamW's step):
#          the batch-1 profile; the GEMV's and the lean decode attention's
#          cost probes (which part of a batch-1 call's fixed cost is what); the tests f1's call
#          could not finish (with every fixture staged), gemm_coopmat last. Then `final`.
#   final  the must-show tables: generate (b1/b8/b64, p512/p2048) beside eager, gemm.py beside
#          cuBLAS, train.py both shapes beside eager and torch.compile (~8 minutes)
#   micro  the must-show decode and GEMM figures in under 2 minutes (a budget near its end)
#   ab     SWITCHES="A;B;..." (env assignments, ';'-separated): batch-1 and batch-64 decode,
#          vkformers alone, each switch set in a process of its own, the first set again last
set -u
PACK=${PACK:-.dev/ny}
source "$PACK/prelude.sh"
PART=${PART:-f2}
suite_start "$PART"

# gen "ENV" EXTRA...: generate.py, vkformers alone, batches 1 and 64 at 512 prompt tokens, lines
# labelled [ENV].
gen() {
    local e=$1
    shift
    env $e python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 64 \
        --prefill-lens 512 --warmup 1 --repeats 3 "$@" 2>&1 | grep -E '^b[0-9]' | sed "s/^/[$e] /" | tee -a "$LOG"
}
# beside_eager ARGS...: generate.py beside transformers eager, into $OUT/generate.json.
beside_eager() {
    sec "generate beside transformers eager, one run, shipped defaults ($*)"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile "$@" --warmup 1 --repeats 3 \
        --json "$OUT/generate.json" 2>&1 | tail -14 | tee -a "$LOG"
}
gemm_vs_cublas() {
    sec "gemm 8192^3 bf16 beside torch.matmul (shipped)"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -1 | tee -a "$LOG"
}
# train_beside SHAPES... : train.py beside eager and torch.compile, into $OUT/train.json.
train_beside() {
    sec "train: $* beside eager and torch.compile"
    timeout "${TRAIN_S:-300}" python3 tools/bench/train.py --vkformers "$V" --shapes "$@" --steps 10 --warmup 3 \
        --json "$OUT/train.json" 2>&1 | tail -10 | tee -a "$LOG"
}
profile_b1() {
    sec "b1 decode profile, shipped defaults (a profile records every step: no replay under --profile)"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
        tail -16 | tee -a "$LOG"
}

case $PART in
f2)
    profile_b1
    sec "where a batch-1 GEMV's fixed ~5 us goes: cost probes (1 no input, 2 no W loads, 4 no cross-subgroup sum, 7 none), W in L2 and streamed; the dispatch floor"
    "$V" bench gemv --rows 1 --copies 1 --probe 0,1,2,4,7 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 --normed --shapes 2560x2048,11264x2048 --probe 0,1,2,4,7 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench dispatch 2>&1 | tail -1 | tee -a "$LOG"
    sec "a GEMV with nothing loaded (probe 7) on 66 to 528 workgroups: is the ~5 us left without W the grid's launch?"
    "$V" bench gemv --rows 1 --copies 1 --shapes 2048x2048 --probe 3,7 --max-groups 66,132,264,528 2>&1 | grep "a call" | tee -a "$LOG"
    sec "where the lean decode attention's ~12 us goes (batch 1, 640 keys, 2-row tiles): probes 0, 1 no K/V loads, 2 no P.V, 4 no split merge, 8 no scores/maxima/probabilities, 15 none"
    for p in 0 1 2 4 8 15; do
        VKFORMERS_DECODE_PROBE=$p "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 --splits auto 2>&1 |
            tail -1 | sed "s/^/[probe $p] /" | tee -a "$LOG"
    done
    sec "tests on NVIDIA's compiler: lean decode, replay, greedy (every family staged), then the cm2 GEMM"
    TT=100 t lean_decode
    TT=100 t replay
    TT=200 t greedy
    TT=240 t gemm_coopmat
    ;;
final)
    beside_eager --batches 1 8 64 --prefill-lens 512 2048
    gemm_vs_cublas
    TRAIN_S=330 train_beside 134m 1.1b
    ;;
micro)
    beside_eager --batches 1 64 --prefill-lens 512
    gemm_vs_cublas
    ;;
ab)
    IFS=';' read -ra sets <<< "${SWITCHES:?SWITCHES=\"A=1;A=0\" names the switch sets}"
    sec "generate b1 b64 (vkformers alone): ${SWITCHES}; the first set again last"
    for e in "${sets[@]}" "${sets[0]}"; do gen "$e"; done
    ;;
*)
    echo "next-suite.sh: no part '$PART' (f2, final, micro, ab)" >&2
    exit 2
    ;;
esac
sec done
