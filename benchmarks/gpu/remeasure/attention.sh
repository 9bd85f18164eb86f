# shellcheck shell=bash
# run_remeasure.sh sections on decode and prefill attention: grids, tiles, splits, per-launch
# sweeps and timelines, and their workload A/Bs. Sourced by run_remeasure.sh, which defines TP
# and the ab_* helpers; each section_NAME runs `run_remeasure.sh NAME`.

# fusedqk: the q/k norm + rotary + K/V write inside the persistent decode kernel: kernel A/B
#   and equality (bench_fused_qk), greedy tokens vs HF with the persistent grid
#   forced at every batch, then the workload with STRIXLM_ATTN_FUSE_QK=1 / 0
section_fusedqk() {  # q/k norm + rotary + K/V write inside the persistent decode kernel
  STRIXLM_ATTN_FUSE_QK=1 run fusedqk_bench 200 python benchmarks/gpu/bench_fused_qk.py --json "$OUT/fused_qk.json"
  # Persistent grid at every decode batch, so the tiny Qwen3 takes the fused path vs HF.
  STRIXLM_ATTN_FUSE_QK=1 STRIXLM_ATTN_PERSISTENT_MIN=0 run e2e_fused 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_FUSE_QK tp_fuse on1:1 off1:0 on2:1 off2:0
}

# timeline: the persistent decode kernel's program timeline (bench_decode_timeline.py)
section_timeline() {  # per-program start/end of 28 back-to-back persistent launches
  run timeline 200 python benchmarks/gpu/bench_decode_timeline.py --json "$OUT/timeline.json"
}

# dynamic: the persistent grid handing its shortest sequences out dynamically: timeline at
#   shares 0 / 0.25 / 0.4, greedy tokens vs HF with the grid forced at every batch,
#   the workload with STRIXLM_ATTN_DYNAMIC_FRAC=0.25 / 0
section_dynamic() {  # the shortest sequences handed out dynamically in the persistent grid
  run timeline_dyn 150 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0 deal:0.25 deal:0.4 --json "$OUT/timeline_dynamic.json"
  # Persistent grid at every decode batch: the tiny models' batches take the dynamic path.
  STRIXLM_ATTN_PERSISTENT_MIN=0 run e2e_dyn 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_DYNAMIC_FRAC tp_dyn on1:0.25 off1:0 on2:0.25 off2:0
}

# dynfrac: split grids hand out their shortest sequences' segments too: timelines at shares
#   0.25 / 0.6 / 1.0 (b64 and b48 take the split grid), attention vs torch, then the
#   workload with STRIXLM_ATTN_DYNAMIC_FRAC=0.6 / 0.25, alternating, twice each
section_dynfrac() {
  run timeline_frac 200 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0.25 deal:0.6 deal:1.0 --json "$OUT/timeline_frac.json"
  run attn 150 python benchmarks/gpu/check_attention.py --quick
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_DYNAMIC_FRAC tp_frac a1:0.6 b1:0.25 a2:0.6 b2:0.25
}

# tilecost: partly filled last KV tiles vs full ones (sweep_decode_attn --tile-cost)
section_tilecost() {
  run tilecost 100 python benchmarks/gpu/sweep_decode_attn.py --tile-cost --json "$OUT/tile_cost.json"
}

# abpersist: the workload with STRIXLM_ATTN_PERSISTENT=1 / 0, alternating, twice each
section_abpersist() {  # the workload with the persistent decode kernel on / off, alternating
  ab_tp STRIXLM_ATTN_PERSISTENT tp_persist on1:1 off1:0 on2:1 off2:0
}

