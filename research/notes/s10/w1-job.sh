#!/usr/bin/env bash
# W1's job: correctness first (kernel-check, gates), then timing alone after synth.
cd /tmp/t && . tools/gpu/window/env
echo "[w1] kernel-check gemmt,gemm $(date +%T)"
timeout 300 kernel-check --only gemmt,gemm --json $OUT/kc.json > $OUT/kc.log 2>&1; echo "kc rc=$?"
grep -E "FAIL|ALL|took|error" $OUT/kc.log | head -20 | cut -c1-250
grep -E "gemmt " $OUT/kc.log | grep -E "worst|err" | head -3 | cut -c1-250
echo "[w1] gates prefill,chunking $(date +%T)"
timeout 300 harness gate --no-fetch --only prefill,chunking --models-dir /tmp/assay-models --no-receipt > $OUT/gate.log 2>&1
echo "gate rc=$?"; grep -E "green|RED|red|skip|rel|err" $OUT/gate.log | head -40 | cut -c1-250
echo "[w1] planted prefill fault $(date +%T)"
ASSAY_PREFILL_PLANT_FAULT=1 timeout 200 harness gate --no-fetch --only prefill --models-dir /tmp/assay-models --no-receipt > $OUT/fault.log 2>&1
echo "fault rc=$? (want non-zero)"; grep -E "^prefill|RED|red" $OUT/fault.log | head -3 | cut -c1-200
tools/gpu/bg wait synth 400 > /dev/null; echo "synth rc=$?"
P=prefill-llama8b-q4_0-p512,prefill-llama8b-bf16-p512,prefill-llama8b-q4_0-p2048
for arm in "ASSAY_GEMM=tiled" "ASSAY_GEMM=v1" "ASSAY_GEMM_LO=0" ; do
  echo "[w1] bench $arm $(date +%T)"
  env $arm timeout 240 harness bench --board prefill-h200 --only $P --no-receipt --arms assay > "$OUT/b-$arm.log" 2>&1
  echo "rc=$?"; grep -E "assay|error|fail" "$OUT/b-$arm.log" | cut -c1-250
done
for pr in 256 1024 2048; do
  echo "[w1] bench pass $pr $(date +%T)"
  ASSAY_PREFILL_PASS=$pr timeout 150 harness bench --board prefill-h200 --only prefill-llama8b-q4_0-p2048 --no-receipt --arms assay > "$OUT/b-pass$pr.log" 2>&1
  echo "rc=$?"; grep -E "assay|error|fail" "$OUT/b-pass$pr.log" | cut -c1-250
done
echo "[w1] done $(date +%T)"
