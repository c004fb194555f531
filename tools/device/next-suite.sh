# The H200 calls for what the session of 2026-12-05 (06:00-09:00, no device) built: the replayed
# decode step, the lean decode attention, the GEMV's loads issued ahead, the argmax's batched
# loads, three cm2 GEMM tiles, gemm.py's 16-bit C; and the must-show tables of issues 13 and 14
# beside PyTorch. Three calls of at most 600 s each, most important first: PART=key (the must-show
# tables beside PyTorch with the session's best switches, the GEMM), PART=ab (every new switch
# A/B on the old step), PART=tests (the new kernels and paths on NVIDIA's compiler, older A/Bs).
# Pack and stage (here):
#   tools/device/pack.sh .dev/nx vkformers-kernels:step_replay vkformers-kernels:sample \
#     vkformers-kernels:attention_decode vkformers-kernels:attention_decode_rope_in \
#     vkformers-kernels:gemv vkformers-kernels:gemv_normed vkformers-kernels:gemv_prefetch \
#     vkformers-kernels:gemm_coopmat vkformers-kernels:attention_cm2 vkformers-kernels:activation \
#     vkformers-kernels:glu \
#     vkformers-generate:replay vkformers-generate:lean_decode vkformers-generate:rope_in_attention \
#     vkformers-generate:greedy
#   cp tools/device/next-suite.sh .dev/nx/
#   tools/device/stage.sh out llama qwen2 mistral gemma gemma2 gptj qwen3 gpt_oss olmo cohere gpt_neox \
#     bloom gpt2 deepseek_v2 qwen3_moe phi3
# Calls: carry [".gl", ".dev/nx"], command
#   `export PACK=.dev/nx; source .dev/nx/prelude.sh; PART=key timeout 570 bash .dev/nx/next-suite.sh`
# then PART=ab and PART=tests on the warm machine (BEST="..." names the decode switches of the
# key table; default the shipped defaults: replay and GEMV loads ahead on, the lean attention
# on (the lean attention the default on GPUs since the H100 A/B of docs/bench/h100-2026-12-05-c)).
# After: `tools/device/stage.sh back`, $OUT to docs/bench/h200-DATE-X/.
# Queued for the next session with a device (written 2026-12-05 without one): PART=chain3 (the
# chain without its fence; the lean decode attention's tile rows at batch 1) and PART=ss (the cm2
# GEMM's static strides on the 1.1B training step's products and on train.py), one call each;
# pack with `tools/device/pack.sh .dev/nx vkformers-kernels:gemv_chain`.
set -u
PACK=${PACK:-.dev/nx}
source "$PACK/prelude.sh"
PART=${PART:-key}
# The shipped defaults (lean decode attention on GPUs since 2026-12-05 08:28) unless BEST names
# switches; VKFORMERS_DECODE_REPLAY=1 is a no-op that keeps `env` given a VAR=VALUE.
BEST=${BEST:-VKFORMERS_DECODE_REPLAY=1}
suite_start "$PART"
# Every switch of the session off: the decode step as the 2026-12-05-a/b runs timed it.
BASE="VKFORMERS_DECODE_REPLAY=0 VKFORMERS_DECODE_LEAN=0 VKFORMERS_GEMV_PREFETCH=0"
gen() { # gen "ENV" EXTRA-ARGS...: generate.py, vkformers only, batch 1 and 64, 512-token prompts
    local e=$1
    shift
    env $e python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 64 \
        --prefill-lens 512 --warmup 1 --repeats 3 "$@" 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
}
gen_b1() { # gen_b1 "ENV": generate.py, vkformers only, batch 1, a 512-token prompt; lines labelled [ENV]
    env $1 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 \
        --prefill-lens 512 --warmup 1 --repeats 3 2>&1 | grep -E '^b[0-9]' | sed "s/^/[$1] /" | tee -a "$LOG"
}
# The GEMM beside torch.matmul at 8192^3 bf16 (shipped), then the shipped tile with raster groups
# of 8, 16, 32 block rows (L2 reuse of B; only 2 and 4 were timed before).
gemm_rasters() {
    sec "gemm 8192^3 bf16 beside torch.matmul (shipped), then the shipped tile with raster groups of 8, 16, 32 block rows"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -1 | tee -a "$LOG"
    for r in 8 16 32; do
        "$V" bench gemm --m 8192 --n 8192 --k 8192 --dtype bf16 --c16 --engine coopmat2-t128k64 --raster $r \
            --iters 20 2>&1 | tail -1 | sed "s/^/raster $r: /" | tee -a "$LOG"
    done
}
if [[ $PART == ab ]]; then
    for k in tiled lean; do
        sec "bench decode --kernel $k, 640 keys, rope inside: batch 1 (splits), 8, 64; batch 1 with L2 flushed"
        "$V" bench decode --kernel $k --rope inside --len 640 --batch 1 --splits auto,1,2,3,5 2>&1 | tail -6 | tee -a "$LOG"
        "$V" bench decode --kernel $k --rope inside --len 640 --batch 8 --splits auto 2>&1 | tail -1 | tee -a "$LOG"
        "$V" bench decode --kernel $k --rope inside --len 640 --batch 64 --splits auto,2 2>&1 | tail -2 | tee -a "$LOG"
        "$V" bench decode --kernel $k --rope inside --len 640 --batch 1 --flush-mb 128 --splits auto 2>&1 | tail -1 | tee -a "$LOG"
    done
    sec "bench gemv, loads issued ahead off and on (1.1B step shapes, rows 1 and 4; plain and normed)"
    "$V" bench gemv --rows 1,4 --prefetch 0,1 2>&1 | tail -24 | tee -a "$LOG"
    "$V" bench gemv --normed --shapes 2560x2048,11264x2048 --rows 1 --prefetch 0,1 \
        --max-groups 0,264,528,1056 2>&1 | tail -20 | tee -a "$LOG"
    # Each switch alone on the old step, then all on; the base twice (first and last) for drift.
    for sw in "$BASE" \
        "VKFORMERS_DECODE_LEAN=0 VKFORMERS_GEMV_PREFETCH=0" \
        "VKFORMERS_DECODE_REPLAY=0 VKFORMERS_GEMV_PREFETCH=0 VKFORMERS_DECODE_LEAN=1" \
        "VKFORMERS_DECODE_REPLAY=0 VKFORMERS_DECODE_LEAN=0" \
        "VKFORMERS_DECODE_LEAN=1" \
        "VKFORMERS_DECODE_LEAN=1 VKFORMERS_DECODE_LEAN_SPLIT_KEYS=640" \
        "VKFORMERS_DECODE_LEAN=1 VKFORMERS_GEMV_MAX_GROUPS=528" \
        "$BASE"; do
        sec "generate b1 b64 [$sw]"
        gen "$sw"
    done
    sec "b1 decode profile, lean on (a profile records every step: no replay under --profile)"
    VKFORMERS_DECODE_LEAN=1 "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 \
        --greedy --profile 2>&1 | tail -16 >> "$LOG"
    sec "b1 replayed steps and host time a token (--json), defaults"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --json 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); print({k: v for k, v in d.get('timings', {}).items()})" |
        tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == final || $PART == final2 ]]; then
    # The must-show tables with the shipped defaults (the GEMV's staged input on GPUs since
    # 2026-12-05 15:40): decode and prefill beside transformers eager, the GEMM beside cuBLAS.
    # final2: the GEMV's tests first, batches 1 and 64 at 512 tokens only.
    if [[ $PART == final2 ]]; then
        sec "tests on NVIDIA's compiler: the GEMV under 7 tunings (STAGE, the gain loaded ahead)"
        TT=200 t gemv_prefetch
        sizes=(--batches 1 64 --prefill-lens 512)
    else
        sizes=(--batches 1 8 64 --prefill-lens 512 2048)
    fi
    sec "generate beside transformers eager, one run, shipped defaults (the README table)"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile "${sizes[@]}" \
        --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -14 | tee -a "$LOG"
    if [[ $PART == final2 && -f .dev/old/bin.tar.xz ]]; then
        # The previous pack (.dev/old, carried) beside this one: batch 1 and 64, vkformers alone.
        mkdir -p .dev/oldbin && tar -xJf .dev/old/bin.tar.xz -C .dev/oldbin
        sec "generate b1 b64, this build then the previous one (.dev/old), then this one again"
        gen "VKFORMERS_DECODE_REPLAY=1"
        V=$PWD/.dev/oldbin/vkformers gen "VKFORMERS_DECODE_REPLAY=1"
        gen "VKFORMERS_DECODE_REPLAY=1"
    fi
    sec "gemm 8192^3 bf16 beside torch.matmul (shipped)"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -1 | tee -a "$LOG"
    sec "bench gemv, W streamed (22 copies), batch 1 and 4, shipped defaults (staged, cap 528)"
    "$V" bench gemv --rows 1,4 --copies 22 --warm-ms 400 2>&1 | grep "µs a call" | tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == chain ]]; then
    # Session of 2026-12-05 (18:02): the decode GEMVs recorded as a dispatch chain (no barrier
    # between dependent products: each waits on a counter after loading its first weights;
    # VKFORMERS_CHAIN=1; it was the default on NVIDIA for this call only), and the cm2 GEMM's static strides (the best of
    # the gemmexp call, docs/bench/h200-2026-12-05-c) timed again, alternating with the shipped
    # kernel, now that `bench gemm` builds its pipelines before the warm-up's clock starts.
    sec "tests on NVIDIA's compiler: GEMV chains bit for bit against barriers; greedy parity and replay, chain on"
    TT=120 t gemv_chain
    TT=240 t greedy
    TT=240 t replay
    sec "generate b1 b64 (vkformers alone): chain off, on, off, on"
    for c in 0 1 0 1; do gen "VKFORMERS_CHAIN=$c"; done
    sec "generate beside transformers eager, one run, chain on (the default for this call only)"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 64 --prefill-lens 512 \
        --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -8 | tee -a "$LOG"
    sec "gemm 8192^3 bf16 (C bf16), NN then NT: shipped and static strides 2, alternating"
    for tb in "" "--trans-b"; do
        for x in "" "--static-strides 2" "" "--static-strides 2" "" "--static-strides 2"; do
            "$V" bench gemm --m 8192 --n 8192 --k 8192 --dtype bf16 --c16 --iters 20 $tb $x 2>&1 | tail -1 |
                sed "s/^/[${x:-shipped} $tb] /" | tee -a "$LOG"
        done
    done
    sec "gemm.py 8192 bf16 NN and NT: shipped, then VKFORMERS_CM2_STATIC_STRIDES=2"
    for e in 0 2; do
        for tb in "" "--trans-b"; do
            VKFORMERS_CM2_STATIC_STRIDES=$e python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 $tb \
                2>&1 | tail -1 | sed "s/^/[static $e ${tb:-NN}] /" | tee -a "$LOG"
        done
    done
    sec "b1 decode profile, chain on (every step recorded under --profile)"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 64 --greedy --profile 2>&1 |
        tail -14 >> "$LOG"
    sec done
    exit 0
