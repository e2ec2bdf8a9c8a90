#!/usr/bin/env bash
# Every check that runs without a GPU or nvcc (the development machine), from the repository
# root:  bash research/notes/dp4a/check_here.sh
#  1. cpu_check.cpp: the references, dp4a_core.h, the kernels' loop bookkeeping;
#  2. bench.cu's host logic on host memory (cpu_shim/fake_runtime.cpp), the test shapes, all
#     formats and families, and three deliberate defects that must show as DIFF;
#  3. the kernel units' host halves type-checked by g++ (cpu_shim/host_view.h, every launch
#     rewritten by launch_rewrite.py into a call checked against the kernel's parameters);
#  4. all device code through NVRTC 13.0 + ptxas (nvrtc_check.py), where the engine's NVRTC
#     wheel is installed.
set -uo pipefail
D=research/notes/dp4a
T=/tmp/dp4a-check
mkdir -p "$T"
G=(nice -n 10 g++ -std=c++17 -Wall -Wno-unknown-pragmas)
fail=0
note() { echo "== $*"; }
note "1. cpu_check"
"${G[@]}" -O2 -ffp-contract=off -pthread "$D/cpu_check.cpp" -o "$T/cpu_check" && "$T/cpu_check" || fail=1
note "2. bench.cu on host memory"
"${G[@]}" -O2 -ffp-contract=off -pthread -I "$D/cpu_shim" -I "$D" -x c++ "$D/bench.cu" \
    -x c++ "$D/cpu_shim/fake_runtime.cpp" -o "$T/fake" || fail=1
for s in tglu tlin; do
    for f in q4_0 q8_0; do
        for fam in engine wa wr; do
            out=$("$T/fake" $s $f $fam) || { echo "fake $s $f $fam exited $?"; fail=1; }
            if echo "$out" | grep '^ROW' | grep -q 'DIFF\|MISMATCH'; then echo "$out"; fail=1; fi
            n=$(echo "$out" | grep -c '^ROW|.*|T=')
            echo "  $s $f $fam: $n rows, no DIFF"
        done
    done
done
for b in tinv grid sub; do
    if DP_FAKE_BUG=$b "$T/fake" tlin q4_0 wa | grep '^ROW' | grep -q DIFF; then echo "  defect $b: caught"
    else echo "  defect $b: NOT caught"; fail=1; fi
done
note "3. host halves of the kernel units"
for u in dp4a_tu engine_tu; do python3 "$D/cpu_shim/launch_rewrite.py" "$D/$u.cu" "$T/$u.cpp" || fail=1; done
for p in 1 2 3 4; do
    "${G[@]}" -fsyntax-only -DDPART=$p -include "$D/cpu_shim/host_view.h" -I "$D/cpu_shim" -I "$D" -I kernels \
        "$T/dp4a_tu.cpp" && echo "  dp4a_tu DPART=$p ok" || fail=1
done
for p in 1 2; do
    "${G[@]}" -fsyntax-only -DEPART=$p -include "$D/cpu_shim/host_view.h" -I "$D/cpu_shim" -I "$D" -I kernels \
        "$T/engine_tu.cpp" && echo "  engine_tu EPART=$p ok" || fail=1
done
note "4. NVRTC"
L=~/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib
if [ -e "$L/libnvrtc.so.13" ]; then
    LD_LIBRARY_PATH=$L nice -n 10 python3 "$D/nvrtc_check.py" > "$T/nvrtc.txt" 2>&1 || { cat "$T/nvrtc.txt"; fail=1; }
    grep -E "compiled|FAIL" "$T/nvrtc.txt"
    if grep -E "spill_ld" "$T/nvrtc.txt" | grep -vq "0/0/0"; then echo "  spills:"; grep -v "0/0/0" "$T/nvrtc.txt" | grep spill; fi
else
    echo "  skipped: no NVRTC wheel at $L"
fi
[ "$fail" = 0 ] && echo "check_here: all passed" || echo "check_here: FAILED"
exit $fail
