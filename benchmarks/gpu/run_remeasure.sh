#!/usr/bin/env bash
# Re-measure after the session-3 changes (mixed-step graphs, fused q/k norm + rotary, fused
# MoE routing, gated RMSNorm kernel, bf16 logits to the sampler, fused K/V write, longest-
# first decode order, one-program MoE alignment), in three device calls (each < 10 min):
#   bash benchmarks/gpu/run_remeasure.sh checks          (~6-9 min)
#   bash benchmarks/gpu/run_remeasure.sh qwen            (~5 min)
#   bash benchmarks/gpu/run_remeasure.sh nano gemm       (~5 min)
# Sections:
#   checks  the new kernels against torch at real shapes (check_glue_kernels.py); tiny Qwen3 /
#           Llama on CUDA against HF with mixed-step graph replays, and Qwen3-0.6B batch-1
#           latency eager vs graphs (check_e2e.py); host syncs per step (check_syncs.py)
#   qwen    the standard workload twice (the first warms Triton's cache), traced; then the
#           online benchmark (500 x 512/128, burst)
#   nano    Nemotron 3 Nano batch-1 latency (target 4 ms) and the standard workload
#   sepv    qk_norm_rope's v cache write in a third program: glue check, workload A/B, e2e
#   variants the standard workload with STRIXLM_VARIANT_WATCH=1: the kernel variants that
#           start-up missed (each one stalls a step while Triton builds it)
#   ncu     Nsight Compute counters for one decode step at 256 / 128 / 48 rows (NCU_SHAPES):
#           DRAM / L2 / SM / tensor-pipe throughput per kernel (ncu_decode_step.py)
#   prof    profile_step.py kernel tables at batch-256 decode and budget-sized prefill steps
#   profrun the standard workload's GPU time by kernel kind over the whole run (profile_run.py)
#   profsteps  profrun plus the idle gaps of steps 100 / 400 / 700 / 950 with their neighbours
#   readbw  copy vs streaming-read bandwidth (bench_read_bw.py)
#   tunable TunableOp-tuned cuBLASLt GEMMs vs the default pick (bench_decode_gemm --tunableop)
#   persist decode attention, unified vs persistent grid (sweep_decode_attn --persistent)
#   splitpersist small decode batches: unified (split) vs the persistent grid with segments
#           (sweep_decode_attn --split-persistent), attention vs torch, then the workload
#           with the new thresholds on / off (persistent from 1.25 sequences per program
#           and two segments from 0.6, vs session 5's 1.75 and no split), alternating
#   abpersist the workload with STRIXLM_ATTN_PERSISTENT=1 / 0, alternating, twice each
#   e2e     greedy tokens vs HF on CUDA (check_e2e.py) only
#   gcab    the workload with the start-up heap frozen during generate (STRIXLM_GC_FREEZE=1,
#           the default) / not, alternating, each traced: host-bound steps and GC pauses
#   fusedqk the q/k norm + rotary + K/V write inside the persistent decode kernel: kernel A/B
#           and equality (bench_fused_qk), greedy tokens vs HF with the persistent grid
#           forced at every batch, then the workload with STRIXLM_ATTN_FUSE_QK=1 / 0
#   final   session 7's closing figures (workload with split-K capped at 128 / 192, syncs,
#           batch-1 step time, online serving)
#   timeline  the persistent decode kernel's program timeline (bench_decode_timeline.py)
#   dynamic the persistent grid handing its shortest sequences out dynamically: timeline at
#           shares 0 / 0.25 / 0.4, greedy tokens vs HF with the grid forced at every batch,
#           the workload with STRIXLM_ATTN_DYNAMIC_FRAC=0.25 / 0
#   dynfrac split grids hand out their shortest sequences' segments too: timelines at shares
#           0.25 / 0.6 / 1.0 (b64 and b48 take the split grid), attention vs torch, then the
#           workload with STRIXLM_ATTN_DYNAMIC_FRAC=0.6 / 0.25, alternating, twice each
#   silufuse the down projection computing silu_and_mul as it loads (the GEMV, M <= 8; the
#           first try also fused it into split-K at 8 < M <= 128, 2.7% slower): greedy
#           tokens vs HF, then the workload with STRIXLM_FUSE_SILU_DOWN=1 / 0, alternating
#   slowsteps  cProfile of the workload's slowest host steps (profile_slow_steps.py)
#   tilecost  partly filled last KV tiles vs full ones (sweep_decode_attn --tile-cost)
#   serve   the online benchmark only (500 x 512/128, burst)
#   pdl     programmatic dependent launch for the step's Triton kernels (session 5's, now
#           with split-K and the persistent grid's deal before its wait): greedy tokens vs
#           HF, then the workload with STRIXLM_DISABLE_PDL=0 / 1, alternating
#   trace   the workload once traced (warm Triton cache assumed): host vs GPU per step kind
#   quickchecks  glue kernels vs torch (and qk_norm_rope's replay time), greedy tokens vs
#           HF on CUDA, host syncs per step at batch 256 and 64 (checks without MoE / order
#           A/B)
#   topp    check_sampler with STRIXLM_SAMPLER_TOPP_REJECTION=1 (it also times the radix path)
#   splitk  split-K GEMM with its reduction in the next add + RMSNorm vs cuBLAS (bench_splitk_norm)
#   splitkab the workload with the engine's split-K o_proj / down (8 < M <= 128, reduced in
#           the next add + RMSNorm) on / off: STRIXLM_SPLITK_MAX_ROWS=128 / 0, alternating,
#           twice each, after a warm-up run
#   fp8pairs check_attention with the fp8 byte-pair read (default) and without
#           (STRIXLM_ATTN_FP8_PAIRS=0), then fp8 throughput both ways
#   fp8grids the fp8 decode grids (programs per SM, register cap) over the split and unsplit
#           batches (bench_fp8_decode --grids), then the workload with bf16 and fp8 KV
#   fp8rule check_attention --quick and the fp8 decode path against bf16 with fp8_grid's
#           rule, then the fp8 workload with the rule (STRIXLM_ATTN_FP8_GRID_MIN=1.3) / the
#           six-program grid at every persistent launch (0), alternating
#   fp8split check_attention --quick, the fp8 grids again (with the engine's own choice), then
#           the fp8 workload with batches split in two below 1.8 sequences a six-grid
#           program (STRIXLM_ATTN_FP8_SPLIT_BELOW=1.8) / never (0), alternating
#   fp8mixed mixed steps' attention as one launch vs decodes + prompts in two, over bf16 and
#           fp8 (bench_fp8_decode --split-mixed)
#   fp8fresh check_attention --quick (fp8 prompts and chunks read their own K / V unquantized),
#           the fp8 workload with STRIXLM_ATTN_FP8_FRESH=1 / 0, alternating
#   fp8serve online serving with fp8 KV, then with bf16 KV, one fresh server each
#   bf16mma the Gluon decode kernel over a bf16 cache (probe_fp8_mma.py --bf16) against the
#           Triton bf16 path, 1-16 segments at b1-b256: a bf16 lever only if it wins
#   clampids block ids of masked KV tiles loaded unmasked, index clamped (STRIXLM_ATTN_CLAMP_IDS;
#           default since session 40; bf16 and fp8 Triton kernels): check_attention --quick, then
#           the bf16 workload on / off alternating after a warm-up
#   fp8mixsplit mixed steps over fp8 split on the device (STRIXLM_ATTN_FP8_MIXED_SPLIT;
#           default since session 40): bench_fp8_decode --split-mixed (and in-graph), the fp8
#           workload with it on / off alternating, then an fp8 server with it on and one off
#   leanloop the persistent loop's q loaded once an item, only the running max reset at item
#           ends (STRIXLM_ATTN_LEAN_LOOP, default since session 40): check_attention --quick,
#           then the bf16 workload on / off alternating after a warm-up
#   aligned tiles that start on a block boundary get each token's slot and block index as
#           loop invariants (STRIXLM_ATTN_ALIGNED_TILES, default since session 41; both
#           Triton attention kernels): check_attention --quick (its per-case times: the
#           unified kernel's decode configs too) and bench_decode_timeline's workload
#           batches with it on and off, then the bf16 workload alternating
#   blockptrs aligned tiles' K / V pointers built a block at a time (STRIXLM_ATTN_BLOCK_PTRS,
#           default since session 41): check_attention --quick, greedy tokens vs HF, then
#           the bf16 workload on / off alternating after a warm-up
#   screen  candidate grids side by side, per launch before any workload A/B:
#           bench_decode_timeline.py --workload at SCREEN_STEPS (default: steps 250-350,
#           around b203, where 64-token tiles at three an SM ran 173.0 vs 174.7 us in
#           session 42) under each of SCREEN_CONFIGS (label=VAR=VALUE,VAR=VALUE; the
#           default first and last, for drift), summed per config
#   tail64  the unified kernel's small-batch tail (sweep_decode_attn.py --tail, b93-b6)
#           with 32-token (default) and 64-token decode tiles (STRIXLM_ATTN_DECODE_TILE;
#           the persistent grid, where the tail takes it, at three programs an SM)
#   midgrid the mid-batch grid (paged_decode.mid_grid: 64-token tiles, three programs an SM,
#           unsplit, at 1.0-1.45 sequences a default-grid program; STRIXLM_ATTN_MID_GRID,
#           default since session 42): bench_decode_timeline.py at the workload's steps
#           650-900 with it on / off, then the bf16 workload on / off alternating after a
#           warm-up (three pairs)
#   tile64  64-token decode tiles (STRIXLM_ATTN_DECODE_TILE=64) at 3 stages, which take
#           72 KB of shared memory a persistent program, so three programs an SM
#           (STRIXLM_ATTN_PERSISTENT_CTAS=3): check_attention --quick, then the bf16
#           workload against the default alternating. sm90 SASS: 740 instructions a
#           64-token tile (11.6 a token) against 480 a 32-token tile (15.0), with 96 KB of
#           K / V in flight an SM against 64 KB
#   ctas5   five persistent programs an SM (STRIXLM_ATTN_PERSISTENT_CTAS=5) against four:
#           at 180 registers (session 41) five fit one wave by registers (5 x 64 x 184 of
#           65,536) and shared memory (5 x 37.9 KB); in session 29, five spilled into a
#           second wave and ran 28% slower
#   warp1   one-warp decode programs (STRIXLM_ATTN_DECODE_WARPS=1), six persistent programs
#           an SM (STRIXLM_ATTN_PERSISTENT_CTAS=6; shared memory allows six, registers
#           eight): check_attention --quick, then the workload against the default
#           alternating. sm90 SASS of a 32-token persistent tile: 684 warp-instructions and
#           2 barriers against 2 x 480 and 9; 255 registers, no spill
#   fp8mma  fp8 decode attention on the Gluon kernel (paged_decode_fp8): probe_fp8_mma.py's
#           segment sweep, check_attention --quick, then the fp8 workload with it on / off
#           (STRIXLM_ATTN_FP8_MMA=1 / 0), alternating
#   fp8     check_attention --quick (fp8 cache bytes vs torch) and the workload with fp8 KV
#   inductor  torch.compile max-autotune GEMMs at M=256 vs cuBLAS (bench_decode_gemm --inductor)
#   gemm    decode GEMMs at batch 64-256: cuBLAS vs weight layout vs split-K Triton, and
#           the roofline (bench_decode_gemm.py; an experiment for issue 3's next lever)
#   sgraph  decode steps sampled in CUDA graphs (sample_graphs.py): tokens vs the eager
#           sampler, greedy vs HF, then batch-1 / batch-32 step time with the graphs on / off
#           (STRIXLM_DISABLE_SAMPLE_GRAPHS), alternating, and the workload traced
#   sgraphab the workload with the sampling graphs on / off, alternating, after a warm-up
#   dense     our Triton GEMM at the shapes where it beat cuBLAS (splitk_linear.plan_dense):
#           greedy tokens vs HF, then the workload on / off (STRIXLM_DENSE_GEMM), alternating
#   gemvrows  the tile GEMMs from 2 rows (STRIXLM_GEMV_MAX_ROWS=1, the default): greedy tokens
#           vs HF, batch 1 with the GEMV (1) / the tile kernel (0), then the workload against
#           session 10's dispatch (GEMV to 8 rows, cuBLAS elsewhere), alternating
#   fusedsilu gate_up with SiLU-and-mul in its epilogue (kernels/gate_up_silu.py): greedy tokens
#           vs HF, then the workload on / off (STRIXLM_FUSE_GATE_UP_SILU), alternating
#   decodepaths  the decode-path variants at the Qwen3-0.6B shape in bf16: greedy tokens and
#           logprobs against session 10's dispatch (check_decode_paths.py)
#   tmagemm a Triton GEMM with TMA tile loads (and warp specialization) against cuBLAS at the
#           decode GEMMs of 128-256 rows (sweep_tma_gemm.py)
#   tmaab   greedy tokens / logprobs of the decode paths (check_decode_paths.py), then the
#           workload with the TMA GEMM on / off (STRIXLM_TMA_GEMM), alternating, after a warm-up
#   tmasweep  the TMA GEMM at finer row counts (qkv 136-256, gate_up 72-160) against cuBLAS
#           and the engine's dispatch
#   blocksize the workload with 16 / 64-token KV blocks (--block-size), alternating
#   block32 the workload with 16 / 32-token KV blocks, alternating, three pairs
#   lmheadtma the same sweep at 96-256 rows with the TMA-loading configs (not yet run)
#   lmheadsample the temperature tail against the LM head with a Gumbel-max epilogue
#           (bench_lm_head_argmax.py --sample; STRIXLM_FUSED_SAMPLE is opt-in until measured)
#   fusedcheck greedy tokens of the fused LM head argmax vs the unfused tail (check_decode_paths)
#   lmtmaab the workload with the fused LM head's TMA table on / off (STRIXLM_LM_HEAD_TMA),
#           alternating, three pairs
#   sampleab the workload sampled at temperature 1 (seeded), the temperature graphs sampling
#           in the LM head's epilogue (the default) / not (STRIXLM_FUSED_SAMPLE=0), alternating
#   sampleab2 the same with two pairs (after a warm-up)
#   mixedattn the admission steps' attention: one launch vs prefill + decode rows apart
#           (bench_mixed_attn.py)
#   budgetab the workload at --max-num-batched-tokens 16384 / 8192, alternating
#   budgetab2 the same at 6144 / 4096 / 8192, after a warm-up
#   prepab  greedy tokens vs HF on CUDA (check_e2e.py), then the decode steps' num_computed
#           update inside the input-prep kernel / as eager ops
#           (STRIXLM_PREP_ADVANCE_IN_KERNEL=1 / 0), alternating
#   headfused decode attention reading whole KV blocks (all kv heads) per tile, against the
#           engine's kernel (bench_headfused_decode.py; ~3 min), and the engine's kernel with
#           128-token tiles and 4 warps
#   gateupab the prefill gate_up + SiLU epilogue alone: the decode paths' tokens
#           (check_decode_paths, defaults vs the reference with it off), then the workload
#           with it on / off (STRIXLM_PREFILL_GATE_UP_SILU_ROWS=2048 / 0), alternating
#   prefillgemm gate_up with SiLU in a TMA epilogue vs cuBLAS + silu_and_mul at prefill rows
#           (sweep_prefill_gemm.py; session 27 timed each config as a persistent walk too:
#           slower, 170.8 -> 220.3 us at 8192 rows for the engine's config, removed)
#   fusedab the workload with the fused greedy tail on / off, alternating, three pairs
#   lmhead  the greedy tail (LM head + greedy sampling graph) against the LM head with an
#           argmax epilogue (bench_lm_head_argmax.py): config sweep and token check per M
#   tailab  the small-batch tail's split heuristic (session 18's profile: attention below ~90
#           sequences at 1.9-3.9 TB/s): sweep_decode_attn.py --tail at the run's tail shapes
#           per knob setting, then the workload alternating STRIXLM_ATTN_SPLIT_CTAS /
#           STRIXLM_ATTN_PERSISTENT_SPLIT_MIN at 2 / 0.6 (default), 4 / 0.6 and 4 / 0.9, twice
#           (run in session 18: default kept)
#   tailsweep  the sweep alone (~1 min), which also times the unified kernel at 1 / 2 / 4 / 8
#           segments per tail shape: the data for a per-batch segment table
#   boundaryab the decode step's boundary as one input-prep launch (block writes, the block-table
#           gather and a read of the host's arrays from pinned memory in the kernel; the token
#           copy to the host on a side stream): the kernel vs torch at real shapes
#           (check_input_prep.py; host reads turned off for the rest if they fail), greedy
#           tokens vs HF, host syncs, then the workload alternating against the snapshot in
#           $BASE (the code before), and with STRIXLM_PREP_HOST_READ=0 / STRIXLM_SIDE_COPY=0
#   baseab  the workload alternating between this snapshot and the one in $BASE (another commit),
#           three pairs after a warm-up of each: for changes without a switch
#   dataflow the MLP as one persistent launch with tile-level dataflow (gate_up + SiLU tiles
#           release per-slice counters that down tiles wait on) against the engine's MLP
#           chain, per layer at 64-256 rows (bench_dataflow_mlp.py): a feasibility probe
#   dataflow2 the best three configs with the counters' sync variants (own cache lines,
#           volatile-load spins, programs capped so down tasks come second, no waits at all)
#   syncs   host syncs per decode step at batch 256 (check_syncs.py)
#   earlyab RMSNorm's weight and the q/k norm + rotary's positions, cos / sin rows, weights and
#           cache slots loaded before the PDL wait (STRIXLM_PDL_EARLY_LOADS): greedy tokens vs
#           HF, the workload on / off alternating (three pairs), batch-1 / 32 step times
#   earlygemm the decode GEMMs as a Gluon TMA kernel whose first weight tiles are requested
#           before the PDL wait, against the same kernel with every load after it and the
#           engine's dispatch, 28 x [PDL producer -> GEMM] (bench_early_weight_gemm.py)
#   earlyres RMSNorm's residual row loaded before the PDL wait too (STRIXLM_PDL_EARLY_RESIDUAL,
#           on by default since session 22): greedy tokens vs HF with it on, then the
#           workload on / off alternating
#   fuseqkab the q/k norm + rotary + K/V write inside the persistent decode kernel
#           (STRIXLM_ATTN_FUSE_QK=1): bench_fused_qk.py (values at real shapes, graph times),
#           then the workload on / off alternating (two pairs). Session 22 ran it on af97000,
#           whose prologue tables came before the PDL wait (reverted: -6.5%)
#   b1serve batch-1 / batch-32 step time and the online benchmark (closing's last two)
#   splitab the workload with the persistent decode grid split in two segments (+ the merge
#           launch) up to 1.25 (default: only below), 2.5 and 100 (every batch from 40)
#           sequences per program (STRIXLM_ATTN_PERSISTENT_MIN), alternating after a warm-up:
#           finer items for the dynamic hand-out against one more launch a layer
#   lmpersist the LM head's TMA tiles walked by a persistent grid from 129 rows (the default
#           since session 26) or never (STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS=129 / 0):
#           bench_lm_head_argmax.py --persistent at 96-256 rows (tokens checked, graph times),
#           then the workload on / off alternating after a warm-up (two pairs). Session 26
#           measured it at every TMA row count (96 up), as an opt-in switch of that time
#   lmpersistab the workload part of lmpersist alone
#   lmsweep the LM head's tile configs walked by a persistent grid of one or two programs an
#           SM, at 16-256 rows (bench_lm_head_argmax.py --persistent sweep): the data for a
#           persistent table, whether two programs an SM win back 96-128 rows, and whether
#           64-row TMA tiles walked persistently beat the pointer tiles below 96 rows
#   lmsmall the greedy LM head's persistent 64-row TMA tiles at 17-128 rows (session 27): the
#           engine's pick one program a tile vs walked (--persistent pick), the sweep against
#           the old table (STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS=0) at rows between the
#           sweep's, then the workload on / off (17 / 0) alternating after a warm-up
#   ahead   the persistent decode kernel with its block ids a tile ahead, so K / V multi-buffer
#           (STRIXLM_ATTN_BLOCKS_AHEAD=1; stages, programs per SM and tile swept):
#           bench_decode_timeline.py --workload per config; check_attention with it on (and
#           the unified kernel's STRIXLM_ATTN_UNIFIED_AHEAD=1)
#   tailahead  where session 29's +0.5% came from: sweep_decode_attn.py --tail (the tail's
#           shapes, the heuristic's pick and 1 / 2 / 4 / 8 segments) with the unified kernel's
#           block ids ahead on / off at 32- and 64-token tiles, and one-warp programs (no
#           cross-warp softmax reductions) (session 30 ran 1:32:2 and 0:32:2: the unified
#           kernel below 40 sequences is 11-28% faster a launch with the ids ahead)
#   atends  (removed after session 30 ran it) the persistent kernel finding its items where
#           one ends instead of at every tile, with 2 and 1 warps: -1.5% per launch with 2
#           warps, +0.18% on the workload, 1 warp slower. It is now what BLOCKS_AHEAD does;
#           the per-tile lookup with the ids ahead and its switch are gone
#   persistmin  where the persistent grid stops splitting sequences in two, now that K / V are
#           double-buffered (session 29 saw the unsplit grid at 3 programs an SM beat the split
#           one at b71): bench_decode_timeline.py --workload at steps 700-850 (b98-b55) with
#           STRIXLM_ATTN_PERSISTENT_MIN 1.25 (default) / 1.0 / 0.8 (session 30: unsplit wins
#           at b71, loses at b55; 1.05 on the workload even with 1.25, which stays)
#   readpattern  the paged KV access pattern against a plain streaming read, one difference at
#           a time: block order, one head's rows or whole blocks, K and V, pool size
#           (bench_read_pattern.py; session 30: 4.32-4.39 TB/s attention-like, 4.44-4.51 whole
#           blocks, pool size no effect). Since then it also reads two / four heads' rows a
#           program and launches the heads side by side (session 31: attention-like 4.38-4.47
#           one head, 4.47-4.53 two heads; side by side no change)
#   aheadab the workload with AHEAD_ENV="VAR=VALUE ..." against the default, alternating after
#           a warm-up of each (two pairs)
#   headgroup  decode attention with 1 / 2 / 4 / 8 kv heads a program, block ids a tile ahead
#           (bench_headgroup_decode.py: a probe kernel against the engine's on the same caches;
#           does a program reading 512 B / 1 KB runs stream faster?), --quick (session 31:
#           two heads x1.023 / x1.048 against one in the probe's loop, still behind the engine
#           at b256 over 100-2000 tokens)
#   split29ab  the unified kernel's split target at 2.9 programs an SM against 2 (the
#           default): session 30's tail sweep put 2.9's pick best at every tail shape (b33-b39
#           x1.11 a launch), one workload pair did not show it; a warm-up of each, then four
#           alternating pairs (STRIXLM_ATTN_SPLIT_CTAS; session 31: 28,130.1 vs 28,134.3 on
#           average, no difference, 2 stays)
#   groupab (removed after session 31 ran it) two kv heads a program inside the persistent
#           kernel (STRIXLM_ATTN_HEAD_GROUP, code in 7c31484, reverted): slower per launch
#           at every workload batch in five configs (b256: 167.2 us one head, 168.4-191.9
#           two) and the workload 26,935-26,980 vs 27,771-27,810 tok/s
#   headmajor  the engine's decode attention on the same cache stored head-major within each
#           block (4 KB runs a head, not 256 B rows; a strided view, sweep_decode_attn.py
#           --quick). Session 32 (double-buffered kernels): even with longest-first token-major
#           at every shape (b256 259.6 vs 260.8 us, b128 147.1 vs 146.7, b64 91.6 vs 91.9), and
#           the workload with the engine's head-major caches even with the default (28,172 /
#           28,122 vs 28,187 / 28,136 tok/s), so the engine's opt-in layout was removed
#   closing the final code's figures in one call: greedy tokens vs HF (check_e2e.py), the
#           workload three times after a warm-up, batch-1 / batch-32 step time, online serving
# Needs the serving wheels in .whl/ for `qwen` (see run_issue3.sh).
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
  # the workload with them / without, alternating, three pairs
  local prefix=$1 settings=$2 i
  (export $settings; run "attn_check_$prefix" 150 python benchmarks/gpu/check_attention.py --quick)
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
if has checks; then
  run glue 90 python benchmarks/gpu/check_glue_kernels.py
  run moe 150 python benchmarks/gpu/check_moe.py  # decode sizes take the one-program align
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run syncs 120 python benchmarks/gpu/check_syncs.py  # the ramp's mixed steps now replay graphs
  run attn_order 90 python benchmarks/gpu/sweep_decode_attn.py --quick  # longest-first A/B
