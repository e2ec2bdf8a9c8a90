#!/usr/bin/env bash
# On the GPU machine, from the repository root (a device call):
#   run(command="bash research/notes/wgmma/run.sh", timeout_s=240)
# Builds bench.cu with nvcc (with gemmt.cu's mma.sync kernel; without it if that fails) and
# runs it; the log goes to $OUT/wgmma.log.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
D=research/notes/wgmma; O=${OUT:-/tmp}; B=/tmp/wgbench
t0=$(date +%s)
if ! nvcc -O3 -std=c++17 -arch=sm_90a -DWITH_GEMMT -Ikernels -I$D $D/bench.cu -lcublas -o $B > $O/nvcc.log 2>&1; then
  echo "build with gemmt.cu failed (see nvcc.log); without it"; tail -5 $O/nvcc.log
  nvcc -O3 -std=c++17 -arch=sm_90a -Ikernels -I$D $D/bench.cu -lcublas -o $B >> $O/nvcc.log 2>&1 || { tail -20 $O/nvcc.log; exit 1; }
fi
echo "built in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 120 $B 2>&1 | tee $O/wgmma.log
