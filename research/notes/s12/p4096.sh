#!/usr/bin/env bash
# Session 12, last call: the decode cell at 4096 context (assay arm only: no llama.cpp build
# fits the budget left), for the attention.split_block default's receipt.
set -uo pipefail
t0=$(date +%s); say() { echo "[p4096 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/ && cd /tmp/t && . tools/gpu/window/env
mkdir -p /tmp/assay-models/synth $OUT
say "synth Q4_0"
SYNTH_QUANTS="Q4_0" OUT=$OUT bash .gpu-lead12/synth.sh 2>&1 | tail -2
say "bench"
timeout 240 harness bench --board decode-h200 --only llama8b-q4_0-p4096-g128 --arms assay --receipts $OUT/bench.jsonl > $OUT/t-p4096.log 2>&1
echo "rc=$?"; grep -E "assay|fail|error" $OUT/t-p4096.log | cut -c1-250
say done
