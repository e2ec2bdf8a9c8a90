#!/usr/bin/env bash
# roofline4 window (carry .gpu-roofline4 and .gpu-donor). Binaries of branch roofline4
# (COMMIT) next to main's (base-*). Arms of the one-token matvec (cubin of the Matvec
# family swapped into a copy of the binary's cache: same entry points, other code):
#   K    = the branch as committed (MV_LD_REGS 64; Q6_K head o4 with split rounds)
#   Kh   = K, head entry matvec_q6_k_r4_o4 compiled as the plain r4 (no min-blocks bound)
#   Ko   = K, head o4 without the split (load+dot per chunk as before)
#   K96h = Kh with MV_LD_REGS 96 (U 4 for Q4_0 gate/up and r4)
# Order: kernel-check (all, K) + --only matvec per variant; decode-check gates (K);
# decode-check timing base / K / Kh / Ko / K96h on the synthetic 8B Q4_0; harness bench
# decode-h200 Q4_0 512+128 with the best arm; ncu of the big matvecs if time is left.
set -uo pipefail
OUT=${OUT:-/tmp/o}; L=/tmp/r4-logs; mkdir -p $L $OUT
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
G=$PWD/.gpu-roofline4; D=$PWD/.gpu-donor
B=/tmp/r4-bin; mkdir -p $B
M=/tmp/r4-models; mkdir -p $M/synth; F=$M/synth/llama-3.1-8b-Q4_0-s0.gguf
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $L/steps.log >> $OUT/steps.log; }
fin() { tar -cJf $OUT/r4-logs.tar.xz -C /tmp r4-logs; }
trap fin EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee $L/gpu.txt
for b in kernel-check decode-check base-decode-check; do xz -dc $G/$b.xz > $B/$b; done
( xz -T8 -dc $G/harness.xz > $B/harness; chmod +x $B/harness ) &
chmod +x $B/*
C=/tmp/r4-cub/K; CB=/tmp/r4-cub/base; mkdir -p $C $CB
xz -dc $G/cub.tar.xz | tar -xf - -C $C; xz -dc $G/basecub.tar.xz | tar -xf - -C $CB
MVKEY=$(cat $G/MVKEY)
for v in Kh Ko K96h; do
  mkdir -p /tmp/r4-cub/$v; cp $C/* /tmp/r4-cub/$v/; xz -dc $G/$v.cubin.xz > /tmp/r4-cub/$v/$MVKEY
done
wait
( [ -f $F ] || $B/harness synth --arch llama --shape llama-3.1-8b --quant Q4_0 --seed 0 \
    --donor $D/llama-tiny-q4_0.gguf --out $F --no-safetensors > $L/synth.log 2>&1
  echo "synth exit $?" >> $L/synth.log ) &
SEED=$(date +%s)
$B/kernel-check --seed $SEED --cubin-cache $C --json $L/kc.json > $L/kc.log 2>&1; kc=$?
el "kernel-check K exit $kc: $(grep -c '^ok' $L/kc.log) ok, $(grep -c '^FAIL' $L/kc.log) FAIL; $(grep -E '^(ALL GREEN|FAILED|RED)' $L/kc.log | head -2 | tr '\n' ' ' | cut -c1-300)"
grep -E "^FAIL" $L/kc.log | head -20
for v in Kh K96h; do
  $B/kernel-check --seed $SEED --only matvec --cubin-cache /tmp/r4-cub/$v > $L/kc-$v.log 2>&1
  el "kernel-check --only matvec $v exit $?: $(grep -c '^ok' $L/kc-$v.log) ok, $(grep -c '^FAIL' $L/kc-$v.log) FAIL; $(grep -E 'Matvec\)' $L/kc-$v.log | head -1 | cut -c1-200)"
  grep -E "^FAIL" $L/kc-$v.log | head -5
done
$B/decode-check --cubin-cache $C --json $L/dc.json --time-tokens 0 > $L/dc.log 2>&1; dc=$?
el "decode-check K exit $dc: $(grep -E 'ALL GREEN|RED|FAIL' $L/dc.log | head -4 | tr '\n' ' ')"
wait; el "synth: $(tail -1 $L/synth.log)"
[ -f $F ] || { echo "no model"; exit 1; }
arm() {  # name binary cache
  timeout 60 $2 --skip-synthetic --skip-argmax --tokens 1 --time-tokens 128 --reps 3 --cubin-cache $3 $F >> $L/time-$1.log 2>&1
  el "timing $1: $(grep -A2 '\[timing\]' $L/time-$1.log | tail -1)"
}
arm base $B/base-decode-check $CB
arm K $B/decode-check $C
arm Kh $B/decode-check /tmp/r4-cub/Kh
arm K96h $B/decode-check /tmp/r4-cub/K96h
best=K; bv=0
for a in K Kh K96h; do
  v=$(grep -A2 '\[timing\]' $L/time-$a.log | sed -n 3p | awk '{print $5}')
  el "arm $a graphed $v"
  if [ -n "$v" ] && awk "BEGIN{exit !($v > $bv)}"; then best=$a; bv=$v; fi
done
el "best $best ($bv)"
if [ $(( $(date +%s) - t0 )) -lt ${BENCH_BEFORE:-95} ]; then
  R=/tmp/r4-root; rm -rf $R; mkdir -p $R; xz -dc $G/tree.tar.xz | tar -xf - -C $R
  H=/tmp/r4-home; mkdir -p $H/.cache/assay; rm -rf $H/.cache/assay/cubins
  if [ $best = K ]; then cp -r $C $H/.cache/assay/cubins; else cp -r /tmp/r4-cub/$best $H/.cache/assay/cubins; fi
  HOME=$H ASSAY_GIT_COMMIT=$(cat $G/COMMIT) ASSAY_GIT_DIRTY=false timeout ${BENCH_S:-80} $B/harness bench --root $R \
    --board decode-h200 --only llama8b-q4_0-p512-g128 --arms assay --models-dir $M --receipts $L/bench.jsonl > $L/bench.log 2>&1
  el "bench ($best cubins) exit $?"; tail -4 $L/bench.log
fi
if [ $(( $(date +%s) - t0 )) -lt ${NCU_BEFORE:-0} ]; then
  cache=/tmp/r4-cub/$best; [ $best = K ] && cache=$C
  timeout ${NCU_S:-30} /usr/local/cuda/bin/ncu --clock-control none --cache-control none --graph-profiling node \
    -k regex:'matvec_q4_0|matvec_q6_k' --launch-skip 700 --launch-count 200 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,launch__occupancy_limit_registers \
    --csv --log-file $L/ncu-$best.csv \
    $B/decode-check --skip-synthetic --skip-argmax --tokens 1 --time-tokens 8 --reps 1 --cubin-cache $cache $F > $L/ncu-app.log 2>&1
  el "ncu exit $? ($(wc -l < $L/ncu-$best.csv 2>/dev/null) lines)"
fi
el done