fi
if [[ $PART == chain3 ]]; then
    # (Written 2026-12-05 19:15, not yet run: the session's device time was spent. Pack:
    # tools/device/pack.sh .dev/nx vkformers-kernels:gemv_chain; stage.sh out llama.) The chain
    # without the memory barrier after its wait (VKFORMERS_CHAIN_FENCE=0: the hypothesis is that
    # it held each link's input loads behind its weights loaded ahead); with it (the default);
    # the chain off first and last.
    sec "tests: GEMV chains, no fence after the wait"
    VKFORMERS_CHAIN_FENCE=0 TT=120 t gemv_chain
    sec "generate b1 (vkformers alone): chain off; on without the fence; with it; without; off"
    for e in "VKFORMERS_CHAIN=0" "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_FENCE=0" "VKFORMERS_CHAIN=1" \
        "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_FENCE=0" "VKFORMERS_CHAIN=0"; do
        gen_b1 "$e"
    done
    # The lean decode attention with fewer query rows a workgroup (VKFORMERS_DECODE_TILE_ROWS;
    # untimed at batch 1): a batch-1 call of the 1.1B model runs only 5 splits x 4 kv heads = 20
    # workgroups, each a serial chain over its tile for all 8 rows of its GQA group (1 split
    # of 5 tiles: 45 us, ~9 us a tile, docs/bench/h100-2026-12-05-e); 2 rows a tile gives 80
    # workgroups with a quarter of the rows each. Tested on lavapipe with 2 and 1 rows
    # (attention_decode_rope_in).
    sec "bench decode --kernel lean, 640 keys, rope inside, batch 1: tile rows 8, 4, 2, 1"
    for tr in 8 4 2 1; do
        VKFORMERS_DECODE_TILE_ROWS=$tr "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 \
            --splits auto 2>&1 | tail -1 | sed "s/^/[rows $tr] /" | tee -a "$LOG"
    done
    sec "generate b1 (vkformers alone): tile rows 8, 2, 4, 8"
    for tr in 8 2 4 8; do
        gen_b1 "VKFORMERS_DECODE_TILE_ROWS=$tr"
    done
    sec done
    exit 0
