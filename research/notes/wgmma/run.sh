#!/usr/bin/env bash
# On the GPU machine, from the repository root (a device call):
#   run(command="bash research/notes/wgmma/run.sh", timeout_s=240)
# Builds bench.cu with nvcc (gemmt.cu's entries) and runs it; the log goes to $OUT/wgmma.log.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
D=research/notes/wgmma; O=${OUT:-/tmp}; B=/tmp/wgbench
t0=$(date +%s)
nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels $D/bench.cu -lcublas -o $B > $O/nvcc.log 2>&1 || { tail -20 $O/nvcc.log; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 120 $B 2>&1 | tee $O/wgmma.log
