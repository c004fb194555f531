# The H200 calls that measure what the sessions of 2026-12-04 (night, late night) built without a
# device: every switch they added, A/B in one run beside PyTorch, and the new kernels' tests on
# NVIDIA's compiler. Pack and run (see README.md here), two calls of at most 600 s each:
#   tools/device/pack.sh .dev/ab vkformers-kernels:optim_multi vkformers-kernels:adamw_multi \
#     vkformers-kernels:col_sum_tiled vkformers-kernels:fresh_outputs vkformers-kernels:split_k \
#     vkformers-kernels:twin vkformers-kernels:twin_only vkformers-kernels:gemv vkformers-kernels:gemv_normed \
#     vkformers-kernels:attention_decode_rope_store vkformers-kernels:attention_decode_rope_in \
#     vkformers-kernels:attention_decode_latent vkformers-tensor:attention_casts vkformers-models:packed_products \
#     vkformers-generate:decode_dispatches vkformers-generate:normed_gemv vkformers-generate:rope_in_attention \
#     vkformers-generate:chat_lookahead vkformers-cli:train_casts vkformers-cli:amp_parity vkformers-vk:spare_batches \
#     vkformers-tensor:inference_twin_ops vkformers-generate:inference_twins vkformers-tensor:autocast \
#     vkformers-generate:prefill_rows vkformers-kernels:embedding vkformers-kernels:gemm_half_c vkformers-kernels:gemm_coopmat
#   cp tools/device/ab-suite.sh .dev/ab/; tools/device/stage.sh out llama qwen2 gemma gemma2 phi3 olmo gpt_neox gptj \
#     mistral qwen3 gpt_oss gpt2 t5 deepseek_v2 fixtures_amp fixtures_train fixtures_lora
#   call 1: carry [".gl", ".dev/ab", ".dev/wheels"], `PACK=.dev/ab source .dev/ab/prelude.sh; PART=a bash .dev/ab/ab-suite.sh`
#   call 2 (the machine still warm): carry [".gl", ".dev/ab", ".dev/wheels"], `... PART=b bash .dev/ab/ab-suite.sh`
#   call 3 if time is left (the prefill bisect): carry [".gl", ".dev/ab", ".dev/bis"], `... PART=c ...`
#   tools/device/stage.sh back
# One call only (device time for one): `PART=key` (below) runs the must-show figures first.
# `PART=next`: tiles of fewer rows in the decode attention (VKFORMERS_DECODE_TILE_ROWS, with its
# tests when the pack has attention_decode and attention_decode_rope_in), the decode attention's
# in-step cost by probes, a batch-64 profile, the decode
# rows' split-K on/off (VKFORMERS_SKINNY_SPLIT_K); `PART=next2`: serve's warm-up A/B with the
# hold on (`tools/device/pack.sh .dev/nx vkformers-kernels:attention_decode
# vkformers-kernels:attention_decode_rope_in`; carry .gl, .dev/nx, .dev/wheels).
# Always `export PACK=...` before `source $PACK/prelude.sh` (the suite reads PACK itself).
# .dev/bis: xz'd release CLIs of ba19923 (the -j run's tree), 6af4688 and ba03eb7 for the prefill
# bisect, 18 MB (part b's carry: tree ~19 + pack ~20 + 18 MiB, under 64; see
# docs/bench/h200-2026-12-04-k/README.md); part c skips the bisect without it.
set -u
PACK=${PACK:-.dev/ab}
source "$PACK/prelude.sh"
PART=${PART:-a}
# The machine itself, so runs on different hosts or drivers can be told apart.
suite_start "$PART"
# Every decode switch of the two sessions off: the step as it was before them.
OLD_DECODE="VKFORMERS_FUSED_PROJ=0 VKFORMERS_PACKED_ROPE=0 VKFORMERS_NORM_GEMV=0 VKFORMERS_ROPE_IN_ATTN=0"
# The openai client for serve.py (parts a and b).
if [[ -d .dev/wheels ]]; then
    python3 -m pip install -q --no-index --find-links .dev/wheels --target /tmp/oa-site openai > /tmp/pip.log 2>&1 || tail -3 /tmp/pip.log
    export PYTHONPATH=/tmp/oa-site${PYTHONPATH:+:$PYTHONPATH}
