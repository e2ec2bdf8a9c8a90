#!/usr/bin/env bash
# prefill64 GPU window (carry .gpu-prefill64 and .gpu-donor): this branch's binaries and tree
# (64-row prompt pass) next to the base's (main at the commit the branch is rebased on):
# kernel-check of the branch (all groups, cubins precompiled; the gemm group again with the
# other row-group settings), harness gate prefill + chunking, the planted prefill fault (must
# be red), then harness bench of 512- and 2048-token prefill cells with the base's and the
# branch's binary (each from its own tree, so the receipts carry their identities), the
# gate-up row groups 1 / 4 against the default 2, argmax/graph/batch gates, and ncu of one
# pass's GEMMs when time is left.
set -uo pipefail
OUT=${OUT:-/tmp/o}; L=/tmp/p64; mkdir -p $L $OUT
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
G=$PWD/.gpu-prefill64; D=$PWD/.gpu-donor
B=/tmp/p64-bin; mkdir -p $B
C=$HOME/.cache/assay/cubins; mkdir -p $C
M=/tmp/p64-models; mkdir -p $M/synth; F=$M/synth/llama-3.1-8b-Q4_0-s0.gguf
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $L/steps.log; }
left() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
fin() { tar -cJf $OUT/p64-logs.tar.xz -C /tmp p64; }
trap fin EXIT
trap "exit 143" TERM INT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee $L/gpu.txt
xz -dc $G/cub.tar.xz | tar -xf - -C $C
for b in harness harness-base kernel-check; do xz -T8 -dc $G/$b.xz > $B/$b; done; chmod +x $B/*
R=/tmp/p64-root; RB=/tmp/p64-base; rm -rf $R $RB; mkdir -p $R $RB
xz -dc $G/tree.tar.xz | tar -xf - -C $R; xz -dc $G/tree-base.tar.xz | tar -xf - -C $RB
cp $G/prefill64-h200.toml $R/boards/; cp $G/prefill64-h200.toml $RB/boards/
COMMIT=$(cat $G/COMMIT); BASE=$(cat $G/COMMIT_BASE)
( [ -f $F ] || $B/harness synth --arch llama --shape llama-3.1-8b --quant Q4_0 --seed 0 \
    --donor $D/llama-tiny-q4_0.gguf --out $F --no-safetensors > $L/synth.log 2>&1
  echo "synth exit $?" >> $L/synth.log ) &
SEED=$(date +%s)
timeout 90 $B/kernel-check --seed $SEED --cubin-cache $C --json $L/kc.json > $L/kc.log 2>&1; kc=$?
el "kernel-check (all) exit $kc: $(grep -E '^(ALL GREEN|FAILED|RED)' $L/kc.log | head -2 | tr '\n' ' ') ok=$(grep -c '^ok' $L/kc.log) fail=$(grep -c '^FAIL' $L/kc.log)"
grep -E "^FAIL" $L/kc.log | cut -c1-220 | head -12
grep -E "^ok  (gemm |gemm_f16x)" $L/kc.log | sort -k5 -g | tail -3 | cut -c1-200
for rg in 1,1 1,4 2,2; do
  ASSAY_GEMM_RG=$rg timeout 30 $B/kernel-check --seed $SEED --only gemm --cubin-cache $C > $L/kc-rg$rg.log 2>&1
  el "kernel-check gemm ASSAY_GEMM_RG=$rg exit $?: ok=$(grep -c '^ok' $L/kc-rg$rg.log) fail=$(grep -c '^FAIL' $L/kc-rg$rg.log)"
done
cd $R
export ASSAY_GIT_COMMIT=$COMMIT ASSAY_GIT_DIRTY=false
timeout 100 $B/harness gate --no-fetch --only prefill,chunking --models-dir $M --receipts $L/gate.jsonl > $L/gate.log 2>&1
el "gate prefill,chunking exit $?"; grep -E "^(ok|FAIL)|green|GREEN|RED|red" $L/gate.log | cut -c1-230 | head -24
ASSAY_PREFILL_ATT_BYTES=1 timeout 60 $B/harness gate --no-fetch --only chunking --models-dir $M --receipts $L/gate-att8.jsonl > $L/gate-att8.log 2>&1
el "gate chunking with attention in launches of 8 rows (ASSAY_PREFILL_ATT_BYTES=1) exit $?"; grep -E "^(ok|FAIL)|GREEN|RED" $L/gate-att8.log | cut -c1-200 | head -10
ASSAY_PREFILL_PLANT_FAULT=1 timeout 40 $B/harness gate --no-fetch --only prefill --models-dir $M --no-receipt > $L/gate-fault.log 2>&1
el "planted prefill fault exit $? (want non-zero)"; grep -E "^(ok|FAIL)|RED|red" $L/gate-fault.log | cut -c1-200 | head -6
wait; el "synth: $(tail -1 $L/synth.log)"
[ -f $F ] || { echo "no model"; exit 1; }
(cd $RB && ASSAY_GIT_COMMIT=$BASE timeout 100 $B/harness-base bench --root $RB --board prefill64-h200 --models-dir $M --receipts $L/bench-base.jsonl > $L/bench-base.log 2>&1)
el "bench base ($BASE) exit $?: $(grep -E 'tok/s' $L/bench-base.log | tr -s ' ' | tr '\n' ' ')"
timeout 100 $B/harness bench --root $R --board prefill64-h200 --models-dir $M --receipts $L/bench.jsonl > $L/bench.log 2>&1
el "bench branch ($COMMIT) exit $?: $(grep -E 'tok/s' $L/bench.log | tr -s ' ' | tr '\n' ' ')"
left 130 && { timeout 45 $B/harness gate --no-fetch --only argmax,graph,batch --models-dir $M --receipts $L/gate-ag.jsonl > $L/gate-ag.log 2>&1
  el "gate argmax,graph,batch exit $?"; grep -E "^(ok|FAIL)|GREEN|RED|green|red" $L/gate-ag.log | cut -c1-200 | head -12; }
for rg in 1,1 1,4; do
  left 165 || break
  ASSAY_GEMM_RG=$rg timeout 30 $B/harness bench --root $R --board prefill64-h200 --only llama8b-q4_0-p512-prefill --models-dir $M --receipts $L/bench-rg$rg.jsonl > $L/bench-rg$rg.log 2>&1
  el "bench branch ASSAY_GEMM_RG=$rg exit $?: $(grep -E 'tok/s' $L/bench-rg$rg.log | tr -s ' ' | tr '\n' ' ')"
done
if left 170 && command -v ncu > /dev/null; then
  timeout 20 ncu --clock-control none --csv --section SpeedOfLight --section Occupancy -k regex:gemm_ --launch-count 12 \
    $B/harness bench --root $R --board prefill64-h200 --only llama8b-q4_0-p512-prefill --runs 5 --models-dir $M --receipts /tmp/ncu-bench.jsonl > $L/ncu.csv 2> $L/ncu.err
  el "ncu exit $?"
fi
el done
