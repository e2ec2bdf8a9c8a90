#!/usr/bin/env bash
# Session 10 final window, timing (alone on the GPU after corr and the llama.cpp build).
cd /tmp/t && . tools/gpu/window/env
M=/tmp/assay-models/synth
filt() { grep -vE "^\s*$" "$1" | grep -E "assay|llama|skip|fail|FAIL|error" | cut -c1-300; }
r() { local tag=$1 secs=$2; shift 2; echo "[timing] ($tag) $* $(date +%T)"
  timeout "$secs" harness bench "$@" --receipts "$OUT/bench.jsonl" > "$OUT/t-$tag.log" 2>&1; echo "($tag) rc=$?"; filt "$OUT/t-$tag.log"; }
p() { echo "[timing] pair $1 $(date +%T)"
  timeout "${2:-180}" harness pair --vs llama.cpp --cells boards/h200.toml --only "$1" --receipts "$OUT/pair.jsonl" > "$OUT/pair-$1.log" 2>&1
  echo "pair $1 rc=$?"; grep -vE "^\s*$" "$OUT/pair-$1.log" | cut -c1-300 | tail -4; }
for i in $(seq 1 420); do [ -f /tmp/llama/cuda/DONE ] && break; sleep 1; done
echo "[timing] llama.cpp DONE=$(cat /tmp/llama/cuda/DONE 2>/dev/null) $(date +%T)"
for i in $(seq 1 200); do [ -f $M/llama-3.1-8b-BF16-s0.gguf ] && break; sleep 1; done
r prefill 300 --board prefill-h200 --only prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
r decode 200 --board decode-h200 --only llama8b-q4_0-p512-g128,llama8b-bf16-p512-g128
p h200-llama8b-q4_0-d512 150
p h200-llama8b-q4_0-p2k 150
r batch 300 --board batch-h200
echo "[timing] done $(date +%T)"
