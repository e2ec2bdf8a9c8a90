#!/usr/bin/env bash
# Session 11 window 3 (one call, cold): kernel-check gemmt + attention, gates prefill /
# chunking / argmax / graph / batch, 8B Q4_0 prefill with the tile-loop decode vs the scratch.
set -uo pipefail
t0=$(date +%s); say() { echo "[w3 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
rm -rf /tmp/assay-cubins; mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t
mkdir -p /tmp/assay-models/synth
SYNTH_QUANTS="Q4_0" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh' > /dev/null
. tools/gpu/window/env
O=${OUT:-/tmp/w3out}; mkdir -p $O
say "kernel-check gemmt,attention"
timeout 150 kernel-check --only gemmt,attention > $O/kc.log 2>&1; echo "rc=$?"
grep -E "FAIL|ALL|took|error" $O/kc.log | head -12 | cut -c1-250
grep -E "tile loop" $O/kc.log | head -8 | cut -c1-200
say "gates"
timeout 200 harness gate --no-fetch --only argmax,graph,chunking,prefill,batch --models-dir /tmp/assay-models --receipts $O/gate.jsonl > $O/gate.log 2>&1
echo "rc=$?"; grep -E "green|RED|red|skip|^FAIL" $O/gate.log | head -12 | cut -c1-230
tools/gpu/bg wait synth 150 > /dev/null; say "synth rc=$?"
P=prefill-llama8b-q4_0-p512,prefill-llama8b-q4_0-p2048
bench() { local tag=$1; shift; say "bench $tag: $*"
  env "$@" timeout 120 harness bench --board prefill-h200 --only $P --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-200 | tail -4; }
bench default ASSAY_X=1
bench scratch ASSAY_GEMMT_FUSED=0
say done
