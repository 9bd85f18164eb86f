"""The memory floor of a throughput workload: the bytes a step schedule must move, over the
copy bandwidth measured on the device.

Decoding at large batch is memory bound: each step reads the weights once and, for every
running request, its KV cache so far (and a hybrid model's Mamba state). `workload_floor`
simulates the scheduler's continuous batching (strixlm/core/scheduler.py: running requests
first, in admission order, then new ones in order while sequence slots and the token budget
last) and sums, step by step:

- weights: one pass over the parameters per step (a step is one forward pass, whatever mix
  of prefill chunks and decodes it holds). The input embedding is a gather of the rows the
  step uses, so it counts as nothing; the LM head is a full matmul and counts in full, tied
  or not. Attention q/k/v/o (+ biases, q/k norms), dense MLPs, routers, shared experts,
  Mamba mixers and norms count in full. Parameters kept in fp32 whatever the model dtype
  (NemotronH's router and its correction bias) count 4 bytes each.
- routed experts (MoE): a step of T tokens reads the experts its tokens chose. With E
  experts, k per token and uniform routing, that is E * (1 - (1 - k/E)^T) experts per MoE
  layer in expectation: k for one token, never more than min(E, T * k), and all E at large
  batch (T = 256, k/E = 6/128 leaves 2e-5 of an expert unread).
- KV reads: a decode of a request whose KV holds c tokens reads c + 1 tokens (its own new
  one included); a prefill chunk after the first reads the chunks before it.
- KV writes: every scheduled token writes its K and V once. Only attention layers hold KV.
- Mamba state (hybrid models): every request in a step writes its state once (conv state in
  the model dtype, SSM state in fp32, every Mamba layer) and reads it first unless the step
  holds its prompt's first chunk (a request starts from zeros).

Per token of KV: 2 * num_attention_layers * num_kv_heads * head_dim * kv_dtype_bytes. Not
counted: activations, logits (B x vocab fp32, ~1% at batch 256 on a Qwen3-0.6B shape),
block-size rounding of the KV read, sliding windows (every layer reads its full context),
and the sampled token (a prefill step samples the first output token: a request of O output
tokens has O - 1 decode steps). floor seconds = bytes / bandwidth; floor tok/s = output
tokens over that. A real engine can only approach it from below.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


def measure_copy_bandwidth(
    device: str, nbytes: int | None = None, iters: int = 10, trials: int | None = None
) -> float:
    """Bytes per second of a large device-to-device copy, read and written bytes both counted
    (the copy moves 2 * nbytes): the best over `trials` fresh buffer pairs (default 8 on
    CUDA, 3 on CPU) of the median of `iters` timed copies.

    nbytes defaults to 2 GiB on CUDA (halved while it does not fit) and 256 MiB on CPU. On
    the H200 one buffer pair read 3.73-3.79 TB/s in some runs and 4.16-4.24 in others, with
    the same code (docs/benchmarks.md, 2026-12-01): the best of several pairs is the
    bandwidth the device can give, which is what a floor should divide by. The best of
    three still read 4.10-4.12 TB/s in three of nineteen runs on one machine whose others
    read 4.16-4.22 (session 47), so CUDA takes eight pairs (about a second).
    """
    if trials is None:
        trials = 8 if torch.device(device).type == "cuda" else 3
    return max(_copy_bandwidth_once(device, nbytes, iters) for _ in range(max(1, trials)))


def _copy_bandwidth_once(device: str, nbytes: int | None, iters: int) -> float:
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
        seconds = median_run_seconds(lambda: dst.copy_(src), dev, iters)
        del src, dst
        torch.cuda.empty_cache()
    else:
        size = nbytes or 256 << 20
        src = torch.ones(size, dtype=torch.uint8)
        dst = torch.empty_like(src)
        seconds = median_run_seconds(lambda: dst.copy_(src), dev, iters)
    return 2 * size / seconds


def median_run_seconds(fn, dev: torch.device, iters: int) -> float:
    """The median time of `iters` runs of fn after a warm-up (0.1 s of runs on CUDA, timed
    with events; two runs on CPU, timed with the clock)."""
    times = []
    if dev.type == "cuda":
        warm_until = time.perf_counter() + 0.1
        while time.perf_counter() < warm_until:
            fn()
            torch.cuda.synchronize(dev)
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(2):
            fn()
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    v = getattr(cfg, name, None)
    return default if v is None else v


def expected_experts(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Distinct experts a step of num_tokens tokens reads in one MoE layer, in expectation
    when each token picks top_k distinct experts uniformly: E * (1 - (1 - k/E)^T)."""
    if num_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def _shape(
    weight_params: int,
    lm_head: int,
    embedding: int,
    kv_elems_per_token: int,
    fp32_params: int = 0,
    moe_layers: int = 0,
    num_experts: int = 0,
    experts_per_token: int = 0,
    expert_params: int = 0,
    conv_state_elems: int = 0,
    ssm_state_elems: int = 0,
    q_elems_per_token: int = 0,
) -> dict[str, int]:
    return {
        # Read every step, in the model dtype (routed experts excluded).
        "weight_params": weight_params,
        # Read every step, stored in fp32.
        "fp32_params": fp32_params,
        "lm_head_params": lm_head,
        "embedding_params_not_read": embedding,
        "kv_elems_per_token": kv_elems_per_token,
        # Routed experts: params of one expert of one MoE layer.
        "moe_layers": moe_layers,
        "num_experts": num_experts,
        "experts_per_token": experts_per_token,
        "expert_params": expert_params,
        # Mamba state of one request, all Mamba layers: conv (model dtype), SSM (fp32).
        "conv_state_elems": conv_state_elems,
        "ssm_state_elems": ssm_state_elems,
        # Query elements of one token over all attention layers (heads x head_dim each):
        # what attention's FLOPs scale with (roofline.py), not a byte of the floor.
        "q_elems_per_token": q_elems_per_token,
    }