fi
# Part key: the issues' must-show figures alone, most important first, in one call of < 10 min
# (for a session whose device time allows one call): generate and train beside PyTorch, the GEMM
# beside cuBLAS, serve, the kernel tests never run on the H200, a batch-1 decode profile.
if [[ $PART == key ]]; then
    sec "generate: vkformers and transformers eager, one run (README table)"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 8 64 --prefill-lens 512 2048 \
        --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -14 | tee -a "$LOG"
    sec "train: both shapes beside eager and torch.compile"
    python3 tools/bench/train.py --vkformers "$V" --shapes 134m 1.1b --steps 10 --warmup 3 \
        --json "$OUT/train.json" 2>&1 | tail -10 | tee -a "$LOG"
    sec "gemm 8192^3 bf16 beside torch.matmul"
    python3 tools/bench/gemm.py --vkformers "$V" --sizes 8192 --dtypes bf16 2>&1 | tail -4 | tee -a "$LOG"
    sec "serve, clients over 8 processes"
    python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" --procs 8 \
        --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve.json" 2>&1 |
        tail -16 | tee -a "$LOG"
    sec "kernel and decoder tests new since the last H200 run"
    for n in inference_twin_ops inference_twins autocast prefill_rows embedding gemm_half_c gemm_coopmat \
        train_casts; do TT=90 t $n; done
    sec "b1 decode profile, 512 prompt"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
        tail -24 >> "$LOG"
    sec done
    exit 0
fi
# Part final (session of 2026-12-05): the decode attention's parallel merge against the previous
# binary (.dev/old/vk-2fff9cf.xz, unpacked to $OLD), more splits and the 64-key tile with it,
# serve's warm-up on and off, the headline table again, then the tests.
if [[ $PART == final ]]; then
    OLD=/tmp/vk-old
    xz -dc .dev/old/vk-2fff9cf.xz > $OLD && chmod +x $OLD
    sec "the changed kernel's test first"
    TT=100 t attention_decode
    sec "generate: vkformers and transformers eager, one run"
    python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 64 --prefill-lens 512 \
        --warmup 1 --repeats 3 --json "$OUT/generate.json" 2>&1 | tail -9 | tee -a "$LOG"
    for bin in "$V" $OLD; do
        sec "bench decode, $bin: batch 1 and 64, 640 keys, rope inside"
        "$bin" bench decode --rope inside --len 640 --splits auto,1,2,4,8 2>&1 | tail -5 | tee -a "$LOG"
        "$bin" bench decode --rope inside --len 640 --batch 64 --splits auto,1,2,4 2>&1 | tail -4 | tee -a "$LOG"
    done
    for w in 1 0; do
        sec "serve, warm-up $w, 512 requests, clients over 8 processes"
        VKFORMERS_SERVE_WARMUP=$w python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
            --procs 8 --clients 64 --requests 512 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-w$w.json" 2>&1 |
            tail -30 | tee -a "$LOG"
    done
    for sw in VKFORMERS_DECODE_GROUPS=1024 VKFORMERS_DECODE_TILE=64; do
        sec "generate, $sw"
        env $sw python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 64 \
            --prefill-lens 512 --warmup 1 --repeats 3 2>&1 | tail -5 | tee -a "$LOG"
    done
    sec "generate, the previous binary (same run)"
    python3 tools/bench/generate.py --vkformers $OLD --skip-eager --skip-compile --batches 1 64 --prefill-lens 512 \
        --warmup 1 --repeats 3 --json "$OUT/gen-old.json" 2>&1 | tail -5 | tee -a "$LOG"
    sec "b1 decode profile"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
        tail -14 >> "$LOG"
    sec "serve, warm-up on, admission hold on (VKFORMERS_ADMISSION_HOLD=1)"
    VKFORMERS_ADMISSION_HOLD=1 python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
        --procs 8 --clients 64 --requests 512 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-hold.json" 2>&1 |
        tail -30 | tee -a "$LOG"
    sec "tests"
    for n in attention_decode_rope_in prefill_rows train_casts http; do TT=100 t $n; done
    TT=150 t gemm_coopmat coopmat_gemm_16_bit_c
    sec done
    exit 0
