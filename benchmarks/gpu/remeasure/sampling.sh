# shellcheck shell=bash
# run_remeasure.sh sections on the sampler and the LM head: fused argmax / Gumbel-max epilogues,
# sampling graphs, persistent LM head walks. Sourced by run_remeasure.sh, which defines TP and
# the ab_* helpers; each section_NAME runs `run_remeasure.sh NAME`.

section_sampler() {  # the all-greedy argmax loop (per-lane best) at real shapes, timed
  run sampler 150 python benchmarks/gpu/check_sampler.py
}

# topp: check_sampler with STRIXLM_SAMPLER_TOPP_REJECTION=1 (it also times the radix path)
section_topp() {  # top-p by rejection vs the radix passes: tokens vs torch, both timed
  STRIXLM_SAMPLER_TOPP_REJECTION=1 run sampler_topp 200 python benchmarks/gpu/check_sampler.py
}

# sgraph: decode steps sampled in CUDA graphs (sample_graphs.py): tokens vs the eager
#   sampler, greedy vs HF, then batch-1 / batch-32 step time with the graphs on / off
#   (STRIXLM_DISABLE_SAMPLE_GRAPHS), alternating, and the workload traced
section_sgraph() {
  run sgraph_check 200 python benchmarks/gpu/check_sample_graphs.py
  run e2e 240 python benchmarks/gpu/check_e2e.py
  for v in on1:0 off1:1 on2:0 off2:1; do
    STRIXLM_DISABLE_SAMPLE_GRAPHS=${v#*:} timeout 150 python benchmarks/gpu/profile_step.py \
      --batch 1 32 --steps 100 > "$OUT/sgraph_step_${v%%:*}.log" 2>&1
    grep "#####" "$OUT/sgraph_step_${v%%:*}.log" | sed "s/^/sgraph ${v%%:*} /"
  done
}

# sgraphab: the workload with the sampling graphs on / off, alternating, after a warm-up
section_sgraphab() {
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DISABLE_SAMPLE_GRAPHS tp_sg on1:0 off1:1 on2:0 off2:1
}

# lmhead: the greedy tail (LM head + greedy sampling graph) against the LM head with an
#   argmax epilogue (bench_lm_head_argmax.py): config sweep and token check per M
section_lmhead() {
  run lm_head 300 python benchmarks/gpu/bench_lm_head_argmax.py --json "$OUT/lm_head.json" \
    --rows 1 8 16 32 48 64 96 128 160 192 224 256
}

# lmheadtma: the same sweep at 96-256 rows with the TMA-loading configs (not yet run)
section_lmheadtma() {  # the fused LM head's tiles by TMA at 96-256 rows (not yet run)
  run lm_head_tma 300 python benchmarks/gpu/bench_lm_head_argmax.py \
    --json "$OUT/lm_head_tma.json" --rows 96 128 160 192 224 256
}

# lmheadsample: the temperature tail against the LM head with a Gumbel-max epilogue
#   (bench_lm_head_argmax.py --sample; STRIXLM_FUSED_SAMPLE is opt-in until measured)
section_lmheadsample() {  # the temperature tail: sampler vs Gumbel-max epilogue (not yet run)
  run lm_head_sample 300 python benchmarks/gpu/bench_lm_head_argmax.py --sample \
    --json "$OUT/lm_head_sample.json" --rows 1 8 16 32 64 128 256
}

# fusedcheck: greedy tokens of the fused LM head argmax vs the unfused tail (check_decode_paths)
section_fusedcheck() {  # greedy tokens with / without the fused LM head argmax, bf16
  CHECK_VARIANTS=defaults,tokens_fused,tokens_unfused run decode_paths 420 \
    python benchmarks/gpu/check_decode_paths.py
}

# fusedab: the workload with the fused greedy tail on / off, alternating, three pairs
section_fusedab() {  # the workload with STRIXLM_FUSED_GREEDY=1 / 0, alternating
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSED_GREEDY tp_fg on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# lmtmaab: the workload with the fused LM head's TMA table on / off (STRIXLM_LM_HEAD_TMA),
#   alternating, three pairs
section_lmtmaab() {  # the workload with STRIXLM_LM_HEAD_TMA=1 / 0, alternating
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_TMA tp_lt on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
  grep "strixlm  " "$OUT"/tp_lt_*.log
}

# sampleab: the workload sampled at temperature 1 (seeded), the temperature graphs sampling
#   in the LM head's epilogue (the default) / not (STRIXLM_FUSED_SAMPLE=0), alternating
section_sampleab() {  # sampled workload: Gumbel-max epilogue (default) vs LM head + sampler
  run tp_warm 100 $TP --model qwen3-0.6b --temperature 1.0
  for v in on1: off1:0 on2: off2:0 on3: off3:0; do
    STRIXLM_FUSED_SAMPLE=${v#*:} run "tp_fs_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --temperature 1.0 --output-json "$OUT/tp_fs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_fs_*.log
}

# sampleab2: the same with two pairs (after a warm-up)
section_sampleab2() {
  run tp_warm 100 $TP --model qwen3-0.6b --temperature 1.0
  for v in on1: off1:0 on2: off2:0; do
    STRIXLM_FUSED_SAMPLE=${v#*:} run "tp_fs_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --temperature 1.0 --output-json "$OUT/tp_fs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_fs_*.log
}

# lmpersist: the LM head's TMA tiles walked by a persistent grid from 129 rows (the default
#   since session 26) or never (STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS=129 / 0):
#   bench_lm_head_argmax.py --persistent at 96-256 rows (tokens checked, graph times),
#   then the workload on / off alternating after a warm-up (two pairs). Session 26
#   measured it at every TMA row count (96 up), as an opt-in switch of that time
section_lmpersist() {  # the LM head as one wave of programs walking its tiles
  run lmpersist_bench 120 python benchmarks/gpu/bench_lm_head_argmax.py --persistent \
    --rows 96 128 160 192 224 256 --json "$OUT/lmpersist_bench.json"
  section_lmpersistab
}

# lmsweep: the LM head's tile configs walked by a persistent grid of one or two programs an
#   SM, at 16-256 rows (bench_lm_head_argmax.py --persistent sweep): the data for a
#   persistent table, whether two programs an SM win back 96-128 rows, and whether
#   64-row TMA tiles walked persistently beat the pointer tiles below 96 rows
section_lmsweep() {  # persistent tile configs, one or two programs an SM
  run lmsweep 500 python benchmarks/gpu/bench_lm_head_argmax.py --persistent sweep \
    --rows 16 32 64 96 128 160 192 224 256 --json "$OUT/lmsweep.json"
  grep -E "^M=" "$OUT/lmsweep.log"
}

# lmpersistab: the workload part of lmpersist alone
section_lmpersistab() {
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS tp_lmp on1:129 off1:0 on2:129 off2:0
}

# lmsmall: the greedy LM head's persistent 64-row TMA tiles at 17-128 rows (session 27): the
#   engine's pick one program a tile vs walked (--persistent pick), the sweep against
#   the old table (STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS=0) at rows between the
#   sweep's, then the workload on / off (17 / 0) alternating after a warm-up
section_lmsmall() {
  run lmsmall_pick 120 python benchmarks/gpu/bench_lm_head_argmax.py --persistent pick \
    --rows 1 16 24 32 48 64 80 96 112 128 --json "$OUT/lmsmall_pick.json"
  grep -E "^M=" "$OUT/lmsmall_pick.log"
  STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS=0 run lmsmall_sweep 200 \
    python benchmarks/gpu/bench_lm_head_argmax.py --persistent sweep --rows 8 16 24 48 80 112 \
    --json "$OUT/lmsmall_sweep.json"
  grep -E "^M=" "$OUT/lmsmall_sweep.log"
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS tp_lms on1:17 off1:0 on2:17 off2:0
}