def _attention_params(cfg: Any, h: int) -> tuple[int, int, int]:
    """(q/k/v/o params with biases, kv_heads, head_dim) of one attention layer."""
    heads = cfg.num_attention_heads
    kv_heads = _get(cfg, "num_key_value_heads", heads)
    head_dim = _get(cfg, "head_dim", h // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = h * q + 2 * h * kv + q * h
    if _get(cfg, "attention_bias", False):  # Llama / Qwen3 / NemotronH: q, k, v, o biases
        attn += q + 2 * kv + h
    elif _get(cfg, "model_type", "") == "qwen2":  # Qwen2: q, k, v biases always
        attn += q + 2 * kv
    return attn, kv_heads, head_dim


def _moe_layer_count(cfg: Any, layers: int) -> int:
    """Layers with a sparse MLP: Qwen2/3-MoE's decoder_sparse_step and mlp_only_layers
    (Mixtral has neither: every layer)."""
    step = _get(cfg, "decoder_sparse_step", 1) or 1
    dense = set(_get(cfg, "mlp_only_layers", []) or [])
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _decoder_shape(cfg: Any) -> dict[str, int]:
    """Llama / Qwen2 / Qwen3 / Mistral, and their MoE variants (Qwen2/3-MoE, Mixtral)."""
    h = cfg.hidden_size
    layers = cfg.num_hidden_layers
    vocab = cfg.vocab_size
    attn, kv_heads, head_dim = _attention_params(cfg, h)
    if _get(cfg, "model_type", "") in ("qwen3", "qwen3_moe"):
        attn += 2 * head_dim  # per-head q/k RMSNorm weights
    norms = 2 * h
    lm_head = vocab * h
    kv = 2 * layers * kv_heads * head_dim
    experts = _get(cfg, "num_experts", 0) or _get(cfg, "num_local_experts", 0)
    q_elems = layers * cfg.num_attention_heads * head_dim
    if not experts:
        mlp = 3 * h * cfg.intermediate_size  # gate, up, down
        weights = layers * (attn + mlp + norms) + h + lm_head
        return _shape(weights, lm_head, vocab * h, kv, q_elems_per_token=q_elems)
    moe_layers = _moe_layer_count(cfg, layers)
    inter = _get(cfg, "moe_intermediate_size", cfg.intermediate_size)
    fixed_moe = h * experts  # the router
    shared = _get(cfg, "shared_expert_intermediate_size", 0)
    if shared:
        fixed_moe += 3 * h * shared + h  # shared expert and its gate
    dense_mlp = 3 * h * cfg.intermediate_size
    weights = (
        layers * (attn + norms)
        + moe_layers * fixed_moe
        + (layers - moe_layers) * dense_mlp
        + h  # the final norm
        + lm_head
    )
    return _shape(
        weights,
        lm_head,
        vocab * h,
        kv,
        moe_layers=moe_layers,
        num_experts=experts,
        experts_per_token=cfg.num_experts_per_tok,
        expert_params=3 * h * inter,  # gate, up, down
        q_elems_per_token=q_elems,
    )


def _nemotron_h_shape(cfg: Any) -> dict[str, int]:
    """NemotronH: Mamba-2 (M), attention (*), MoE (E) and ReLU^2 MLP (-) layers, each with
    one pre-norm (strixlm/models/nemotron_h.py)."""
    from strixlm.models.nemotron_h import ATTENTION, MAMBA, MLP, MOE, layer_pattern, mamba_dims

    pattern = layer_pattern(cfg)
    h, vocab = cfg.hidden_size, cfg.vocab_size
    n_mamba, n_attn = pattern.count(MAMBA), pattern.count(ATTENTION)
    n_moe, n_mlp = pattern.count(MOE), pattern.count(MLP)
    weights = len(pattern) * h + h + vocab * h  # layer norms, final norm, LM head
    conv_state = ssm_state = 0
    if n_mamba:
        d = mamba_dims(cfg)
        proj = d.intermediate_size + d.conv_dim + d.num_heads  # in_proj: z | xBC | dt
        mamba = h * proj + d.conv_dim * d.conv_kernel + 3 * d.num_heads  # + dt_bias, A, D
        mamba += d.intermediate_size + d.intermediate_size * h  # gated norm, out_proj
        if d.use_conv_bias:
            mamba += d.conv_dim
        if d.use_bias:
            mamba += proj + h
        weights += n_mamba * mamba
        conv_state = n_mamba * d.conv_dim * (d.conv_kernel - 1)
        ssm_state = n_mamba * d.num_heads * d.head_dim * d.state_size
    kv = q_elems = 0
    if n_attn:
        attn, kv_heads, head_dim = _attention_params(cfg, h)
        weights += n_attn * attn
        kv = 2 * n_attn * kv_heads * head_dim
        q_elems = n_attn * cfg.num_attention_heads * head_dim
    bias = bool(_get(cfg, "mlp_bias", False))

    def mlp(width: int, inter: int) -> int:  # up + down (ReLU^2: no gate)
        return 2 * width * inter + ((inter + width) if bias else 0)

    if n_mlp:
        weights += n_mlp * mlp(h, cfg.intermediate_size)
    shape = dict(fp32_params=0, moe_layers=0, num_experts=0, experts_per_token=0)
    expert = 0
    if n_moe:
        experts = cfg.n_routed_experts
        latent = _get(cfg, "moe_latent_size", None)
        fixed = mlp(h, cfg.moe_shared_expert_intermediate_size)
        if latent:
            fixed += mlp(h, latent)  # fc1_latent_proj and fc2_latent_proj
        weights += n_moe * fixed
        expert = 2 * (latent or h) * cfg.moe_intermediate_size
        shape = dict(
            fp32_params=n_moe * (experts * h + experts),  # router and correction bias
            moe_layers=n_moe,
            num_experts=experts,
            experts_per_token=cfg.num_experts_per_tok,
        )
    return _shape(
        weights,
        vocab * h,
        vocab * h,
        kv,
        expert_params=expert,
        conv_state_elems=conv_state,
        ssm_state_elems=ssm_state,
        q_elems_per_token=q_elems,
        **shape,
    )


def model_shape(cfg: Any) -> dict[str, int]:
    """What one step reads (see the module docstring), from an HF config: parameters read
    every step, routed experts, KV elements per token, Mamba state elements per request."""
    if _get(cfg, "hybrid_override_pattern") or _get(cfg, "layers_block_type"):
        return _nemotron_h_shape(cfg)
    return _decoder_shape(cfg)


@dataclass
class StepLoad:
    """What one step of the simulated schedule computes and moves, in tokens and requests."""

    tokens: int  # scheduled tokens (prefill chunks and decodes)
    sampled: int  # requests that sample a token (decodes, prompts reaching their end)
    kv_read: int  # tokens of KV read
    kv_written: int  # tokens of KV written
    state_reads: int  # request states read (hybrid models)
    state_writes: int
    # (chunk tokens, tokens of context before the chunk) of each prefill chunk
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)