# clampids: block ids of masked KV tiles loaded unmasked, index clamped (STRIXLM_ATTN_CLAMP_IDS;
#   default since session 40; bf16 and fp8 Triton kernels): check_attention --quick, then
#   the bf16 workload on / off alternating after a warm-up
section_clampids() {  # the Gluon kernel's masked-id finding, tried on the Triton kernels
  (export STRIXLM_ATTN_CLAMP_IDS=1; run attn_check_clamp 150 python benchmarks/gpu/check_attention.py --quick)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_CLAMP_IDS tp_clamp on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# leanloop: the persistent loop's q loaded once an item, only the running max reset at item
#   ends (STRIXLM_ATTN_LEAN_LOOP, default since session 40): check_attention --quick,
#   then the bf16 workload on / off alternating after a warm-up
section_leanloop() {  # the persistent loop's q per item, only the running max reset
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_LEAN_LOOP tp_lean on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# aligned: tiles that start on a block boundary get each token's slot and block index as
#   loop invariants (STRIXLM_ATTN_ALIGNED_TILES, default since session 41; both
#   Triton attention kernels): check_attention --quick (its per-case times: the
#   unified kernel's decode configs too) and bench_decode_timeline's workload
#   batches with it on and off, then the bf16 workload alternating
section_aligned() {  # tiles on block boundaries: slot / block index hoisted out of the loops
  run attn_check_aligned 150 python benchmarks/gpu/check_attention.py --quick
  run aligned_timeline_on 200 python benchmarks/gpu/bench_decode_timeline.py \
    --variants deal:0.6 --workload 60 200 400 600 --json "$OUT/aligned_on.json"
  (export STRIXLM_ATTN_ALIGNED_TILES=0
   run attn_check_unaligned 150 python benchmarks/gpu/check_attention.py --quick
   run aligned_timeline_off 200 python benchmarks/gpu/bench_decode_timeline.py \
     --variants deal:0.6 --workload 60 200 400 600 --json "$OUT/aligned_off.json")
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_ALIGNED_TILES tp_aligned on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# blockptrs: aligned tiles' K / V pointers built a block at a time (STRIXLM_ATTN_BLOCK_PTRS,
#   default since session 41): check_attention --quick, greedy tokens vs HF, then
#   the bf16 workload on / off alternating after a warm-up
section_blockptrs() {  # aligned tiles' K / V pointers built per block (STRIXLM_ATTN_BLOCK_PTRS)
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run e2e 240 python benchmarks/gpu/check_e2e.py
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_BLOCK_PTRS tp_bp on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# screen: candidate grids side by side, per launch before any workload A/B:
#   bench_decode_timeline.py --workload at SCREEN_STEPS (default: steps 250-350,
#   around b203, where 64-token tiles at three an SM ran 173.0 vs 174.7 us in
#   session 42) under each of SCREEN_CONFIGS (label=VAR=VALUE,VAR=VALUE; the
#   default first and last, for drift), summed per config
# timeline_under NAME "VAR=VALUE ..." STEP...: bench_decode_timeline.py's default kernel
#   (deal:0.6) at those steps of the workload under the settings, JSON to $OUT/NAME.json
timeline_under() {
  local name=$1 settings=$2; shift 2
  (for kv in $settings; do export "$kv"; done
   run "$name" 90 python benchmarks/gpu/bench_decode_timeline.py --workload "$@" \
     --variants deal:0.6 --json "$OUT/$name.json")
}

section_screen() {  # candidate grids per launch (the persistent decode kernel)
  C=STRIXLM_ATTN_PERSISTENT_CTAS T=STRIXLM_ATTN_DECODE_TILE
  for cfg in ${SCREEN_CONFIGS:-default= tile64c3=$T=64,$C=3 default2=}; do
    settings=${cfg#*=}
    timeline_under "screen_${cfg%%=*}" "${settings//,/ }" ${SCREEN_STEPS:-250 275 300 325 350}
  done
  python - "$OUT" <<'PY'
import glob, json, sys
for p in sorted(glob.glob(sys.argv[1] + "/screen_*.json")):
    us = [round(r["us_per_launch"], 1) for r in json.load(open(p))]
    print(f"{p.rsplit('/', 1)[1][7:-5]:>12}: {sum(us):7.1f} us over the batches {us}")
PY
}

# tail64: the unified kernel's small-batch tail (sweep_decode_attn.py --tail, b93-b6)
#   with 32-token (default) and 64-token decode tiles (STRIXLM_ATTN_DECODE_TILE;
#   the persistent grid, where the tail takes it, at three programs an SM)
section_tail64() {  # the tail's split heuristic at 32- and 64-token decode tiles
  for t in 32:4 64:3; do  # TILE:persistent programs an SM (a 64-token program takes 72 KB)
    STRIXLM_ATTN_DECODE_TILE=${t%:*} STRIXLM_ATTN_PERSISTENT_CTAS=${t#*:} run "tail_tile${t%:*}" 150 \
      python benchmarks/gpu/sweep_decode_attn.py --tail --budget-s 130 --json "$OUT/tail_tile${t%:*}.json"
  done
}

# screen_ab PREFIX "VAR=VALUE ...": a decode-attention setting per launch first, over the
#   workload's decode batches b244-b40 (bench_decode_timeline.py: the default, the setting,
#   the default again for drift; ~1 min); where the setting is faster over them by 0.5%,
#   check_attention --quick with it and the workload with it on / off (ab_env, ~4 min more).
#   SCREEN_ONLY=1 stops after the screen (several screens then fit one call)
screen_ab() {
  local prefix=$1 settings=$2 cfg faster
  for cfg in default1: "on:$settings" default2:; do
    timeline_under "${prefix}_${cfg%%:*}" "${cfg#*:}" 150 300 450 600 700 800 900
  done
  faster=$(python - "$OUT/$prefix" <<'PY'
import json, sys
us = {k: sum(r["us_per_launch"] for r in json.load(open(f"{sys.argv[1]}_{k}.json")))
      for k in ("default1", "on", "default2")}
print({k: round(v, 1) for k, v in us.items()}, file=sys.stderr)
print("yes" if us["on"] < 0.995 * min(us["default1"], us["default2"]) else "")
PY
  )
  echo "$prefix ($settings) faster per launch: ${faster:-no, no workload A/B}"
  if [[ -n $faster && -z $SCREEN_ONLY ]]; then ab_env "$prefix" "$settings"; fi
}

# uncut: the decode tile without session 45's three cuts, the default since session 47 (a
#   deferred row sum, attn_tiles.DEFER_SUM; every dealt item's q rows in one q tile,
#   paged_decode.ITEM_ROWS; scores masked by the causal limit alone, CAUSAL_SCORES), per
#   launch, then the workload if the old tile wins there (screen_ab). On the H200 the cuts
#   were 0.6% faster a launch and +0.5% on the workload (session 47), so "faster" here
#   would mean a new machine or compiler turned that around
section_uncut() {  # the tile without the deferred sum, item rows and causal scores
  screen_ab uncut "STRIXLM_ATTN_DEFER_SUM=0 STRIXLM_ATTN_ITEM_ROWS=0 STRIXLM_ATTN_CAUSAL_SCORES=0"
}

# dynshare: the persistent grid's dynamic share (paged_decode.DYNAMIC_FRAC, 0.6 since
#   session 8, when fully dynamic was about even) per launch at the workload's decode
#   batches b244-b40, 0.4 / 0.6 / 0.8 / 1.0 in one run (~1 min). The dealt loop now costs
#   more a tile than the dynamic items' loop (sm90 SASS 480 against 366), so the balance
#   may have moved. Where a share beats 0.6 by 0.5% over the batches: the workload with it
#   and with 0.6, alternating, three pairs (~3 min; not with SCREEN_ONLY=1)
section_dynshare() {  # the dynamic share per launch, then the workload if another wins
  local pick
  run dynshare 150 python benchmarks/gpu/bench_decode_timeline.py --workload 150 300 450 \
    600 700 800 900 --variants deal:0.6 deal:0.4 deal:0.8 deal:1.0 --json "$OUT/dynshare.json"
  pick=$(python - "$OUT/dynshare.json" <<'PY'
import json, sys
us = {}
for r in json.load(open(sys.argv[1])):
    us[r["variant"]] = us.get(r["variant"], 0.0) + r["us_per_launch"]
print({k: round(v, 1) for k, v in us.items()}, file=sys.stderr)
best = min(us, key=us.get)
if us[best] < 0.995 * us["deal:0.6"]:
    print(best.split(":")[1])
PY
  )
  echo "dynamic share pick: ${pick:-none, 0.6 stays}"
  if [[ -n $pick && -z $SCREEN_ONLY ]]; then
    run tp_warm 100 $TP --model qwen3-0.6b
    ab_tp STRIXLM_ATTN_DYNAMIC_FRAC tp_dyn new1:"$pick" old1:0.6 new2:"$pick" old2:0.6 \
      new3:"$pick" old3:0.6
  fi
}

# prefillsweep: the long-prefill config (paged_attention.PREFILL_CONFIG: block_m 64, tile 32,
#   4 warps, 3 stages, from session 9's sweep) swept again at one of the workload's admission
#   steps (13 x 600-token prompts + 64 decodes; 48 configs, down to 32-row blocks, 16-token
#   tiles and 2 warps), since sessions 40-41 cut the kernel's tile loops (~2-4 min). Where the
#   best beats the default by 3% a launch: check_attention --quick with it, then the
#   workload with STRIXLM_ATTN_PREFILL_CONFIG set / not, alternating (ab_env, ~3 min more)
section_prefillsweep() {
  run prefillsweep 300 python benchmarks/gpu/check_attention.py --sweep --sweep-alone \
    --sweep-only '^prefill 13x600 \+ 64 decodes$' --json "$OUT/prefillsweep.json"
  local pick
  pick=$(python - "$OUT/prefillsweep.json" <<'PY'
import json, re, sys
for s in json.load(open(sys.argv[1])).get("sweep", []):
    t_best, cfg = s["best"][0]
    if s["t_heuristic_us"] and t_best < 0.97 * s["t_heuristic_us"]:
        f = dict(re.findall(r"(\w+)=(\w+)", cfg))
        print(",".join(f[k] for k in ("block_m", "tile", "num_warps", "num_stages")))
PY
  )
  echo "prefill pick: ${pick:-none, the default stays}"
  if [[ -n $pick ]]; then ab_env prefill "STRIXLM_ATTN_PREFILL_CONFIG=$pick"; fi
}

# midgrid: the mid-batch grid (paged_decode.mid_grid: 64-token tiles, three programs an SM,
#   unsplit, at 1.0-1.45 sequences a default-grid program; STRIXLM_ATTN_MID_GRID,
#   default since session 42): bench_decode_timeline.py at the workload's steps
#   650-900 with it on / off, then the bf16 workload on / off alternating after a
#   warm-up (three pairs)
section_midgrid() {  # the mid-batch grid on / off: per launch, then the workload
  for v in 1 0; do
    STRIXLM_ATTN_MID_GRID=$v run "midgrid_timeline$v" 90 \
      python benchmarks/gpu/bench_decode_timeline.py --workload 650 675 700 725 750 775 800 \
      825 850 --variants deal:0.6 --json "$OUT/midgrid_timeline$v.json"
    grep -E "us/launch" "$OUT/midgrid_timeline$v.log" | cut -c1-80
  done
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_MID_GRID tp_mid on1:1 off1:0 on2:1 off2:0 on3:1 off3:0
}

# tile64: 64-token decode tiles (STRIXLM_ATTN_DECODE_TILE=64) at 3 stages, which take
#   72 KB of shared memory a persistent program, so three programs an SM
#   (STRIXLM_ATTN_PERSISTENT_CTAS=3): check_attention --quick, then the bf16
#   workload against the default alternating. sm90 SASS: 740 instructions a
#   64-token tile (11.6 a token) against 480 a 32-token tile (15.0), with 96 KB of
#   K / V in flight an SM against 64 KB
section_tile64() {  # 64-token decode tiles at 3 stages, three programs an SM (env only)
  ab_env tile64 "STRIXLM_ATTN_DECODE_TILE=64 STRIXLM_ATTN_PERSISTENT_CTAS=3"
}

# ctas5: five persistent programs an SM (STRIXLM_ATTN_PERSISTENT_CTAS=5) against four:
#   at 180 registers (session 41) five fit one wave by registers (5 x 64 x 184 of
#   65,536) and shared memory (5 x 37.9 KB); in session 29, five spilled into a
#   second wave and ran 28% slower
section_ctas5() {  # five persistent programs an SM, which registers now allow (env only)
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_PERSISTENT_CTAS tp_ctas five1:5 four1:4 five2:5 four2:4 five3:5 four3:4
}

# warp1: one-warp decode programs (STRIXLM_ATTN_DECODE_WARPS=1), six persistent programs
#   an SM (STRIXLM_ATTN_PERSISTENT_CTAS=6; shared memory allows six, registers
#   eight): check_attention --quick, then the workload against the default
#   alternating. sm90 SASS of a 32-token persistent tile: 684 warp-instructions and
#   2 barriers against 2 x 480 and 9; 255 registers, no spill
section_warp1() {  # one-warp decode programs, six persistent programs an SM (env only)
  ab_env warp1 "STRIXLM_ATTN_DECODE_WARPS=1 STRIXLM_ATTN_PERSISTENT_CTAS=6"
}

# persist: decode attention, unified vs persistent grid (sweep_decode_attn --persistent)
section_persist() {  # decode attention: unified vs persistent grid (bit-equal outputs)
  run persist 300 python benchmarks/gpu/sweep_decode_attn.py --persistent --json "$OUT/persistent.json"
}

# splitpersist: small decode batches: unified (split) vs the persistent grid with segments
#   (sweep_decode_attn --split-persistent), attention vs torch, then the workload
#   with the new thresholds on / off (persistent from 1.25 sequences per program
#   and two segments from 0.6, vs session 5's 1.75 and no split), alternating
section_splitpersist() {
  run split_sweep 200 python benchmarks/gpu/sweep_decode_attn.py --split-persistent \
    --json "$OUT/split_persistent.json"
  run split_attn_check 150 python benchmarks/gpu/check_attention.py --quick
  for v in on1:1.25:0.6 off1:1.75:0 on2:1.25:0.6 off2:1.75:0; do
    IFS=: read -r tag pmin smin <<<"$v"
    STRIXLM_ATTN_PERSISTENT_MIN=$pmin STRIXLM_ATTN_PERSISTENT_SPLIT_MIN=$smin \
      run tp_split_$tag 100 $TP --model qwen3-0.6b
  done
  grep "strixlm  " "$OUT"/tp_split_*.log
}

# mixedattn: the admission steps' attention: one launch vs prefill + decode rows apart
#   (bench_mixed_attn.py)
section_mixedattn() {
  run mixed_attn 150 python benchmarks/gpu/bench_mixed_attn.py --json "$OUT/mixed_attn.json"
}

# headfused: decode attention reading whole KV blocks (all kv heads) per tile, against the
#   engine's kernel (bench_headfused_decode.py; ~3 min), and the engine's kernel with
#   128-token tiles and 4 warps
section_headfused() {
  run headfused 300 python benchmarks/gpu/bench_headfused_decode.py --json "$OUT/headfused.json"
  # The engine's own kernel with twice the tokens a tile (the knobs are read at import).
  STRIXLM_ATTN_DECODE_TILE=128 STRIXLM_ATTN_DECODE_WARPS=4 STRIXLM_ATTN_PERSISTENT_CTAS=2 \
    run engine_tile128 120 \
    python benchmarks/gpu/bench_headfused_decode.py --engine-only
}

# tailsweep: the sweep alone (~1 min), which also times the unified kernel at 1 / 2 / 4 / 8
#   segments per tail shape: the data for a per-batch segment table
section_tailsweep() {
  run tail 200 python benchmarks/gpu/sweep_decode_attn.py --tail --budget-s 170 \
    --json "$OUT/tail.json"
}

# tailab: the small-batch tail's split heuristic (session 18's profile: attention below ~90
#   sequences at 1.9-3.9 TB/s): sweep_decode_attn.py --tail at the run's tail shapes
#   per knob setting, then the workload alternating STRIXLM_ATTN_SPLIT_CTAS /
#   STRIXLM_ATTN_PERSISTENT_SPLIT_MIN at 2 / 0.6 (default), 4 / 0.6 and 4 / 0.9, twice
#   (run in session 18: default kept)
section_tailab() {
  section_tailsweep
  run tp_warm 100 $TP --model qwen3-0.6b
  for r in 1 2; do
    for v in 2:0.6 4:0.6 4:0.9; do
      c=${v%%:*} m=${v#*:}
      STRIXLM_ATTN_SPLIT_CTAS=$c STRIXLM_ATTN_PERSISTENT_SPLIT_MIN=$m run "tp_c${c}_m${m}_$r" 100 \
        $TP --model qwen3-0.6b --output-json "$OUT/tp_c${c}_m${m}_$r.json"
    done
  done
  grep "strixlm  " "$OUT"/tp_c*.log
}

# fuseqkab: the q/k norm + rotary + K/V write inside the persistent decode kernel
#   (STRIXLM_ATTN_FUSE_QK=1): bench_fused_qk.py (values at real shapes, graph times),
#   then the workload on / off alternating (two pairs). Session 22 ran it on af97000,
#   whose prologue tables came before the PDL wait (reverted: -6.5%)
section_fuseqkab() {  # the fused q/k prologue against the separate launch
  run fusedqk 60 python benchmarks/gpu/bench_fused_qk.py --json "$OUT/fused_qk.json"
  (export STRIXLM_ATTN_FUSE_QK=1; run tp_warm 100 $TP --model qwen3-0.6b)
  ab_tp STRIXLM_ATTN_FUSE_QK tp_fqk on1:1 off1:0 on2:1 off2:0
}

# sepv: qk_norm_rope's v cache write in a third program: glue check, workload A/B, e2e
section_sepv() {  # qk_norm_rope's v cache write in a program of its own
  run glue 150 python benchmarks/gpu/check_glue_kernels.py
  grep -E "cache write|ALL PASS|FAIL" "$OUT/glue.log"
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_QK_SEPARATE_V tp_sepv on1:1 off1:0 on2:1 off2:0
  run e2e 240 python benchmarks/gpu/check_e2e.py
  grep -E "match|exact" "$OUT/e2e.log" | head -8
}

# splitab: the workload with the persistent decode grid split in two segments (+ the merge
#   launch) up to 1.25 (default: only below), 2.5 and 100 (every batch from 40)
#   sequences per program (STRIXLM_ATTN_PERSISTENT_MIN), alternating after a warm-up:
#   finer items for the dynamic hand-out against one more launch a layer
section_splitab() {  # two segments per sequence at larger batches: balance vs the merge launch
  run tp_warm 100 $TP --model qwen3-0.6b
  ab_tp STRIXLM_ATTN_PERSISTENT_MIN tp_split d1:1.25 m1:2.5 a1:100 d2:1.25 m2:2.5 a2:100
}

# ahead: the persistent decode kernel with its block ids a tile ahead, so K / V multi-buffer
#   (STRIXLM_ATTN_BLOCKS_AHEAD=1; stages, programs per SM and tile swept):
#   bench_decode_timeline.py --workload per config; check_attention with it on (and
#   the unified kernel's STRIXLM_ATTN_UNIFIED_AHEAD=1)
section_ahead() {  # decode attention with K / V multi-buffered (block ids a tile ahead)
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
}

# tailahead: where session 29's +0.5% came from: sweep_decode_attn.py --tail (the tail's
#   shapes, the heuristic's pick and 1 / 2 / 4 / 8 segments) with the unified kernel's
#   block ids ahead on / off at 32- and 64-token tiles, and one-warp programs (no
#   cross-warp softmax reductions) (session 30 ran 1:32:2 and 0:32:2: the unified
#   kernel below 40 sequences is 11-28% faster a launch with the ids ahead)
section_tailahead() {  # the tail's launches with the double-buffered K / V on and off
  for v in 1:32:2 0:32:2 1:64:2 0:64:2 1:32:1; do  # AHEAD:TILE:WARPS
    IFS=: read -r a t w <<< "$v"
    STRIXLM_ATTN_UNIFIED_AHEAD=$a STRIXLM_ATTN_DECODE_TILE=$t STRIXLM_ATTN_DECODE_WARPS=$w \
      run "tail_a${a}_t${t}_w$w" 100 python benchmarks/gpu/sweep_decode_attn.py --tail \
      --budget-s 60 --json "$OUT/tail_a${a}_t${t}_w$w.json"
  done
}

# persistmin: where the persistent grid stops splitting sequences in two, now that K / V are
#   double-buffered (session 29 saw the unsplit grid at 3 programs an SM beat the split
#   one at b71): bench_decode_timeline.py --workload at steps 700-850 (b98-b55) with
#   STRIXLM_ATTN_PERSISTENT_MIN 1.25 (default) / 1.0 / 0.8 (session 30: unsplit wins
#   at b71, loses at b55; 1.05 on the workload even with 1.25, which stays)
section_persistmin() {  # the split / unsplit boundary of the persistent grid
  for m in 1.25 1.0 0.8; do
    STRIXLM_ATTN_PERSISTENT_MIN=$m run "persistmin_$m" 120 \
      python benchmarks/gpu/bench_decode_timeline.py --workload 700 750 800 850 \
      --variants deal:0.6 --json "$OUT/persistmin_$m.json"
  done
}

# readpattern: the paged KV access pattern against a plain streaming read, one difference at
#   a time: block order, one head's rows or whole blocks, K and V, pool size
#   (bench_read_pattern.py; session 30: 4.32-4.39 TB/s attention-like, 4.44-4.51 whole
#   blocks, pool size no effect). Since then it also reads two / four heads' rows a
#   program and launches the heads side by side (session 31: attention-like 4.38-4.47
#   one head, 4.47-4.53 two heads; side by side no change)
section_readpattern() {  # what in the paged access holds attention under the read ceiling
  run readpattern 240 python benchmarks/gpu/bench_read_pattern.py --json "$OUT/read_pattern.json"
}

# aheadab: the workload with AHEAD_ENV="VAR=VALUE ..." against the default, alternating after
#   a warm-up of each (two pairs)
section_aheadab() {  # the workload: $AHEAD_ENV (VAR=VALUE ...) against the default, two pairs
  run tp_warm 100 $TP --model qwen3-0.6b
  (export $AHEAD_ENV; run tp_ahead_warm 100 $TP --model qwen3-0.6b)
  for i in 1 2; do
    run "tp_base$i" 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_base$i.json"
    (export $AHEAD_ENV; run "tp_ahead$i" 100 $TP --model qwen3-0.6b \
      --output-json "$OUT/tp_ahead$i.json")
  done
  grep "strixlm  " "$OUT"/tp_*.log
}

# headgroup: decode attention with 1 / 2 / 4 / 8 kv heads a program, block ids a tile ahead
#   (bench_headgroup_decode.py: a probe kernel against the engine's on the same caches;
#   does a program reading 512 B / 1 KB runs stream faster?), --quick (session 31:
#   two heads x1.023 / x1.048 against one in the probe's loop, still behind the engine
#   at b256 over 100-2000 tokens)
section_headgroup() {  # kv heads a program: the probe kernel against the engine's
  # --quick: the two b256 shapes, 1 / 2 / 4 heads (~2 min; the full sweep is ~5-6 min)
  run headgroup 300 python benchmarks/gpu/bench_headgroup_decode.py --quick \
    --json "$OUT/headgroup.json"
}

# split29ab: the unified kernel's split target at 2.9 programs an SM against 2 (the
#   default): session 30's tail sweep put 2.9's pick best at every tail shape (b33-b39
#   x1.11 a launch), one workload pair did not show it; a warm-up of each, then four
#   alternating pairs (STRIXLM_ATTN_SPLIT_CTAS; session 31: 28,130.1 vs 28,134.3 on
#   average, no difference, 2 stays)
section_split29ab() {  # the unified kernel's split target, 2.9 vs 2 programs an SM
  for c in 2 2.9; do STRIXLM_ATTN_SPLIT_CTAS=$c run "tp_c${c}_warm" 100 $TP --model qwen3-0.6b; done
  for r in 1 2 3 4; do
    for c in 2 2.9; do
      STRIXLM_ATTN_SPLIT_CTAS=$c run "tp_c${c}_$r" 100 $TP --model qwen3-0.6b \
        --output-json "$OUT/tp_c${c}_$r.json"
    done
  done
  grep "strixlm  " "$OUT"/tp_c*.log
}

# headmajor: the engine's decode attention on the same cache stored head-major within each
#   block (4 KB runs a head, not 256 B rows; a strided view, sweep_decode_attn.py
#   --quick). Session 32 (double-buffered kernels): even with longest-first token-major
#   at every shape (b256 259.6 vs 260.8 us, b128 147.1 vs 146.7, b64 91.6 vs 91.9), and
#   the workload with the engine's head-major caches even with the default (28,172 /
#   28,122 vs 28,187 / 28,136 tok/s), so the engine's opt-in layout was removed
section_headmajor() {  # head-major blocks with the double-buffered kernels
  run headmajor 150 python benchmarks/gpu/sweep_decode_attn.py --quick --budget-s 120 \
    --json "$OUT/sweep_quick.json"
  grep -E "heuristic|head-major|longest" "$OUT/headmajor.log"
}