fi
if has qwen; then
  run tp_warm 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_warm.json"
  STRIXLM_STEP_TRACE=/tmp/trace.csv run tp 100 $TP --model qwen3-0.6b --output-json "$OUT/tp.json"
  python benchmarks/gpu/summarize_trace.py /tmp/trace.csv | head -16
  STRIXLM_DISABLE_MIXED_GRAPHS=1 run tp_nomixed 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_nomixed.json"  # A/B: mixed steps eager
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
fi
if has nano; then
  run nano_latency 150 python benchmarks/gpu/bench_nemotron.py --sections latency
  run nano_tp 130 $TP --model nemotron-3-nano-30b-a3b --output-json "$OUT/nano_tp.json"
fi
if has prof; then  # kernel tables: decode at batch 256, and budget-sized prefill steps
  run prof_decode 110 python benchmarks/gpu/profile_step.py --batch 256 --steps 20
  run prof_prefill 110 python benchmarks/gpu/profile_step.py --prefill --steps 6
fi
if has sampler; then  # the all-greedy argmax loop (per-lane best) at real shapes, timed
  run sampler 150 python benchmarks/gpu/check_sampler.py
fi
if has topp; then  # top-p by rejection vs the radix passes: tokens vs torch, both timed
  STRIXLM_SAMPLER_TOPP_REJECTION=1 run sampler_topp 200 python benchmarks/gpu/check_sampler.py
