#!/usr/bin/env bash
# prefilltc GPU window (carry .gpu-prefilltc and .gpu-donor): kernel-check (gemm + matvec
# groups) of this branch's binary with precompiled cubins while the synthetic 8B Q4_0 is
# made; harness gate prefill + chunking (both prompt-pass modes), the planted prefill fault
# (must be red), argmax/graph/batch with ASSAY_PREFILL=gemm; then harness bench of a
# 512-token prefill cell with ASSAY_PREFILL=rows (before) and =gemm (after), in a root
# unpacked from `git archive` of this branch (so the receipts carry its identities).
set -uo pipefail
OUT=${OUT:-/tmp/o}; L=/tmp/pf-logs; mkdir -p $L $OUT
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
G=$PWD/.gpu-prefilltc; D=$PWD/.gpu-donor
B=/tmp/pf-bin; mkdir -p $B
C=$HOME/.cache/assay/cubins; mkdir -p $C
M=/tmp/pf-models; mkdir -p $M/synth; F=$M/synth/llama-3.1-8b-Q4_0-s0.gguf
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $L/steps.log; }
fin() { tar -cJf $OUT/pf-logs.tar.xz -C /tmp pf-logs; }
trap fin EXIT
trap "exit 143" TERM INT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee $L/gpu.txt
xz -dc $G/cub.tar.xz | tar -xf - -C $C
xz -T8 -dc $G/harness.xz > $B/harness
xz -dc $G/kernel-check.xz > $B/kernel-check; chmod +x $B/*
R=/tmp/pf-root; rm -rf $R; mkdir -p $R; xz -dc $G/tree.tar.xz | tar -xf - -C $R
cp $G/prefill-h200.toml $R/boards/
COMMIT=$(cat $G/COMMIT)
( [ -f $F ] || $B/harness synth --arch llama --shape llama-3.1-8b --quant Q4_0 --seed 0 \
    --donor $D/llama-tiny-q4_0.gguf --out $F --no-safetensors > $L/synth.log 2>&1
  echo "synth exit $?" >> $L/synth.log ) &
SEED=$(date +%s)
timeout ${KC_S:-60} $B/kernel-check --seed $SEED --only gemm --cubin-cache $C --json $L/kc.json > $L/kc.log 2>&1; kc=$?
el "kernel-check gemm exit $kc: $(grep -E '^(ALL GREEN|FAILED|RED)' $L/kc.log | head -2 | tr '\n' ' ') ok=$(grep -c '^ok' $L/kc.log) fail=$(grep -c '^FAIL' $L/kc.log)"
grep -E "^FAIL" $L/kc.log | head -12
grep -E "^ok  (gemm |gemm_f16x)" $L/kc.log | sort -k5 -g | tail -3
cd $R
export ASSAY_GIT_COMMIT=$COMMIT ASSAY_GIT_DIRTY=false
timeout ${GATE_S:-70} $B/harness gate --no-fetch --only prefill,chunking --models-dir $M --receipts $L/gate.jsonl > $L/gate.log 2>&1
el "gate prefill,chunking exit $?"; grep -E "^(ok|FAIL)|green|GREEN|RED|red" $L/gate.log | cut -c1-230 | head -24
ASSAY_PREFILL_PLANT_FAULT=1 timeout 40 $B/harness gate --no-fetch --only prefill --models-dir $M --no-receipt > $L/gate-fault.log 2>&1
el "planted prefill fault exit $? (want non-zero)"; grep -E "^(ok|FAIL)|RED|red" $L/gate-fault.log | cut -c1-200 | head -6
wait; el "synth: $(tail -1 $L/synth.log)"
[ -f $F ] || { echo "no model"; exit 1; }
for mode in rows gemm; do
  ASSAY_PREFILL=$mode timeout ${BENCH_S:-60} $B/harness bench --board prefill-h200 --models-dir $M --receipts $L/bench.jsonl > $L/bench-$mode.log 2>&1
  el "bench prefill $mode exit $?: $(grep -E 'tok/s|median' $L/bench-$mode.log | tail -2 | tr '\n' ' ')"
done
if [ $(( $(date +%s) - t0 )) -lt ${MORE_BEFORE:-140} ]; then
  ASSAY_PREFILL=gemm timeout ${MORE_S:-60} $B/harness gate --no-fetch --only argmax,graph,batch --models-dir $M --receipts $L/gate-gemm.jsonl > $L/gate-gemm.log 2>&1
  el "gate argmax,graph,batch with ASSAY_PREFILL=gemm exit $?"; grep -E "^(ok|FAIL)|GREEN|RED|green|red" $L/gate-gemm.log | cut -c1-200 | head -20
fi
el done
