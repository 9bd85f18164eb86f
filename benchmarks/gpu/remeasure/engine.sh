# shellcheck shell=bash
# run_remeasure.sh sections on the whole engine: correctness checks, the standard workload and
# its A/Bs, profiles, hardware counters, online serving, the closing figures. Sourced by
# run_remeasure.sh, which defines TP and the ab_* helpers; each section_NAME runs
# `run_remeasure.sh NAME`.

# checks: the new kernels against torch at real shapes (check_glue_kernels.py); tiny Qwen3 /
#   Llama on CUDA against HF with mixed-step graph replays, and Qwen3-0.6B batch-1
#   latency eager vs graphs (check_e2e.py); host syncs per step (check_syncs.py)
section_checks() {
  run glue 90 python benchmarks/gpu/check_glue_kernels.py
  run moe 150 python benchmarks/gpu/check_moe.py  # decode sizes take the one-program align
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run syncs 120 python benchmarks/gpu/check_syncs.py  # the ramp's mixed steps now replay graphs
  run attn_order 90 python benchmarks/gpu/sweep_decode_attn.py --quick  # longest-first A/B
}

# qwen: the standard workload twice (the first warms Triton's cache), traced; then the
#   online benchmark (500 x 512/128, burst)
section_qwen() {
  run tp_warm 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_warm.json"
  STRIXLM_STEP_TRACE=/tmp/trace.csv run tp 100 $TP --model qwen3-0.6b --output-json "$OUT/tp.json"
  python benchmarks/gpu/summarize_trace.py /tmp/trace.csv | head -16
  STRIXLM_DISABLE_MIXED_GRAPHS=1 run tp_nomixed 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_nomixed.json"  # A/B: mixed steps eager
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
}

# nano: Nemotron 3 Nano batch-1 latency (target 4 ms) and the standard workload
section_nano() {
  run nano_latency 150 python benchmarks/gpu/bench_nemotron.py --sections latency
  run nano_tp 130 $TP --model nemotron-3-nano-30b-a3b --output-json "$OUT/nano_tp.json"
}

# prof: profile_step.py kernel tables at batch-256 decode and budget-sized prefill steps
section_prof() {  # kernel tables: decode at batch 256, and budget-sized prefill steps
  run prof_decode 110 python benchmarks/gpu/profile_step.py --batch 256 --steps 20
  run prof_prefill 110 python benchmarks/gpu/profile_step.py --prefill --steps 6
}

section_tp() {  # the standard workload: warm-up run, then the figure
  run tp_warm 100 $TP --model qwen3-0.6b
  run tp 100 $TP --model qwen3-0.6b --output-json "$OUT/tp.json"
}

section_prof1() {
  run prof_b1 110 python benchmarks/gpu/profile_step.py --batch 1 --steps 50
}

# e2e: greedy tokens vs HF on CUDA (check_e2e.py) only
section_e2e() {
  run e2e 240 python benchmarks/gpu/check_e2e.py
}

