#!/usr/bin/env bash
# Session 12 window, timing (a bg job after corr, from /tmp/t; the helpers of s11-timing).
# Receipts first (prefill, decode, pairs, batch), then the stale cells (Q8_0 / Q4_K_M need
# their checkpoints: synthesize them only after the llama.cpp build is DONE — session 11 lost
# its window to a synth that starved the build), A/B logs last.
cd /tmp/t && . tools/gpu/window/env
M=/tmp/assay-models/synth
SKIP=""   # --skip-missing-arms when the llama.cpp build failed
LL=1
filt() { grep -vE "^\s*$" "$1" | grep -E "assay|llama|skip|fail|FAIL|error|rc=" | cut -c1-300; }
# b TAG SECS ENV... -- HARNESS-BENCH-ARGS...: one bounded bench step (ENV: VAR=value or none)
b() {
  local tag=$1 secs=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "[timing] ($tag) ${envs[*]} harness bench $* $(date +%T)"
  env "${envs[@]}" timeout "$secs" harness bench "$@" $SKIP > "$OUT/t-$tag.log" 2>&1
  echo "($tag) rc=$?"; filt "$OUT/t-$tag.log"
}
# r TAG SECS ARGS...: bench with receipts; a TAG SECS ENV... -- ARGS...: logs-only A/B
r() { local tag=$1 secs=$2; shift 2; b "$tag" "$secs" -- "$@" --receipts "$OUT/bench.jsonl"; }
a() { b "$@" --no-receipt --arms assay; }
# p CELL [SECS]: one pair vs llama-server
p() {
  [ "$LL" = 1 ] || { echo "[timing] pair $1 skipped (no llama.cpp build)"; return; }
  echo "[timing] pair $1 $(date +%T)"
  timeout "${2:-180}" harness pair --vs llama.cpp --cells boards/h200.toml --only "$1" \
    --receipts "$OUT/pair.jsonl" > "$OUT/pair-$1.log" 2>&1
  echo "pair $1 rc=$?"; grep -vE "^\s*$" "$OUT/pair-$1.log" | cut -c1-400 | tail -6
}
# need QUANT... [SECS]: wait until the synth job wrote these 8B checkpoints or ended
need() {
  local secs=300 q files=()
  for q in "$@"; do case "$q" in [0-9]*) secs=$q ;; *) files+=("$M/llama-3.1-8b-$q-s0.gguf") ;; esac; done
  for ((i = 0; i < secs; i++)); do
    local all=1 f
    for f in "${files[@]}"; do [ -f "$f" ] || all=0; done
    [ $all = 1 ] && return 0
    [ -f /tmp/assay-bg/synth/rc ] && { echo "[timing] synth job ended (rc $(cat /tmp/assay-bg/synth/rc)); missing files are made by bench"; return 0; }
    sleep 1
  done
  echo "[timing] still waiting for $* after $secs s; going on (bench makes what is missing)"
}
echo "[timing] commit $ASSAY_GIT_COMMIT; wait llama.cpp $(date +%T)"
for i in $(seq 1 400); do [ -f /tmp/llama/cuda/DONE ] && break; sleep 1; done
if [ "$(cat /tmp/llama/cuda/DONE 2>/dev/null)" = 0 ]; then
  echo "llama.cpp built (DONE 0)"
else
  echo "llama.cpp NOT built (DONE: $(cat /tmp/llama/cuda/DONE 2>/dev/null || echo missing)); bench cells without it, pairs skipped"
  tail -5 /tmp/llama/cuda/build.log 2>/dev/null
  LL=0; SKIP=--skip-missing-arms
fi
need Q4_0 BF16 300


# Receipts first; the Q8_0 / Q4_K_M checkpoints are synthesized only now (llama.cpp built).
SYNTH_QUANTS="Q8_0 Q4_K_M" tools/gpu/bg start synth2 'bash .gpu-lead12/synth.sh' > /dev/null
P3=prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
echo "[timing] (a) prefill $(date +%T)"
r prefill 240 --board prefill-h200 --only $P3
echo "[timing] (a2) BF16 A/B: x in two bf16 parts (the old in-place path)"
a ab-bf16-2p 90 ASSAY_GEMM_LO=1 -- --board prefill-h200 --only prefill-llama8b-bf16-p512
echo "[timing] (b) decode"
r decode 200 --board decode-h200 --only llama8b-q4_0-p512-g128,llama8b-bf16-p512-g128
echo "[timing] (c) pairs"
p h200-llama8b-q4_0-d512 150
p h200-llama8b-q4_0-p2k 150
echo "[timing] (d) batch board"
r batch 300 --board batch-h200
echo "[timing] (e) stale cells"
need Q8_0 200
r prefill2 240 --board prefill-h200 --only prefill-llama8b-q8_0-p512,prefill-llama8b-q4_0-p8192
r decode2 200 --board decode-h200 --only llama8b-q8_0-p512-g128
need Q4_K_M 120
r decode3 150 --board decode-h200 --only llama8b-q4_k_m-p512-g128
echo "[timing] done $(date +%T)"
