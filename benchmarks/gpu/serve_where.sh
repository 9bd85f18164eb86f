#!/usr/bin/env bash
# Where the online burst's late requests wait (session 32): in about half the runs of
# `run_issue3.sh serve` since session 6, the ~240 requests that queue for a sequence slot
# get all 128 tokens in one burst at the end (end-to-end minus TTFT under 50 ms), completing
# one after another ~0.7 ms apart. Session 32 (call 5) found the server's own TTFT (taken
# when the API process routes an output) under 2.5 s for every request while the client saw
# the late ones at ~3.4 s, the API event loop ~90% busy and the client mostly idle.
#   bash benchmarks/gpu/serve_where.sh [default] [nocoalesce] [nofreeze]   (~6 min for all)
# Each named server gets three bursts (500 x 512 in / 128 out):
#   default    the server as shipped (its API process's start-up heap frozen since session 32);
#   nocoalesce engine messages routed one by one even when the loop is behind
#              (STRIXLM_COALESCE_OUTPUTS=0; routed together by default since session 32);
#   nofreeze   the API process's heap left to the collector (STRIXLM_API_GC_FREEZE=0).
# Per burst: every thread's CPU seconds of the server's processes before and after
# (proc_cpu.py), the client's CPU time (bash `times`), the server's /metrics, and the
# server's per-request stream trace (STRIXLM_STREAM_TRACE: arrival, outputs routed, body
# chunks taken and written) joined with the client's stamps on one clock
# (stream_trace_join.py), for the burst requests and the streamed ones apart. py-spy (a
# wheel in .whl_extra/) samples the API process and the client during the default's run 3
# where the container allows it. The server logs one line a second.
# M / SERVE_ARGS / BENCH_ARGS override the model and flags (a CPU smoke run); RUNS the bursts.
SECTIONS=${*:-default nocoalesce nofreeze}
source benchmarks/gpu/lib.sh
M=${M:-strixlm/benchmarks/configs/qwen3-0.6b}
SPY=
if ls .whl_extra/py_spy-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/spy .whl_extra/py_spy-*.whl \
    && SPY=/tmp/spy/bin/py-spy
fi
serve_runs() {  # LABEL [VAR=VALUE...]: one server with that environment, three bursts
  local label=$1 r t0 cpid spies=()
  shift
  env "$@" STRIXLM_STREAM_TRACE="$OUT/trace_$label.jsonl" python -m strixlm.entrypoints.cli \
    serve $M --load-format dummy --dtype bfloat16 --port 8000 --max-num-seqs 256 \
    --max-num-batched-tokens 8192 --log-stats-interval 1 ${SERVE_ARGS:-} \
    > "$OUT/where_server_$label.log" 2>&1 &
  local server=$!
  for _ in $(seq 240); do curl -sf localhost:8000/health >/dev/null && break; sleep 0.5; done
  for r in $(seq "${RUNS:-3}"); do
    python benchmarks/gpu/proc_cpu.py $server > "$OUT/cpu_before_${label}_$r.json"
    t0=$(date +%s%N)
    (python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
      --random-input-len 512 --random-output-len 128 --output-json "$OUT/where_${label}_$r.json" \
      ${BENCH_ARGS:-}; times) > "$OUT/where_client_${label}_$r.log" 2>&1 &
    local client=$!
    if [[ $r == 3 && $label == default && -n $SPY ]]; then
      for _ in $(seq 300); do
        curl -s localhost:8000/metrics \
          | grep -Eq '^strixlm:num_requests_(running|waiting)\{.*\} [1-9]' && break
        sleep 0.05
      done
      cpid=$(pgrep -n -f "bench serve --port 8000")
      $SPY record -d 4 -r 200 -f raw --nonblocking -o "$OUT/spy_server.txt" -p $server \
        > "$OUT/spy_server.log" 2>&1 &
      spies+=($!)
      $SPY record -d 4 -r 200 -f raw --nonblocking -o "$OUT/spy_client.txt" -p "$cpid" \
        > "$OUT/spy_client.log" 2>&1 &
      spies+=($!)
    fi
    wait $client
    echo "$label run $r: wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    python benchmarks/gpu/proc_cpu.py $server > "$OUT/cpu_after_${label}_$r.json"
    curl -s localhost:8000/metrics > "$OUT/metrics_${label}_$r.txt"
    grep -E "Request throughput|Median TTFT|Median TPOT" "$OUT/where_client_${label}_$r.log"
    tail -1 "$OUT/where_client_${label}_$r.log"
    sleep 2
  done
  [[ ${#spies[@]} -gt 0 ]] && wait "${spies[@]}"
  kill $server; wait $server
  python benchmarks/gpu/stream_trace_join.py "$OUT/trace_$label.jsonl" \
    "$OUT"/where_"${label}"_[123].json
}
if has default; then serve_runs default; fi
if has nocoalesce; then serve_runs nocoalesce STRIXLM_COALESCE_OUTPUTS=0; fi
if has nofreeze; then serve_runs nofreeze STRIXLM_API_GC_FREEZE=0; fi
