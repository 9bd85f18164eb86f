#!/usr/bin/env bash
# Nemotron 3 Nano 30B-A3B (dummy bf16 weights) figures in one device call, <= 9 minutes:
#   mem    KV + Mamba-state bytes per request at 32K/128K/256K vs a 52-layer attention model
#          (check_nemotron.py --memory-only; CPU arithmetic, seconds)
#   bench  batch-1 decode ms/token with CUDA graphs (512-token prompt; target <= 4 ms), then
#          one 262,136-token prompt + 8 tokens on the same engine (bench_nemotron.py)
#   tp     the standard throughput workload (256 requests, in/out uniform in [100, 1024]) on
#          strixlm, and the HF transformers peer on the first $HF_SUBSET requests (default
#          16: one padded batch of 16, ~900 decode steps through HF's torch Mamba code; HF's
#          continuous batching has no Mamba cache, so the peer is padded generate), with
#          the memory floor (MoE experts per step, Mamba state, attention-only KV)
# Optional, for a second call (not in the default set, ~5 minutes):
#   check  check_nemotron.py (tiny models on CUDA: graphs vs eager vs HF tokens, zeroing)
#          and check_mamba.py --quick (kernels at Nano shapes; the state-view fix)
# Usage (repo root, GPU machine): bash benchmarks/gpu/run_nemotron.sh [sections...]
SECTIONS=${*:-mem bench tp}
HF_SUBSET=${HF_SUBSET:-16}
source benchmarks/gpu/lib.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
if has mem; then
  run mem 30 python benchmarks/gpu/check_nemotron.py --memory-only
fi
if has bench; then
  run bench 220 python benchmarks/gpu/bench_nemotron.py
fi
if has tp; then
  run tp 290 python -m strixlm.benchmarks.throughput --model nemotron-3-nano-30b-a3b \
    --dtype bfloat16 --device cuda --no-tqdm --compare hf --hf-mode generate \
    --hf-subset "$HF_SUBSET" --output-json "$OUT/tp_nano.json"
fi
if has check; then
  run check_nemotron 330 python benchmarks/gpu/check_nemotron.py
  run check_mamba 240 python benchmarks/gpu/check_mamba.py --quick
fi
echo "=== summary"
grep -h -E "^(PASS|FAIL|INFO|ALL|FAILED)|memory floor|ratio strixlm|^strixlm |^hf \(|achieved" \
  "$OUT"/*.log 2>/dev/null | grep -v -i warn | head -60