def schedule_loads(
    requests: Sequence[tuple[int, int]], max_num_seqs: int, max_num_batched_tokens: int
) -> list[StepLoad]:
    """The scheduler's continuous batching of `requests` ((input_len, output_len) each, all
    queued at once, in arrival order), step by step (see the module docstring)."""
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
    nxt = 0
    loads = []
    while nxt < len(reqs) or len(prompt):
        # Running requests first: a decode wants 1 token, a partial prefill the rest of its
        # prompt; each gets what is left of the budget after those before it.
        want = np.where(computed < prompt, prompt - computed, 1)
        before = np.cumsum(want) - want
        n = np.minimum(want, np.maximum(budget - before, 0))
        used = int(n.sum())
        decode = (computed >= prompt) & (n > 0)
        chunk = ~decode & (n > 0)
        step = StepLoad(
            tokens=0,
            sampled=0,
            # A decode reads its KV and its new token's; a later prefill chunk the chunks
            # before it.
            kv_read=int((computed[decode] + 1).sum()) + int(computed[chunk].sum()),
            kv_written=used,
            # Running requests continue their state: read, then write.
            state_reads=int((n > 0).sum()),
            state_writes=int((n > 0).sum()),
            prefill_chunks=list(zip(n[chunk].tolist(), computed[chunk].tolist(), strict=True)),
        )
        computed = computed + n
        # A decode samples; a prefill samples when its chunk reaches the end of the prompt.
        sampled = decode | (chunk & (computed == prompt))
        step.sampled = int(sampled.sum())
        left = left - sampled
        # Then new requests, in order, while slots and budget last.
        new_p, new_c, new_l = [], [], []
        while nxt < len(reqs) and used < budget and len(prompt) + len(new_p) < max_num_seqs:
            p, o = (int(x) for x in reqs[nxt])
            c = min(p, budget - used)
            used += c
            step.kv_written += c
            step.state_writes += 1  # a first chunk starts from zeros: write only
            step.prefill_chunks.append((c, 0))
            step.sampled += c == p
            new_p.append(p)
            new_c.append(c)
            new_l.append(o - (c == p))
            nxt += 1
        if new_p:
            prompt = np.concatenate([prompt, new_p])
            computed = np.concatenate([computed, new_c])
            left = np.concatenate([left, new_l])
        step.tokens = used
        loads.append(step)
        keep = left > 0
        prompt, computed, left = prompt[keep], computed[keep], left[keep]
    return loads


