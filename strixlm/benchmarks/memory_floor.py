"""The memory floor of a throughput workload: the bytes a step schedule must move, over the
copy bandwidth measured on the device.

Decoding a small model at large batch is memory bound: each step reads all the weights once
and, for every running request, its KV cache so far. `workload_floor` simulates the
scheduler's continuous batching (strixlm/core/scheduler.py: running requests first, in
admission order, then new ones in order while sequence slots and the token budget last) and
sums, step by step:

- weights: one pass over the parameters per step (a step is one forward pass, whatever mix
  of prefill chunks and decodes it holds). The input embedding is a gather of the rows the
  step uses, so it counts as nothing; the LM head is a full matmul and counts in full, tied
  or not. Attention q/k/v/o (+ biases, q/k norms), MLP (all experts of an MoE layer: a large
  batch touches them all) and norms count in full.
- KV reads: a decode of a request whose KV holds c tokens reads c + 1 tokens (its own new
  one included); a prefill chunk after the first reads the chunks before it.
- KV writes: every scheduled token writes its K and V once.

Per token of KV: 2 * num_layers * num_kv_heads * head_dim * kv_dtype_bytes. Not counted:
activations, logits (B x vocab fp32, ~1% at batch 256 on a Qwen3-0.6B shape), block-size
rounding of the KV read, sliding windows (every layer reads its full context), and the
sampled token (a prefill step samples the first output token: a request of O output tokens
has O - 1 decode steps). floor seconds = bytes / bandwidth; floor tok/s = output tokens over
that. A real engine can only approach it from below.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def measure_copy_bandwidth(device: str, nbytes: int | None = None, iters: int = 10) -> float:
    """Bytes per second of a large device-to-device copy, read and written bytes both counted
    (the copy moves 2 * nbytes). Median of `iters` timed copies after a few warm-ups.

    nbytes defaults to 2 GiB on CUDA (halved while it does not fit) and 256 MiB on CPU.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        size = nbytes or 2 << 30
        while True:
            try:
                src = torch.empty(size, dtype=torch.uint8, device=dev)
                dst = torch.empty_like(src)
                break
            except torch.OutOfMemoryError:
                if size <= 64 << 20:
                    raise
                size //= 2
        src.fill_(1)
        for _ in range(3):
            dst.copy_(src)
        times = []
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        del src, dst
        torch.cuda.empty_cache()
    else:
        size = nbytes or 256 << 20
        src = torch.ones(size, dtype=torch.uint8)
        dst = torch.empty_like(src)
        for _ in range(2):
            dst.copy_(src)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    return 2 * size / statistics.median(times)


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    v = getattr(cfg, name, None)
    return default if v is None else v


