#!/usr/bin/env bash
# Session 12 correctness battery (bg job from /tmp/t once SmolLM2 is in place): every GPU
# gate with receipts, then the planted faults that must turn prefill, batch and served-cuda red.
cd /tmp/t && . tools/gpu/window/env
g() { grep -E "green|RED|red|skip" "$1" | cut -c1-250; }
echo "[corr] commit $ASSAY_GIT_COMMIT; gate $(date +%T)"
timeout 600 harness gate --no-fetch --only argmax,graph,chunking,prefill,batch,served-cuda,spec-cuda \
  --models-dir /tmp/assay-models --receipts $OUT/gate.jsonl > $OUT/gate.log 2>&1
echo "gate rc=$? (want 0)"; g $OUT/gate.log
echo "[corr] planted faults $(date +%T)"
for f in PREFILL:prefill:1 BATCH:batch:1 SERVED:served-cuda:6; do
  IFS=: read -r var gate val <<< "$f"
  env "ASSAY_${var}_PLANT_FAULT=$val" timeout 200 harness gate --no-fetch --only "$gate" \
    --models-dir /tmp/assay-models --no-receipt > "$OUT/fault-$gate.log" 2>&1
  echo "$gate planted rc=$? (want non-zero)"; grep -E "^$gate" "$OUT/fault-$gate.log" | cut -c1-200
done
echo "[corr] done $(date +%T)"
