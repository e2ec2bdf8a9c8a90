#!/usr/bin/env bash
set -uo pipefail
t0=$(date +%s); say() { echo "[w5 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
rm -rf /tmp/assay-cubins; mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t
mkdir -p /tmp/assay-models/synth
SYNTH_QUANTS="Q4_0 BF16" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh' > /dev/null
. tools/gpu/window/env
O=${OUT:-/tmp/w5out}; mkdir -p $O
say "kernel-check gemmt,gemm"
timeout 200 kernel-check --only gemmt,gemm > $O/kc.log 2>&1; echo "rc=$?"
grep -E "FAIL|ALL|took" $O/kc.log | head -8 | cut -c1-250
say "gates prefill,chunking,argmax,graph"
timeout 200 harness gate --no-fetch --only prefill,chunking,argmax,graph --models-dir /tmp/assay-models --receipts $O/gate.jsonl > $O/gate.log 2>&1
echo "rc=$?"; grep -E "green|RED|^ " $O/gate.log | head -12 | cut -c1-250
tools/gpu/bg wait synth 200 > /dev/null; say "synth rc=$?"
P=prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
bench() { local tag=$1; shift; say "bench $tag: $*"
  env "$@" timeout 150 harness bench --board prefill-h200 --only $P --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-200 | tail -4; }
bench tiled ASSAY_GEMM=tiled
bench lo0 ASSAY_GEMM_LO=0
bench v1 ASSAY_GEMM=v1
bench p1024 ASSAY_PREFILL_PASS=1024
bench p256 ASSAY_PREFILL_PASS=256
say done
