#!/usr/bin/env bash
# A/B of decode-attention variants on the standard workload, then batch-1 latency with and
# without the GEMV kernel. Prints each run's output tok/s; writes $OUT/ab_*.json.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TP="python -m strixlm.benchmarks.throughput --model qwen3-0.6b --dtype bfloat16 --device cuda --no-tqdm"
for v in "krows1 STRIXLM_ATTN_K_ROWS=1" "krows0 STRIXLM_ATTN_K_ROWS=0"; do
  set -- $v
  echo "=== throughput variant $1 ($2)"
  env $2 STRIXLM_STEP_TRACE=/tmp/trace_$1.csv timeout 110 $TP --output-json "$OUT/ab_$1.json" \
    2>&1 | grep -E "strixlm  |memory floor|achieved"
  python benchmarks/gpu/summarize_trace.py /tmp/trace_$1.csv | head -14
done
for g in 0 1; do
  echo "=== batch-1 decode latency, STRIXLM_DISABLE_GEMV=$g"
  STRIXLM_DISABLE_GEMV=$g timeout 90 python benchmarks/gpu/profile_step.py --batch 1 --steps 50 \
    2>&1 | grep -E "#####|gemv|nvjet" | head -8
done
