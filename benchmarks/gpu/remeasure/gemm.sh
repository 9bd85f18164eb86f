# shellcheck shell=bash
# run_remeasure.sh sections on the GEMMs and the MLP: cuBLAS against our Triton / Gluon kernels,
# split-K, TMA, fused activations. Sourced by run_remeasure.sh, which defines TP and the ab_*
# helpers; each section_NAME runs `run_remeasure.sh NAME`.

# silufuse: the down projection computing silu_and_mul as it loads (the GEMV, M <= 8; the
#   first try also fused it into split-K at 8 < M <= 128, 2.7% slower): greedy
#   tokens vs HF, then the workload with STRIXLM_FUSE_SILU_DOWN=1 / 0, alternating
section_silufuse() {
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSE_SILU_DOWN tp_silu on1:1 off1:0 on2:1 off2:0
}

# tunable: TunableOp-tuned cuBLASLt GEMMs vs the default pick (bench_decode_gemm --tunableop)
section_tunable() {  # PyTorch TunableOp's cuBLASLt pick vs the default at the decode GEMMs
  run tunable 200 python benchmarks/gpu/bench_decode_gemm.py --tunableop --json "$OUT/gemm_tunableop.json"
}

# splitk: split-K GEMM with its reduction in the next add + RMSNorm vs cuBLAS (bench_splitk_norm)
section_splitk() {  # split-K o_proj/down GEMM + the reducing add/RMSNorm vs cuBLAS + norm
  run splitk 200 python benchmarks/gpu/bench_splitk_norm.py --json "$OUT/splitk_norm.json"
}

