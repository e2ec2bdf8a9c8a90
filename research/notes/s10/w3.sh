#!/usr/bin/env bash
# Session 10, W3 (branch tiled): isolate the 512-row pass's run-to-run difference.
set -uo pipefail
t0=$(date +%s); say() { echo "[w3 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
if [ ! -x /tmp/assay-bin/harness ]; then
  mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
  xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
  ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
  tools/gpu/run --receive 2>&1 | tail -1
fi
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t
mkdir -p /tmp/assay-models/synth
[ -f /tmp/assay-models/synth/llama-3.1-8b-Q4_0-s0.gguf ] || SYNTH_QUANTS="Q4_0" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh' > /dev/null
. tools/gpu/window/env
O=${OUT:-/tmp/w3out}; mkdir -p $O
say "gates argmax,graph with pass 512 (small models)"
ASSAY_PREFILL_PASS=512 timeout 150 harness gate --no-fetch --only argmax,graph --models-dir /tmp/assay-models --no-receipt > $O/gate-ag.log 2>&1
echo "rc=$?"; grep -E "green|RED" $O/gate-ag.log | head -4 | cut -c1-250
tools/gpu/bg wait synth 200 > /dev/null; say "synth"
C=prefill-llama8b-q4_0-p512
bench() { local tag=$1 c=$2; shift 2; say "bench $tag $c: $*"
  env "$@" timeout 90 harness bench --board prefill-h200 --only $c --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-300 | tail -2; }
bench att64 $C ASSAY_PREFILL_PASS=512 ASSAY_PREFILL_ATT_BYTES=4000000
bench p256 $C ASSAY_PREFILL_PASS=256
bench p512lo0 $C ASSAY_PREFILL_PASS=512 ASSAY_GEMM_LO=0
bench p128x2k prefill-llama8b-q4_0-p2048 ASSAY_PREFILL_PASS=128
bench p512x2k prefill-llama8b-q4_0-p2048 ASSAY_PREFILL_PASS=512
bench v1x2k prefill-llama8b-q4_0-p2048 ASSAY_GEMM=v1
say "done"
