"""A compute-aware bound of a throughput workload, beside its memory floor.

The memory floor (memory_floor.py) divides the bytes a schedule must move by the copy
bandwidth, as if every step were memory bound. An engine that runs a layer's kernels one
after another (this one, vLLM, SGLang) has two phases in every step that cannot hide each
other: the linear layers, which read the weights once and do 2 FLOPs per parameter per
token, and attention, which reads the KV cache and does 4 FLOPs per query-key pair per head
dimension (q k^T and p v). Each phase takes at least max(bytes / bandwidth, FLOPs / matmul
rate). Prefill steps and large decode batches make the linear phase compute bound, and the
floor does not count that time.

`workload_roofline` walks the memory floor's schedule (`schedule_loads`) and sums, step by
step:
- linear: max(weight bytes / bandwidth, (2 x tokens x linear params a token uses + 2 x
  sampling rows x LM head params) / rate). The LM head runs only for the rows that sample.
  Routed experts count top_k per token for FLOPs and the expected distinct experts for
  bytes, as in the floor.
- attention: max((KV read + KV written + Mamba state) bytes / bandwidth, 4 x query-key pairs
  x query width / rate), where a decode's pairs are its context and a prefill chunk of c
  tokens after k cached ones has c x k + c (c + 1) / 2.

Not counted: norms, activations, rotary, the sampler, a Mamba mixer's scan and convolution
FLOPs (its projections are counted), and every kernel's start and end. The rate should be
what a large matmul reaches on the device (`measure_matmul_flops`), not the data-sheet peak.
A real engine can only approach the bound from below. It is a different bound from the
issue's memory floor, not a replacement for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from strixlm.benchmarks.memory_floor import (
    StepLoad,
    median_run_seconds,
    model_shape,
    schedule_loads,
    step_byte_parts,
)


def measure_matmul_flops(
    device: str, dtype: torch.dtype = torch.bfloat16, n: int | None = None, iters: int = 10
) -> float:
    """FLOP/s of an n x n x n matmul in `dtype`, the median of `iters` timed runs after a
    warm-up. n defaults to 8192 on CUDA (1.1 TFLOP a run) and 512 on CPU, where the model
    dtype may be float32 or bfloat16 alike."""
    dev = torch.device(device)
    size = n or (8192 if dev.type == "cuda" else 512)
    a = torch.randn(size, size, device=dev).to(dtype)
    b = torch.randn(size, size, device=dev).to(dtype)
    return 2.0 * size**3 / median_run_seconds(lambda: torch.matmul(a, b), dev, iters)


def step_phases(
    model_cfg: Any,
    dtype_bytes: int,
    kv_dtype_bytes: int,
    loads: Sequence[StepLoad],
    bandwidth: float,
    flops: float,
) -> list[tuple[float, float, float, float]]:
    """(weight bytes' seconds, linear FLOPs' seconds, KV and state bytes' seconds,
    attention FLOPs' seconds) of each step of `loads`: a step's bound is max of the first
    two plus max of the last two (see the module docstring). The byte sides are the memory
    floor's own (memory_floor.step_byte_parts)."""
    if bandwidth <= 0 or flops <= 0:
        raise ValueError("bandwidth and flops must be positive")
    shape = model_shape(model_cfg)
    lm_head = shape["lm_head_params"]
    # Parameters one token multiplies through, the LM head aside (tied or not).
    token_params = (shape["weight_params"] + shape["fp32_params"] - lm_head) + shape[
        "moe_layers"
    ] * shape["experts_per_token"] * shape["expert_params"]
    q_elems = shape["q_elems_per_token"]
    parts = step_byte_parts(shape, dtype_bytes, kv_dtype_bytes, loads) / bandwidth
    out = []
    for step, (weight_s, kv_s) in zip(loads, parts.tolist(), strict=True):
        gemm_s = (2.0 * step.tokens * token_params + 2.0 * step.sampled * lm_head) / flops
        pairs = step.kv_read - sum(k for _, k in step.prefill_chunks)
        pairs += sum(c * k + c * (c + 1) / 2 for c, k in step.prefill_chunks)
        out.append((weight_s, gemm_s, kv_s, 4.0 * pairs * q_elems / flops))
    return out


def step_bound_s(phase: tuple[float, float, float, float]) -> float:
    """One step's bound from its step_phases entry: the linear phase takes the longer of its
    weight reads and its FLOPs, then attention the longer of its KV traffic and its FLOPs."""
    weight_s, gemm_s, kv_s, attn_math_s = phase
    return max(weight_s, gemm_s) + max(kv_s, attn_math_s)


def workload_roofline(
    model_cfg: Any,
    dtype_bytes: int,
    kv_dtype_bytes: int,
    requests: Sequence[tuple[int, int]],
    max_num_seqs: int,
    bandwidth: float,
    flops: float,
    max_num_batched_tokens: int = 2048,
) -> dict[str, Any]:
    """The bound (seconds, output tok/s) at `bandwidth` bytes/s and `flops` FLOP/s, with the
    seconds each phase spends above its bytes' time (what the memory floor leaves out)."""
    loads = schedule_loads(requests, max_num_seqs, max_num_batched_tokens)
    phases = step_phases(model_cfg, dtype_bytes, kv_dtype_bytes, loads, bandwidth, flops)
    linear_s = attention_s = linear_extra_s = attention_extra_s = 0.0
    for weight_s, gemm_s, kv_s, attn_math_s in phases:
        linear_s += max(weight_s, gemm_s)
        linear_extra_s += max(0.0, gemm_s - weight_s)
        attention_s += max(kv_s, attn_math_s)
        attention_extra_s += max(0.0, attn_math_s - kv_s)
    out_tokens = int(sum(o for _, o in requests))
    bound_s = sum(step_bound_s(p) for p in phases)
    return {
        "bandwidth": bandwidth,
        "matmul_flops": flops,
        "steps": len(loads),
        "linear_s": linear_s,
        "attention_s": attention_s,
        # Time above the phases' bytes: compute the memory floor does not count.
        "linear_compute_over_bytes_s": linear_extra_s,
        "attention_compute_over_bytes_s": attention_extra_s,
        "bound_s": bound_s,
        "output_tokens": out_tokens,
        "bound_output_tok_s": out_tokens / bound_s if bound_s > 0 else float("inf"),
    }