fi
# Part next (for the session after 2026-12-05): where the decode attention's time goes inside a
# step (probes in generate, not timestamps: the profile gives a dispatch its wait on the barrier
# before it), a batch-64 profile, and the serve warm-up's effect with the hold on (both orders).
if [[ $PART == next ]]; then
    if [[ -x .dev/bin/t_attention_decode ]]; then
        sec "the decode attention's tests with tiles of 4 and 3 rows"
        for tr in 4 3; do VKFORMERS_DECODE_TILE_ROWS=$tr TT=100 t attention_decode; done
        VKFORMERS_DECODE_TILE_ROWS=4 TT=100 t attention_decode_rope_in
    fi
    for tr in 8 4 2 8 4; do
        sec "generate b1 and b64, VKFORMERS_DECODE_TILE_ROWS=$tr (rows of a decode attention tile)"
        VKFORMERS_DECODE_TILE_ROWS=$tr python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
            --batches 1 64 --prefill-lens 512 --warmup 1 --repeats 3 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
        VKFORMERS_DECODE_TILE_ROWS=$tr "$V" bench decode --rope inside --len 640 --batch 64 --splits auto 2>&1 |
            tail -1 | tee -a "$LOG"
    done
    python3 -c "import json; [print(json.dumps({'input_ids':[(i*7+r)%31000+3 for i in range(512)]})) for r in range(64)]" \
        > /tmp/b64.jsonl
    for p in 0 1 2 4 8 15; do
        sec "generate b1 and b64, VKFORMERS_DECODE_PROBE=$p (wrong tokens for p > 0: a cost probe)"
        VKFORMERS_DECODE_PROBE=$p python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
            --batches 1 64 --prefill-lens 512 --warmup 1 --repeats 2 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
    done
    sec "b64 decode profile"
    "$V" generate --model "$M" --prompt-ids-file /tmp/b64.jsonl --max-new-tokens 64 --greedy --profile 2>&1 |
        tail -30 >> "$LOG"
    sec "bench gemm: a batch-64 step's split products, whole (the column sum timed too, since 2026-12-05)"
    for nk in "2560 2048" "2048 2048" "2048 5632"; do
        set -- $nk
        for sp in 1 2 4 8; do
            "$V" bench gemm --m 64 --n $1 --k $2 --trans-b --engine coopmat2-skinny64 --split-k $sp 2>&1 |
                sed "s/^/split $sp: /" | tee -a "$LOG"
        done
    done
    for sk in 0 1 0 1; do
        sec "generate b8 and b64, VKFORMERS_SKINNY_SPLIT_K=$sk (decode rows' products unsplit / split along K)"
        VKFORMERS_SKINNY_SPLIT_K=$sk python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
            --batches 8 64 --prefill-lens 512 --warmup 1 --repeats 3 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
    done
    sec done
    exit 0
fi
# Part next2: serve's warm-up A/B with the hold on (default since 2026-12-05), both orders.
if [[ $PART == next2 ]]; then
    for w in 0 1 0 1; do
        sec "serve, warm-up $w, hold on (default)"
        VKFORMERS_SERVE_WARMUP=$w python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
            --procs 8 --clients 64 --requests 512 --max-tokens 256 --prompt-spread 64 2>&1 |
            grep -E 'tokens_per_s|ttft_p99|first_wave_p99|rest_p99|warmup_ms' | tee -a "$LOG"
    done
    sec done
    exit 0
fi
if [[ $PART == c ]]; then
    if [[ -d .dev/bis ]]; then
        sec "prefill bisect (b1/b8 x 512 prefill 12,782/20,226 tok/s in h200-2026-12-04-k against 32,903/63,623 in -j)"
        for x in .dev/bis/vk-*.xz; do
            b=/tmp/$(basename "$x" .xz); xz -dc "$x" > "$b"; chmod +x "$b"
            echo "$b" | tee -a "$LOG"
            python3 tools/bench/generate.py --vkformers "$b" --skip-eager --skip-compile --batches 1 8 --prefill-lens 512 \
                --warmup 1 --repeats 2 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
        done
        echo "HEAD, a process per run as the older builds" | tee -a "$LOG"
        python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 8 --prefill-lens 512 \
            --warmup 1 --repeats 2 --cold-processes 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
        nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv 2>&1 | tee -a "$LOG"
    fi
    sec done
    exit 0