def unit_bytes(
    shape: dict[str, int], dtype_bytes: int, kv_dtype_bytes: int
) -> tuple[int, int, int, int]:
    """(weights every step reads, one expert of every MoE layer, KV of one token, Mamba
    state of one request), in bytes. Conv state is in the model dtype, SSM state in fp32."""
    fixed = shape["weight_params"] * dtype_bytes + shape["fp32_params"] * 4
    expert = shape["moe_layers"] * shape["expert_params"] * dtype_bytes
    kv_token = shape["kv_elems_per_token"] * kv_dtype_bytes
    state = shape["conv_state_elems"] * dtype_bytes + shape["ssm_state_elems"] * 4
    return fixed, expert, kv_token, state


def step_byte_parts(
    shape: dict[str, int], dtype_bytes: int, kv_dtype_bytes: int, loads: Sequence[StepLoad]
) -> np.ndarray:
    """[steps, 2] float64: each step's weight bytes (the routed experts its tokens chose
    included) and its KV reads and writes plus Mamba state traffic. The roofline bounds the
    two sides apart (roofline.step_phases); their sum is step_bytes."""
    fixed, expert, kv_tok, state = unit_bytes(shape, dtype_bytes, kv_dtype_bytes)
    num_experts, top_k = shape["num_experts"], shape["experts_per_token"]
    out = np.empty((len(loads), 2), dtype=np.float64)
    for i, s in enumerate(loads):
        experts = expected_experts(num_experts, top_k, s.tokens) if num_experts else 0.0
        out[i, 0] = fixed + experts * expert
        out[i, 1] = (s.kv_read + s.kv_written) * kv_tok + (s.state_reads + s.state_writes) * state
    return out