def model_shape(cfg: Any) -> dict[str, int]:
    """Parameters read per step (see the module docstring) and KV elements per token, from an
    HF config of a dense or MoE decoder (Llama / Qwen3 / Mistral shape)."""
    if _get(cfg, "hybrid_override_pattern") or _get(cfg, "layers_block_type"):
        raise NotImplementedError("memory floor: hybrid (mamba) models are not modelled")
    h = cfg.hidden_size
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv_heads = _get(cfg, "num_key_value_heads", heads)
    head_dim = _get(cfg, "head_dim", h // heads)
    vocab = cfg.vocab_size
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = h * q + 2 * h * kv + q * h
    if _get(cfg, "attention_bias", False):  # Llama / Qwen3: q, k, v and o biases
        attn += q + 2 * kv + h
    elif _get(cfg, "model_type", "") == "qwen2":  # Qwen2: q, k, v biases always
        attn += q + 2 * kv
    if _get(cfg, "model_type", "") in ("qwen3", "qwen3_moe"):
        attn += 2 * head_dim  # per-head q/k RMSNorm weights
    experts = _get(cfg, "num_experts", 0) or _get(cfg, "num_local_experts", 0)
    if experts:  # router + every expert (gate, up, down), plus a shared expert if any
        inter = _get(cfg, "moe_intermediate_size", cfg.intermediate_size)
        mlp = h * experts + experts * 3 * h * inter
        shared = _get(cfg, "shared_expert_intermediate_size", 0)
        if shared:
            mlp += 3 * h * shared + h  # shared expert and its gate
    else:
        mlp = 3 * h * cfg.intermediate_size  # gate, up, down
    norms = 2 * h
    per_layer = attn + mlp + norms
    lm_head = vocab * h
    return {
        "weight_params": layers * per_layer + h + lm_head,  # + the final norm
        "lm_head_params": lm_head,
        "embedding_params_not_read": vocab * h,
        "kv_elems_per_token": 2 * layers * kv_heads * head_dim,
    }


def workload_floor(
    model_cfg: Any,
    dtype_bytes: int,
    kv_dtype_bytes: int,
    requests: Sequence[tuple[int, int]],
    max_num_seqs: int,
    bandwidth: float,
    max_num_batched_tokens: int = 2048,
) -> dict[str, Any]:
    """Bytes the workload must move and the best tok/s that allows at `bandwidth` (bytes/s).

    requests: (input_len, output_len) per request, in arrival order (all queued at once).
    Returns bytes (total and by kind), steps, floor_s and floor_output_tok_s.
    """
    shape = model_shape(model_cfg)
    weight_bytes = shape["weight_params"] * dtype_bytes
    kv_tok = shape["kv_elems_per_token"] * kv_dtype_bytes
    budget = max_num_batched_tokens
    reqs = np.asarray(requests, dtype=np.int64).reshape(-1, 2)
    if budget < 1 or max_num_seqs < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
    if len(reqs) and (reqs[:, 0].min() < 1 or reqs[:, 1].min() < 1):
        raise ValueError("every request needs at least one input and one output token")

    # Running requests, in admission order: prompt length, tokens in the KV cache, output
    # tokens still to sample.
    prompt = np.zeros(0, np.int64)
    computed = np.zeros(0, np.int64)
    left = np.zeros(0, np.int64)
    nxt = steps = 0
    kv_read = kv_written = 0  # in tokens
    while nxt < len(reqs) or len(prompt):
        # Running requests first: a decode wants 1 token, a partial prefill the rest of its
        # prompt; each gets what is left of the budget after those before it.
        want = np.where(computed < prompt, prompt - computed, 1)
        before = np.cumsum(want) - want
        n = np.minimum(want, np.maximum(budget - before, 0))
        used = int(n.sum())
        decode = (computed >= prompt) & (n > 0)
        kv_read += int((computed[decode] + 1).sum())
        kv_read += int(computed[~decode & (n > 0)].sum())  # later prefill chunks
        kv_written += used
        computed = computed + n
        # A decode samples; a prefill samples when its chunk reaches the end of the prompt.
        sampled = decode | ((n > 0) & ~decode & (computed == prompt))
        left = left - sampled
        # Then new requests, in order, while slots and budget last.
        new_p, new_c, new_l = [], [], []
        while nxt < len(reqs) and used < budget and len(prompt) + len(new_p) < max_num_seqs:
            p, o = (int(x) for x in reqs[nxt])
            c = min(p, budget - used)
            used += c
            kv_written += c
            new_p.append(p)
            new_c.append(c)
            new_l.append(o - (c == p))
            nxt += 1
        if new_p:
            prompt = np.concatenate([prompt, new_p])
            computed = np.concatenate([computed, new_c])
            left = np.concatenate([left, new_l])
        steps += 1
        keep = left > 0
        prompt, computed, left = prompt[keep], computed[keep], left[keep]

    weights_total = steps * weight_bytes
    kv_read_b, kv_write_b = kv_read * kv_tok, kv_written * kv_tok
    total = weights_total + kv_read_b + kv_write_b
    out_tokens = int(reqs[:, 1].sum()) if len(reqs) else 0
    floor_s = total / bandwidth
    return {
        "bytes": total,
        "weight_bytes": weights_total,
        "kv_read_bytes": kv_read_b,
        "kv_write_bytes": kv_write_b,
        "weight_bytes_per_step": weight_bytes,
        "kv_bytes_per_token": kv_tok,
        "steps": steps,
        "output_tokens": out_tokens,
        "bandwidth": bandwidth,
        "floor_s": floor_s,
        "floor_output_tok_s": out_tokens / floor_s if floor_s > 0 else float("inf"),
    }
