# The device calls of issues 13 and 14 (training and inference speed on the H200): the must-show
# tables beside PyTorch, and the A/Bs a session queues for the next one with a device. Parts run
# before 2026-12-06 (chain, chain2, chain3, gemmexp, stage, rows, ss, s1, f1, key, ab, ...) are in
# this file's history (`git log -p tools/device/next-suite.sh`); their results in docs/bench/.
#
# Pack and stage (here), then call with carry [".gl", ".dev/ny"]:
#   tools/device/pack.sh .dev/ny vkformers-kernels:gemm_coopmat vkformers-kernels:attention_decode \
#     vkformers-kernels:gemv_prefetch vkformers-kernels:adamw_multi \
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
#   f5     f4's first minutes: the tests and SGROWS in whole steps (a budget of ~4 minutes).
#   f4     f3 reordered for a short budget: the tests of the two changes, SGROWS in whole steps,
#          the 1.1B step beside eager (wide AdamW), then the probes and a train profile.
#   f3     queued 2026-12-06 (second session): the probes of f2, and rows summed by one subgroup
#          (VKFORMERS_GEMV_SGROWS) against the shipped GEMV: bench gemv and whole steps; tests.
#   f2     queued 2026-12-06: the batch-1 profile; the GEMV's and the lean decode attention's
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
f3)
    profile_b1
    sec "GEMV cost probes (1 no input, 2 no W loads, 4 no cross-subgroup sum), W in L2; the dispatch floor"
    "$V" bench gemv --rows 1 --copies 1 --probe 0,1,2,4 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench dispatch 2>&1 | tail -1 | tee -a "$LOG"
    sec "rows summed by one subgroup (SGROWS 0/1), W streamed (22 copies): plain, then normed"
    "$V" bench gemv --rows 1,4 --copies 22 --sgrows 0,1 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 --normed --shapes 2560x2048,11264x2048,32000x2048 --sgrows 0,1 --probe 0,4 2>&1 | grep "a call" | tee -a "$LOG"
    sec "lean decode attention probes (batch 1, 640 keys): 0, 1 no K/V loads, 2 no P.V, 4 no merge, 8 no scores, 15 none"
    for p in 0 1 2 4 8 15; do
        VKFORMERS_DECODE_PROBE=$p "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 --splits auto 2>&1 |
            tail -1 | sed "s/^/[probe $p] /" | tee -a "$LOG"
    done
    sec "generate b1 (vkformers alone): SGROWS 0, 1, 0, 1"
    for e in VKFORMERS_GEMV_SGROWS=0 VKFORMERS_GEMV_SGROWS=1 VKFORMERS_GEMV_SGROWS=0 VKFORMERS_GEMV_SGROWS=1; do
        gen "$e" --batches 1
    done
    sec "train 1.1B profile (4 steps, vkformers alone): where a step's time outside the big products goes"
    python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --steps 4 --warmup 1 \
        --extra-args "--profile" 2>&1 | tail -2 | tee -a "$LOG"
    grep -A36 "^profile" target/bench-work/vk-train-1.1b.log | tee -a "$LOG"
    sec "tests on NVIDIA's compiler: gemv_prefetch (SGROWS against the f64 reference), lean decode, replay, greedy"
    TT=120 t gemv_prefetch
    TT=60 t adamw_multi
    TT=100 t lean_decode
    TT=100 t replay
    TT=150 t greedy
    ;;
f4)
    sec "tests on NVIDIA's compiler: adamw_multi (wide path), gemv_prefetch (SGROWS against the f64 reference)"
    TT=40 t adamw_multi
    TT=100 t gemv_prefetch
    sec "train 1.1B beside eager (the wide AdamW; no torch.compile)"
    timeout 200 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-compile --steps 10 --warmup 3 \
        --json "$OUT/train.json" 2>&1 | tail -6 | tee -a "$LOG"
    sec "generate b1 (vkformers alone): SGROWS 0, 1, 0, 1"
    for e in VKFORMERS_GEMV_SGROWS=0 VKFORMERS_GEMV_SGROWS=1 VKFORMERS_GEMV_SGROWS=0 VKFORMERS_GEMV_SGROWS=1; do
        gen "$e" --batches 1
    done
    sec "rows by subgroup, W streamed (22 copies); GEMV probes in L2; lean attention probes"
    "$V" bench gemv --rows 1 --copies 22 --sgrows 0,1 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 --normed --shapes 2560x2048,11264x2048 --sgrows 0,1 2>&1 | grep "a call" | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 1 --shapes 2048x2048,2048x5632 --probe 0,1,2,4 2>&1 | grep "a call" | tee -a "$LOG"
    for p in 0 1 2 4 8 15; do
        VKFORMERS_DECODE_PROBE=$p "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 --splits auto 2>&1 |
            tail -1 | sed "s/^/[probe $p] /" | tee -a "$LOG"
    done
    sec "train 1.1B profile (4 steps, vkformers alone)"
    python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --steps 4 --warmup 1 \
        --extra-args "--profile" 2>&1 | tail -1 | tee -a "$LOG"
    grep -A30 "^profile" target/bench-work/vk-train-1.1b.log | tee -a "$LOG"
    ;;
f5)
    sec "tests on NVIDIA's compiler: adamw_multi (wide path), gemv_prefetch (SGROWS); generate b1 SGROWS 0, 1, 0"
    TT=30 t adamw_multi
    TT=90 t gemv_prefetch
    for e in VKFORMERS_GEMV_SGROWS=0 VKFORMERS_GEMV_SGROWS=1 VKFORMERS_GEMV_SGROWS=0; do gen "$e" --batches 1; done
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
    echo "next-suite.sh: no part '$PART' (f2, f3, f4, f5, final, micro, ab)" >&2
    exit 2
    ;;
esac
sec done
