#!/usr/bin/env bash
# Session 12 window, call 1 (cold), from the call's tree:
#   run(command="bash .gpu-lead12/f1.sh", carry=[".gpu/bin", ".gpu/meta", ".gpu-cubins",
#       ".gpu-donor", ".gpu-competitors/llama.cpp-src.tar.xz",
#       ".gpu-competitors/llama.cpp-src.tar.xz.sha256", ".gpu-competitors/llama.cpp-src.pin",
#       ".gpu-lead12"], timeout_s=300)
# cubins, binaries, tree -> /tmp/t, llama.cpp build (bg), synth Q4_0 + BF16 (bg), then
# kernel-check with its receipt (sync, ~30 s) and the prefill gate on the synthetic
# families (sync, logs only: the early verdict on the BF16 tile-loop path).
set -uo pipefail
t0=$(date +%s)
say() { echo "[f1 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
say "start; $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -1); COMMIT $(cat .gpu/meta/COMMIT)"
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/
say "tree copied; binaries: $(ls /tmp/assay-bin | tr '\n' ' ')"
(cd /tmp/t && competitors/llama.cpp/build --cuda --background --home /tmp/llama) 2>&1 | tail -1
mkdir -p /tmp/assay-models/synth
cd /tmp/t
SYNTH_QUANTS="Q4_0 BF16" tools/gpu/bg start synth 'bash .gpu-lead12/synth.sh' > /dev/null
. tools/gpu/window/env
mkdir -p $OUT
say "kernel-check (receipt)"
timeout 150 harness gate --no-fetch --only kernel-check --models-dir /tmp/assay-models --receipts $OUT/gate-kc.jsonl > $OUT/kc.log 2>&1
echo "kc rc=$?"; grep -E "ALL GREEN|FAIL|checks|green|RED" $OUT/kc.log | head -8 | cut -c1-220
grep -E "BF16.*(2\^17|tile loop)|gemmt BF16 rows=37.*x in 1" $OUT/kc.log | head -6 | cut -c1-200
say "prefill gate, synthetic (logs only)"
timeout 150 harness gate --no-fetch --only prefill --models-dir /tmp/assay-models --no-receipt > $OUT/prefill0.log 2>&1
echo "prefill rc=$?"; grep -iE "green|red|qwen2|bf16|x_parts|fail" $OUT/prefill0.log | head -14 | cut -c1-220
tools/gpu/bg status 1 | cut -c1-160
tools/gpu/bg collect $OUT/f1.tar.xz > /dev/null
say done