# gcab: the workload with the start-up heap frozen during generate (STRIXLM_GC_FREEZE=1,
#   the default) / not, alternating, each traced: host-bound steps and GC pauses
section_gcab() {
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in on1:1 off1:0 on2:1 off2:0; do
    STRIXLM_GC_FREEZE=${v#*:} STRIXLM_STEP_TRACE=/tmp/trace_${v%%:*}.csv \
      run tp_gc_${v%%:*} 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_gc_${v%%:*}.json"
    python benchmarks/gpu/summarize_trace.py /tmp/trace_${v%%:*}.csv | tail -11
  done
  grep "strixlm  " "$OUT"/tp_gc_*.log
}

# final: session 7's closing figures (workload with split-K capped at 128 / 192, syncs,
#   batch-1 step time, online serving)
section_final() {  # session 7's closing figures: workload (split-K cap 128, and 192 as an A/B),
  # host syncs at batch 256 and 64, batch-1 step time, online serving
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_SPLITK_MAX_ROWS tp_final a1:128 b1:192 a2:128 b2:192
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
  run syncs64 120 python benchmarks/gpu/check_syncs.py --num-requests 64
  timeout 150 python benchmarks/gpu/profile_step.py --batch 1 --steps 50 2>&1 | grep "#####"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
}

# slowsteps: cProfile of the workload's slowest host steps (profile_slow_steps.py)
section_slowsteps() {
  run slowsteps 150 python benchmarks/gpu/profile_slow_steps.py
}

# pdl: programmatic dependent launch for the step's Triton kernels (session 5's, now
#   with split-K and the persistent grid's deal before its wait): greedy tokens vs
#   HF, then the workload with STRIXLM_DISABLE_PDL=0 / 1, alternating
section_pdl() {
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DISABLE_PDL tp_pdl on1:0 off1:1 on2:0 off2:1
}

# trace: the workload once traced (warm Triton cache assumed): host vs GPU per step kind
section_trace() {
  STRIXLM_STEP_TRACE=/tmp/trace.csv run tp_traced 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_traced.json"
  python benchmarks/gpu/summarize_trace.py /tmp/trace.csv | tee "$OUT/trace_summary.txt" | head -40
  cp /tmp/trace.csv "$OUT/trace.csv"  # per step: schedule / launch / wait / update
}

# serve: the online benchmark only (500 x 512/128, burst)
section_serve() {
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
}

# quickchecks: glue kernels vs torch (and qk_norm_rope's replay time), greedy tokens vs
#   HF on CUDA, host syncs per step at batch 256 and 64 (checks without MoE / order
#   A/B)
section_quickchecks() {
  run glue 90 python benchmarks/gpu/check_glue_kernels.py
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
  run syncs64 120 python benchmarks/gpu/check_syncs.py --num-requests 64  # 2-segment split
}

section_overlap() {  # two half-batches on two streams vs one batch (layer skeleton)
  run overlap 150 python benchmarks/gpu/bench_overlap.py --json "$OUT/overlap.json"
}

section_nanowarm() {  # the first run fills Triton's cache, the second is the figure
  run nano_tp_cold 130 $TP --model nemotron-3-nano-30b-a3b
  run nano_tp_warm 130 $TP --model nemotron-3-nano-30b-a3b --output-json "$OUT/nano_tp_warm.json"
}

# profrun: the standard workload's GPU time by kernel kind over the whole run (profile_run.py)
section_profrun() {  # the whole standard workload under torch.profiler: time per kernel kind
  run profrun 300 python benchmarks/gpu/profile_run.py --json "$OUT/profile_run.json"
}

# profsteps: profrun plus the idle gaps of steps 100 / 400 / 700 / 950 with their neighbours
section_profsteps() {  # the whole-run profile plus four steps' idle gaps with the ops around them
  run profsteps 300 python benchmarks/gpu/profile_run.py --json "$OUT/profile_run.json" \
    --show-steps 100,400,700,950
}

# readbw: copy vs streaming-read bandwidth (bench_read_bw.py)
section_readbw() {  # HBM read ceiling (what decode attention can reach) vs copy bandwidth
  run readbw 120 python benchmarks/gpu/bench_read_bw.py --json "$OUT/read_bw.json"
}

# decodepaths: the decode-path variants at the Qwen3-0.6B shape in bf16: greedy tokens and
#   logprobs against session 10's dispatch (check_decode_paths.py)
section_decodepaths() {
  run decode_paths 330 python benchmarks/gpu/check_decode_paths.py
}

# blocksize: the workload with 16 / 64-token KV blocks (--block-size), alternating
section_blocksize() {
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_flag --block-size tp_bs b16_1:16 b64_1:64 b16_2:16 b64_2:64
  grep "strixlm  " "$OUT"/tp_bs_*.log
}

# block32: the workload with 16 / 32-token KV blocks, alternating, three pairs
section_block32() {
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_flag --block-size tp_bs b16_1:16 b32_1:32 b16_2:16 b32_2:32 b16_3:16 b32_3:32
  grep "strixlm  " "$OUT"/tp_bs_*.log
}

# budgetab: the workload at --max-num-batched-tokens 16384 / 8192, alternating
section_budgetab() {
  ab_flag --max-num-batched-tokens tp b16k1:16384 b8k1:8192 b16k2:16384 b8k2:8192
  grep "strixlm  " "$OUT"/tp_b*.log
}

# budgetab2: the same at 6144 / 4096 / 8192, after a warm-up
section_budgetab2() {
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_flag --max-num-batched-tokens tp b6k1:6144 b4k1:4096 b8k1:8192 b6k2:6144 b4k2:4096 b8k2:8192
  grep "strixlm  " "$OUT"/tp_b*.log
}

# prepab: greedy tokens vs HF on CUDA (check_e2e.py), then the decode steps' num_computed
#   update inside the input-prep kernel / as eager ops
#   (STRIXLM_PREP_ADVANCE_IN_KERNEL=1 / 0), alternating
section_prepab() {
  run e2e 240 python benchmarks/gpu/check_e2e.py  # the in-kernel update is on by default
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PREP_ADVANCE_IN_KERNEL tp_prep on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# boundaryab: the decode step's boundary as one input-prep launch (block writes, the block-table
#   gather and a read of the host's arrays from pinned memory in the kernel; the token
#   copy to the host on a side stream): the kernel vs torch at real shapes
#   (check_input_prep.py; host reads turned off for the rest if they fail), greedy
#   tokens vs HF, host syncs, then the workload alternating against the snapshot in
#   $BASE (the code before), and with STRIXLM_PREP_HOST_READ=0 / STRIXLM_SIDE_COPY=0
section_boundaryab() {
  run prep_check 120 python benchmarks/gpu/check_input_prep.py
  grep -q "ALL EQUAL" "$OUT/prep_check.log" || export STRIXLM_PREP_HOST_READ=0
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
  ab_base 2
  STRIXLM_PREP_HOST_READ=0 run tp_nohostread 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_nohostread.json"
  STRIXLM_SIDE_COPY=0 run tp_nosidecopy 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_nosidecopy.json"
  grep "strixlm  " "$OUT"/tp_*.log
}

# baseab: the workload alternating between this snapshot and the one in $BASE (another commit),
#   three pairs after a warm-up of each: for changes without a switch
section_baseab() {
  ab_base 3
  grep "strixlm  " "$OUT"/tp_*.log
}

# syncs: host syncs per decode step at batch 256 (check_syncs.py)
section_syncs() {
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
}

# earlyab: RMSNorm's weight and the q/k norm + rotary's positions, cos / sin rows, weights and
#   cache slots loaded before the PDL wait (STRIXLM_PDL_EARLY_LOADS): greedy tokens vs
#   HF, the workload on / off alternating (three pairs), batch-1 / 32 step times
section_earlyab() {
  run e2e 240 python benchmarks/gpu/check_e2e.py  # early loads on (the default)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PDL_EARLY_LOADS tp_early on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
  for v in 1 0; do
    STRIXLM_PDL_EARLY_LOADS=$v run "b1_early$v" 100 python benchmarks/gpu/profile_step.py \
      --batch 1 32 --steps 50
    grep "#####" "$OUT/b1_early$v.log"
  done
}

# earlyres: RMSNorm's residual row loaded before the PDL wait too (STRIXLM_PDL_EARLY_RESIDUAL,
#   on by default since session 22): greedy tokens vs HF with it on, then the
#   workload on / off alternating
section_earlyres() {  # RMSNorm's residual row before the PDL wait as well
  run e2e 240 env STRIXLM_PDL_EARLY_RESIDUAL=1 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PDL_EARLY_RESIDUAL tp_res on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# ncu: Nsight Compute counters for one decode step at 256 / 128 / 48 rows (NCU_SHAPES):
#   DRAM / L2 / SM / tensor-pipe throughput per kernel (ncu_decode_step.py)
section_ncu() {  # hardware counters (Nsight Compute) for one decode step per batch shape
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"; "$NCU" --version | tail -1
  NCU_FLAGS=$(python benchmarks/gpu/ncu_decode_step.py --ncu-args)
  # batch:prompt:memory fraction (a small KV pool keeps ncu's per-pass memory restore short)
  for shape in ${NCU_SHAPES:-256:800:0.3 128:900:0.15 48:1000:0.1}; do
    IFS=: read -r b p m <<< "$shape"
    # shellcheck disable=SC2086
    run "ncu_b$b" "${NCU_LIMIT:-200}" "$NCU" --clock-control none --profile-from-start off \
      --graph-profiling node --launch-count "${NCU_COUNT:-60}" $NCU_FLAGS -f -o "$OUT/ncu_b$b" \
      python benchmarks/gpu/ncu_decode_step.py --batch "$b" --prompt-len "$p" --mem-frac "$m"
    "$NCU" --import "$OUT/ncu_b$b.ncu-rep" --csv --page raw > "$OUT/ncu_b$b.csv"
    python benchmarks/gpu/ncu_decode_step.py --summarize "$OUT/ncu_b$b.csv" | tee "$OUT/ncu_b$b.txt"
  done
}

# variants: the standard workload with STRIXLM_VARIANT_WATCH=1: the kernel variants that
#   start-up missed (each one stalls a step while Triton builds it)
section_variants() {  # Triton kernel variants built after start-up (variant_watch.py), each a stall
  # The first run in a fresh process after a fresh start-up; the Triton cache as this call finds it.
  (export STRIXLM_VARIANT_WATCH=1; run tp_variants 150 $TP --model qwen3-0.6b)
  late_variants "$OUT/tp_variants.log"
}

# b1serve: batch-1 / batch-32 step time and the online benchmark (closing's last two)
section_b1serve() {
  run b1 100 python benchmarks/gpu/profile_step.py --batch 1 32 --steps 50
  grep "#####" "$OUT/b1.log"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
}

# benchlatency: `strixlm bench latency` with its HF peer (static cache, compiled decode) at
#   batch 1 and 32, 512-token prompts, 128 output tokens: the issue's batch-1 figure from the
#   user-facing command, beside profile_step.py's
section_benchlatency() {
  for b in 1 32; do
    run "lat_b$b" 300 python -m strixlm.benchmarks.latency --model qwen3-0.6b --dtype bfloat16 \
      --device cuda --batch-size "$b" --input-len 512 --output-len 128 --compare hf \
      --output-json "$OUT/lat_b$b.json"
  done
  grep -h -A4 "^engine" "$OUT"/lat_b*.log
}

# closing: the final code's figures in one call: greedy tokens vs HF (check_e2e.py), the
#   workload three times after a warm-up, batch-1 / batch-32 step time, online serving
section_closing() {
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  for i in 1 2 3; do run "tp_$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_$i.json"; done
  grep "strixlm  " "$OUT"/tp_[0-9].log
  run b1 100 python benchmarks/gpu/profile_step.py --batch 1 32 --steps 50
  grep "#####" "$OUT/b1.log"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
}