# splitkab: the workload with the engine's split-K o_proj / down (8 < M <= 128, reduced in
#   the next add + RMSNorm) on / off: STRIXLM_SPLITK_MAX_ROWS=128 / 0, alternating,
#   twice each, after a warm-up run
section_splitkab() {  # the workload with split-K o_proj / down on / off, alternating
  run tp_warm 100 $TP --model qwen3-0.6b  # fills Triton's cache (split-K kernels included)
  ab_tp STRIXLM_SPLITK_MAX_ROWS tp_splitk on1:128 off1:0 on2:128 off2:0
  for v in on:128 off:0; do  # decode steps at the batch sizes split-K covers
    STRIXLM_SPLITK_MAX_ROWS=${v#*:} timeout 150 python benchmarks/gpu/profile_step.py \
      --batch 16 32 64 128 --steps 40 2>&1 | grep "#####" | sed "s/^/splitk $v /"
  done
}

# gemm: decode GEMMs at batch 64-256: cuBLAS vs weight layout vs split-K Triton, and
#   the roofline (bench_decode_gemm.py; an experiment for issue 3's next lever)
section_gemm() {
  run gemm 150 python benchmarks/gpu/bench_decode_gemm.py --json "$OUT/gemm.json"
}

# inductor: torch.compile max-autotune GEMMs at M=256 vs cuBLAS (bench_decode_gemm --inductor)
section_inductor() {  # can any Triton GEMM template beat cuBLAS at the decode shapes?
  run inductor 400 python benchmarks/gpu/bench_decode_gemm.py --inductor 256 \
    --json "$OUT/gemm_inductor.json"
}

# dense: our Triton GEMM at the shapes where it beat cuBLAS (splitk_linear.plan_dense):
#   greedy tokens vs HF, then the workload on / off (STRIXLM_DENSE_GEMM), alternating
section_dense() {
  run e2e_dense 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DENSE_GEMM tp_dense on1:1 off1:0 on2:1 off2:0
}

# gemvrows: the tile GEMMs from 2 rows (STRIXLM_GEMV_MAX_ROWS=1, the default): greedy tokens
#   vs HF, batch 1 with the GEMV (1) / the tile kernel (0), then the workload against
#   session 10's dispatch (GEMV to 8 rows, cuBLAS elsewhere), alternating
section_gemvrows() {
  run e2e_gemvrows 240 python benchmarks/gpu/check_e2e.py
  for v in 1 0; do
    STRIXLM_GEMV_MAX_ROWS=$v run "b1_gemv$v" 120 python benchmarks/gpu/profile_step.py --batch 1 \
      --steps 100
    grep "#####" "$OUT/b1_gemv$v.log" | sed "s/^/gemv rows $v: /"
  done
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in new1 old1 new2 old2; do
    if [[ $v == new* ]]; then g=1 d=1; else g=8 d=0; fi
    STRIXLM_GEMV_MAX_ROWS=$g STRIXLM_DENSE_GEMM=$d run "tp_rows_$v" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/tp_rows_$v.json"
  done
  grep "strixlm  " "$OUT"/tp_rows_*.log
}

# fusedsilu: gate_up with SiLU-and-mul in its epilogue (kernels/gate_up_silu.py): greedy tokens
#   vs HF, then the workload on / off (STRIXLM_FUSE_GATE_UP_SILU), alternating
section_fusedsilu() {
  run e2e_fusedsilu 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSE_GATE_UP_SILU tp_fsilu on1:1 off1:0 on2:1 off2:0
}

# tmagemm: a Triton GEMM with TMA tile loads (and warp specialization) against cuBLAS at the
#   decode GEMMs of 128-256 rows (sweep_tma_gemm.py)
section_tmagemm() {
  run sweep_tma 420 python benchmarks/gpu/sweep_tma_gemm.py --json "$OUT/sweep_tma_gemm.json"
}

# tmaab: greedy tokens / logprobs of the decode paths (check_decode_paths.py), then the
#   workload with the TMA GEMM on / off (STRIXLM_TMA_GEMM), alternating, after a warm-up
section_tmaab() {
  run decode_paths 330 python benchmarks/gpu/check_decode_paths.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_TMA_GEMM tp_tma on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# tmasweep: the TMA GEMM at finer row counts (qkv 136-256, gate_up 72-160) against cuBLAS
#   and the engine's dispatch
section_tmasweep() {
  S="python benchmarks/gpu/sweep_tma_gemm.py"
  run tma_qkv 200 $S --shapes qkv --rows 136 144 160 176 192 208 224 240 256 \
    --json "$OUT/tma_qkv.json"
  run tma_gate_up 150 $S --shapes gate_up --rows 72 96 112 128 136 160 --json "$OUT/tma_gate_up.json"
}

# prefillgemm: gate_up with SiLU in a TMA epilogue vs cuBLAS + silu_and_mul at prefill rows
#   (sweep_prefill_gemm.py; session 27 timed each config as a persistent walk too:
#   slower, 170.8 -> 220.3 us at 8192 rows for the engine's config, removed)
section_prefillgemm() {
  run prefill_gemm 200 python benchmarks/gpu/sweep_prefill_gemm.py --json "$OUT/prefill_gemm.json"
}

# gateupab: the prefill gate_up + SiLU epilogue alone: the decode paths' tokens
#   (check_decode_paths, defaults vs the reference with it off), then the workload
#   with it on / off (STRIXLM_PREFILL_GATE_UP_SILU_ROWS=2048 / 0), alternating
section_gateupab() {
  CHECK_VARIANTS=defaults run decode_paths 200 python benchmarks/gpu/check_decode_paths.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PREFILL_GATE_UP_SILU_ROWS tp_gu on1:2048 off1:0 on2:2048 off2:0
}

# dataflow: the MLP as one persistent launch with tile-level dataflow (gate_up + SiLU tiles
#   release per-slice counters that down tiles wait on) against the engine's MLP
#   chain, per layer at 64-256 rows (bench_dataflow_mlp.py): a feasibility probe
section_dataflow() {
  run dataflow 300 python benchmarks/gpu/bench_dataflow_mlp.py --json "$OUT/dataflow.json"
}

# dataflow2: the best three configs with the counters' sync variants (own cache lines,
#   volatile-load spins, programs capped so down tasks come second, no waits at all)
section_dataflow2() {  # the three best configs of `dataflow` with the counters' sync variants
  run dataflow2 300 python benchmarks/gpu/bench_dataflow_mlp.py --configs 7 2 4 --variants \
    --json "$OUT/dataflow2.json"
}

# earlygemm: the decode GEMMs as a Gluon TMA kernel whose first weight tiles are requested
#   before the PDL wait, against the same kernel with every load after it and the
#   engine's dispatch, 28 x [PDL producer -> GEMM] (bench_early_weight_gemm.py)
section_earlygemm() {  # a Gluon TMA GEMM with its weight tiles requested before the PDL wait
  run earlygemm 400 python benchmarks/gpu/bench_early_weight_gemm.py --json "$OUT/earlygemm.json"
}
