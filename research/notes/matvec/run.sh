#!/usr/bin/env bash
# On the GPU machine, from the repository root (a device call):
#   run(command="bash research/notes/matvec/run.sh", timeout_s=180)
# Builds the batch-1 Q4_0 matvec bench with nvcc (five translation units in parallel: the
# engine's matvec.cu entries, three parts of the variants, the host bench) and runs it, one
# process per (shape, family). Logs: $OUT/matvec.log (everything), $OUT/rows.txt (the
# ROW lines), $OUT/nvcc-*.log (with ptxas -v: registers / spills per kernel).
# Optional: SHAPES="gateup down" FAMILIES="engine wr" to run a subset.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
D=research/notes/matvec
O=${OUT:-/tmp/mvout}
B=/tmp/mvbench-build
mkdir -p "$O" "$B"
t0=$(date +%s)
NV=(nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -I"$D" -Xptxas -v)
"${NV[@]}" -c "$D/engine_tu.cu" -o "$B/engine.o" > "$O/nvcc-engine.log" 2>&1 & p0=$!
"${NV[@]}" -DVPART=1 -c "$D/variants_tu.cu" -o "$B/v1.o" > "$O/nvcc-v1.log" 2>&1 & p1=$!
"${NV[@]}" -DVPART=2 -c "$D/variants_tu.cu" -o "$B/v2.o" > "$O/nvcc-v2.log" 2>&1 & p2=$!
"${NV[@]}" -DVPART=3 -c "$D/variants_tu.cu" -o "$B/v3.o" > "$O/nvcc-v3.log" 2>&1 & p3=$!
"${NV[@]}" -c "$D/bench.cu" -o "$B/bench.o" > "$O/nvcc-bench.log" 2>&1 & p4=$!
fail=0
for p in $p0 $p1 $p2 $p3 $p4; do wait "$p" || fail=1; done
if [ "$fail" != 0 ]; then
    for f in "$O"/nvcc-*.log; do
        if grep -q "error" "$f"; then echo "== $f"; grep -B2 -A3 "error" "$f" | head -40; fi
    done
    echo "BUILD FAILED"
    exit 1
fi
nvcc -arch=sm_90a "$B/engine.o" "$B/v1.o" "$B/v2.o" "$B/v3.o" "$B/bench.o" -o "$B/mvbench" > "$O/nvcc-link.log" 2>&1 \
    || { cat "$O/nvcc-link.log"; echo "LINK FAILED"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s" | tee "$O/matvec.log"
nvcc --version | tail -2 | tee -a "$O/matvec.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv,noheader | tee -a "$O/matvec.log"
# registers / spills of every kernel as ptxas reported them
grep -h -A2 "Compiling entry function" "$O"/nvcc-engine.log "$O"/nvcc-v?.log 2>/dev/null \
    | grep -E "Compiling|Used|spill" | sed -E 's/ptxas info *: //' > "$O/ptxas.txt" || true

for shape in ${SHAPES:-gateup down q k kv}; do
    for fam in ${FAMILIES:-engine wr sk}; do
        timeout 60 "$B/mvbench" "$shape" "$fam" 2>&1 | tee -a "$O/matvec.log"
        rc=${PIPESTATUS[0]}
        [ "$rc" = 0 ] || echo "!! mvbench $shape $fam exited with $rc" | tee -a "$O/matvec.log"
    done
done
grep '^ROW|' "$O/matvec.log" > "$O/rows.txt" || true
echo
echo "== summary: fastest per shape (median us per call) among rows with bits == engine, and among all"
awk -F'|' '
/^ROW\|/ && /\|us=/ {
    shape=$2; name=$4; us=""; gbs=""; be=""; inv=""
    for (i = 5; i <= NF; i++) {
        if ($i ~ /^us=/) us = substr($i, 4)
        if ($i ~ /^GBs=/) gbs = substr($i, 5)
        if ($i ~ /^bits!=engine=/) be = substr($i, 14)
        if ($i ~ /^inv=/) inv = substr($i, 5)
    }
    if (us + 0 <= 0) next
    if (!(shape in ball) || us + 0 < ball[shape]) { ball[shape] = us + 0; nall[shape] = name " (" gbs " GB/s)" }
    if (be == "0" && inv == "ok" && (!(shape in bex) || us + 0 < bex[shape])) { bex[shape] = us + 0; nex[shape] = name " (" gbs " GB/s)" }
    if (name ~ /\*$/) eng[shape] = us " us (" gbs " GB/s)"
}
END {
    for (s in ball) printf "  %-7s engine: %-26s exact best: %8.2f us %-40s any best: %8.2f us %s\n", s, eng[s], bex[s], nex[s], ball[s], nall[s]
}' "$O/rows.txt" | tee -a "$O/matvec.log"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$O/matvec.log"
