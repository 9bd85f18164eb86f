#!/usr/bin/env bash
# Where the online benchmark's time goes, by process: `strixlm serve` (API server and its
# engine process) and the `bench serve` client, each sampled by py-spy during the burst
# (500 x 512 in / 128 out). Needs the serving wheels in .whl/ and a py-spy wheel in
# .whl_extra/ (py-spy is not on the card). Writes $OUT/serve.json, $OUT/serve_server.log,
# $OUT/pyspy_server.txt (API + engine, --subprocesses) and $OUT/pyspy_client.txt (folded).
SECTIONS=none
source benchmarks/gpu/lib.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/spy .whl_extra/py_spy-*.whl
SPY=/tmp/spy/bin/py-spy
M=strixlm/benchmarks/configs/qwen3-0.6b
python -m strixlm.entrypoints.cli serve $M --load-format dummy --dtype bfloat16 \
  --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 > "$OUT/serve_server.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do curl -sf localhost:8000/health >/dev/null && break; sleep 1; done
python -m strixlm.entrypoints.cli bench serve --port 8000 --num-prompts 500 \
  --random-input-len 512 --random-output-len 128 --output-json "$OUT/serve.json" \
  > "$OUT/serve_client.log" 2>&1 &
CLIENT=$!
# Start sampling when the burst has reached the engine (the client first imports and builds
# its prompts for a few seconds).
for _ in $(seq 300); do
  curl -s localhost:8000/metrics | grep -Eq '^strixlm:num_requests_(running|waiting) [1-9]' \
    && break
  sleep 0.05
done
$SPY record -d 3 -r 250 -f raw --nonblocking --subprocesses -o "$OUT/pyspy_server.txt" \
  -p $SERVER > /dev/null 2>&1 &
$SPY record -d 3 -r 250 -f raw --nonblocking -o "$OUT/pyspy_client.txt" -p $CLIENT \
  > /dev/null 2>&1 &
wait $CLIENT
sleep 1
tail -24 "$OUT/serve_client.log"
kill $SERVER; wait
