#!/usr/bin/env bash
# Session 10 final window, correctness (lean): the gate battery with receipts, the planted
# prefill and batch faults (must be red), the old prompt pass (ASSAY_GEMM=v1) through the
# prefill and chunking gates (logs only).
cd /tmp/t && . tools/gpu/window/env
g() { grep -E "green|RED|red|skip" "$1" | cut -c1-250; }
echo "[corr] commit $ASSAY_GIT_COMMIT; gate $(date +%T)"
timeout 600 harness gate --no-fetch --only argmax,graph,chunking,prefill,batch,served-cuda,spec-cuda \
  --models-dir /tmp/assay-models --receipts $OUT/gate.jsonl > $OUT/gate.log 2>&1
echo "gate rc=$? (want 0)"; g $OUT/gate.log
echo "[corr] planted faults $(date +%T)"
for f in PREFILL:prefill BATCH:batch; do
  env "ASSAY_${f%%:*}_PLANT_FAULT=1" timeout 200 harness gate --no-fetch --only "${f#*:}" \
    --models-dir /tmp/assay-models --no-receipt > "$OUT/fault-${f#*:}.log" 2>&1
  echo "${f#*:} planted rc=$? (want non-zero)"; grep -E "^${f#*:}" "$OUT/fault-${f#*:}.log" | cut -c1-200
done
echo "[corr] gemm v1 $(date +%T)"
ASSAY_GEMM=v1 timeout 200 harness gate --no-fetch --only prefill,chunking --models-dir /tmp/assay-models \
  --no-receipt > $OUT/gate-gemmv1.log 2>&1
echo "gemm v1 gates rc=$? (want 0)"; g $OUT/gate-gemmv1.log
echo "[corr] done $(date +%T)"