fi
if [[ $PART == f2 ]]; then
    # (Written 2026-12-06 01:25 for the next session with a device.) What f1's call could not
    # finish: the generate tests with every family they load (stage: llama qwen2 mistral gemma
    # gemma2 gptj qwen3 gpt_oss olmo cohere gpt_neox bloom gpt2 deepseek_v2 qwen3_moe phi3),
    # gemm_coopmat whole (its static-strides test now on one engine), the batch-1 decode profile
    # with the 2-row tiles, and train.py's 1.1B shape beside eager and torch.compile (f1's was
    # cut during compile). Pack as f1 (.dev/ny).
    sec "tests on NVIDIA's compiler: cm2 GEMM, lean decode, replay, greedy"
    TT=300 t gemm_coopmat
    TT=100 t lean_decode
    TT=100 t replay
    TT=200 t greedy
    sec "b1 decode profile, shipped defaults"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
        tail -16 | tee -a "$LOG"
    sec "train: 1.1B beside eager and torch.compile"
    timeout 300 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --steps 10 --warmup 3 \
        --json "$OUT/train.json" 2>&1 | tail -8 | tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == f1 ]]; then
    # (Written 2026-12-06 00:45.) The new defaults (the lean decode attention's shorter row tiles
    # at batch 1, the cm2 GEMM's static strides for products of 2^34 multiply-adds and up) on
    # NVIDIA's compiler, then the must-show tables beside PyTorch in one run. Pack:
    #   tools/device/pack.sh .dev/ny vkformers-kernels:gemm_coopmat vkformers-kernels:attention_decode \
    #     vkformers-kernels:attention_decode_rope_in vkformers-generate:greedy \
    #     vkformers-generate:lean_decode vkformers-generate:replay
    # and `tools/device/stage.sh out llama`.
    sec "tests on NVIDIA's compiler: cm2 GEMM (static strides bit for bit), decode attention, lean decode, replay"
    TT=200 t gemm_coopmat
    TT=200 t attention_decode
    TT=150 t attention_decode_rope_in
    TT=100 t lean_decode
    TT=100 t replay
    sec "generate beside transformers eager, one run, shipped defaults"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 64 --prefill-lens 512 \
        --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -10 | tee -a "$LOG"
    sec "gemm 8192^3 bf16 beside torch.matmul (shipped: static strides by size)"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -1 | tee -a "$LOG"
    sec "train: both shapes beside eager and torch.compile"
    timeout 270 python3 tools/bench/train.py --vkformers "$V" --shapes 134m 1.1b --steps 10 --warmup 3 \
        --json "$OUT/train.json" 2>&1 | tail -12 | tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == s1 ]]; then
    # (Written 2026-12-06 00:20.) One call for every queued A/B, cheapest first: the lean decode
    # attention's tile rows at batch 1 (kernel alone, then whole steps, 8 first and last for
    # drift); the chain without its fence; the cm2 GEMM's static strides on gemm.py's 8192^3
    # beside cuBLAS (alternating), on the 1.1B step's forward products, and on train.py's 1.1B
    # step (vkformers alone, alternating).
    sec "bench decode --kernel lean, 640 keys, rope inside, batch 1: tile rows 8, 4, 2, 1"
    for tr in 8 4 2 1; do
        VKFORMERS_DECODE_TILE_ROWS=$tr "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 \
            --splits auto,1,2,3,5 2>&1 | tail -5 | sed "s/^/[rows $tr] /" | tee -a "$LOG"
    done
    sec "generate b1 (vkformers alone): tile rows 8, 4, 2, 1, 8"
    for tr in 8 4 2 1 8; do
        gen_b1 "VKFORMERS_DECODE_TILE_ROWS=$tr"
    done
    sec "generate b1 (vkformers alone): chain off, on without its fence, on with it, off"
    for e in "VKFORMERS_CHAIN=0" "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_FENCE=0" "VKFORMERS_CHAIN=1" "VKFORMERS_CHAIN=0"; do
        gen_b1 "$e"
    done
    sec "gemm.py 8192^3 bf16 beside cuBLAS: static strides 0, 2, 0, 2"
    for ss in 0 2 0 2; do
        VKFORMERS_CM2_STATIC_STRIDES=$ss python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 \
            2>&1 | tail -1 | sed "s/^/[static strides $ss] /" | tee -a "$LOG"
    done
    sec "bench gemm, the 1.1B step's forward products (tokens 4096, weights [n, k]): static strides 0, 2"
    for shape in "2560 2048" "2048 2048" "11264 2048" "2048 5632" "32000 2048"; do
        set -- $shape
        for ss in 0 2; do
            "$V" bench gemm --m 4096 --n $1 --k $2 --dtype bf16 --c16 --trans-b --static-strides $ss --iters 20 \
                2>&1 | tail -1 | sed "s/^/[4096x$1x$2 ss $ss] /" | tee -a "$LOG"
        done
    done
    sec "train.py 1.1B (vkformers alone): static strides 0, 2, 0, 2"
    for ss in 0 2 0 2; do
        VKFORMERS_CM2_STATIC_STRIDES=$ss timeout 100 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b \
            --skip-torch --skip-compile --steps 10 --warmup 3 2>&1 | grep -E "vkformers:" | sed "s/^/[static strides $ss] /" | tee -a "$LOG"
    done
    sec done
    exit 0
