#!/usr/bin/env bash
# Session 11: build release binaries from a clean worktree ($SRC, default /work/w1, its own
# target dir) and stage them into /work/main/.gpu (bin, meta) and .gpu-cubins (persistent
# cubin cache /work/notes/cubcache: only changed families recompile).
set -euo pipefail
SRC=${SRC:-/work/w1}
R=/work/main
export CARGO_TARGET_DIR=$SRC/target
T=$CARGO_TARGET_DIR/release
cd "$R"
head=$(git -C "$SRC" rev-parse HEAD)
[ -z "$(git -C "$SRC" status --porcelain -- engine kernels gates harness)" ] || { echo "SRC dirty"; exit 1; }
echo "[stage11] building $head from $SRC $(date +%T)"
tools/gpu/stage --src "$SRC" --keep-parts 2>&1 | tail -4
for b in kernel-check decode-check; do [ -f .gpu/bin/$b ] && xz -T2 -6 -f .gpu/bin/$b; done
echo "$head false" > .gpu/meta/COMMIT
NV=$HOME/.cache/assay/cuda-nvrtc-13.0.88
C=/work/notes/cubcache
LD_LIBRARY_PATH=$NV/nvidia/cu13/lib $T/kernel-check --cubin-cache $C --precompile sm_90a:13000 | tail -3
rm -rf .gpu-cubins; mkdir -p .gpu-cubins
tar -cf - -C $C . | xz -T2 -6 > .gpu-cubins/cubins.tar.xz
echo "[stage11] done $(date +%T): COMMIT $(cat .gpu/meta/COMMIT); $(ls .gpu/bin | tr '\n' ' '); cubins $(du -h .gpu-cubins/cubins.tar.xz | cut -f1)"
