#!/usr/bin/env bash
set -uo pipefail
t0=$(date +%s); say() { echo "[w4 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
[ -d /tmp/assay-cubins/x ] || xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -1
export PATH=/tmp/assay-bin:$PATH
O=${OUT:-/tmp/w4out}; mkdir -p $O
say "kernel-check gemmt"
timeout 300 kernel-check --only gemmt > $O/kc.log 2>&1; echo "rc=$?"
grep -E "FAIL|ALL|took" $O/kc.log | head -30 | cut -c1-250
grep -E "n=512|k=14336" $O/kc.log | head -24 | cut -c1-250
say done
