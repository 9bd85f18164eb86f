#!/usr/bin/env bash
# One device call: end-to-end checks, the standard throughput workload, then kernel checks.
# Usage (repo root, on the GPU machine): bash benchmarks/gpu/run_all.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
run() { local name=$1 limit=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" 2>&1 | grep -v -i warning | tee "$OUT/$name.log" | tail -n 40; }
run e2e 200 python benchmarks/gpu/check_e2e.py
run throughput 200 python -m strixlm.benchmarks.throughput --model qwen3-0.6b --dtype bfloat16 --device cuda --no-tqdm --output-json "$OUT/throughput.json"
run attention 120 python benchmarks/gpu/check_attention.py --quick
run sampler 90 python benchmarks/gpu/check_sampler.py
run fused 60 python benchmarks/gpu/check_fused.py --no-compile
