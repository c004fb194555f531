# The H200 call that measures what the session of 2026-12-04 (night) built without a device:
# every switch it added, A/B in one run beside PyTorch, plus the new kernels' tests on NVIDIA's
# compiler. Pack and run (see README.md here; ~20 device-minutes):
#   tools/device/pack.sh .dev/ab vkformers-kernels:optim_multi vkformers-kernels:adamw_multi \
#     vkformers-kernels:col_sum_tiled vkformers-kernels:fresh_outputs vkformers-kernels:split_k \
#     vkformers-kernels:elementwise vkformers-tensor:views vkformers-models:packed_products \
#     vkformers-generate:decode_dispatches vkformers-generate:chat_lookahead \
#     vkformers-kernels:attention_decode_latent vkformers-kernels:attention_decode_rope_store vkformers-tensor:attention_casts vkformers-kernels:twin vkformers-cli:train_casts vkformers-cli:amp_parity
#   cp tools/device/ab-suite.sh .dev/ab/; tools/device/stage.sh out llama qwen2 gemma phi3 olmo gpt_neox gptj mistral deepseek_v2 \
#     fixtures_amp fixtures_train fixtures_lora
#   run: PACK=.dev/ab source .dev/ab/prelude.sh; PART=a bash .dev/ab/ab-suite.sh   (carry .gl, .dev/ab
#   and .dev/wheels for serve.py's openai client), then PART=b on the still-warm machine: each part
#   fits one 600 s call.
#   tools/device/stage.sh back
set -u
PACK=${PACK:-.dev/ab}
source "$PACK/prelude.sh"
PART=${PART:-a}
# The machine itself, so runs on different hosts or drivers can be told apart.
sec "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv 2>&1 | tee -a "$LOG"
"$V" devices 2>&1 | head -4 | tee -a "$LOG"
if [[ $PART == b ]]; then
sec "model"
bench_model
M=target/bench-work/llama-1.1b
if [[ -d .dev/bis ]]; then
    sec "prefill bisect (b1/b8 x 512 prefill 12,782/20,226 tok/s against 32,903/63,623 at 17:29)"
    for x in .dev/bis/vk-*.xz; do
        b=/tmp/$(basename "$x" .xz); xz -dc "$x" > "$b"; chmod +x "$b"
        echo "$b" | tee -a "$LOG"
        python3 tools/bench/generate.py --vkformers "$b" --skip-eager --skip-compile --batches 1 8 --prefill-lens 512 \
            --warmup 1 --repeats 2 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
    done
    echo "HEAD, a process per run as the older builds" | tee -a "$LOG"
    python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 8 --prefill-lens 512 \
        --warmup 1 --repeats 2 --cold-processes 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
    echo "HEAD, warm-up and runs in one process (generate --repeat)" | tee -a "$LOG"
    python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile --batches 1 8 --prefill-lens 512 \
        --warmup 1 --repeats 2 2>&1 | grep -E '^b[0-9]' | tee -a "$LOG"
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv 2>&1 | tee -a "$LOG"
fi
sec "train: new optimizer kernels (one run with eager)"
python3 tools/bench/train.py --vkformers "$V" --shapes 134m 1.1b --skip-compile --steps 10 --warmup 3 \
    --json "$OUT/train-new.json" 2>&1 | tail -8 | tee -a "$LOG"
sec "train: before the night session's kernels (per-tensor AdamW, per-buffer grad norm, zero fills, serial col sum, attention casts)"
VKFORMERS_ADAMW=per-tensor VKFORMERS_GRAD_NORM=per-buffer VKFORMERS_ZERO_FILLS=1 VKFORMERS_COL_SUM=serial VKFORMERS_ATTN_CASTS=1 \
    python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile --steps 10 --warmup 3 \
    --json "$OUT/train-old.json" 2>&1 | tail -6 | tee -a "$LOG"
sec "train profile, 1.1B shape, 4 steps"
python3 -c "import json,shlex; r=[x for x in json.load(open('$OUT/train-new.json'))['results'] if x.get('shape')=='1.1b' or '1.1b' in json.dumps(x.get('cmd',''))]; c=[x for x in r if x.get('system')=='vkformers'][0]['cmd']; i=c.index('--max-steps'); c[i+1]='4'; print(shlex.join(c+['--profile']))" > /tmp/prof.sh
cat /tmp/prof.sh >> "$LOG"
bash /tmp/prof.sh 2>&1 | tail -60 >> "$LOG"
sec "b1 decode profile, 512 prompt"
python3 -c "import json; print(json.dumps({'input_ids':[(i*7)%31000+3 for i in range(512)]}))" > /tmp/b1.jsonl
"$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy --profile 2>&1 | tail -30 >> "$LOG"
sec "latent decode: 16-byte loads / element loads (was 299 µs, 16 GB/s)"
for w in 1 0; do
    echo "wide $w" | tee -a "$LOG"
    VKFORMERS_LATENT_WIDE=$w "$V" bench decode-latent 2>&1 | tail -8 | tee -a "$LOG"
done
sec done
exit 0
fi
python3 -m pip install -q --no-index --find-links .dev/wheels --target /tmp/oa-site openai > /tmp/pip.log 2>&1 || tail -3 /tmp/pip.log
export PYTHONPATH=/tmp/oa-site${PYTHONPATH:+:$PYTHONPATH}
sec "kernel and packing tests"
for n in optim_multi adamw_multi col_sum_tiled fresh_outputs split_k elementwise views packed_products \
    decode_dispatches chat_lookahead attention_casts twin train_casts amp_parity \
    attention_decode_latent attention_decode_rope_store; do t $n; done
VKFORMERS_LATENT_WIDE=0 t attention_decode_latent
sec "model"
bench_model
M=target/bench-work/llama-1.1b
sec "generate: packed products + packed rope on / both off (one run with eager)"
python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 8 64 --prefill-lens 512 \
    --warmup 1 --repeats 3 --json "$OUT/gen-on.json" 2>&1 | tail -12 | tee -a "$LOG"
VKFORMERS_FUSED_PROJ=0 VKFORMERS_PACKED_ROPE=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
    --batches 8 64 --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-off.json" 2>&1 | tail -8 | tee -a "$LOG"
sec "prefill profile, batch 8 x 512 (why batched prefill trails eager)"
python3 -c "import json; print(''.join(json.dumps({'input_ids':[(i*7+r*13)%31000+3 for i in range(512)]})+'\n' for r in range(8)), end='')" > /tmp/b8.jsonl
"$V" generate --model "$M" --prompt-ids-file /tmp/b8.jsonl --max-new-tokens 1 --greedy --profile 2>&1 | tail -40 >> "$LOG"
sec "serve (incremental detokenization)"
for d in window; do
    VKFORMERS_DETOK=$d python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
        --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-$d.json" 2>&1 | tail -12 | tee -a "$LOG"
done
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