fi
if [[ $PART == ss ]]; then
    # (Written 2026-12-05 21:20, no device that session.) The cm2 GEMM's static strides
    # (VKFORMERS_CM2_STATIC_STRIDES=2: lda/ldb/ldc and the fast path's layout dimensions as
    # specialization constants) won every 8192^3 pair on the H100 by 3-16% (docs/bench/
    # h100-2026-12-05-i) but were never timed on a training step: the 1.1B step's products alone,
    # off and on, then train.py's 1.1B shape off / on / off / on (vkformers alone). A default for
    # large products only if the step gains (one pipeline per stride triple: a handful a model).
    sec "bench gemm, the 1.1B step's forward products (tokens 4096, weights [n, k]): static strides 0, 2"
    for shape in "2560 2048" "2048 2048" "11264 2048" "2048 5632" "32000 2048"; do
        set -- $shape
        for ss in 0 2; do
            "$V" bench gemm --m 4096 --n $1 --k $2 --dtype bf16 --c16 --trans-b --static-strides $ss --iters 20 \
                2>&1 | tail -1 | sed "s/^/[4096x$1x$2 ss $ss] /" | tee -a "$LOG"
        done
    done
    sec "train.py 1.1B (vkformers alone): static strides 0, 2, 0, 2"
    for ss in 0 2 0 2; do
        VKFORMERS_CM2_STATIC_STRIDES=$ss python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch \
            --skip-compile --steps 10 --warmup 3 2>&1 | tail -3 | sed "s/^/[static strides $ss] /" | tee -a "$LOG"
    done
    sec done
    exit 0
