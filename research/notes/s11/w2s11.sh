#!/usr/bin/env bash
# Session 11 window 2 (one call, cold): kernel-check (all), the GPU gates on the synthetic
# families, planted prefill fault, the 8B prefill bench (default, attn=split, tile=128),
# ncu of one 512-token Q4_0 pass.
set -uo pipefail
t0=$(date +%s); say() { echo "[w2 +$(( $(date +%s) - t0 ))s] $*"; }
left() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
rm -rf /tmp/assay-cubins; mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t
mkdir -p /tmp/assay-models/synth
SYNTH_QUANTS="Q4_0 BF16" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh' > /dev/null
. tools/gpu/window/env
O=${OUT:-/tmp/w2out}; mkdir -p $O
say "kernel-check (all)"
timeout 200 kernel-check > $O/kc.log 2>&1; echo "rc=$?"
grep -E "FAIL|ALL|took|error" $O/kc.log | head -12 | cut -c1-250
grep -E "attention_prefill" $O/kc.log | head -20 | cut -c1-200
say "gates"
timeout 400 harness gate --no-fetch --only argmax,graph,chunking,prefill,batch,served-cuda,spec-cuda --models-dir /tmp/assay-models --receipts $O/gate.jsonl > $O/gate.log 2>&1
echo "rc=$?"; grep -E "green|RED|red|skip|^FAIL" $O/gate.log | head -20 | cut -c1-230
grep -E "^(ok|FAIL) " $O/gate.log | grep -i "gemm tiled" | head -10 | cut -c1-200
ASSAY_PREFILL_PLANT_FAULT=1 timeout 100 harness gate --no-fetch --only prefill --models-dir /tmp/assay-models --no-receipt > $O/fault-prefill.log 2>&1
echo "planted prefill rc=$? (want non-zero)"; grep -E "^prefill" $O/fault-prefill.log | cut -c1-200
tools/gpu/bg wait synth 200 > /dev/null; say "synth rc=$?"
P=prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
bench() { local tag=$1; shift; say "bench $tag: $*"
  env "$@" timeout 150 harness bench --board prefill-h200 --only $P --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-200 | tail -4; }
bench default ASSAY_X=1
bench split ASSAY_PREFILL_ATTN=split
if left 400; then bench tile64 ASSAY_GEMMT_TILE=64; fi
if left 450; then
  say ncu
  timeout 100 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --launch-skip 300 --launch-count 60 harness bench --board prefill-h200 --only prefill-llama8b-q4_0-p512 --no-receipt --arms assay --runs 5 > $O/ncu.csv 2> $O/ncu.err; echo "ncu rc=$?"
fi
say done
