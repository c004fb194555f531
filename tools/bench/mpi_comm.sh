#!/usr/bin/env bash
# Data parallelism's cost on one host: the 134M Llama (common.py's shape) pre-trained from its
# config on random-token rows, 1 process with batch 2B against `mpirun -n RANKS` with batch B
# per rank (the same global batch), and the time per step the ranks spend in the gradient
# reduction (rank 0's `communication over ...` line). With 2 ranks on one GPU this is the
# baseline a multi-GPU run improves on.
# Usage: tools/bench/mpi_comm.sh VKFORMERS [RANKS=2] [B=4] [STEPS=10] [SEQ=1024] [extra train flags...]
set -euo pipefail
vk=$1 ranks=${2:-2} b=${3:-4} steps=${4:-10} seq=${5:-1024}
shift $(($# < 5 ? $# : 5))
work=$(mktemp -d)
python3 - "$work" "$seq" "$((b * ranks * steps))" <<'PY'
import json, random, sys
work, seq, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=32000, hidden_size=768,
           intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
           max_position_embeddings=2048, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
           rope_parameters=dict(rope_type="default", rope_theta=10000.0), initializer_range=0.02,
           pad_token_id=0, bos_token_id=1, dtype="float32")
json.dump(cfg, open(f"{work}/config.json", "w"))
rng = random.Random(0)
with open(f"{work}/data.jsonl", "w") as f:
    for _ in range(rows):
        f.write(json.dumps({"input_ids": [rng.randrange(3, 32000) for _ in range(seq)]}) + "\n")
PY
common=(train --init-from-config "$work/config.json" --data "$work/data.jsonl" --seq-len "$seq"
        --max-steps "$steps" --no-shuffle --lr 1e-4 --seed 0)
# Extra flags go to both runs, except `--zero N`, which only an mpirun job takes.
extra=("$@") single=()
for ((i = 0; i < ${#extra[@]}; i++)); do
  if [ "${extra[i]}" = --zero ]; then i=$((i + 1)); else single+=("${extra[i]}"); fi
done
echo "== 1 process, batch $((b * ranks))"
"$vk" "${common[@]}" ${single[@]+"${single[@]}"} --out "$work/one" --batch-size "$((b * ranks))" 2>&1 | grep -E "^step|loss .* ->" | tail -3
echo "== mpirun -n $ranks, batch $b per rank"
# VKFORMERS_DIST_OVERLAP=0 in the environment: every bucket reduced after backward (comparison).
fwd=(-x "VKFORMERS_DIST_OVERLAP=${VKFORMERS_DIST_OVERLAP:-1}")
mpirun --allow-run-as-root --oversubscribe --bind-to none "${fwd[@]}" -n "$ranks" "$vk" "${common[@]}" ${extra[@]+"${extra[@]}"} --out "$work/dp" \
  --batch-size "$b" 2>&1 | grep -E "^step|loss .* ->|communication|optimizer state|error" | tail -6
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
rows = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl")]
one, dp = rows("one"), rows("dp")
med = lambda r: sorted(x["tokens_per_s"] for x in r[3:])[len(r[3:]) // 2] if len(r) > 3 else float("nan")
print(f"median tokens/s after 3 steps: 1 process {med(one):.0f}, data parallel {med(dp):.0f}")
print("max |loss difference| over the steps:", max(abs(a["loss"] - b["loss"]) for a, b in zip(one, dp)))
PY
rm -rf "$work"