fi
if [[ $PART == chain2 ]]; then
    # The chain lost on the H100 (docs/bench/h100-2026-12-05-i: batch 1 488/489 against 527/519
    # tokens/s off) with every waiting workgroup polling its counter back to back: the same
    # polls with VKFORMERS_CHAIN_BACKOFF dependent FMAs between them; the chain off first and last.
    # Then the cm2 GEMM's tests under static strides 2 (a default candidate).
    sec "tests: GEMV chains (backoff 256)"
    TT=120 t gemv_chain
    sec "generate b1 (vkformers alone): chain off; on with backoff 0, 64, 256, 1024, 4096; off"
    for e in "VKFORMERS_CHAIN=0" "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_BACKOFF=0" "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_BACKOFF=64" \
        "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_BACKOFF=256" "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_BACKOFF=1024" \
        "VKFORMERS_CHAIN=1 VKFORMERS_CHAIN_BACKOFF=4096" "VKFORMERS_CHAIN=0"; do
        gen_b1 "$e"
    done
    sec "tests: cm2 GEMM under VKFORMERS_CM2_STATIC_STRIDES=2"
    VKFORMERS_CM2_STATIC_STRIDES=2 TT=200 t gemm_coopmat
    sec done
    exit 0
fi
if [[ $PART == gemmexp ]]; then
    # The cm2 GEMM experiments of 2026-12-05 (static strides, uvec4 operand pointers, the
    # hand-staged K loop) again, now that `bench gemm` warms for a second: their first timing
    # (docs/bench/h100-2026-12-05-e) ran each in a fresh process after three warm-up runs, and the
    # shipped tile's NT case there (63.4) timed 281 with the warm-up (h100-2026-12-05-h), so those
    # losses may be low clocks. The shipped tile first and last (drift).
    sec "gemm 8192^3 bf16 (C bf16), NN and NT: shipped, static strides 1/2, uvec4 pointers, both, t128, staged, shipped"
    for tb in "" "--trans-b"; do
        for x in "coopmat2-t128k64" "coopmat2-t128k64 --static-strides 1" "coopmat2-t128k64 --static-strides 2" \
            "coopmat2-t128k64 --vec16 1" "coopmat2-t128k64 --static-strides 2 --vec16 1" "coopmat2-t128" \
            "coopmat2-staged" "coopmat2-staged --static-strides 1" "coopmat2-t128k64 --raster 8" "coopmat2-t128k64"; do
            "$V" bench gemm --m 8192 --n 8192 --k 8192 --dtype bf16 --c16 --iters 20 $tb --engine $x 2>&1 | tail -1 |
                sed "s/^/[$x $tb] /" | tee -a "$LOG"
        done
    done
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -1 | tee -a "$LOG"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 --trans-b 2>&1 | tail -1 |
        sed "s/^/NT: /" | tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == stage ]]; then
    # Session of 2026-12-05 (14:43): the GEMV's input staged in shared memory (STAGE) under grid
    # caps (on by default since; VKFORMERS_GEMV_STAGE=0 for the unstaged lines).
    sec "tests on NVIDIA's compiler: the GEMV under 7 tunings (STAGE among them), GPU variants"
    TT=200 t gemv_prefetch
    sec "bench gemv, W streamed (22 copies), batch 1: input staged off/on under grid caps none, 528, 1056"
    "$V" bench gemv --rows 1 --copies 22 --warm-ms 400 --normed --shapes 2560x2048,11264x2048,32000x2048 \
        --stage 0,1 --max-groups 0,528,1056 2>&1 | grep "µs a call" | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 --warm-ms 400 --shapes 2048x2048,2048x5632 --stage 0,1 \
        --max-groups 0,528,1056 2>&1 | grep "µs a call" | tee -a "$LOG"
    "$V" bench gemv --rows 4 --copies 22 --warm-ms 400 --normed --shapes 2560x2048,11264x2048 --stage 0,1 \
        --max-groups 0,528 2>&1 | grep "µs a call" | tee -a "$LOG"
    # (The cm2 GEMM experiments this part timed, static strides, uvec4 pointers and a hand-staged
    # K loop, all lost and are removed: docs/bench/h100-2026-12-05-e.)
    sec "generate b1 b64 (vkformers): defaults, then the input staged with grid caps none, 528, 1056"
    gen "VKFORMERS_GEMV_STAGE=0"
    gen "VKFORMERS_GEMV_STAGE=1 VKFORMERS_GEMV_MAX_GROUPS=100000"
    gen "VKFORMERS_GEMV_STAGE=1 VKFORMERS_GEMV_MAX_GROUPS=528"
    gen "VKFORMERS_GEMV_STAGE=1 VKFORMERS_GEMV_MAX_GROUPS=1056"
    sec "b1 decode profile, input staged, cap 528"
    VKFORMERS_GEMV_STAGE=1 VKFORMERS_GEMV_MAX_GROUPS=528 "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl \
        --max-new-tokens 128 --greedy --profile 2>&1 | tail -14 | tee -a "$LOG"
    sec done
    exit 0
