#!/usr/bin/env bash
# On the GPU machine, from the repository root (a device call):
#   run(command="bash research/notes/dp4a/run.sh", timeout_s=240)
# Builds the dp4a matvec bench with nvcc (seven translation units in parallel: the engine's
# one-token and batched matvec.cu entries, four dp4a units, the host bench) and runs it, one
# process per (shape, format, family), so that a faulting kernel loses only its own rows.
# Outputs in $OUT: dp4a.log (everything), rows.txt (the ROW lines), table.txt (the summary),
# ptxas.txt (registers / spills of every kernel), nvcc-*.log.
# Subsets: SHAPES="qgateup qdown qo lgateup" FMTS="q4_0 q8_0" FAMILIES="engine wa wr".
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
D=research/notes/dp4a
O=${OUT:-/tmp/dpout}
B=/tmp/dp4a-build
mkdir -p "$O" "$B"
t0=$(date +%s)
NV=(nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -I"$D" -Xptxas -v -Xcompiler -pthread -Xcompiler -ffp-contract=off)
pids=()
"${NV[@]}" -DEPART=1 -c "$D/engine_tu.cu" -o "$B/e1.o" > "$O/nvcc-e1.log" 2>&1 & pids+=($!)
"${NV[@]}" -DEPART=2 -c "$D/engine_tu.cu" -o "$B/e2.o" > "$O/nvcc-e2.log" 2>&1 & pids+=($!)
for p in 1 2 3 4; do
    "${NV[@]}" -DDPART=$p -c "$D/dp4a_tu.cu" -o "$B/d$p.o" > "$O/nvcc-d$p.log" 2>&1 & pids+=($!)
done
"${NV[@]}" -c "$D/bench.cu" -o "$B/bench.o" > "$O/nvcc-bench.log" 2>&1 & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [ "$fail" != 0 ]; then
    for f in "$O"/nvcc-*.log; do
        if grep -q "error" "$f"; then echo "== $f"; grep -B2 -A3 "error" "$f" | head -40; fi
    done
    echo "BUILD FAILED"
    exit 1
fi
nvcc -arch=sm_90a "$B"/e1.o "$B"/e2.o "$B"/d1.o "$B"/d2.o "$B"/d3.o "$B"/d4.o "$B"/bench.o \
    -o "$B/dpbench" -lpthread > "$O/nvcc-link.log" 2>&1 || { cat "$O/nvcc-link.log"; echo "LINK FAILED"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s" | tee "$O/dp4a.log"
nvcc --version | tail -2 | tee -a "$O/dp4a.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv,noheader | tee -a "$O/dp4a.log"
# registers / spills of every kernel as ptxas reported them (names demangled when c++filt is there)
FILT=cat
command -v c++filt > /dev/null && FILT=c++filt
grep -h -A4 "Compiling entry function" "$O"/nvcc-e?.log "$O"/nvcc-d?.log 2>/dev/null \
    | grep -E "Compiling|Used|spill" | sed -E 's/ptxas info *: //' | $FILT > "$O/ptxas.txt" || true

for shape in ${SHAPES:-qgateup qdown qo lgateup}; do
    for fmt in ${FMTS:-q4_0 q8_0}; do
        for fam in ${FAMILIES:-engine wa wr}; do
            timeout 60 "$B/dpbench" "$shape" "$fmt" "$fam" 2>&1 | tee -a "$O/dp4a.log"
            rc=${PIPESTATUS[0]}
            [ "$rc" = 0 ] || echo "!! dpbench $shape $fmt $fam exited with $rc" | tee -a "$O/dp4a.log"
        done
    done
done
grep '^ROW|' "$O/dp4a.log" > "$O/rows.txt" || true

# The summary: per shape, format and T, the engine's choice and the fastest dp4a kernel of
# each design among those whose checks pass (cpu max rel <= 1e-6, Tinv and inv ok).
# perTok = us(T) / us(T=1) of the same kernel (the engine: over its one-token entry).
awk -F'|' '
/^ROW\|/ && /\|quant x\|/ { q[$2 " " $3, substr($6, 3)] = substr($7, 4); next }
/^ROW\|/ && /\|T=/ && /\|us=/ {
    shape = $2; fmt = $3; fam = $4; name = $5; T = substr($6, 3)
    delete f
    for (i = 7; i <= NF; i++) { p = index($i, "="); if (p) f[substr($i, 1, p - 1)] = substr($i, p + 1) }
    us = f["us"] + 0; if (us <= 0) next
    valid = (f["tinv"] == "ok" || f["tinv"] == "-") && f["inv"] == "ok"
    if (f["cpu"] != "-") { split(f["cpu"], c, ","); if (c[1] + 0 > 1e-6) valid = 0 }
    key = shape " " fmt
    if (!(key in keys)) { keys[key] = 1; order[++nk] = key }
    if (fam == "engine") {
        if (name ~ /\*$/) { eng[key, T] = us; engg[key, T] = f["GBs"]; enge[key] = f["err64"] }
        next
    }
    if (!valid) { bad[key] = bad[key] " " fam ":" name "@T" T; next }
    if (!(((key, fam, T) in best)) || us < best[key, fam, T]) {
        best[key, fam, T] = us; bname[key, fam, T] = name; bpt[key, fam, T] = f["pertok"]; be[key, fam] = f["err64"]
    }
}
END {
    printf "%-16s %2s | %8s %6s %6s | %-22s %7s %6s %6s | %-22s %7s %6s %6s | %7s\n", "shape fmt", "T", "engine", "GB/s", "perTok", "best wa", "us", "perTok", "x eng", "best wr", "us", "perTok", "x eng", "quant"
    for (n = 1; n <= nk; n++) {
        key = order[n]
        e1 = (((key, 1) in eng) ? eng[key, 1] : 0)
        for (ti = 1; ti <= 4; ti++) {
            T = (ti == 1 ? 1 : (ti == 2 ? 2 : (ti == 3 ? 4 : 8)))
            e = (((key, T) in eng) ? eng[key, T] : 0)
            line = sprintf("%-16s %2d | %8.2f %6s %6.2f", key, T, e, (((key, T) in engg) ? engg[key, T] : "-"), (e1 > 0 ? e / e1 : 0))
            for (fi = 1; fi <= 2; fi++) {
                fam = (fi == 1 ? "wa" : "wr")
                if ((key, fam, T) in best) {
                    b = best[key, fam, T]
                    line = line sprintf(" | %-22s %7.2f %6.2f %6.2f", bname[key, fam, T], b, bpt[key, fam, T], (e > 0 ? e / b : 0))
                } else line = line sprintf(" | %-22s %7s %6s %6s", "-", "-", "-", "-")
            }
            line = line sprintf(" | %7s", (((key, T) in q) ? q[key, T] : "-"))
            print line
        }
    }
    for (n = 1; n <= nk; n++) {
        key = order[n]
        printf "err64 %s: engine %s, wa %s, wr %s\n", key, enge[key], be[key, "wa"], be[key, "wr"]
        if (key in bad) printf "FAILED CHECKS %s:%s\n", key, bad[key]
    }
}' "$O/rows.txt" > "$O/table.txt"
echo
echo "== summary (us per call; x eng = engine us at the same T / dp4a us; perTok = us(T) / us(T=1)"
echo "   of the same kernel, the engine's over its one-token entry; quant = the x quantisation, us)"
cat "$O/table.txt" | tee -a "$O/dp4a.log"
echo "total $(( $(date +%s) - t0 )) s" | tee -a "$O/dp4a.log"
