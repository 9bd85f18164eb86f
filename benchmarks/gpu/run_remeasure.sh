#!/usr/bin/env bash
# One device call's measurements, by section name, in the order given:
#   bash benchmarks/gpu/run_remeasure.sh SECTION...      (default: checks)
# e.g. `run_remeasure.sh closing` re-runs issue 3's figures on the current code (greedy tokens
# vs HF, the standard workload three times after a warm-up, batch-1 / batch-32 step time,
# online serving). Each section is a function section_NAME in benchmarks/gpu/remeasure/, whose
# comment says what it runs and why; `run_remeasure.sh list` prints the names. Logs and JSON go
# to $OUT (lib.sh). Sections: remeasure/engine.sh (checks, the workload, profiles, serving),
# attention.sh, fp8.sh, gemm.sh, sampling.sh. Those that serve need the serving wheels in .whl/
# (see run_issue3.sh). An unknown name stops the call before anything runs.
SECTIONS=${*:-checks}
source benchmarks/gpu/lib.sh
TP="python -m strixlm.benchmarks.throughput --dtype bfloat16 --device cuda --no-tqdm"
ab_tp() {  # ENV_VAR PREFIX LABEL:VALUE...: the workload once per pair, alternating, with JSON
  local var=$1 prefix=$2 v; shift 2
  for v in "$@"; do
    (export "$var=${v#*:}"; run "${prefix}_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/${prefix}_${v%%:*}.json")
  done
  grep "strixlm  " "$OUT"/"${prefix}"_*.log
}
ab_flag() {  # FLAG PREFIX LABEL:VALUE...: the workload once per pair with FLAG VALUE, in order
  local flag=$1 prefix=$2 v; shift 2
  for v in "$@"; do
    run "${prefix}_${v%%:*}" 100 $TP --model qwen3-0.6b "$flag" "${v#*:}" \
      --output-json "$OUT/${prefix}_${v%%:*}.json"
  done
}
ab_fp8() {  # ENV_VAR LABEL:VALUE...: a warm-up, then the workload with fp8 KV once per pair
  local var=$1 v; shift
  run tp_fp8_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  for v in "$@"; do
    (export "$var=${v#*:}"; run "tp_fp8_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8_${v%%:*}.json")
  done
  grep "strixlm  \|achieved" "$OUT"/tp_fp8_*.log
}
ab_env() {  # PREFIX "VAR=VALUE ...": check_attention under those settings, a warm-up, then
  # the workload with them / without, alternating, three pairs (none if the check fails)
  local prefix=$1 settings=$2 i
  if ! (export $settings; run "attn_check_$prefix" 150 python benchmarks/gpu/check_attention.py \
    --quick); then
    echo "ab_env: check_attention failed under $settings; no workload runs"
    return 1
  fi
  run tp_warm 100 $TP --model qwen3-0.6b
  for i in 1 2 3; do
    (export $settings; run "tp_${prefix}_on$i" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/tp_${prefix}_on$i.json")
    run "tp_${prefix}_off$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_${prefix}_off$i.json"
  done
  grep "strixlm  " "$OUT"/tp_"$prefix"_*.log
}
ab_base() {  # PAIRS: warm-ups, then the workload alternating $BASE's snapshot / this one
  run tp_warm 100 $TP --model qwen3-0.6b
  (cd "$BASE" && export PYTHONPATH=$BASE && run tp_base_warm 100 $TP --model qwen3-0.6b)
  local i
  for ((i = 1; i <= $1; i++)); do
    (cd "$BASE" && export PYTHONPATH=$BASE && run "tp_base$i" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/tp_base$i.json")
    run "tp_new$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_new$i.json"
  done
}
for f in benchmarks/gpu/remeasure/*.sh; do source "$f"; done
known=$(declare -F | sed -n 's/^declare -f section_//p' | sort | tr '\n' ' ')
if [[ $SECTIONS == list ]]; then echo "$known"; exit 0; fi
for s in $SECTIONS; do
  if ! declare -F "section_$s" > /dev/null; then
    echo "run_remeasure.sh: unknown section '$s'; sections: $known" >&2
    exit 2
  fi
done
for s in $SECTIONS; do "section_$s"; done
