#!/usr/bin/env bash
# Session 11 window 1 (one call, cold): kernel-check gemmt+gemm, gates prefill/chunking/
# argmax/graph on the synthetic families, 8B prefill bench (default and variants), a
# profile of one 8B Q4_0 512-token prefill.
set -uo pipefail
t0=$(date +%s); say() { echo "[w1 +$(( $(date +%s) - t0 ))s] $*"; }
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
O=${OUT:-/tmp/w1out}; mkdir -p $O
say "kernel-check gemmt,gemm"
timeout 220 kernel-check --only gemmt,gemm > $O/kc.log 2>&1; echo "rc=$?"
grep -E "FAIL|ALL|took|error" $O/kc.log | head -12 | cut -c1-250
say "gates prefill,chunking,argmax,graph"
timeout 240 harness gate --no-fetch --only prefill,chunking,argmax,graph --models-dir /tmp/assay-models --receipts $O/gate.jsonl > $O/gate.log 2>&1
echo "rc=$?"; grep -E "green|RED|^ok|^FAIL|^ +[0-9]+ tokens" $O/gate.log | head -40 | cut -c1-230
tools/gpu/bg wait synth 200 > /dev/null; say "synth rc=$?"
P=prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
bench() { local tag=$1; shift; say "bench $tag: $*"
  env "$@" timeout 150 harness bench --board prefill-h200 --only $P --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-200 | tail -4; }
bench default ASSAY_X=1
bench tile128 ASSAY_GEMMT_TILE=128
bench lo1 ASSAY_GEMM_LO=1
if left 470; then
  NS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  say "profile with ${NS:-none}"
  if [ -n "$NS" ]; then
    timeout 90 $NS profile -t cuda -o /tmp/prof --force-overwrite true harness bench --board prefill-h200 --only prefill-llama8b-q4_0-p512 --no-receipt --arms assay --runs 5 > $O/nsys.log 2>&1
    echo "nsys rc=$?"
    timeout 60 $NS stats -r cuda_gpu_kern_sum -f csv -o $O/kern /tmp/prof.nsys-rep > /dev/null 2>&1; echo "stats rc=$?"
    head -25 $O/kern*.csv 2>/dev/null | cut -d, -f1-9 | cut -c1-220
  fi
fi
say done
