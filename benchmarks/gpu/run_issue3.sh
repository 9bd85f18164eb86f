#!/usr/bin/env bash
# Issue 3 measurements in one device call: traced throughput (two prefill budgets), the
# per-step profile at batch 1 and 256, the sync count, and the online serving benchmark.
# Usage (repo root, GPU machine, wheels for fastapi/uvicorn/pydantic/gguf in .whl/):
#   bash benchmarks/gpu/run_issue3.sh [sections...]   sections: tp prof syncs serve serve2 hf
SECTIONS=${*:-tp prof syncs serve}
source benchmarks/gpu/lib.sh
M=strixlm/benchmarks/configs/qwen3-0.6b
TP="python -m strixlm.benchmarks.throughput --model qwen3-0.6b --dtype bfloat16 --device cuda --no-tqdm"
start_server() {  # LOG [serve flags...]: `strixlm serve` on port 8000 in the background
  local t0 log=$1  # (SERVER_PID), until healthy
  shift
  t0=$(date +%s%N)
  python -m strixlm.entrypoints.cli serve $M --load-format dummy --dtype bfloat16 \
    --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 "$@" > "$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 240); do curl -sf localhost:8000/health >/dev/null && break; sleep 0.5; done
  echo "healthy after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
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
if has serve; then  # SERVE_FLAGS: more serve flags (e.g. --kv-cache-dtype fp8), SERVE_TAG: names
  echo "=== bench serve (500 x 512 in / 128 out, burst) ${SERVE_FLAGS:-}"
  start_server /tmp/serve.log ${SERVE_FLAGS:-}
  timeout 200 python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
    --random-input-len 512 --random-output-len 128 --output-json "$OUT/serve${SERVE_TAG:-}.json" \
    2>&1 | tail -30
  grep -E "throughput|error|Error" /tmp/serve.log | tail -8
  # The server's own latency histograms (ITL one observation per engine step and request):
  # their counts and sums set beside the client's figures.
  curl -s localhost:8000/metrics > "$OUT/serve${SERVE_TAG:-}_metrics.txt"
  grep -E "^strixlm:(time_to_first_token|inter_token_latency|e2e_request_latency)_seconds_(count|sum)" \
    "$OUT/serve${SERVE_TAG:-}_metrics.txt"
  kill $SERVER_PID; wait $SERVER_PID
fi
if has serve2; then  # the first-server effect: two servers in turn, each benchmarked twice
  for s in 1 2; do
    echo "=== server $s"
    # Throughput every second: a stall, or a server slow throughout, shows in the log.
    STRIXLM_VARIANT_WATCH=1 start_server "$OUT/serve2_server$s.log" --log-stats-interval 1
    for r in 1 2; do
      # A seed per run: the same prompts again would hit the prefix cache.
      timeout 200 python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
        --random-input-len 512 --random-output-len 128 --seed "$s$r" \
        --output-json "$OUT/serve2_s${s}r$r.json" \
        2>&1 | grep -E "Request throughput|Median TTFT|P99 TTFT|Median TPOT"
    done
    kill $SERVER_PID; wait $SERVER_PID
    late_variants "$OUT/serve2_server$s.log"
    grep -o -E "[0-9:]{8},[0-9]+ Avg prompt.*Running: [0-9]+" "$OUT/serve2_server$s.log" \
      | sed -E 's/ tokens\/s//g; s/Avg (prompt|generation) throughput/\1/g' | tail -24
  done
fi
if has hf; then
  echo "=== throughput with the HF peer in the same run"
  timeout 560 $TP --max-num-batched-tokens ${HF_BUDGET:-8192} --compare hf --hf-mode cb \
    --output-json "$OUT/tp_hf.json" 2>&1 | grep -v -i warn | tail -20
fi
