#!/usr/bin/env bash
# Issue 3 measurements in one device call: traced throughput (two prefill budgets), the
# per-step profile at batch 1 and 256, the sync count, and the online serving benchmark.
# Usage (repo root, GPU machine, wheels for fastapi/uvicorn/pydantic/gguf in .whl/):
#   bash benchmarks/gpu/run_issue3.sh [sections...]   sections: tp prof syncs serve serve2 hf
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
else
  export PYTHONPATH=$PWD
fi
SECTIONS=${*:-tp prof syncs serve}
M=strixlm/benchmarks/configs/qwen3-0.6b
TP="python -m strixlm.benchmarks.throughput --model qwen3-0.6b --dtype bfloat16 --device cuda --no-tqdm"
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
if has tp; then
  for b in 2048 8192 16384; do
    echo "=== throughput, max_num_batched_tokens $b"
    STRIXLM_STEP_TRACE=/tmp/trace$b.csv timeout 120 $TP --max-num-batched-tokens $b \
      --output-json "$OUT/tp$b.json" 2>&1 | grep -v -i warn | tail -12
    python benchmarks/gpu/summarize_trace.py /tmp/trace$b.csv
  done
fi
if has prof; then
  echo "=== profile_step"
  timeout 150 python benchmarks/gpu/profile_step.py --batch 1 256 --steps 30 2>&1 \
    | grep -v -i warn | head -c 20000
fi
if has syncs; then
  echo "=== check_syncs"
  timeout 120 python benchmarks/gpu/check_syncs.py 2>&1 | grep -v -i "warn" | tail -30
fi
if has serve; then
  echo "=== bench serve (500 x 512 in / 128 out, burst)"
  python -m strixlm.entrypoints.cli serve $M --load-format dummy --dtype bfloat16 \
    --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 > /tmp/serve.log 2>&1 &
  for _ in $(seq 120); do curl -sf localhost:8000/health >/dev/null && break; sleep 1; done
  timeout 200 python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
    --random-input-len 512 --random-output-len 128 --output-json "$OUT/serve.json" 2>&1 | tail -30
  grep -E "throughput|error|Error" /tmp/serve.log | tail -8
  kill %1; wait
fi
if has serve2; then  # the first-server effect: two servers in turn, each benchmarked twice
  for s in 1 2; do
    echo "=== server $s"
    start=$(date +%s%N)
    STRIXLM_VARIANT_WATCH=1 python -m strixlm.entrypoints.cli serve $M --load-format dummy \
      --dtype bfloat16 --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
      > "$OUT/serve2_server$s.log" 2>&1 &
    pid=$!
    for _ in $(seq 180); do curl -sf localhost:8000/health >/dev/null && break; sleep 0.5; done
    echo "healthy after $(( ($(date +%s%N) - start) / 1000000 )) ms"
    for r in 1 2; do
      # A seed per run: the same prompts again would hit the prefix cache.
      timeout 200 python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
        --random-input-len 512 --random-output-len 128 --seed "$s$r" \
        --output-json "$OUT/serve2_s${s}r$r.json" \
        2>&1 | grep -E "Request throughput|Median TTFT|P99 TTFT|Median TPOT"
    done
    kill $pid; wait $pid
    # Kernel variants that start-up missed (strixlm/kernels/variant_watch.py), each a stall.
    grep -E "start-up built" "$OUT/serve2_server$s.log"
    echo "late variants: $(grep -c "after start-up" "$OUT/serve2_server$s.log")"
    grep "after start-up" "$OUT/serve2_server$s.log" | cut -c1-400 | head -20
  done
fi
if has hf; then
  echo "=== throughput with the HF peer in the same run"
  timeout 560 $TP --max-num-batched-tokens ${HF_BUDGET:-8192} --compare hf --hf-mode cb \
    --output-json "$OUT/tp_hf.json" 2>&1 | grep -v -i warn | tail -20
fi
