#!/usr/bin/env bash
# Where the online burst's late requests wait (session 32): in about half the runs of
# `run_issue3.sh serve` since session 6, the ~240 requests that queue for a sequence slot
# get all 128 tokens in one burst at the end (end-to-end minus TTFT under 50 ms), completing
# one after another ~0.7 ms apart. Each of three bursts against one server records:
# - every thread's CPU seconds of the server's processes before and after (proc_cpu.py:
#   the API event loop, its engine reader thread, the engine process);
# - the client's own CPU time (bash `times`) against its wall time;
# - the server's /metrics after it (its TTFT / ITL histograms are taken when the API
#   process routes each output, before the HTTP write);
# - the server log at one line a second (tokens routed per second).
# py-spy (a wheel in .whl_extra/) samples the API process and the client during run 3
# where the container allows it.
SECTIONS=none
source benchmarks/gpu/lib.sh
M=${M:-strixlm/benchmarks/configs/qwen3-0.6b}  # M / SERVE_ARGS / BENCH_ARGS: a CPU smoke run
SPY=
if ls .whl_extra/py_spy-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/spy .whl_extra/py_spy-*.whl \
    && SPY=/tmp/spy/bin/py-spy
fi
python -m strixlm.entrypoints.cli serve $M --load-format dummy --dtype bfloat16 --port 8000 \
  --max-num-seqs 256 --max-num-batched-tokens 8192 --log-stats-interval 1 ${SERVE_ARGS:-} \
  > "$OUT/where_server.log" 2>&1 &
SERVER=$!
for _ in $(seq 240); do curl -sf localhost:8000/health >/dev/null && break; sleep 0.5; done
for r in 1 2 3; do
  python benchmarks/gpu/proc_cpu.py $SERVER > "$OUT/cpu_before_$r.json"
  t0=$(date +%s%N)
  (python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
    --random-input-len 512 --random-output-len 128 --output-json "$OUT/where_$r.json" \
    ${BENCH_ARGS:-}; times) \
    > "$OUT/where_client_$r.log" 2>&1 &
  CLIENT=$!
  if [[ $r == 3 && -n $SPY ]]; then
    for _ in $(seq 300); do
      curl -s localhost:8000/metrics | grep -Eq '^strixlm:num_requests_(running|waiting)\{.*\} [1-9]' \
        && break
      sleep 0.05
    done
    CPID=$(pgrep -n -f "bench serve --port 8000")
    $SPY record -d 4 -r 200 -f raw --nonblocking -o "$OUT/spy_server.txt" -p $SERVER \
      > "$OUT/spy_server.log" 2>&1 &
    $SPY record -d 4 -r 200 -f raw --nonblocking -o "$OUT/spy_client.txt" -p "$CPID" \
      > "$OUT/spy_client.log" 2>&1 &
  fi
  wait $CLIENT
  echo "run $r: wall $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  python benchmarks/gpu/proc_cpu.py $SERVER > "$OUT/cpu_after_$r.json"
  curl -s localhost:8000/metrics > "$OUT/metrics_$r.txt"
  grep -E "Request throughput|Median TTFT|Median TPOT" "$OUT/where_client_$r.log"
  tail -2 "$OUT/where_client_$r.log"
  sleep 2
done
wait $(jobs -p | grep -v "^$SERVER$") 2>/dev/null || true
kill $SERVER; wait
