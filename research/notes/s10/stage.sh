#!/usr/bin/env bash
# Build and stage the session-10 GPU window from /work/main's HEAD (here, no GPU):
#   .gpu/bin        release kernel-check, decode-check, harness, assay (tools/gpu/stage
#                   --keep-parts; kernel-check / decode-check then xz-compressed too:
#                   tools/gpu/run unpacks every *.xz)
#   .gpu/meta/COMMIT "<sha> false"
#   .gpu-cubins/cubins.tar.xz  every kernel family precompiled for sm_90a / driver 13000
#   .gpu/parts/p1, p2          SmolLM2 parts (kept; cut again only when missing)
#   .gpu-donor/llama-tiny-q4_0.gguf  tokenizer donor of harness synth (made when missing)
# Refuses when engine/ kernels/ gates/ harness/ (or Cargo.toml / Cargo.lock) differ from
# HEAD: tracked changes always; untracked files too unless ALLOW_UNTRACKED=1 (they would
# travel with the tree without being in the binaries).
# usage: bash .gpu-lead10/stage.sh [--no-build]   (--no-build: restage the binaries already
#        in /work/main/target/release, built from HEAD by the caller)
set -euo pipefail
R=/work/main
cd "$R"
export CARGO_TARGET_DIR=/work/main/target
T=$CARGO_TARGET_DIR/release
build=1; [ "${1:-}" = --no-build ] && build=0
say() { echo "[stage] $*"; }

st=$(git status --porcelain -- engine kernels gates harness Cargo.toml Cargo.lock)
tracked=$(printf '%s\n' "$st" | grep -v '^??' | grep . || true)
untracked=$(printf '%s\n' "$st" | grep '^??' || true)
if [ -n "$tracked" ]; then
  say "REFUSED: tracked changes under engine/ kernels/ gates/ harness/ (commit first):"; echo "$tracked"; exit 1
fi
if [ -n "$untracked" ] && [ "${ALLOW_UNTRACKED:-0}" != 1 ]; then
  say "REFUSED: untracked files under engine/ kernels/ gates/ harness/ (commit, remove, or ALLOW_UNTRACKED=1):"; echo "$untracked"; exit 1
fi
head=$(git rev-parse HEAD)
say "HEAD $head"

# 1. binaries (tools/gpu/stage builds kernel-check, decode-check, harness, assay)
if [ $build = 1 ]; then
  tools/gpu/stage --keep-parts
else
  mkdir -p .gpu/bin .gpu/meta; rm -f .gpu/bin/*
  cp $T/kernel-check $T/decode-check .gpu/bin/
  for b in harness assay; do strip -o .gpu/bin/$b $T/$b; xz -T2 -6 -f .gpu/bin/$b; done
  { echo "commit $head"; echo "dirty_files 0"; echo "staged_at $(date -u +%Y-%m-%dT%H:%M:%SZ)"; } > .gpu/meta/STAGED
fi
for b in kernel-check decode-check; do
  if [ -f .gpu/bin/$b ]; then xz -T2 -6 -f .gpu/bin/$b; fi
done
echo "$head false" > .gpu/meta/COMMIT
say "COMMIT $(cat .gpu/meta/COMMIT); .gpu/bin: $(ls .gpu/bin | tr '\n' ' ')"

# 2. cubins (NVRTC wheel, no GPU needed)
NV=$HOME/.cache/assay/cuda-nvrtc-13.0.88
if [ ! -e $NV/nvidia/cu13/lib/libnvrtc.so.13 ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target $NV nvidia-cuda-nvrtc==13.0.88
fi
S=$(mktemp -d)
LD_LIBRARY_PATH=$NV/nvidia/cu13/lib $T/kernel-check --cubin-cache $S/cub --precompile sm_90a:13000 | tail -3
rm -rf .gpu-cubins; mkdir -p .gpu-cubins
tar -cf - -C $S/cub . | xz -T2 -6 > .gpu-cubins/cubins.tar.xz
rm -rf $S
say "cubins: $(du -h .gpu-cubins/cubins.tar.xz | cut -f1)"

# 3. models: SmolLM2 parts (kept) and the tokenizer donor
SMOL=$HOME/.cache/assay/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f .gpu/parts/p1/models.tar.part00 ] || [ ! -s .gpu/meta/parts.sha256 ]; then
  [ -f $SMOL ] || tools/fetch-models --only SmolLM2-135M-Instruct
  tools/gpu/stage --parts-only --part-mib 47 --model $SMOL
fi
if [ ! -f .gpu-donor/llama-tiny-q4_0.gguf ]; then
  [ -f $SMOL ] || tools/fetch-models --only SmolLM2-135M-Instruct
  # A tiny synthetic llama with SmolLM2's tokenizer, its tensors then dropped (1.7 MB
  # instead of 19.8; harness synth reads only the donor's metadata: same output bytes).
  mkdir -p .gpu-donor $HOME/.cache/assay/donor
  $T/harness synth --arch llama --shape tiny --quant Q4_0 --seed 0 --donor $SMOL \
    --out $HOME/.cache/assay/donor/llama-tiny-q4_0.full.gguf --no-safetensors | tail -2
  python3 .gpu-lead10/slim-donor.py $HOME/.cache/assay/donor/llama-tiny-q4_0.full.gguf .gpu-donor/llama-tiny-q4_0.gguf
fi

# 4. the window scripts and the sizes of each call
for f in tools/gpu/window/s10-corr tools/gpu/window/s10-timing .gpu-lead10/f1.sh .gpu-lead10/synth.sh; do
  bash -n $f || { say "ERROR: $f does not parse"; exit 1; }
done
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
sz() { du -cb "$@" | tail -1 | cut -f1; }
c1=$(sz .gpu/bin .gpu/meta .gpu-cubins .gpu-donor .gpu-competitors/llama.cpp-src.tar.xz \
  .gpu-competitors/llama.cpp-src.tar.xz.sha256 .gpu-competitors/llama.cpp-src.pin .gpu-lead10)
c2=$(sz .gpu/meta .gpu/parts/p1); c3=$(sz .gpu/meta .gpu/parts/p2)
lim=$((64 << 20)); ok=1
for c in "1 $c1" "2 $c2" "3 $c3"; do
  set -- $c; tot=$(( tree + $2 ))
  printf '[stage] call %s: tree %.1f MiB + carried %.1f MiB = %.1f MiB of 64\n' $1 \
    "$(echo "$tree/1048576" | bc -l)" "$(echo "$2/1048576" | bc -l)" "$(echo "$tot/1048576" | bc -l)"
  [ $tot -lt $lim ] || { say "ERROR: call $1 is over 64 MiB"; ok=0; }
done
du -sh .gpu/bin/* .gpu-cubins .gpu-donor .gpu-competitors .gpu-lead10 .gpu/parts/*
[ $ok = 1 ] && say "ready: HEAD $head" || exit 1
