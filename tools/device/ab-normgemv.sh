# The H200 A/B of the input RMSNorms computed by the decode GEMV (`VKFORMERS_NORM_GEMV`, issue 14):
# the kernel and decoder tests on NVIDIA's compiler, then the 1.1B bf16 folder's batch-1 and
# batch-4 decode (the GEMV's rows where cooperative matrix 2 exists) with the fusion on and off in
# one run, and a batch-1 decode profile each way (dispatches a step: 22 layers x 2 fewer, e.g.
# 159 -> 115 with the rope in the attention, 181 -> 137 without).
# Pack and run (~8 device-minutes):
#   tools/device/pack.sh .dev/ng vkformers-kernels:gemv_normed vkformers-kernels:gemv \
#     vkformers-generate:normed_gemv vkformers-generate:decode_dispatches
#   cp tools/device/ab-normgemv.sh .dev/ng/; tools/device/stage.sh out llama qwen2 mistral gemma
#   run: carry [".gl", ".dev/ng"], command `PACK=.dev/ng source .dev/ng/prelude.sh; bash .dev/ng/ab-normgemv.sh`
#   tools/device/stage.sh back
set -u
PACK=${PACK:-.dev/ng}
source "$PACK/prelude.sh"
sec "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
sec "tests (the decoder tests set VKFORMERS_NORM_GEMV themselves)"
for n in gemv_normed gemv normed_gemv decode_dispatches; do t $n; done
sec "model"
bench_model
M=target/bench-work/llama-1.1b
for on in 1 0; do
    sec "generate, VKFORMERS_NORM_GEMV=$on"
    VKFORMERS_NORM_GEMV=$on python3 tools/bench/generate.py --vkformers "$V" --skip-eager --skip-compile \
        --batches 1 4 8 --prefill-lens 512 --warmup 1 --repeats 3 --json "$OUT/gen-norm-$on.json" 2>&1 | tail -8 | tee -a "$LOG"
done
python3 -c "import json; print(json.dumps({'input_ids':[(i*7)%31000+3 for i in range(512)]}))" > /tmp/b1.jsonl
for on in 1 0; do
    sec "b1 decode profile, 512 prompt, VKFORMERS_NORM_GEMV=$on"
    VKFORMERS_NORM_GEMV=$on "$V" generate --model "$M" --prompt-ids-file /tmp/b1.jsonl --max-new-tokens 128 --greedy \
        --profile 2>&1 | tail -22 >> "$LOG"
done
sec done
