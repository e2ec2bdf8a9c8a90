#!/usr/bin/env bash
# batchmv GPU window (carry .gpu-batchmv and .gpu-donor). STEP=1: kernel-check of this
# branch's binary (fresh cubins; the synthetic 8B Q4_0 made meanwhile), then harness bench
# (assay arm) of a 512-token prefill cell and of the decode-h200 Q4_0 512+128 cell, in a
# root unpacked from `git archive` of this branch (so the receipts carry its identities).
# STEP=2: the prefill cell with main's 1e87e28 harness in a root of 80a63fe (same kernels
# and engine sources as 1e87e28): the before.
set -uo pipefail
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
G=$PWD/.gpu-batchmv
D=$PWD/.gpu-donor
B=/tmp/bmv-bin; mkdir -p $B
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
M=/tmp/bmv-models; mkdir -p $M/synth
C=$HOME/.cache/assay/cubins; mkdir -p $C
F=$M/synth/llama-3.1-8b-Q4_0-s0.gguf
COMMIT=$(cat $G/COMMIT)
if [ "${STEP:-1}" = 1 ]; then
  xz -T8 -dc $G/harness.xz > $B/harness
  cp $G/kernel-check $B/; chmod +x $B/*
  R=/tmp/bmv-after; rm -rf $R; mkdir -p $R; xz -dc $G/after-tree.tar.xz | tar -xf - -C $R
  cp $G/prefill-batchmv.toml $R/boards/
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
  ( [ -f $F ] || $B/harness synth --arch llama --shape llama-3.1-8b --quant Q4_0 --seed 0 \
      --donor $D/llama-tiny-q4_0.gguf --out $F --no-safetensors > $OUT/synth.log 2>&1 ) &
  $B/kernel-check --seed ${SEED:-$(date +%s)} --cubin-cache $C --json $OUT/kernel-check.json > $OUT/kernel-check.log 2>&1
  kc=$?
  el "kernel-check exit $kc"
  grep -E "^(device|modules|FAIL|ALL GREEN|FAILED|kernel-check took)" $OUT/kernel-check.log | head -30
  echo "ok lines: $(grep -c '^ok' $OUT/kernel-check.log)"
  grep -E "1 vs 8 per launch" $OUT/kernel-check.log | head -3
  wait
  el "synth done"; tail -2 $OUT/synth.log
  STEP=3
fi
if [ "${STEP:-1}" = 3 ]; then
  R=/tmp/bmv-after
  cd $R
  ASSAY_GIT_COMMIT=$COMMIT ASSAY_GIT_DIRTY=false timeout 150 $B/harness bench --board prefill-batchmv --models-dir $M --receipts $OUT/bench-after.jsonl > $OUT/bench-prefill.log 2>&1
  el "bench prefill exit $?"; tail -4 $OUT/bench-prefill.log
  ASSAY_GIT_COMMIT=$COMMIT ASSAY_GIT_DIRTY=false timeout 150 $B/harness bench --board decode-h200 --only llama8b-q4_0-p512-g128 --arms assay --models-dir $M --receipts $OUT/bench-after.jsonl > $OUT/bench-decode.log 2>&1
  el "bench decode exit $?"; tail -4 $OUT/bench-decode.log
fi
if [ "${STEP2:-0}" = 1 ]; then
  xz -T8 -dc $G/old-harness.xz > $B/harness-old; chmod +x $B/harness-old
  R=/tmp/bmv-before; rm -rf $R; mkdir -p $R; xz -dc $G/before-tree.tar.xz | tar -xf - -C $R
  cp $G/prefill-batchmv.toml $R/boards/
  cd $R
  ASSAY_GIT_COMMIT=80a63fee256a9f95ba32daac2db0e940e2650afc ASSAY_GIT_DIRTY=false timeout 300 $B/harness-old bench --board prefill-batchmv --models-dir $M --receipts $OUT/bench-before.jsonl > $OUT/bench-before.log 2>&1
  el "bench before exit $?"; tail -4 $OUT/bench-before.log
fi
ls -la $OUT