def step_bytes(
    shape: dict[str, int], dtype_bytes: int, kv_dtype_bytes: int, loads: Sequence[StepLoad]
) -> np.ndarray:
    """Bytes each step of `loads` must move (float64, one entry a step). Their sum is
    workload_floor's "bytes"; profile_run.py sets each step's share of the floor beside the
    step's measured time."""
    return step_byte_parts(shape, dtype_bytes, kv_dtype_bytes, loads).sum(axis=1)


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
    Returns bytes (total and by kind), steps, floor_s and floor_output_tok_s. Mamba conv
    state is in the model dtype (dtype_bytes), SSM state in fp32.
    """
    shape = model_shape(model_cfg)
    fixed_bytes, expert_bytes, kv_tok, state_bytes = unit_bytes(shape, dtype_bytes, kv_dtype_bytes)
    num_experts, top_k = shape["num_experts"], shape["experts_per_token"]
    loads = schedule_loads(requests, max_num_seqs, max_num_batched_tokens)
    steps = len(loads)
    kv_read = sum(s.kv_read for s in loads)  # in tokens
    kv_written = sum(s.kv_written for s in loads)
    state_reads = sum(s.state_reads for s in loads)  # in request-states
    state_writes = sum(s.state_writes for s in loads)
    # Experts read per MoE layer, summed over steps.
    expert_loads = (
        sum(expected_experts(num_experts, top_k, s.tokens) for s in loads) if num_experts else 0.0
    )

    experts_total = expert_loads * expert_bytes if num_experts else 0
    weights_total = steps * fixed_bytes + experts_total
    kv_read_b, kv_write_b = kv_read * kv_tok, kv_written * kv_tok
    state_read_b, state_write_b = state_reads * state_bytes, state_writes * state_bytes
    total = weights_total + kv_read_b + kv_write_b + state_read_b + state_write_b
    out_tokens = int(sum(o for _, o in requests))
    floor_s = total / bandwidth
    return {
        "bytes": total,
        "weight_bytes": weights_total,
        "expert_weight_bytes": experts_total,
        "kv_read_bytes": kv_read_b,
        "kv_write_bytes": kv_write_b,
        "state_read_bytes": state_read_b,
        "state_write_bytes": state_write_b,
        # A step reading every weight (all experts); a one-token step reads top_k experts.
        "weight_bytes_per_step": fixed_bytes + num_experts * expert_bytes,
        "weight_bytes_one_token_step": fixed_bytes + top_k * expert_bytes,
        "kv_bytes_per_token": kv_tok,
        "state_bytes_per_request": state_bytes,
        "steps": steps,
        "mean_experts_per_moe_layer": expert_loads / steps if num_experts and steps else 0.0,
        "output_tokens": out_tokens,
        "bandwidth": bandwidth,
        "floor_s": floor_s,
        "floor_output_tok_s": out_tokens / floor_s if floor_s > 0 else float("inf"),
    }
