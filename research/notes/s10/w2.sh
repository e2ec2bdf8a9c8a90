#!/usr/bin/env bash
# Session 10, W2 (branch tiled): why the 8B bench runs disagree, precision data, speed.
# One foreground call. carry: .gpu/bin .gpu/meta .gpu-cubins .gpu-donor .gpu-lead10
set -uo pipefail
t0=$(date +%s); say() { echo "[w2 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t
mkdir -p /tmp/assay-models/synth
SYNTH_QUANTS="Q4_0 BF16" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh' > /dev/null
. tools/gpu/window/env
O=${OUT:-/tmp/w2out}; mkdir -p $O
say "gate prefill (tiled, default)"
timeout 120 harness gate --no-fetch --only prefill --models-dir /tmp/assay-models --no-receipt > $O/gate-prefill.log 2>&1
echo "rc=$?"; grep -E "green|RED" $O/gate-prefill.log | head -3 | cut -c1-160
grep -iE "e-0|rel" $O/gate-prefill.log | head -60 | cut -c1-200
tools/gpu/bg wait synth 200 > /dev/null; say "synth rc=$?"
C=prefill-llama8b-q4_0-p512
bench() { local tag=$1; shift; say "bench $tag: $*"
  env "$@" timeout 90 harness bench --board prefill-h200 --only $C --no-receipt --arms assay > "$O/b-$tag.log" 2>&1
  echo "rc=$?"; grep -E "assay|FAILED|error" "$O/b-$tag.log" | grep -v "^\s*$" | cut -c1-300 | tail -3; }
bench v1 ASSAY_GEMM=v1
bench rows ASSAY_PREFILL=rows
bench t64 ASSAY_PREFILL_PASS=64
bench t512 ASSAY_PREFILL_PASS=512
bench t512nopdl ASSAY_PREFILL_PASS=512 ASSAY_NO_PDL=1
bench t128 ASSAY_PREFILL_PASS=128
bench v1b ASSAY_GEMM=v1 ASSAY_NO_PDL=1
say "done"
