#!/usr/bin/env bash
# On the GPU machine, from the repository root (a device call):
#   run(command="bash research/notes/wgmma2/run.sh", timeout_s=240)
# Builds bench.cu four times in parallel with nvcc (GW2_ONLY=0: the engine's entries and
# cuBLAS; 1: ws; 2: sw; 3: tm — each binary includes gemmt.cu for the reference), then runs
# one process per (family, format, tile), so that a kernel that faults or hangs (the bench
# build's mbarrier watchdog traps after ~2 s; its record, or "no record" for other faults, is
# printed as "!! watchdog: ..." after the CUDA error) loses only its own rows; each launch is
# announced first ("-- <kernel> <product> n=.. fmt, grid, threads, smem"). Logs under $OUT:
# gw2.log (everything), rows.txt (the ROW lines), table.txt (the summary), nvcc-*.log,
# ptxas.txt (registers / spills / wgmma serialization notes of the draft's kernels).
# Optional: FAMS="ws sw" FMTS="q4_0" TILES="256" to run a subset; GW2_NOFLUSH=1 keeps L2 warm;
# GW2_NVFLAGS="-DGW2_NO_CFENCE" adds nvcc flags; GW2_WRAP="compute-sanitizer --print-limit 3"
# runs each bench under a wrapper (use with a subset: the sanitizer is slow).
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
D=research/notes/wgmma2
O=${OUT:-/tmp/gw2out}
B=/tmp/gw2build
mkdir -p "$O" "$B"
t0=$(date +%s)
read -ra EXTRA <<< "${GW2_NVFLAGS:-}"  # e.g. GW2_NVFLAGS=-DGW2_NO_CFENCE
NV=(nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -I"$D" -Xptxas -v -DGW2_WATCHDOG=4000000000LL ${EXTRA[@]+"${EXTRA[@]}"})
pids=()
for f in 0 1 2 3; do
    "${NV[@]}" -DGW2_ONLY=$f "$D/bench.cu" -lcublas -o "$B/bench$f" > "$O/nvcc-$f.log" 2>&1 &
    pids[$f]=$!
done
built=()
for f in 0 1 2 3; do
    if wait "${pids[$f]}"; then
        built[$f]=1
    else
        built[$f]=0
        echo "!! build GW2_ONLY=$f failed:" | tee -a "$O/gw2.log"
        grep -B2 -A3 "error" "$O/nvcc-$f.log" | head -30 | tee -a "$O/gw2.log"
    fi
done
echo "built in $(( $(date +%s) - t0 )) s" | tee -a "$O/gw2.log"
nvcc --version | tail -2 | tee -a "$O/gw2.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv,noheader \
    | tee -a "$O/gw2.log"
# Registers / spills of the draft's kernels, and any wgmma serialization note (C7515).
for f in 1 2 3; do
    awk '/Compiling entry function .gw2_/ { name = $0; sub(/.*function ./, "", name); sub(/. for.*/, "", name) }
         /spill stores/ { s = $0; sub(/.*bytes stack frame, /, "", s) }
         /Used [0-9]+ registers/ && name != "" { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); printf "%-26s regs %-4s %s\n", name, r, s; name = "" }' \
        "$O/nvcc-$f.log"
done > "$O/ptxas.txt" 2>/dev/null
grep -h "C7515\|Performance Loss" "$O"/nvcc-*.log >> "$O/ptxas.txt" 2>/dev/null
cat "$O/ptxas.txt" | tee -a "$O/gw2.log"

run() {  # binary family format tile
    local bin=$1; shift
    if [ "${built[$bin]}" != 1 ]; then
        echo "!! skip $* (not built)" | tee -a "$O/gw2.log"
        return
    fi
    read -ra WRAP <<< "${GW2_WRAP:-}"
    timeout 60 ${WRAP[@]+"${WRAP[@]}"} "$B/bench$bin" "$@" 2>&1 | tee -a "$O/gw2.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || echo "!! bench $* exited with $rc" | tee -a "$O/gw2.log"
}
FMTS=${FMTS:-f16 q4_0}
for fmt in $FMTS; do run 0 ref "$fmt"; done
declare -A BIN=([ws]=1 [sw]=2 [tm]=3)
for fam in ${FAMS:-ws sw tm}; do
    for fmt in $FMTS; do
        for tile in ${TILES:-128 256}; do run "${BIN[$fam]}" "$fam" "$fmt" "$tile"; done
    done
done
grep '^ROW|' "$O/gw2.log" > "$O/rows.txt" || true

# Summary: TFLOP/s per (tokens, product, format) and kernel; "!" marks outputs whose bits
# differ from the engine's (count in parentheses), "?" outputs left unwritten.
awk -F'|' '
/^ROW\|/ {
    n = ""; p = ""; f = ""; k = ""; tf = ""; df = ""; uw = ""
    for (i = 2; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == "n") n = kv[2]; if (kv[1] == "prod") p = kv[2]; if (kv[1] == "fmt") f = kv[2]
        if (kv[1] == "kernel") k = kv[2]; if (kv[1] == "TFLOPs") tf = kv[2]
        if (kv[1] == "diff") df = kv[2]; if (kv[1] == "unw") uw = kv[2]
    }
    key = n "x" p
    v = tf
    if (df + 0 > 0) v = v "!(" df ")"
    if (uw + 0 > 0) v = v "?"
    cell[key, f, k] = v
    if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    if (k == "cublas_f16") cb[key] = tf
}
END {
    split("engine_w128 engine_w256 engine_mma128 ws_n128 ws_n256 sw_n128 sw_n256 tm_n128 tm_n256", ks, " ")
    printf "%-12s %-5s %8s", "shape", "fmt", "cublas"
    for (j = 1; j <= 9; j++) printf " %14s", ks[j]
    printf "\n"
    split("f16 q4_0", fs, " ")
    for (i = 1; i <= nk; i++) for (q = 1; q <= 2; q++) {
        key = order[i]; f = fs[q]
        any = 0
        for (j = 1; j <= 9; j++) if ((key, f, ks[j]) in cell) any = 1
        if (!any) continue
        printf "%-12s %-5s %8s", key, f, (key in cb) ? cb[key] : "-"
        for (j = 1; j <= 9; j++) printf " %14s", ((key, f, ks[j]) in cell) ? cell[key, f, ks[j]] : "-"
        printf "\n"
    }
}' "$O/rows.txt" > "$O/table.txt"
echo
echo "== TFLOP/s (median; 2 n rows k / time; !(c): c outputs differ from the engine's bits; ?: unwritten)" | tee -a "$O/gw2.log"
cat "$O/table.txt" | tee -a "$O/gw2.log"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$O/gw2.log"
