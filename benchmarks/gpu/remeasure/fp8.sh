# shellcheck shell=bash
# run_remeasure.sh sections on the fp8 KV cache: its decode kernels and grids, mixed steps,
# serving. Sourced by run_remeasure.sh, which defines TP and the ab_* helpers; each section_NAME
# runs `run_remeasure.sh NAME`.

# fp8pairs: check_attention with the fp8 byte-pair read (default) and without
#   (STRIXLM_ATTN_FP8_PAIRS=0), then fp8 throughput both ways
section_fp8pairs() {  # fp8 K/V read as byte pairs (the default) vs Triton's conversion
  run attn_check_pairs 150 python benchmarks/gpu/check_attention.py --quick
  STRIXLM_ATTN_FP8_PAIRS=0 run attn_check_nopairs 150 python benchmarks/gpu/check_attention.py --quick
  run tp_fp8_pairs_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8_pairs 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8_pairs.json"
  STRIXLM_ATTN_FP8_PAIRS=0 run tp_fp8_nopairs 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 \
    --output-json "$OUT/tp_fp8_nopairs.json"
}

# fp8grids: the fp8 decode grids (programs per SM, register cap) over the split and unsplit
#   batches (bench_fp8_decode --grids), then the workload with bf16 and fp8 KV
section_fp8grids() {  # which fp8 grid each decode batch should take
  run fp8_grids 300 python benchmarks/gpu/bench_fp8_decode.py --grids --json "$OUT/fp8_grids.json"
  run tp_warm 100 $TP --model qwen3-0.6b
  run tp_bf16 100 $TP --model qwen3-0.6b --output-json "$OUT/tp_bf16.json"
  run tp_fp8_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8.json"
}

# fp8rule: check_attention --quick and the fp8 decode path against bf16 with fp8_grid's
#   rule, then the fp8 workload with the rule (STRIXLM_ATTN_FP8_GRID_MIN=1.3) / the
#   six-program grid at every persistent launch (0), alternating
section_fp8rule() {  # the six-program fp8 grid only where its programs get 1.3 items each
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run fp8_decode 200 python benchmarks/gpu/bench_fp8_decode.py --variants "" \
    --json "$OUT/fp8_decode.json"
  ab_fp8 STRIXLM_ATTN_FP8_GRID_MIN rule1:1.3 all1:0 rule2:1.3 all2:0
}

# fp8split: check_attention --quick, the fp8 grids again (with the engine's own choice), then
#   the fp8 workload with batches split in two below 1.8 sequences a six-grid
#   program (STRIXLM_ATTN_FP8_SPLIT_BELOW=1.8) / never (0), alternating
section_fp8split() {  # fp8 batches split in two where a six-grid program gets < 1.8 items
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run fp8_grids 200 python benchmarks/gpu/bench_fp8_decode.py --grids --json "$OUT/fp8_grids.json"
  ab_fp8 STRIXLM_ATTN_FP8_SPLIT_BELOW split1:1.8 never1:0 split2:1.8 never2:0
}

# fp8mixed: mixed steps' attention as one launch vs decodes + prompts in two, over bf16 and
#   fp8 (bench_fp8_decode --split-mixed)
section_fp8mixed() {  # would routing a mixed step's decodes to the decode path pay?
  run fp8_mixed 200 python benchmarks/gpu/bench_fp8_decode.py --split-mixed \
    --json "$OUT/fp8_mixed.json"
}

# fp8fresh: check_attention --quick (fp8 prompts and chunks read their own K / V unquantized),
#   the fp8 workload with STRIXLM_ATTN_FP8_FRESH=1 / 0, alternating
section_fp8fresh() {  # a step's own K / V read unquantized over fp8 caches (fresh_rows)
  run fp8_fresh 150 python benchmarks/gpu/bench_fp8_decode.py --fresh --json "$OUT/fp8_fresh.json"
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  ab_fp8 STRIXLM_ATTN_FP8_FRESH fresh1:1 cache1:0 fresh2:1 cache2:0
}

# fp8mma: fp8 decode attention on the Gluon kernel (paged_decode_fp8): probe_fp8_mma.py's
#   segment sweep, check_attention --quick, then the fp8 workload with it on / off
#   (STRIXLM_ATTN_FP8_MMA=1 / 0), alternating
section_fp8mma() {  # fp8 decode attention with explicit register layouts (Gluon)
  run fp8_mma 300 python benchmarks/gpu/probe_fp8_mma.py --json "$OUT/fp8_mma.json"
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  ab_fp8 STRIXLM_ATTN_FP8_MMA mma1:1 triton1:0 mma2:1 triton2:0
}

# bf16mma: the Gluon decode kernel over a bf16 cache (probe_fp8_mma.py --bf16) against the
#   Triton bf16 path, 1-16 segments at b1-b256: a bf16 lever only if it wins
section_bf16mma() {  # explicit register layouts without the fp8 conversion
  run bf16_mma 300 python benchmarks/gpu/probe_fp8_mma.py --bf16 --json "$OUT/bf16_mma.json"
}

# fp8mixsplit: mixed steps over fp8 split on the device (STRIXLM_ATTN_FP8_MIXED_SPLIT;
#   default since session 40): bench_fp8_decode --split-mixed (and in-graph), the fp8
#   workload with it on / off alternating, then an fp8 server with it on and one off
section_fp8mixsplit() {  # a mixed step's decodes on the Gluon kernel, on the device
  run fp8_mixed 200 python benchmarks/gpu/bench_fp8_decode.py --split-mixed \
    --json "$OUT/fp8_mixed.json"
  ab_fp8 STRIXLM_ATTN_FP8_MIXED_SPLIT split1:1 one1:0 split2:1 one2:0
  STRIXLM_ATTN_FP8_MIXED_SPLIT=1 SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8_split \
    bash benchmarks/gpu/run_issue3.sh serve
  SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8 bash benchmarks/gpu/run_issue3.sh serve
}

# fp8serve: online serving with fp8 KV, then with bf16 KV, one fresh server each
section_fp8serve() {  # the server with fp8 KV beside bf16 KV on the same machine
  SERVE_FLAGS="--kv-cache-dtype fp8" SERVE_TAG=_fp8 bash benchmarks/gpu/run_issue3.sh serve
  bash benchmarks/gpu/run_issue3.sh serve
}

# fp8: check_attention --quick (fp8 cache bytes vs torch) and the workload with fp8 KV
section_fp8() {  # fp8 KV: cache bytes equal to torch's cast (the -0.0 fix), then throughput
  run attn_check 150 python benchmarks/gpu/check_attention.py --quick
  run tp_fp8_warm 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8
  run tp_fp8 100 $TP --model qwen3-0.6b --kv-cache-dtype fp8 --output-json "$OUT/tp_fp8.json"
}
