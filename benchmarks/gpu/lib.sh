# Shared by the run_*.sh device scripts (source it from the repo root, after SECTIONS is set):
# $OUT, PYTHONPATH with the serving wheels from .whl/ when present, has SECTION, and
# run NAME LIMIT CMD... (log to $OUT/NAME.log, print its tail and the exit status, and
# return it), and
# late_variants LOG (the Triton kernel variants a STRIXLM_VARIANT_WATCH=1 run built after
# start-up, each a stall: strixlm/kernels/variant_watch.py).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
if ls .whl/*.whl >/dev/null 2>&1; then  # the serving stack (not on the card): bash benchmarks/gpu/fetch_wheels.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=$PWD:/tmp/site
fi
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
run() {  # name, time limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  grep -v -i -E "warn|it/s\]|^\s*$" "$OUT/$name.log" | tail -n 40
  echo "--- $name: exit $rc after $((SECONDS - t0))s (124 = timed out)"
  return $rc
}
late_variants() {  # log file of a run with STRIXLM_VARIANT_WATCH=1
  grep -E "start-up built" "$1"
  echo "late variants: $(grep -c "after start-up" "$1")"
  grep "after start-up" "$1" | cut -c1-400 | head -30
  # The throughput benchmark marks where its timed run starts: variants past it cost the figure.
  grep -q "the timed run starts" "$1" && echo "in the timed run: $(sed -n \
    '/the timed run starts/,$p' "$1" | grep -c "after start-up")"
}