fi
if [[ $PART == b ]]; then
    sec "train: today's step (one run with eager)"
    python3 tools/bench/train.py --vkformers "$V" --shapes 134m 1.1b --skip-compile --steps 10 --warmup 3 \
        --json "$OUT/train-new.json" 2>&1 | tail -8 | tee -a "$LOG"
    sec "train: f32 outputs and gradients written again (VKFORMERS_WIDE_OUTPUTS=1)"
    VKFORMERS_WIDE_OUTPUTS=1 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile \
        --steps 10 --warmup 3 --json "$OUT/train-wide.json" 2>&1 | tail -6 | tee -a "$LOG"
    sec "train: q/k/v and gate/up as separate products (VKFORMERS_TRAIN_PACKED=0)"
    VKFORMERS_TRAIN_PACKED=0 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile \
        --steps 10 --warmup 3 --json "$OUT/train-apart.json" 2>&1 | tail -6 | tee -a "$LOG"
    sec "train: o_proj's dA in f32 then a cast (VKFORMERS_GEMM_CASTS=1)"
    VKFORMERS_GEMM_CASTS=1 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile \
        --steps 10 --warmup 3 --json "$OUT/train-gemm-casts.json" 2>&1 | tail -6 | tee -a "$LOG"
    sec "train profile, 1.1B shape, 4 steps"
    python3 -c "import json,shlex; r=[x for x in json.load(open('$OUT/train-new.json'))['results'] if x.get('shape')=='1.1b' and x.get('system')=='vkformers']; c=r[0]['cmd']; i=c.index('--max-steps'); c[i+1]='4'; print(shlex.join(c+['--profile']))" > /tmp/prof.sh
    bash /tmp/prof.sh 2>&1 | tail -45 >> "$LOG"
    sec "bench gemv: the decode step's products alone (plain; normed), and the dispatch floor"
    "$V" bench gemv --rows 1,4,8 2>&1 | tee -a "$LOG"
    "$V" bench gemv --rows 1,4 --normed --shapes 2560x2048,11264x2048 2>&1 | tee -a "$LOG"
    "$V" bench dispatch 2>&1 | tee -a "$LOG"
    sec "serve, 8 client processes, one batch a step (VKFORMERS_BATCH_COMMANDS=0)"
    VKFORMERS_BATCH_COMMANDS=0 python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
        --procs 8 --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-1batch.json" 2>&1 |
        tail -16 | tee -a "$LOG"
    sec "serve, one client process (as before)"
    python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" --procs 1 \
        --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-1proc.json" 2>&1 | tail -16 | tee -a "$LOG"
    for m in apart inside; do
        sec "bench decode --rope $m (batch 1; batch 64 x 640 keys)"
        "$V" bench decode --rope $m 2>&1 | tail -3 | tee -a "$LOG"
        "$V" bench decode --rope $m --batch 64 --len 640 2>&1 | tail -3 | tee -a "$LOG"
    done
    sec done
    exit 0
fi
sec "kernel, decoder and training tests"
for n in optim_multi adamw_multi col_sum_tiled fresh_outputs split_k twin twin_only gemv gemv_normed \
    attention_decode_rope_store attention_decode_rope_in attention_decode_latent attention_casts packed_products \
    decode_dispatches normed_gemv rope_in_attention chat_lookahead train_casts amp_parity spare_batches \
    inference_twins inference_twin_ops autocast prefill_rows embedding gemm_half_c gemm_coopmat; do t $n; done
sec "generate: today's decode step, in-process warm runs (one run with eager)"
python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 8 64 --prefill-lens 512 \
    --warmup 1 --repeats 3 --json "$OUT/gen-new.json" 2>&1 | tail -12 | tee -a "$LOG"
sec "generate: every decode switch of the two sessions off"
env $OLD_DECODE python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 8 64 \
    --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-old.json" 2>&1 | tail -8 | tee -a "$LOG"
sec "generate batch 8 and 64: casts before products again (VKFORMERS_INFERENCE_TWINS=0)"
VKFORMERS_INFERENCE_TWINS=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 8 64 \
    --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-no-twins.json" 2>&1 | tail -6 | tee -a "$LOG"
sec "generate batch 8 and 64: the prefill in one forward (VKFORMERS_MAX_PREFILL_TOKENS=0; the default groups rows by 2048 columns)"
VKFORMERS_MAX_PREFILL_TOKENS=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 8 64 \
    --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-one-prefill.json" 2>&1 | tail -6 | tee -a "$LOG"
for sw in VKFORMERS_NORM_GEMV VKFORMERS_ROPE_IN_ATTN; do
    sec "generate batch 1 and 4, $sw=0"
    env $sw=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 4 \
        --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-$sw-0.json" 2>&1 | tail -6 | tee -a "$LOG"
done
sec "b1 decode profile, 512 prompt (today / old)"
"$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 | tail -24 >> "$LOG"
env $OLD_DECODE "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 |
    tail -24 >> "$LOG"
sec "serve, clients over 8 processes"
python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" --procs 8 \
    --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve.json" 2>&1 | tail -16 | tee -a "$LOG"
sec "chat: lookahead on / off"
printf 'Write a long story about a dragon.\nContinue it.\nAnd then?\n' > /tmp/turns.txt
# chat needs a tokenizer: generate.py's copy of the model folder with a WordLevel one, if made.
CM=target/bench-work/llama-1.1b-wordlevel
[[ -d $CM ]] || CM=$M
for la in 1 0; do
    echo "lookahead $la" | tee -a "$LOG"
    VKFORMERS_DECODE_LOOKAHEAD=$la "$V" chat --model "$CM" --stats --greedy --max-new-tokens 256 < /tmp/turns.txt \
        2> /tmp/chat.err > /dev/null
    grep 'new at' /tmp/chat.err | tee -a "$LOG" || tail -3 /tmp/chat.err | tee -a "$LOG"
done
sec done
