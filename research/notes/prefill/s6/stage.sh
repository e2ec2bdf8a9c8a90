#!/usr/bin/env bash
# Stage the prefill64 window (w.sh) into /work/main/.gpu-prefill64 (git-ignored): release
# binaries of the branch (this worktree) and of BASE (main, built in a detached worktree),
# cubins of both precompiled for sm_90a / driver 13000, git archives of both trees.
# usage: stage.sh BRANCH_WORKTREE BASE_WORKTREE   (CARGO_TARGET_DIR set; the two worktrees
# share it: cargo's artifacts of one workspace in two folders share names, so each build
# first touches its sources, or it links the other folder's stale crates)
set -euo pipefail
W=$1; BW=$2; T=${CARGO_TARGET_DIR:?}; G=/work/main/.gpu-prefill64; S=$(mktemp -d)
export LD_LIBRARY_PATH=$HOME/.cache/assay/cuda-nvrtc-13.0.88/nvidia/cu13/lib
build() { (cd "$1" && find engine gates harness kernels -type f \( -name '*.rs' -o -name '*.cu' -o -name '*.cuh' \) -exec touch {} + \
  && cargo build --release --locked -p gates --bin kernel-check -p harness --bin harness); }
build "$BW"; cp $T/release/harness $S/harness-base; cp $T/release/kernel-check $S/kc-base
build "$W"
mkdir -p $S/cub; $S/kc-base --cubin-cache $S/cub --precompile sm_90a:13000
$T/release/kernel-check --cubin-cache $S/cub --precompile sm_90a:13000
rm -rf $G; mkdir -p $G
git -C "$W" rev-parse HEAD > $G/COMMIT; git -C "$BW" rev-parse HEAD > $G/COMMIT_BASE
git -C "$W" archive HEAD | xz -T2 -6 > $G/tree.tar.xz
git -C "$BW" archive HEAD | xz -T2 -6 > $G/tree-base.tar.xz
cp "$W"/research/notes/prefill/s6/{w.sh,prefill64-h200.toml} $G/
tar -cf - -C $S/cub . | xz -T2 -6 > $G/cub.tar.xz
xz -T2 -6 -c $T/release/kernel-check > $G/kernel-check.xz
strip -o $S/h $T/release/harness; xz -T2 -6 -c $S/h > $G/harness.xz
strip -o $S/hb $S/harness-base; xz -T2 -6 -c $S/hb > $G/harness-base.xz
rm -rf $S; du -sh $G
# Then, holding the GPU lock: run(command="bash .gpu-prefill64/w.sh", carry=[".gpu-prefill64",
# ".gpu-donor"], timeout_s=215): one call, ~60-90 s cold start + ~190 s.
