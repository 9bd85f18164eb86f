"""The compute-aware bound (strixlm/benchmarks/roofline.py): by hand, against the memory
floor when compute is free, and its FLOP counts against HF's layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from floor_shapes import TINY, small_qwen3, small_qwen3_moe
from transformers import (
    AutoConfig,
    Qwen3ForCausalLM,
    Qwen3MoeForCausalLM,
)

from strixlm.benchmarks.memory_floor import model_shape, schedule_loads, step_bytes, workload_floor
from strixlm.benchmarks.roofline import (
    measure_matmul_flops,
    step_bound_s,
    step_phases,
    workload_roofline,
)
from strixlm.benchmarks.throughput import CONFIGS_DIR
from strixlm.benchmarks.workload import make_workload

# floor_shapes.TINY: 680 parameters read a step, of which the LM head is 10 * 8 = 80; 600 a
# token multiplies through (norm weights included). Query width: 2 heads * 4 dims.
FREE = 1e30  # a rate that makes its side of every phase take no time


def _requests(seed: int, n: int = 30) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    ins, outs = rng.integers(1, 300, n).tolist(), rng.integers(1, 200, n).tolist()
    return list(zip(ins, outs, strict=True))


def test_compute_bound_by_hand() -> None:
    # One slot, budget 4 (test_floor_one_slot_by_hand's schedule). Tokens 3, 1, 2, 1, 1 = 8;
    # every step samples (5 rows through the LM head). Query-key pairs: A's prompt 1+2+3 = 6,
    # its decode 4; B's prompt 1+2 = 3, its decodes 3 and 4: 20.
    r = workload_roofline(TINY, 2, 2, [(3, 2), (2, 3)], 1, FREE, 1e3, max_num_batched_tokens=4)
    assert r["steps"] == 5
    linear = 2 * 8 * 600 + 2 * 5 * 80
    attention = 4 * 20 * 8
    assert r["linear_s"] == pytest.approx(linear / 1e3)
    assert r["attention_s"] == pytest.approx(attention / 1e3)
    assert r["bound_s"] == pytest.approx((linear + attention) / 1e3)
    assert r["bound_output_tok_s"] == pytest.approx(5 / r["bound_s"])
    assert r["linear_compute_over_bytes_s"] == pytest.approx(r["linear_s"])


def test_chunked_prompt_pairs_by_hand() -> None:
    # Two slots, budget 2 (test_floor_chunked_prefill_by_hand's schedule). Step 1: A's first
    # chunk, 2 tokens (1 + 2 pairs). Step 2: A's last token after 2 (3 pairs), B's first of 2
    # (1 pair). Step 3: decode A (4), B's last token after 1 (2). 13 pairs, 6 tokens, 3
    # sampling rows (A at step 2 and 3, B at step 3).
    r = workload_roofline(TINY, 2, 1, [(3, 2), (2, 1)], 2, FREE, 1.0, max_num_batched_tokens=2)
    assert r["attention_s"] == pytest.approx(4 * 13 * 8)
    assert r["linear_s"] == pytest.approx(2 * 6 * 600 + 2 * 3 * 80)


@pytest.mark.parametrize("name", ["qwen3-0.6b", "nemotron-3-nano-30b-a3b"])
@pytest.mark.parametrize("kv_bytes", [2, 1])
def test_free_compute_gives_the_memory_floor(name: str, kv_bytes: int) -> None:
    """With compute free, every phase takes its bytes' time: the bound is the floor (dense,
    hybrid Mamba / MoE, bf16 and fp8 KV, chunked and not)."""
    cfg = AutoConfig.from_pretrained(CONFIGS_DIR / name)
    for seed, seqs, budget in ((0, 256, 8192), (1, 5, 64), (2, 3, 300)):
        reqs = _requests(seed)
        floor = workload_floor(cfg, 2, kv_bytes, reqs, seqs, 4e12, budget)
        bound = workload_roofline(cfg, 2, kv_bytes, reqs, seqs, 4e12, FREE, budget)
        assert bound["steps"] == floor["steps"]
        assert bound["bound_s"] == pytest.approx(floor["floor_s"], rel=1e-12)
        assert bound["linear_compute_over_bytes_s"] == bound["attention_compute_over_bytes_s"] == 0
        # At a real rate the bound only adds time.
        real = workload_roofline(cfg, 2, kv_bytes, reqs, seqs, 4e12, 7e14, budget)
        extra = real["linear_compute_over_bytes_s"] + real["attention_compute_over_bytes_s"]
        assert real["bound_s"] == pytest.approx(floor["floor_s"] + extra, rel=1e-9)


def test_step_phases_add_up_to_the_bound_and_the_floor() -> None:
    # profile_run.py sets these per-step figures beside measured steps: their sums are the
    # roofline's bound and, on the byte sides, the memory floor's bytes.
    cfg = AutoConfig.from_pretrained(CONFIGS_DIR / "qwen3-0.6b")
    reqs = _requests(3, 40)
    loads = schedule_loads(reqs, 16, 512)
    phases = step_phases(cfg, 2, 2, loads, 4.2e12, 7e14)
    bound = workload_roofline(cfg, 2, 2, reqs, 16, 4.2e12, 7e14, 512)
    assert len(phases) == bound["steps"] == len(loads)
    by_hand = [max(w, g) + max(kv, a) for w, g, kv, a in phases]
    assert [step_bound_s(p) for p in phases] == pytest.approx(by_hand, rel=1e-12)
    assert sum(by_hand) == pytest.approx(bound["bound_s"], rel=1e-12)
    assert bound["linear_s"] + bound["attention_s"] == pytest.approx(bound["bound_s"], rel=1e-12)
    per_step = step_bytes(model_shape(cfg), 2, 2, loads) / 4.2e12
    assert [w + kv for w, _, kv, _ in phases] == pytest.approx(per_step.tolist(), rel=1e-12)


def test_standard_workload_on_h200_figures() -> None:
    """The standard workload at the H200's measured rates (4.2 TB/s copy, ~750 TFLOP/s bf16
    matmul): the linear layers' FLOPs, not their weight reads, bound the prefill and large
    decode steps by about 0.2 s beyond the floor's 4.07 s."""
    cfg = AutoConfig.from_pretrained(CONFIGS_DIR / "qwen3-0.6b")
    w = make_workload(256, (100, 1024), (100, 1024), cfg.vocab_size, seed=0)
    reqs = [(len(p), o) for p, o in zip(w.prompts, w.output_lens, strict=True)]
    floor = workload_floor(cfg, 2, 2, reqs, 256, 4.2e12, 8192)
    bound = workload_roofline(cfg, 2, 2, reqs, 256, 4.2e12, 7.5e14, 8192)
    assert floor["floor_s"] == pytest.approx(4.074, abs=1e-3)
    assert bound["linear_compute_over_bytes_s"] == pytest.approx(0.202, abs=1e-3)
    assert bound["attention_compute_over_bytes_s"] < 0.002
    assert bound["bound_output_tok_s"] == pytest.approx(34_782, abs=1)


