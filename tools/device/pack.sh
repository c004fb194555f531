#!/usr/bin/env bash
# Packs what one call on the device machine (an H200 without Rust) runs: the release CLI and the
# named integration-test binaries, stripped, in DIR/bin.tar.xz (the call's carry has a 64 MiB
# limit, tree included), beside a copy of prelude.sh that unpacks them there.
#   tools/device/pack.sh .dev/p1 vkformers-kernels:attention_decode vkformers-generate:greedy
# Test binaries land as t_NAME (run them with `t NAME [filter]` after sourcing the prelude).
set -euo pipefail
dir=${1:?usage: pack.sh DIR [CRATE:TEST ...]}
shift
cd "$(dirname "$0")/../.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Without the `mpi` feature: the device's calls run one GPU, so the pack need not link Open MPI.
cargo build --release --locked -p vkformers-cli --no-default-features
cp target/release/vkformers "$stage/vkformers"
for spec in "$@"; do
    crate=${spec%%:*}
    test=${spec#*:}
    exe=$(cargo test --release --locked -p "$crate" --test "$test" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -n1)
    [[ -n "$exe" ]] || { echo "pack.sh: no test binary for $spec" >&2; exit 1; }
    cp "$exe" "$stage/t_$test"
done
strip "$stage"/*
mkdir -p "$dir"
tar -C "$stage" -cf - . | xz -T2 -6 > "$dir/bin.tar.xz.tmp"
mv "$dir/bin.tar.xz.tmp" "$dir/bin.tar.xz"
cp tools/device/prelude.sh "$dir/prelude.sh"
du -h "$dir/bin.tar.xz"
