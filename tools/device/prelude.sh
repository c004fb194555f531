# Sourced first by every command on the device machine: `PACK=.dev/p1 source .dev/p1/prelude.sh`.
# Installs the carried Vulkan loader (.gl/*.deb, fetched here with apt-get download), points it at
# the NVIDIA driver, unpacks the pack's binaries to .dev/bin and puts the CLI where the CLI tests
# look for it. Defines V (the CLI), LOG ($OUT/log.txt), `sec TITLE` (a timed heading in the log)
# and `t NAME [ARGS]` (runs test binary t_NAME, appends its summary to the log, all of it to
# $OUT/tests-full.txt).
set -u
PACK=${PACK:?set PACK to the pack folder}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VKFORMERS_TEST_NO_VALIDATION=1
export RUST_TEST_THREADS=1
mkdir -p .dev/bin && tar -xJf "$PACK/bin.tar.xz" -C .dev/bin
V=$PWD/.dev/bin/vkformers
LOG=$OUT/log.txt
for p in debug release; do mkdir -p target/$p && cp "$V" target/$p/vkformers; done
sec() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
t() {
    local n=$1
    shift
    echo "-- $n $*" >> "$LOG"
    timeout "${TT:-300}" ".dev/bin/t_$n" "$@" > "/tmp/t_$n.log" 2>&1
    echo "rc $?" >> "$LOG"
    grep -E "^test result|FAILED|panicked at" "/tmp/t_$n.log" | head -8 >> "$LOG"
    cat "/tmp/t_$n.log" >> "$OUT/tests-full.txt"
}
# The 1.1B Llama of the benches (random weights, bf16), built from its config by the device's torch.
bench_model() {
    python3 -c "import sys; sys.path.insert(0,'tools/bench'); import common as C; from pathlib import Path; C.build_model_dir(Path('target/bench-work'),'1.1b')" 2>&1 | tail -1
}
# The start every suite shares: the machine (GPU, driver, clocks) into the log, the clocks twice a
# second through the whole call into $OUT/clocks-$1.csv (a run where the GPU sat at low clocks
# shows beside the log's section times), the 1.1B bench model, and M and /tmp/b1.jsonl (one
# 512-token prompt) for `generate`.
suite_start() {
    sec "machine"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
        --format=csv 2>&1 | tee -a "$LOG"
    "$V" devices 2>&1 | head -4 | tee -a "$LOG"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 500 > "$OUT/clocks-$1.csv" 2>&1 &
    CLOCKS=$!
    trap 'kill $CLOCKS 2>/dev/null' EXIT
    sec "model"
    bench_model
    M=target/bench-work/llama-1.1b
    python3 -c "import json; print(json.dumps({'input_ids':[(i*7)%31000+3 for i in range(512)]}))" > /tmp/b1.jsonl
}
