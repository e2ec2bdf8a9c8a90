#!/usr/bin/env bash
# Session 10 window, call 1 (cold), run from the call's tree:
#   run(command="bash .gpu-lead10/f1.sh", carry=[".gpu/bin", ".gpu/meta", ".gpu-cubins",
#       ".gpu-donor", ".gpu-competitors/llama.cpp-src.tar.xz",
#       ".gpu-competitors/llama.cpp-src.tar.xz.sha256", ".gpu-competitors/llama.cpp-src.pin",
#       ".gpu-lead10"], timeout_s=180)
# 1. precompiled cubins -> /tmp/assay-cubins (~/.cache/assay/cubins links there);
# 2. tools/gpu/run --receive (binaries -> /tmp/assay-bin);
# 3. the tree -> /tmp/t (background jobs must not run from the call's tree: the next call
#    replaces it);
# 4. llama.cpp build in the background (/tmp/llama/cuda/DONE when done, ~6 min);
# 5. bg jobs from /tmp/t: `synth` (the 8B checkpoints, .gpu-lead10/synth.sh) and `kc`
#    (harness gate --only kernel-check, receipt $OUT/gate-kc.jsonl of the job).
# Returns in well under a minute; every step prints one progress line.
set -uo pipefail
t0=$(date +%s)
say() { echo "[f1s11 +$(( $(date +%s) - t0 ))s] $*"; }
fail=0
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
say "start in $PWD; $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | head -1)"
[ -f .gpu/meta/COMMIT ] && say "COMMIT $(cat .gpu/meta/COMMIT)" || { say "ERROR: no .gpu/meta/COMMIT (stage first)"; fail=1; }

# 1. cubins
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
if [ -f .gpu-cubins/cubins.tar.xz ]; then
  xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins || fail=1
elif [ -d .gpu-cubins ]; then
  cp -a .gpu-cubins/. /tmp/assay-cubins/ || fail=1
else
  say "WARNING: no .gpu-cubins carried; kernels compile with NVRTC on first use"
fi
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
say "cubins: $(find /tmp/assay-cubins -type f | wc -l) files, $(du -sh /tmp/assay-cubins | cut -f1)"

# 2. binaries
tools/gpu/run --receive 2>&1 | sed 's/^/    /'
for b in harness assay kernel-check decode-check; do
  [ -x /tmp/assay-bin/$b ] || { say "ERROR: /tmp/assay-bin/$b missing"; fail=1; }
done
say "binaries: $(/tmp/assay-bin/harness --version 2>&1 | head -1)"

# 3. the tree
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ || fail=1
for f in tools/gpu/window/s10-corr tools/gpu/window/s10-timing tools/gpu/window/env .gpu-donor/llama-tiny-q4_0.gguf \
  .gpu-competitors/llama.cpp-src.tar.xz .gpu-lead10/synth.sh; do
  [ -f "/tmp/t/$f" ] || { say "ERROR: /tmp/t/$f missing"; fail=1; }
done
say "tree copied to /tmp/t ($(du -sh /tmp/t | cut -f1))"

# 4. llama.cpp (detached; its own log)
(cd /tmp/t && competitors/llama.cpp/build --cuda --background --home /tmp/llama) 2>&1 | sed 's/^/    /'
say "llama.cpp build started (poll /tmp/llama/cuda/DONE)"

# 5. background jobs
mkdir -p /tmp/assay-models/synth
cd /tmp/t
SYNTH_QUANTS="Q4_0 BF16 Q8_0 Q4_K_M" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh'
tools/gpu/bg start kc '. tools/gpu/window/env; harness gate --no-fetch --only kernel-check --models-dir /tmp/assay-models --receipts $OUT/gate-kc.jsonl'
sleep 3
tools/gpu/bg status 2 | cut -c1-200
say "done (fail=$fail). Next: call 2 = tools/gpu/run --receive with .gpu/meta .gpu/parts/p1"
exit $fail
