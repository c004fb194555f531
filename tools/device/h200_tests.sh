#!/usr/bin/env bash
# Test binaries on the H200 (the device tool's machine): run from the repository root there.
# Needs, in the carried paths: .gl/ with the Vulkan loader AND glvnd's debs (libvulkan1 libegl1
# libglvnd0 libopengl0 libgl1 libglx0 libgles2: without glvnd the NVIDIA ICD does not load and
# the loader reports no device), and .dev/pack/bin.tar.xz holding stripped test binaries named
# t_<name> (from target/debug/deps after `cargo test --no-run`). The binaries find their
# fixtures through the build machine's CARGO_MANIFEST_DIR, hence the /work/main link.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json /usr/local/share/vulkan/icd.d/nvidia*.json 2>/dev/null | head -1)
[ -z "$icd" ] && icd=$(find / -name 'nvidia_icd*.json' -not -path '/proc/*' 2>/dev/null | head -1)
echo "icd: $icd"; ls -la /usr/lib/x86_64-linux-gnu/libGLX_nvidia* /usr/lib/x86_64-linux-gnu/libnvidia-glcore* 2>&1 | head -3
export VK_DRIVER_FILES="$icd" VKFORMERS_TEST_NO_VALIDATION=1
# The binaries name their fixtures by the build machine's path.
mkdir -p /work && ln -sfn "$PWD" /work/main
mkdir -p .dev/bin && tar -xJf .dev/pack/bin.tar.xz -C .dev/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/summary.txt"
for t in .dev/bin/t_*; do
  name=$(basename "$t")
  start=$(date +%s.%N)
  timeout 100 "$t" --test-threads 4 > "$OUT/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  printf '%s rc=%s %.1fs %s\n' "$name" "$rc" "$(python3 -c "print($end - $start)")" "$(grep -E '^test result' "$OUT/$name.log" | tail -1)" >> "$OUT/summary.txt"
done
cat "$OUT/summary.txt"
grep -hE "FAILED|panicked" "$OUT"/t_*.log | head -40
# Keep the logs that failed and fold the rest into one file (at most 8 files come back).
cat "$OUT"/t_*.log > "$OUT/all.log" && rm -f "$OUT"/t_*.log