fi
if [[ $PART == micro || $PART == mini ]]; then
    # micro: the must-show figures and the GEMM's rasters in under 2 minutes (a device budget near
    # its end); mini adds the batch-1 profile and the GEMV PIPE A/B (~3 minutes).
    sec "generate beside transformers eager, b1 and b64, 512-token prompts, shipped defaults"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 64 --prefill-lens 512 --warmup 1 \
        --repeats 2 --json "$OUT/generate.json" 2>&1 | tail -8 | tee -a "$LOG"
    gemm_rasters
    if [[ $PART == mini ]]; then
        sec "b1 decode profile, shipped defaults"
        "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
            tail -16 | tee -a "$LOG"
        sec "generate b1: defaults, then VKFORMERS_GEMV_PIPE=1"
        for sw in "$BEST" "VKFORMERS_GEMV_PIPE=1"; do
            gen_b1 "$sw"
        done
    fi
    sec done
    exit 0
fi
if [[ $PART == key ]]; then
    sec "generate beside transformers eager, one run, decode switches [$BEST] (the README table)"
    env $BEST python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 8 64 \
        --prefill-lens 512 2048 --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -14 | tee -a "$LOG"
    gemm_rasters
    sec "gemm 8192^3 bf16 beside torch.matmul, f32 C"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 --c32 2>&1 | tail -1 | tee -a "$LOG"
    sec "b1 decode profile, shipped defaults (a profile records every step: no replay under --profile)"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
        tail -16 | tee -a "$LOG"
    sec "bench gemv at batch 1: W in L2 (1 copy) against W streamed from memory (22 copies, as in a step)"
    "$V" bench gemv --rows 1 --copies 1 2>&1 | tail -6 | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 2>&1 | tail -6 | tee -a "$LOG"
    "$V" bench gemv --rows 1 --copies 22 --normed --shapes 2560x2048,11264x2048 --max-groups 0,264 2>&1 | tail -5 | tee -a "$LOG"
    "$V" bench gemv --rows 1,4 --copies 22 --shapes 2048x5632 --pipe 0,1 2>&1 | tail -4 | tee -a "$LOG"
    sec "bench decode --kernel lean, 640 keys, rope inside, batch 1: splits, and L2 flushed (cold K/V as in a step)"
    "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 --splits auto,1,2,5 2>&1 | tail -4 | tee -a "$LOG"
    "$V" bench decode --kernel lean --rope inside --len 640 --batch 1 --flush-mb 128 --splits auto 2>&1 | tail -1 | tee -a "$LOG"
    sec "generate b1 b64: defaults, then a block's next GEMV chunk pair loaded ahead (VKFORMERS_GEMV_PIPE=1)"
    gen "$BEST"
    gen "VKFORMERS_GEMV_PIPE=1"
    sec done
    exit 0
fi
if [[ $PART == tests ]]; then
    sec "tests on NVIDIA's compiler: the cm2 GEMM (every engine), the GEMV's loads ahead (PIPE), the lean decode"
    TT=330 t gemm_coopmat
    TT=90 t gemv_prefetch
    TT=90 t lean_decode
    sec done
    exit 0
fi