fi
if has tp; then  # the standard workload: warm-up run, then the figure
  run tp_warm 100 $TP --model qwen3-0.6b
  run tp 100 $TP --model qwen3-0.6b --output-json "$OUT/tp.json"
fi
if has prof1; then
  run prof_b1 110 python benchmarks/gpu/profile_step.py --batch 1 --steps 50
fi
if has e2e; then
  run e2e 240 python benchmarks/gpu/check_e2e.py
fi
if has gcab; then
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in on1:1 off1:0 on2:1 off2:0; do
    STRIXLM_GC_FREEZE=${v#*:} STRIXLM_STEP_TRACE=/tmp/trace_${v%%:*}.csv \
      run tp_gc_${v%%:*} 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_gc_${v%%:*}.json"
    python benchmarks/gpu/summarize_trace.py /tmp/trace_${v%%:*}.csv | tail -11
  done
  grep "strixlm  " "$OUT"/tp_gc_*.log
fi
if has fusedqk; then  # q/k norm + rotary + K/V write inside the persistent decode kernel
  STRIXLM_ATTN_FUSE_QK=1 run fusedqk_bench 200 python benchmarks/gpu/bench_fused_qk.py --json "$OUT/fused_qk.json"
  # Persistent grid at every decode batch, so the tiny Qwen3 takes the fused path vs HF.
  STRIXLM_ATTN_FUSE_QK=1 STRIXLM_ATTN_PERSISTENT_MIN=0 run e2e_fused 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_FUSE_QK tp_fuse on1:1 off1:0 on2:1 off2:0
fi
if has final; then  # session 7's closing figures: workload (split-K cap 128, and 192 as an A/B),
  # host syncs at batch 256 and 64, batch-1 step time, online serving
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_SPLITK_MAX_ROWS tp_final a1:128 b1:192 a2:128 b2:192
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
  run syncs64 120 python benchmarks/gpu/check_syncs.py --num-requests 64
  timeout 150 python benchmarks/gpu/profile_step.py --batch 1 --steps 50 2>&1 | grep "#####"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
fi
if has timeline; then  # per-program start/end of 28 back-to-back persistent launches
  run timeline 200 python benchmarks/gpu/bench_decode_timeline.py --json "$OUT/timeline.json"
fi
if has dynamic; then  # the shortest sequences handed out dynamically in the persistent grid
  run timeline_dyn 150 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0 deal:0.25 deal:0.4 --json "$OUT/timeline_dynamic.json"
  # Persistent grid at every decode batch: the tiny models' batches take the dynamic path.
  STRIXLM_ATTN_PERSISTENT_MIN=0 run e2e_dyn 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_DYNAMIC_FRAC tp_dyn on1:0.25 off1:0 on2:0.25 off2:0
fi
if has dynfrac; then
  run timeline_frac 200 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0.25 deal:0.6 deal:1.0 --json "$OUT/timeline_frac.json"
  run attn 150 python benchmarks/gpu/check_attention.py --quick
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_DYNAMIC_FRAC tp_frac a1:0.6 b1:0.25 a2:0.6 b2:0.25
fi
if has silufuse; then
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSE_SILU_DOWN tp_silu on1:1 off1:0 on2:1 off2:0
fi
if has slowsteps; then
  run slowsteps 150 python benchmarks/gpu/profile_slow_steps.py
fi
if has tilecost; then
  run tilecost 100 python benchmarks/gpu/sweep_decode_attn.py --tile-cost --json "$OUT/tile_cost.json"
fi
if has pdl; then
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DISABLE_PDL tp_pdl on1:0 off1:1 on2:0 off2:1
fi
if has trace; then
  STRIXLM_STEP_TRACE=/tmp/trace.csv run tp_traced 100 $TP --model qwen3-0.6b \
    --output-json "$OUT/tp_traced.json"
  python benchmarks/gpu/summarize_trace.py /tmp/trace.csv | tee "$OUT/trace_summary.txt" | head -40
  cp /tmp/trace.csv "$OUT/trace.csv"  # per step: schedule / launch / wait / update
fi
if has serve; then
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
fi
if has quickchecks; then
  run glue 90 python benchmarks/gpu/check_glue_kernels.py
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
  run syncs64 120 python benchmarks/gpu/check_syncs.py --num-requests 64  # 2-segment split
fi
if has overlap; then  # two half-batches on two streams vs one batch (layer skeleton)
  run overlap 150 python benchmarks/gpu/bench_overlap.py --json "$OUT/overlap.json"
fi
if has nanowarm; then  # the first run fills Triton's cache, the second is the figure
  run nano_tp_cold 130 $TP --model nemotron-3-nano-30b-a3b
  run nano_tp_warm 130 $TP --model nemotron-3-nano-30b-a3b --output-json "$OUT/nano_tp_warm.json"
fi
if has profrun; then  # the whole standard workload under torch.profiler: time per kernel kind
  run profrun 300 python benchmarks/gpu/profile_run.py --json "$OUT/profile_run.json"
fi
if has profsteps; then  # the whole-run profile plus four steps' idle gaps with the ops around them
  run profsteps 300 python benchmarks/gpu/profile_run.py --json "$OUT/profile_run.json" \
    --show-steps 100,400,700,950
fi
if has readbw; then  # HBM read ceiling (what decode attention can reach) vs copy bandwidth
  run readbw 120 python benchmarks/gpu/bench_read_bw.py --json "$OUT/read_bw.json"
fi
if has tunable; then  # PyTorch TunableOp's cuBLASLt pick vs the default at the decode GEMMs
  run tunable 200 python benchmarks/gpu/bench_decode_gemm.py --tunableop --json "$OUT/gemm_tunableop.json"
fi
if has abpersist; then  # the workload with the persistent decode kernel on / off, alternating
  ab_tp STRIXLM_ATTN_PERSISTENT tp_persist on1:1 off1:0 on2:1 off2:0
fi
if has fp8pairs; then  # fp8 K/V read as byte pairs (the default) vs Triton's conversion
  run attn_check_pairs 150 python benchmarks/gpu/check_attention.py --quick
  STRIXLM_ATTN_FP8_PAIRS=0 run attn_check_nopairs 150 python benchmarks/gpu/check_attention.py --quick
  run tp_fp8_pairs_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8_pairs 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8_pairs.json"
  STRIXLM_ATTN_FP8_PAIRS=0 run tp_fp8_nopairs 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 \
    --output-json "$OUT/tp_fp8_nopairs.json"
fi
if has fp8grids; then  # which fp8 grid each decode batch should take
  run fp8_grids 300 python benchmarks/gpu/bench_fp8_decode.py --grids --json "$OUT/fp8_grids.json"
  run tp_warm 100 $TP --model qwen3-0.6b
  run tp_bf16 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_bf16.json"
  run tp_fp8_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8.json"
fi
if has fp8rule; then  # the six-program fp8 grid only where its programs get 1.3 items each
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run fp8_decode 200 python benchmarks/gpu/bench_fp8_decode.py --variants "" \
    --json "$OUT/fp8_decode.json"
  ab_fp8 STRIXLM_ATTN_FP8_GRID_MIN rule1:1.3 all1:0 rule2:1.3 all2:0
fi
if has fp8split; then  # fp8 batches split in two where a six-grid program gets < 1.8 items
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run fp8_grids 200 python benchmarks/gpu/bench_fp8_decode.py --grids --json "$OUT/fp8_grids.json"
  ab_fp8 STRIXLM_ATTN_FP8_SPLIT_BELOW split1:1.8 never1:0 split2:1.8 never2:0
fi
if has fp8mixed; then  # would routing a mixed step's decodes to the decode path pay?
  run fp8_mixed 200 python benchmarks/gpu/bench_fp8_decode.py --split-mixed \
    --json "$OUT/fp8_mixed.json"
fi
if has fp8fresh; then  # a step's own K / V read unquantized over fp8 caches (fresh_rows)
  run fp8_fresh 150 python benchmarks/gpu/bench_fp8_decode.py --fresh --json "$OUT/fp8_fresh.json"
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  ab_fp8 STRIXLM_ATTN_FP8_FRESH fresh1:1 cache1:0 fresh2:1 cache2:0
fi
if has fp8mma; then  # fp8 decode attention with explicit register layouts (Gluon)
  run fp8_mma 300 python benchmarks/gpu/probe_fp8_mma.py --json "$OUT/fp8_mma.json"
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  ab_fp8 STRIXLM_ATTN_FP8_MMA mma1:1 triton1:0 mma2:1 triton2:0
fi
if has bf16mma; then  # explicit register layouts without the fp8 conversion
  run bf16_mma 300 python benchmarks/gpu/probe_fp8_mma.py --bf16 --json "$OUT/bf16_mma.json"
fi
if has clampids; then  # the Gluon kernel's masked-id finding, tried on the Triton kernels
  (export STRIXLM_ATTN_CLAMP_IDS=1; run attn_check_clamp 150 python benchmarks/gpu/check_attention.py --quick)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_CLAMP_IDS tp_clamp on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has fp8mixsplit; then  # a mixed step's decodes on the Gluon kernel, on the device
  run fp8_mixed 200 python benchmarks/gpu/bench_fp8_decode.py --split-mixed \
    --json "$OUT/fp8_mixed.json"
  ab_fp8 STRIXLM_ATTN_FP8_MIXED_SPLIT split1:1 one1:0 split2:1 one2:0
  STRIXLM_ATTN_FP8_MIXED_SPLIT=1 SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8_split \
    bash benchmarks/gpu/run_issue3.sh serve
  SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8 bash benchmarks/gpu/run_issue3.sh serve
fi
if has leanloop; then  # the persistent loop's q per item, only the running max reset
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_LEAN_LOOP tp_lean on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has aligned; then  # tiles on block boundaries: slot / block index hoisted out of the loops
  run attn_check_aligned 150 python benchmarks/gpu/check_attention.py --quick
  run aligned_timeline_on 200 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0.6 --workload 60 200 400 600 --json "$OUT/aligned_on.json"
  (export STRIXLM_ATTN_ALIGNED_TILES=0
   run attn_check_unaligned 150 python benchmarks/gpu/check_attention.py --quick
   run aligned_timeline_off 200 python benchmarks/gpu/bench_decode_timeline.py \
     --variants deal:0.6 --workload 60 200 400 600 --json "$OUT/aligned_off.json")
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_ALIGNED_TILES tp_aligned on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has blockptrs; then  # aligned tiles' K / V pointers built per block (STRIXLM_ATTN_BLOCK_PTRS)
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_BLOCK_PTRS tp_bp on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has screen; then  # candidate grids per launch (the persistent decode kernel)
  C=STRIXLM_ATTN_PERSISTENT_CTAS T=STRIXLM_ATTN_DECODE_TILE
  for cfg in ${SCREEN_CONFIGS:-default= tile64c3=$T=64,$C=3 default2=}; do
    label=${cfg%%=*} settings=${cfg#*=}
    (for kv in ${settings//,/ }; do export "$kv"; done
     run "screen_$label" 90 python benchmarks/gpu/bench_decode_timeline.py \
       --workload ${SCREEN_STEPS:-250 275 300 325 350} --variants deal:0.6 --json "$OUT/screen_$label.json")
  done
  python - "$OUT" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/screen_*.json")):
    us = [round(r["us_per_launch"], 1) for r in json.load(open(p))]
    print(f"{p.rsplit('/', 1)[1][7:-5]:>12}: {sum(us):7.1f} us over the batches {us}")
PY
fi
if has tail64; then  # the tail's split heuristic at 32- and 64-token decode tiles
  for t in 32:4 64:3; do  # TILE:persistent programs an SM (a 64-token program takes 72 KB)
    STRIXLM_ATTN_DECODE_TILE=${t%:*} STRIXLM_ATTN_PERSISTENT_CTAS=${t#*:} run "tail_tile${t%:*}" 150 \
      python benchmarks/gpu/sweep_decode_attn.py --tail --budget-s 130 --json "$OUT/tail_tile${t%:*}.json"
  done
fi
if has midgrid; then  # the mid-batch grid on / off: per launch, then the workload
  for v in 1 0; do
    STRIXLM_ATTN_MID_GRID=$v run "midgrid_timeline$v" 90 \
      python benchmarks/gpu/bench_decode_timeline.py --workload 650 675 700 725 750 775 800 \
      825 850 --variants deal:0.6 --json "$OUT/midgrid_timeline$v.json"
    grep -E "us/launch" "$OUT/midgrid_timeline$v.log" | cut -c1-80
  done
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_MID_GRID tp_mid on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has tile64; then  # 64-token decode tiles at 3 stages, three programs an SM (env only)
  ab_env tile64 "STRIXLM_ATTN_DECODE_TILE=64 STRIXLM_ATTN_PERSISTENT_CTAS=3"
fi
if has ctas5; then  # five persistent programs an SM, which registers now allow (env only)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_PERSISTENT_CTAS tp_ctas five1:5 four1:4 five2:5 four2:4 five3:5 four3:4
fi
if has warp1; then  # one-warp decode programs, six persistent programs an SM (env only)
  ab_env warp1 "STRIXLM_ATTN_DECODE_WARPS=1 STRIXLM_ATTN_PERSISTENT_CTAS=6"
fi
if has fp8serve; then  # the server with fp8 KV beside bf16 KV on the same machine
  SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8 bash benchmarks/gpu/run_issue3.sh serve
  bash benchmarks/gpu/run_issue3.sh serve
fi
if has persist; then  # decode attention: unified vs persistent grid (bit-equal outputs)
  run persist 300 python benchmarks/gpu/sweep_decode_attn.py --persistent --json "$OUT/persistent.json"
fi
if has splitpersist; then
  run split_sweep 200 python benchmarks/gpu/sweep_decode_attn.py --split-persistent \
    --json "$OUT/split_persistent.json"
  run split_attn_check 150 python benchmarks/gpu/check_attention.py --quick
  for v in on1:1.25:0.6 off1:1.75:0 on2:1.25:0.6 off2:1.75:0; do
    IFS=: read -r tag pmin smin <<<"$v"
    STRIXLM_ATTN_PERSISTENT_MIN=$pmin STRIXLM_ATTN_PERSISTENT_SPLIT_MIN=$smin \
      run tp_split_$tag 100 $TP --model qwen3-0.6b
  done
  grep "strixlm  " "$OUT"/tp_split_*.log
fi
if has splitk; then  # split-K o_proj/down GEMM + the reducing add/RMSNorm vs cuBLAS + norm
  run splitk 200 python benchmarks/gpu/bench_splitk_norm.py --json "$OUT/splitk_norm.json"
fi
if has splitkab; then  # the workload with split-K o_proj / down on / off, alternating
  run tp_warm 100 $TP --model qwen3-0.6b  # fills Triton's cache (split-K kernels included)
  ab_tp STRIXLM_SPLITK_MAX_ROWS tp_splitk on1:128 off1:0 on2:128 off2:0
  for v in on:128 off:0; do  # decode steps at the batch sizes split-K covers
    STRIXLM_SPLITK_MAX_ROWS=${v#*:} timeout 150 python benchmarks/gpu/profile_step.py \
      --batch 16 32 64 128 --steps 40 2>&1 | grep "#####" | sed "s/^/splitk $v /"
  done
fi
if has gemm; then
  run gemm 150 python benchmarks/gpu/bench_decode_gemm.py --json "$OUT/gemm.json"
fi
if has inductor; then  # can any Triton GEMM template beat cuBLAS at the decode shapes?
  run inductor 400 python benchmarks/gpu/bench_decode_gemm.py --inductor 256 \
    --json "$OUT/gemm_inductor.json"
fi
if has fp8; then  # fp8 KV: cache bytes equal to torch's cast (the -0.0 fix), then throughput
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run tp_fp8_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8.json"
fi
if has sgraph; then
  run sgraph_check 200 python benchmarks/gpu/check_sample_graphs.py
  run e2e 240 python benchmarks/gpu/check_e2e.py
  for v in on1:0 off1:1 on2:0 off2:1; do
    STRIXLM_DISABLE_SAMPLE_GRAPHS=${v#*:} timeout 150 python benchmarks/gpu/profile_step.py \
      --batch 1 32 --steps 100 > "$OUT/sgraph_step_${v%%:*}.log" 2>&1
    grep "#####" "$OUT/sgraph_step_${v%%:*}.log" | sed "s/^/sgraph ${v%%:*} /"
  done
fi
if has sgraphab; then
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DISABLE_SAMPLE_GRAPHS tp_sg on1:0 off1:1 on2:0 off2:1
fi
if has dense; then
  run e2e_dense 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_DENSE_GEMM tp_dense on1:1 off1:0 on2:1 off2:0
fi
if has gemvrows; then
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
fi
if has fusedsilu; then
  run e2e_fusedsilu 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSE_GATE_UP_SILU tp_fsilu on1:1 off1:0 on2:1 off2:0
fi
if has decodepaths; then
  run decode_paths 330 python benchmarks/gpu/check_decode_paths.py
fi
if has blocksize; then
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in b16_1:16 b64_1:64 b16_2:16 b64_2:64; do
    run "tp_bs_${v%%:*}" 100 $TP --model qwen3-0.6b --block-size "${v#*:}" \
      --output-json "$OUT/tp_bs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_bs_*.log
fi
if has block32; then
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in b16_1:16 b32_1:32 b16_2:16 b32_2:32 b16_3:16 b32_3:32; do
    run "tp_bs_${v%%:*}" 100 $TP --model qwen3-0.6b --block-size "${v#*:}" \
      --output-json "$OUT/tp_bs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_bs_*.log
fi
if has lmhead; then
  run lm_head 300 python benchmarks/gpu/bench_lm_head_argmax.py --json "$OUT/lm_head.json" \
    --rows 1 8 16 32 48 64 96 128 160 192 224 256
fi
if has lmheadtma; then  # the fused LM head's tiles by TMA at 96-256 rows (not yet run)
  run lm_head_tma 300 python benchmarks/gpu/bench_lm_head_argmax.py \
    --json "$OUT/lm_head_tma.json" --rows 96 128 160 192 224 256
fi
if has lmheadsample; then  # the temperature tail: sampler vs Gumbel-max epilogue (not yet run)
  run lm_head_sample 300 python benchmarks/gpu/bench_lm_head_argmax.py --sample \
    --json "$OUT/lm_head_sample.json" --rows 1 8 16 32 64 128 256
fi
if has fusedcheck; then  # greedy tokens with / without the fused LM head argmax, bf16
  CHECK_VARIANTS=defaults,tokens_fused,tokens_unfused run decode_paths 420 \
    python benchmarks/gpu/check_decode_paths.py
fi
if has fusedab; then  # the workload with STRIXLM_FUSED_GREEDY=1 / 0, alternating
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_FUSED_GREEDY tp_fg on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has lmtmaab; then  # the workload with STRIXLM_LM_HEAD_TMA=1 / 0, alternating
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_TMA tp_lt on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
  grep "strixlm  " "$OUT"/tp_lt_*.log
fi
if has sampleab; then  # sampled workload: Gumbel-max epilogue (default) vs LM head + sampler
  run tp_warm 100 $TP --model qwen3-0.6b --temperature 1.0
  for v in on1: off1:0 on2: off2:0 on3: off3:0; do
    STRIXLM_FUSED_SAMPLE=${v#*:} run "tp_fs_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --temperature 1.0 --output-json "$OUT/tp_fs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_fs_*.log
fi
if has tmagemm; then
  run sweep_tma 420 python benchmarks/gpu/sweep_tma_gemm.py --json "$OUT/sweep_tma_gemm.json"
fi
if has tmaab; then
  run decode_paths 330 python benchmarks/gpu/check_decode_paths.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_TMA_GEMM tp_tma on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has tmasweep; then
  S="python benchmarks/gpu/sweep_tma_gemm.py"
  run tma_qkv 200 $S --shapes qkv --rows 136 144 160 176 192 208 224 240 256 \
    --json "$OUT/tma_qkv.json"
  run tma_gate_up 150 $S --shapes gate_up --rows 72 96 112 128 136 160 --json "$OUT/tma_gate_up.json"
fi
if has sampleab2; then
  run tp_warm 100 $TP --model qwen3-0.6b --temperature 1.0
  for v in on1: off1:0 on2: off2:0; do
    STRIXLM_FUSED_SAMPLE=${v#*:} run "tp_fs_${v%%:*}" 100 $TP --model qwen3-0.6b \
      --temperature 1.0 --output-json "$OUT/tp_fs_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_fs_*.log
fi
if has mixedattn; then
  run mixed_attn 150 python benchmarks/gpu/bench_mixed_attn.py --json "$OUT/mixed_attn.json"
fi
if has budgetab; then
  for v in b16k1:16384 b8k1:8192 b16k2:16384 b8k2:8192; do
    run "tp_${v%%:*}" 100 $TP --model qwen3-0.6b --max-num-batched-tokens "${v#*:}" \
      --output-json "$OUT/tp_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_b*.log
fi
if has prefillgemm; then
  run prefill_gemm 200 python benchmarks/gpu/sweep_prefill_gemm.py --json "$OUT/prefill_gemm.json"
fi
if has budgetab2; then
  run tp_warm 100 $TP --model qwen3-0.6b
  for v in b6k1:6144 b4k1:4096 b8k1:8192 b6k2:6144 b4k2:4096 b8k2:8192; do
    run "tp_${v%%:*}" 100 $TP --model qwen3-0.6b --max-num-batched-tokens "${v#*:}" \
      --output-json "$OUT/tp_${v%%:*}.json"
  done
  grep "strixlm  " "$OUT"/tp_b*.log
fi
if has gateupab; then
  CHECK_VARIANTS=defaults run decode_paths 200 python benchmarks/gpu/check_decode_paths.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PREFILL_GATE_UP_SILU_ROWS tp_gu on1:2048 off1:0 on2:2048 off2:0
fi
if has prepab; then
  run e2e 240 python benchmarks/gpu/check_e2e.py  # the in-kernel update is on by default
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PREP_ADVANCE_IN_KERNEL tp_prep on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has headfused; then
  run headfused 300 python benchmarks/gpu/bench_headfused_decode.py --json "$OUT/headfused.json"
  # The engine's own kernel with twice the tokens a tile (the knobs are read at import).
  STRIXLM_ATTN_DECODE_TILE=128 STRIXLM_ATTN_DECODE_WARPS=4 STRIXLM_ATTN_PERSISTENT_CTAS=2 \
    run engine_tile128 120 \
    python benchmarks/gpu/bench_headfused_decode.py --engine-only
fi

if has tailsweep || has tailab; then
  run tail 200 python benchmarks/gpu/sweep_decode_attn.py --tail --budget-s 170 \
    --json "$OUT/tail.json"
fi
if has tailab; then
  run tp_warm 100 $TP --model qwen3-0.6b
  for r in 1 2; do
    for v in 2:0.6 4:0.6 4:0.9; do
      c=${v%%:*} m=${v#*:}
      STRIXLM_ATTN_SPLIT_CTAS=$c STRIXLM_ATTN_PERSISTENT_SPLIT_MIN=$m run "tp_c${c}_m${m}_$r" 100 \
        $TP --model qwen3-0.6b --output-json "$OUT/tp_c${c}_m${m}_$r.json"
    done
  done
  grep "strixlm  " "$OUT"/tp_c*.log
fi
if has boundaryab; then
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
fi
if has baseab; then
  ab_base 3
  grep "strixlm  " "$OUT"/tp_*.log
fi
if has dataflow; then
  run dataflow 300 python benchmarks/gpu/bench_dataflow_mlp.py --json "$OUT/dataflow.json"
fi
if has dataflow2; then  # the three best configs of `dataflow` with the counters' sync variants
  run dataflow2 300 python benchmarks/gpu/bench_dataflow_mlp.py --configs 7 2 4 --variants \
    --json "$OUT/dataflow2.json"
fi
if has syncs; then
  run syncs 120 python benchmarks/gpu/check_syncs.py --num-requests 256
fi
if has earlyab; then
  run e2e 240 python benchmarks/gpu/check_e2e.py  # early loads on (the default)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PDL_EARLY_LOADS tp_early on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
  for v in 1 0; do
    STRIXLM_PDL_EARLY_LOADS=$v run "b1_early$v" 100 python benchmarks/gpu/profile_step.py \
      --batch 1 32 --steps 50
    grep "#####" "$OUT/b1_early$v.log"
  done
fi
if has earlygemm; then  # a Gluon TMA GEMM with its weight tiles requested before the PDL wait
  run earlygemm 400 python benchmarks/gpu/bench_early_weight_gemm.py --json "$OUT/earlygemm.json"
fi
if has earlyres; then  # RMSNorm's residual row before the PDL wait as well
  run e2e 240 env STRIXLM_PDL_EARLY_RESIDUAL=1 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_PDL_EARLY_RESIDUAL tp_res on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
fi
if has fuseqkab; then  # the fused q/k prologue against the separate launch
  run fusedqk 60 python benchmarks/gpu/bench_fused_qk.py --json "$OUT/fused_qk.json"
  (export STRIXLM_ATTN_FUSE_QK=1; run tp_warm 100 $TP --model qwen3-0.6b)
  ab_tp STRIXLM_ATTN_FUSE_QK tp_fqk on1:1 off1:0 on2:1 off2:0
fi
if has sepv; then  # qk_norm_rope's v cache write in a program of its own
  run glue 150 python benchmarks/gpu/check_glue_kernels.py
  grep -E "cache write|ALL PASS|FAIL" "$OUT/glue.log"
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_QK_SEPARATE_V tp_sepv on1:1 off1:0 on2:1 off2:0
  run e2e 240 python benchmarks/gpu/check_e2e.py
  grep -E "match|exact" "$OUT/e2e.log" | head -8
fi
if has ncu; then  # hardware counters (Nsight Compute) for one decode step per batch shape
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
fi
if has variants; then  # Triton kernel variants built after start-up (variant_watch.py), each a stall
  # The first run in a fresh process after a fresh start-up; the Triton cache as this call finds it.
  (export STRIXLM_VARIANT_WATCH=1; run tp_variants 150 $TP --model qwen3-0.6b)
  late_variants "$OUT/tp_variants.log"
fi
if has b1serve; then
  run b1 100 python benchmarks/gpu/profile_step.py --batch 1 32 --steps 50
  grep "#####" "$OUT/b1.log"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
fi
if has splitab; then  # two segments per sequence at larger batches: balance vs the merge launch
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_PERSISTENT_MIN tp_split d1:1.25 m1:2.5 a1:100 d2:1.25 m2:2.5 a2:100
fi
if has lmpersist; then  # the LM head as one wave of programs walking its tiles
  run lmpersist_bench 120 python benchmarks/gpu/bench_lm_head_argmax.py --persistent \
    --rows 96 128 160 192 224 256 --json "$OUT/lmpersist_bench.json"
fi
if has lmsweep; then  # persistent tile configs, one or two programs an SM
  run lmsweep 500 python benchmarks/gpu/bench_lm_head_argmax.py --persistent sweep \
    --rows 16 32 64 96 128 160 192 224 256 --json "$OUT/lmsweep.json"
  grep -E "^M=" "$OUT/lmsweep.log"
fi
if has lmpersist || has lmpersistab; then
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_PERSISTENT_MIN_ROWS tp_lmp on1:129 off1:0 on2:129 off2:0
fi
if has lmsmall; then
  run lmsmall_pick 120 python benchmarks/gpu/bench_lm_head_argmax.py --persistent pick \
    --rows 1 16 24 32 48 64 80 96 112 128 --json "$OUT/lmsmall_pick.json"
  grep -E "^M=" "$OUT/lmsmall_pick.log"
  STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS=0 run lmsmall_sweep 200 \
    python benchmarks/gpu/bench_lm_head_argmax.py --persistent sweep --rows 8 16 24 48 80 112 \
    --json "$OUT/lmsmall_sweep.json"
  grep -E "^M=" "$OUT/lmsmall_sweep.log"
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_LM_HEAD_SMALL_PERSISTENT_MIN_ROWS tp_lms on1:17 off1:0 on2:17 off2:0
fi
if has ahead; then  # decode attention with K / V multi-buffered (block ids a tile ahead)
  # AHEAD:STAGES:CTAS_PER_SM:TILE; the first is the engine's default
  for c in 0:2:4:64 1:3:3:64 1:4:2:64 1:3:5:32 1:4:3:32 1:3:4:32 1:2:4:64; do
    IFS=: read -r a st ct tl <<< "$c"
    (export STRIXLM_ATTN_BLOCKS_AHEAD=$a STRIXLM_ATTN_PERSISTENT_STAGES=$st \
      STRIXLM_ATTN_PERSISTENT_CTAS=$ct STRIXLM_ATTN_DECODE_TILE=$tl
     run "ahead_${a}_${st}_${ct}_${tl}" 200 python benchmarks/gpu/bench_decode_timeline.py \
       --workload 150 300 450 600 700 800 --variants deal:0.6 \
       --json "$OUT/ahead_${a}_${st}_${ct}_${tl}.json")
  done
  python - "$OUT" <<'PY'
import json, sys, glob
res = {}
for p in glob.glob(sys.argv[1] + "/ahead_*.json"):
    rows = json.load(open(p))
    res[p.rsplit("/", 1)[1][6:-5]] = [round(r["us_per_launch"], 1) for r in rows]
for k, v in sorted(res.items(), key=lambda kv: sum(kv[1])):
    print(f"{k}: {sum(v):.1f} us over the shapes {v}")
PY
  # The persistent grid at every decode batch, and the unified kernel with its blocks ahead.
  (export STRIXLM_ATTN_BLOCKS_AHEAD=1 STRIXLM_ATTN_PERSISTENT_STAGES=3 \
    STRIXLM_ATTN_PERSISTENT_CTAS=3 STRIXLM_ATTN_PERSISTENT_MIN=0 STRIXLM_ATTN_UNIFIED_AHEAD=1
   run attn_check_ahead 200 python benchmarks/gpu/check_attention.py --quick)
fi
if has tailahead; then  # the tail's launches with the double-buffered K / V on and off
  for v in 1:32:2 0:32:2 1:64:2 0:64:2 1:32:1; do  # AHEAD:TILE:WARPS
    IFS=: read -r a t w <<< "$v"
    STRIXLM_ATTN_UNIFIED_AHEAD=$a STRIXLM_ATTN_DECODE_TILE=$t STRIXLM_ATTN_DECODE_WARPS=$w \
      run "tail_a${a}_t${t}_w$w" 100 python benchmarks/gpu/sweep_decode_attn.py --tail \
      --budget-s 60 --json "$OUT/tail_a${a}_t${t}_w$w.json"
  done
fi
if has persistmin; then  # the split / unsplit boundary of the persistent grid
  for m in 1.25 1.0 0.8; do
    STRIXLM_ATTN_PERSISTENT_MIN=$m run "persistmin_$m" 120 \
      python benchmarks/gpu/bench_decode_timeline.py --workload 700 750 800 850 \
      --variants deal:0.6 --json "$OUT/persistmin_$m.json"
  done
fi
if has readpattern; then  # what in the paged access holds attention under the read ceiling
  run readpattern 240 python benchmarks/gpu/bench_read_pattern.py --json "$OUT/read_pattern.json"
fi
if has aheadab; then  # the workload: $AHEAD_ENV (VAR=VALUE ...) against the default, two pairs
  run tp_warm 100 $TP --model qwen3-0.6b
  (export $AHEAD_ENV; run tp_ahead_warm 100 $TP --model qwen3-0.6b)
  for i in 1 2; do
    run "tp_base$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_base$i.json"
    (export $AHEAD_ENV; run "tp_ahead$i" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/tp_ahead$i.json")
  done
  grep "strixlm  " "$OUT"/tp_*.log
fi
if has headgroup; then  # kv heads a program: the probe kernel against the engine's
  # --quick: the two b256 shapes, 1 / 2 / 4 heads (~2 min; the full sweep is ~5-6 min)
  run headgroup 300 python benchmarks/gpu/bench_headgroup_decode.py --quick \
    --json "$OUT/headgroup.json"
fi
if has split29ab; then  # the unified kernel's split target, 2.9 vs 2 programs an SM
  for c in 2 2.9; do STRIXLM_ATTN_SPLIT_CTAS=$c run "tp_c${c}_warm" 100 $TP --model qwen3-0.6b; done
  for r in 1 2 3 4; do
    for c in 2 2.9; do
      STRIXLM_ATTN_SPLIT_CTAS=$c run "tp_c${c}_$r" 100 $TP --model qwen3-0.6b \
        --output-json "$OUT/tp_c${c}_$r.json"
    done
  done
  grep "strixlm  " "$OUT"/tp_c*.log
fi
if has headmajor; then  # head-major blocks with the double-buffered kernels
  run headmajor 150 python benchmarks/gpu/sweep_decode_attn.py --quick --budget-s 120 \
    --json "$OUT/sweep_quick.json"
  grep -E "heuristic|head-major|longest" "$OUT/headmajor.log"
fi
if has closing; then
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  for i in 1 2 3; do run "tp_$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_$i.json"; done
  grep "strixlm  " "$OUT"/tp_[0-9].log
  run b1 100 python benchmarks/gpu/profile_step.py --batch 1 32 --steps 50
  grep "#####" "$OUT/b1.log"
  bash benchmarks/gpu/run_issue3.sh serve 2>&1 | grep -v -i warn | tail -24
fi
