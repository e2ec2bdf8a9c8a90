#!/usr/bin/env bash
# The synthetic Llama-3.1-8B checkpoints of the session-10 window, reused in session 12 (a bg job started by
# f1.sh from /tmp/t): Q4_0 and BF16 first (the timing job's first cells), then Q8_0 and
# Q4_K_M. Tokenizer from .gpu-donor/llama-tiny-q4_0.gguf (a tiny synthetic llama carrying
# SmolLM2's tokenizer.* keys: the same bytes as with SmolLM2 itself as the donor). Each file
# is written under /tmp/assay-synth-tmp and renamed into /tmp/assay-models/synth/ when
# complete, so that no reader (harness bench, s10-timing's `need`) sees a partial file.
cd /tmp/t && . tools/gpu/window/env
D=/tmp/t/.gpu-donor/llama-tiny-q4_0.gguf
S=/tmp/assay-models/synth; T=/tmp/assay-synth-tmp
mkdir -p "$S" "$T"
rc_all=0
for q in ${SYNTH_QUANTS:-Q4_0 BF16 Q8_0 Q4_K_M}; do
  f="$S/llama-3.1-8b-$q-s0.gguf"
  if [ -f "$f" ]; then echo "[synth] $q: have $f"; continue; fi
  t0=$(date +%s)
  harness synth --arch llama --shape llama-3.1-8b --quant "$q" --seed 0 --donor "$D" \
    --out "$T/llama-3.1-8b-$q-s0.gguf" --no-safetensors > "$OUT/synth-$q.log" 2>&1
  rc=$?
  if [ $rc = 0 ]; then mv "$T/llama-3.1-8b-$q-s0.gguf" "$f"; else rc_all=1; rm -f "$T/llama-3.1-8b-$q-s0.gguf"; fi
  echo "[synth] $q rc=$rc in $(( $(date +%s) - t0 )) s ($(date +%T)) $(du -h "$f" 2>/dev/null | cut -f1)"
  tail -2 "$OUT/synth-$q.log" | cut -c1-200
done
exit $rc_all
