#!/usr/bin/env bash
# Branch bf16r2's window (next session): is the BF16 decode regression (session 3 144.0 ->
# session 7 121.6 tok/s, synthetic Llama-3.1-8B) the one-token matvec's 4 rows per warp
# spilling (matvec_bf16_r4 / _glu_r2 at 64 registers, 24-40 bytes of spills)? Staged like
# session 7's window 1 (research/notes/s7/w7/, the lead's .gpu-w7/w.sh): carry a folder with
# base/ (main's decode-check), cand/ (this branch's decode-check + kernel-check), both cubin
# sets precompiled (kernel-check --precompile sm_90a:13000), harness.xz for synth, and
# .gpu-donor. ~60 s cold start + ~100 s synth of the BF16 8B + 4 x ~20 s of decode-check.
set -uo pipefail
OUT=${OUT:-/tmp/o}; L=/tmp/bf; mkdir -p $L $OUT
export LD_LIBRARY_PATH=/usr/local/cuda/targets/x86_64-linux/lib
G=$PWD/.gpu-bf16r2; D=$PWD/.gpu-donor; B=/tmp/bf-bin; mkdir -p $B/base $B/cand
C=$HOME/.cache/assay/cubins; mkdir -p $C; xz -dc $G/cub.tar.xz | tar -xf - -C $C
xz -dc $G/harness.xz > $B/harness; xz -dc $G/cand/kernel-check.xz > $B/kernel-check
for a in base cand; do xz -dc $G/$a/decode-check.xz > $B/$a/decode-check; done; chmod +x $B/* $B/*/*
F=/tmp/bf-models/synth/llama-3.1-8b-BF16-s0.gguf; mkdir -p $(dirname $F)
( $B/harness synth --arch llama --shape llama-3.1-8b --quant BF16 --seed 0 --donor $D/llama-tiny-q4_0.gguf \
    --out $F --no-safetensors > $L/synth.log 2>&1; echo "synth exit $?" >> $L/synth.log ) &
timeout 100 $B/kernel-check --cubin-cache $C --only matvec > $L/kc.log 2>&1
echo "kernel-check matvec exit $?: $(grep -E '^(ALL GREEN|FAILED|RED)' $L/kc.log | head -1)"
wait; tail -1 $L/synth.log
for a in base cand base cand; do
  timeout 90 $B/$a/decode-check --cubin-cache $C --skip-synthetic --skip-argmax --tokens 1 --time-tokens 128 --reps 2 --prompt-tokens 512 $F > $L/dc-$a.log 2>&1
  echo "decode-check BF16 512 $a exit $?: $(grep -A2 '^model' $L/dc-$a.log | tr -s ' ' | tr '\n' ' ' | cut -c1-300)"
done
timeout 60 $B/cand/decode-check --cubin-cache $C --tokens 16 --time-tokens 0 > $L/dc-gates.log 2>&1
echo "decode-check gates (cand) exit $?: $(grep -E 'ALL GREEN|RED|FAIL' $L/dc-gates.log | tail -1)"
tar -cJf $OUT/bf-logs.tar.xz -C /tmp bf