def test_flop_counts_match_hf_layers() -> None:
    """Parameters a token multiplies through = HF's parameters less the embedding and the LM
    head; the query width = the layers' q_proj outputs; a MoE token uses top_k experts."""
    dense, moe = small_qwen3(tied=False), small_qwen3_moe()
    for cfg, cls in ((dense, Qwen3ForCausalLM), (moe, Qwen3MoeForCausalLM)):
        with torch.device("meta"):
            model = cls(cfg)
        per_token = 0
        for name, p in model.named_parameters():
            if "embed_tokens" in name or "lm_head" in name:
                continue
            if ".experts." in name:  # one expert's share of its layer's stacked experts
                per_token += p.numel() // cfg.num_experts * cfg.num_experts_per_tok
            else:
                per_token += p.numel()
        q_width = sum(layer.self_attn.q_proj.out_features for layer in model.model.layers)
        shape = model_shape(cfg)
        assert shape["q_elems_per_token"] == q_width
        # One token, one step, bandwidth free: its linear FLOPs are 2 per parameter (and 2
        # per LM head parameter: the row samples).
        r = workload_roofline(cfg, 2, 2, [(1, 1)], 1, FREE, 1.0)
        lm_head = model.lm_head.weight.numel()
        assert r["linear_s"] == pytest.approx(2 * per_token + 2 * lm_head)
        assert r["attention_s"] == pytest.approx(4 * q_width)


def test_bad_rates_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        workload_roofline(TINY, 2, 2, [(3, 2)], 1, 1e12, 0.0)


def test_matmul_rate_cpu() -> None:
    assert measure_matmul_flops("cpu", torch.float32, n=128, iters=3) > 1e6
