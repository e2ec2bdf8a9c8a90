#!/usr/bin/env bash
# Session 10, window W1 (the tiled prompt pass, branch `tiled`), call 1: set up and start
# the bg job `w1` (kernel-check gemmt+gemm, gates prefill+chunking, prefill bench A/B).
# carry: .gpu/bin .gpu/meta .gpu-cubins .gpu-donor .gpu-lead10
set -uo pipefail
t0=$(date +%s); say() { echo "[w1 +$(( $(date +%s) - t0 ))s] $*"; }
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); COMMIT $(cat .gpu/meta/COMMIT)"
mkdir -p /tmp/assay-cubins "$HOME/.cache/assay"
[ -f .gpu-cubins/cubins.tar.xz ] && xz -T0 -dc .gpu-cubins/cubins.tar.xz | tar -xf - -C /tmp/assay-cubins
[ -d .gpu-cubins ] && [ ! -f .gpu-cubins/cubins.tar.xz ] && cp -a .gpu-cubins/. /tmp/assay-cubins/
ln -sfn /tmp/assay-cubins "$HOME/.cache/assay/cubins"
tools/gpu/run --receive 2>&1 | tail -2
rm -rf /tmp/t && mkdir -p /tmp/t && cp -a . /tmp/t/
mkdir -p /tmp/assay-models/synth
cd /tmp/t
SYNTH_QUANTS="Q4_0 BF16" tools/gpu/bg start synth 'bash .gpu-lead10/synth.sh'
tools/gpu/bg start w1 'bash .gpu-lead10/w1-job.sh'
sleep 2; tools/gpu/bg status 2 | cut -c1-200
say "started"
