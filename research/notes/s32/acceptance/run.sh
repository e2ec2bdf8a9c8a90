#!/bin/bash
# The Q4_0 draft: target/release/harness requant Qwen2.5-Coder-0.5B-Instruct --to Q4_0 -o /tmp/q05-q4_0.gguf (session 32, 8 s).
cd /work/main
for cls in short-code medium-code long-agentic; do
 for d in Qwen2.5-Coder-0.5B-Instruct /tmp/q05-q4_0.gguf; do
  tag=$(basename $d .gguf)
  /usr/bin/time -f "%e s" target/release/assay generate Qwen2.5-Coder-1.5B-Instruct --backend cpu --threads 2 --cache-weights-mb 16000 \
    -p "$(cat boards/prompts/$cls.txt)" -n 128 --ignore-eos --spec draft:$d --spec-k 8 --spec-policy off --json \
    > /tmp/acc/$cls-$tag.json 2> /tmp/acc/$cls-$tag.err
 done
done
echo done > /tmp/acc/DONE
