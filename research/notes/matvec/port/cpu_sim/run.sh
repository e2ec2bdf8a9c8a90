#!/usr/bin/env bash
# CPU simulation of kernels/matvec.cu's streamed entry points (matvec_<fmt>[_glu]_wr_r<R>_d<D>)
# against today's one-token entry points, bit for bit (no GPU, no nvcc: g++ and python3).
# gen.py turns the real kernels/ sources into one C++ file (only the PTX helpers are
# replaced, by shim_post.h); sim_main.cpp runs it with one std::thread per CUDA thread
# (shim_pre.h). Then five planted faults in the streamed kernel, each of which must fail.
#
# usage: [SEG_ONLY=1] bash research/notes/matvec/port/cpu_sim/run.sh [KERNELS_DIR]
#   KERNELS_DIR: a kernels/ with port.patch applied (default: this repository's kernels/)
# ~5 min for the clean run and ~1 min per planted fault on 2 cores; work files in $WORK.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kd=$(cd "${1:-$here/../../../../../kernels}" && pwd)
work=${WORK:-/tmp/mv-wr-sim}
mkdir -p "$work"
grep -q matvec_wr_body "$kd/matvec.cu" || { echo "$kd/matvec.cu has no streamed kernel (apply port.patch)"; exit 2; }

build() {  # NAME KERNELS_DIR
    python3 "$here/gen.py" "$2" "$work/gen_$1.cpp"
    g++ -std=c++20 -O1 -ffp-contract=off -pthread -Wno-unknown-pragmas -DMV_PART=1 \
        -DGEN="\"$work/gen_$1.cpp\"" -I"$here" "$here/sim_main.cpp" -o "$work/sim_$1"
}

build clean "$kd"
if [ -z "${SEG_ONLY:-}" ]; then
echo "clean: $("$work/sim_clean" | tail -1)"
fi

plant() {  # NAME OLD NEW: one replacement in matvec.cu; the quick run must fail
    rm -rf "$work/k_$1" && cp -r "$kd" "$work/k_$1"
    python3 - "$work/k_$1/matvec.cu" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read()
assert s.count(old) == 1, old
open(p, "w").write(s.replace(old, new))
PY
    build "$1" "$work/k_$1"
    if "$work/sim_$1" ${SIM_MODE:-} quick > "$work/$1.log"; then
        echo "planted $1: NOT caught"; exit 1
    fi
    echo "planted $1: caught ($(tail -1 "$work/$1.log"))"
}
if [ -z "${SEG_ONLY:-}" ]; then
plant wait_one_short 'gt_wait<D - 1>();' 'gt_wait<D>();'
plant refill_slot_being_read 'issue(slot == 0 ? D - 1 : slot - 1);' 'issue(slot);'
plant scale_low_half_always '(rings[u * 32 + lane] >> (16 * (c & 1)))' '(rings[u * 32 + lane])'
plant glu_up_is_gate 'warp_sum(acc[GLU ? R + r : r])' 'warp_sum(acc[r])'
plant norm_one_ulp 'mv_norm4(a, inv, ((const float4*)nw)[e]' 'mv_norm4(a, inv * 1.0000001f, ((const float4*)nw)[e]'
fi

# The segmented entry points (matvec_<fmt>_seg3_wr_r4_d<D>, q/k/v in one launch;
# research/notes/matvec/qkv/): each matrix's rows vs that matrix alone in today's r1 entry
# point. SEG_ONLY=1 runs only this part (~1 min clean, ~10 s per planted fault).
echo "seg clean: $("$work/sim_clean" seg | tail -1)"
SIM_MODE=seg
plant seg_boundary_late 'if (ig >= g0[s]) {' 'if (ig > g0[s]) {'
plant seg_store_row_global 'lg = cg - g0[s];' 'lg = cg;'
plant seg_no_padding 'ngroups += (sg.rows[s] + R - 1) / R;' 'ngroups += sg.rows[s] / R;'
plant seg_bias_of_q 'sbias = sg.bias[s];' 'sbias = sg.bias[0];'
plant seg_scales_of_q '(u64)srows * nb * F::QBYTES;' '(u64)sg.rows[0] * nb * F::QBYTES;'
