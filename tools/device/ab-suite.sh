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
#   run: PACK=.dev/ab source .dev/ab/prelude.sh; bash .dev/ab/ab-suite.sh   (carry .gl, .dev/ab)
#   tools/device/stage.sh back
set -u
PACK=${PACK:-.dev/ab}
source "$PACK/prelude.sh"
sec "kernel and packing tests"
for n in optim_multi adamw_multi col_sum_tiled fresh_outputs split_k elementwise views packed_products \
    decode_dispatches chat_lookahead attention_casts twin train_casts amp_parity \
    attention_decode_latent attention_decode_rope_store; do t $n; done
VKFORMERS_LATENT_WIDE=0 t attention_decode_latent
sec "latent decode: 16-byte loads / element loads (was 299 µs, 16 GB/s)"
for w in 1 0; do
    for a in "" "--batch 32 --splits auto,1" "--width 288 --values 256 --heads 40 --splits auto,1" "--dtype f32 --splits auto"; do
        echo "wide $w $a" | tee -a "$LOG"
        VKFORMERS_LATENT_WIDE=$w "$V" bench decode-latent $a 2>&1 | tail -8 | tee -a "$LOG"
    done
done
sec "model"
bench_model
M=target/bench-work/llama-1.1b
sec "generate: packed products on / off (one run with eager)"
python3 tools/bench/generate.py --vkformers "$V" --skip-compile --batches 1 8 64 --prefill-lens 512 2048 \
    --warmup 1 --repeats 3 --json "$OUT/gen-on.json" 2>&1 | tail -12 | tee -a "$LOG"
VKFORMERS_FUSED_PROJ=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
    --batches 8 64 --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-off.json" 2>&1 | tail -8 | tee -a "$LOG"
VKFORMERS_PACKED_ROPE=0 python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
    --batches 8 64 --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-rope-split.json" 2>&1 | tail -8 | tee -a "$LOG"
sec "prefill profile, batch 8 x 512 (why batched prefill trails eager)"
python3 -c "import json; print(''.join(json.dumps({'input_ids':[(i*7+r*13)%31000+3 for i in range(512)]})+'\n' for r in range(8)), end='')" > /tmp/b8.jsonl
"$V" generate --model "$M" --prompt-ids-file /tmp/b8.jsonl --max-new-tokens 1 --greedy --profile 2>&1 | tail -40 >> "$LOG"
sec "serve: detok window / full"
for d in window full; do
    VKFORMERS_DETOK=$d python3 tools/bench/serve.py --shape 1.1b --vkformers "$V" --serve-args "--max-batch 64" \
        --clients 64 --requests 256 --max-tokens 256 --prompt-spread 64 --json "$OUT/serve-$d.json" 2>&1 | tail -12 | tee -a "$LOG"
done
sec "train: new optimizer kernels / old (one run with eager)"
python3 tools/bench/train.py --vkformers "$V" --shapes 134m 1.1b --skip-compile --steps 10 --warmup 3 \
    --json "$OUT/train-new.json" 2>&1 | tail -8 | tee -a "$LOG"
VKFORMERS_ATTN_CASTS=1 python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile \
    --steps 10 --warmup 3 --json "$OUT/train-attn-casts.json" 2>&1 | tail -6 | tee -a "$LOG"
VKFORMERS_ADAMW=per-tensor VKFORMERS_GRAD_NORM=per-buffer VKFORMERS_ZERO_FILLS=1 VKFORMERS_COL_SUM=serial \
    python3 tools/bench/train.py --vkformers "$V" --shapes 1.1b --skip-torch --skip-compile --steps 10 --warmup 3 \
    --json "$OUT/train-old.json" 2>&1 | tail -6 | tee -a "$LOG"
sec "chat: lookahead on / off"
printf 'Write a long story about a dragon.\nContinue it.\nAnd then?\n' > /tmp/turns.txt
for la in 1 0; do
    echo "lookahead $la" | tee -a "$LOG"
    VKFORMERS_DECODE_LOOKAHEAD=$la "$V" chat --model "$M" --stats --greedy --max-new-tokens 256 < /tmp/turns.txt 2>&1 >/dev/null |
        grep 'new at' | tee -a "$LOG"
done
sec done
