"""The Hugging Face transformers peer for `strixlm bench throughput`, in its best configuration.

Continuous batching ("cb", the default wherever it runs): the engine behind
`model.generate_batch`. generate_batch takes one max_new_tokens for all requests, so we drive
the same machinery one level down, exactly as generate_batch does: the
`continuous_batching_context_manager` (same GenerationConfig, ContinuousBatchingConfig,
WorkloadHints and CUDA-graph warm-up) and `manager.add_request(..., max_new_tokens=n_i,
eos_token_id=-1)` per request, so every request produces exactly its own output length. On CUDA
the config is ContinuousBatchingConfig(use_cuda_graph=True, use_async_batching=True,
max_batch_tokens=..., max_memory_percent=...); the manager itself switches the model's
attention to a paged implementation ("paged|sdpa", or flash if installed). These calls exist
in transformers 5.17 and 5.24 alike.

Padded batches ("generate"): plain `model.generate` over left-padded batches of up to 16
requests sorted by output length; each batch runs to its longest output and each request keeps
(and is counted for) only its own length.

HF's continuous batching caches attention K/V only: a model with recurrent layers (NemotronH's
Mamba layers, layer type "linear_attention") is refused there, so "auto" goes straight to
padded generate for it (the reason lands in the result's config as cb_skipped).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

from strixlm.benchmarks.workload import RunResult, Workload

logger = logging.getLogger(__name__)

PADDED_BATCH_SIZE = 16


def load_hf_model(folder: str, load_format: str, dtype: torch.dtype, device: str):
    """HF's own model for the folder: its weights, or HF's random init for a dummy run."""
    if load_format == "dummy":
        config = AutoConfig.from_pretrained(folder)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)
    # A fresh generation config: the checkpoint's eos/sampling defaults would otherwise be
    # merged into ours by generate() and stop requests early.
    model.generation_config = GenerationConfig()
    return model.eval()


def cb_unsupported(config) -> str | None:
    """Why HF continuous batching cannot run this model (its own layer-type check), or None."""
    try:
        from transformers.generation.continuous_batching.cache import group_layers_by_attn_type
    except ImportError:  # another layout of transformers: let run_cb try
        return None
    try:
        group_layers_by_attn_type(config)
    except ValueError as e:
        return str(e)
    return None


def free_device_memory(device: str) -> None:
    """Hand back what the objects just dropped held (a model, an engine) before the next
    one loads."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return str(obj)


def make_cb_config(
    on_cuda: bool,
    max_batch_tokens: int | None,
    max_memory_percent: float | None,
    num_blocks: int | None,
):
    """ContinuousBatchingConfig with the fields this transformers version knows; the rest are
    dropped with a warning (so a field renamed between versions never breaks the run)."""
    from transformers import ContinuousBatchingConfig

    wanted: dict[str, Any] = {}
    if on_cuda:
        wanted.update(use_cuda_graph=True, use_async_batching=True)
    if max_batch_tokens:
        wanted["max_batch_tokens"] = max_batch_tokens
    if max_memory_percent is not None:
        wanted["max_memory_percent"] = max_memory_percent
    if num_blocks is not None:
        wanted["num_blocks"] = num_blocks
    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    dropped = sorted(set(wanted) - known)
    if dropped:
        logger.warning("ContinuousBatchingConfig here lacks %s: running without them", dropped)
    kwargs = {k: v for k, v in wanted.items() if k in known}
    return ContinuousBatchingConfig(**kwargs), kwargs


def _drain(manager, workload: Workload, prefix: str) -> list[list[int]]:
    """Submit every request with its own max_new_tokens and wait for all of them."""
    ids = []
    for i, (prompt, n) in enumerate(zip(workload.prompts, workload.output_lens, strict=True)):
        rid = manager.add_request(
            input_ids=prompt, request_id=f"{prefix}{i}", max_new_tokens=n, eos_token_id=-1
        )
        if rid is None:
            raise RuntimeError("the HF continuous batching manager refused a request")
        ids.append(rid)
    results: dict[str, list[int]] = {}
    while len(results) < len(ids):
        out = manager.get_result(timeout=1)
        if out is None:
            if not manager.is_running():
                raise RuntimeError("HF continuous batching stopped before finishing")
            continue
        if out.is_finished():
            if out.error is not None:
                raise RuntimeError(f"HF request {out.request_id} failed: {out.error}")
            results[out.request_id] = list(out.generated_tokens)
    return [results[r] for r in ids]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_cb(
    model,
    workload: Workload,
    warmup: Workload,
    device: str,
    max_batch_tokens: int | None,
    max_memory_percent: float | None,
) -> RunResult:
    on_cuda = device.startswith("cuda")
    num_blocks = None
    if not on_cuda:
        # On CPU HF would size its cache from free RAM (GBs); give it what the workload needs.
        block = 256
        num_blocks = sum(
            -(-(len(p) + n) // block) + 1
            for p, n in zip(workload.prompts, workload.output_lens, strict=True)
        )
        num_blocks += 8
    cb_config, cb_kwargs = make_cb_config(on_cuda, max_batch_tokens, max_memory_percent, num_blocks)
    longest = max(workload.output_lens + warmup.output_lens)
    gen_config = GenerationConfig(max_new_tokens=longest, do_sample=False, eos_token_id=-1)
    cm_kwargs: dict[str, Any] = dict(
        generation_config=gen_config,
        continuous_batching_config=cb_config,
        block=True,
        timeout=60,
        warmup=True,
    )
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints

        cm_kwargs["workload_hints"] = WorkloadHints(
            max_prompt_length=max(len(p) for p in workload.prompts + warmup.prompts),
            max_generated_length=longest,
            num_requests=workload.num_requests,
        )
    except ImportError:
        logger.warning("transformers lacks WorkloadHints: running without workload hints")
    with model.continuous_batching_context_manager(**cm_kwargs) as manager:
        attn = model.config._attn_implementation
        _drain(manager, warmup, "warmup-")
        _sync(device)
        start = time.perf_counter()
        token_ids = _drain(manager, workload, "req-")
        _sync(device)
        elapsed = time.perf_counter() - start
        resolved = _jsonable(manager.continuous_batching_config)
    config = {
        "mode": "cb",
        "api": "continuous_batching_context_manager + add_request(max_new_tokens=per request) "
        "(the engine behind generate_batch)",
        "continuous_batching_config_args": _jsonable(cb_kwargs),
        "continuous_batching_config_resolved": resolved,
        "generation_config": {"do_sample": False, "eos_token_id": -1},
        "attn_implementation": attn,
    }
    return _result(workload, elapsed, token_ids, config)


def run_padded_generate(
    model, workload: Workload, warmup: Workload, device: str, batch_size: int = PADDED_BATCH_SIZE
) -> RunResult:
    pad_id = 0

    def go(w: Workload) -> list[list[int]]:
        order = sorted(range(w.num_requests), key=lambda i: (w.output_lens[i], len(w.prompts[i])))
        out: list[list[int]] = [[] for _ in range(w.num_requests)]
        for b in range(0, len(order), batch_size):
            idx = order[b : b + batch_size]
            width = max(len(w.prompts[i]) for i in idx)
            new = max(w.output_lens[i] for i in idx)
            ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                p = w.prompts[i]
                ids[row, width - len(p) :] = torch.tensor(p)
                mask[row, width - len(p) :] = 1
            gen = GenerationConfig(
                max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=pad_id
            )
            with torch.inference_mode():
                seqs = model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=gen
                )
            seqs = seqs[:, width:].tolist()
            for row, i in enumerate(idx):
                out[i] = seqs[row][: w.output_lens[i]]
        return out

    go(warmup)
    _sync(device)
    start = time.perf_counter()
    token_ids = go(workload)
    _sync(device)
    elapsed = time.perf_counter() - start
    config = {
        "mode": "generate",
        "api": f"model.generate, left-padded batches of up to {batch_size} sorted by output "
        "length; each request counted for its own length only",
        "attn_implementation": model.config._attn_implementation,
    }
    return _result(workload, elapsed, token_ids, config)


def _result(
    workload: Workload, elapsed: float, token_ids: list[list[int]], config: dict
) -> RunResult:
    return RunResult(
        name="hf",
        num_requests=workload.num_requests,
        input_tokens=workload.input_tokens,
        output_tokens=sum(len(t) for t in token_ids),
        elapsed_s=elapsed,
        token_ids=token_ids,
        config=config,
    )


def run_hf_peer(
    folder: str,
    load_format: str,
    dtype: torch.dtype,
    device: str,
    workload: Workload,
    warmup: Workload,
    *,
    mode: str = "auto",
    max_batch_tokens: int | None = None,
    max_memory_percent: float | None = None,
) -> RunResult:
    """Load HF's model and time it on the workload. mode: auto (cb, falling back to padded
    generate if cb fails), cb, or generate."""
    model = load_hf_model(folder, load_format, dtype, device)
    skipped = cb_unsupported(model.config) if mode == "auto" else None
    if skipped:
        logger.warning(
            "HF continuous batching cannot run this model (%s): padded generate", skipped
        )
        mode = "generate"
    try:
        if mode in ("auto", "cb"):
            try:
                res = run_cb(model, workload, warmup, device, max_batch_tokens, max_memory_percent)
            except Exception as e:  # noqa: BLE001 - any failure of the optional path
                if mode == "cb":
                    raise
                logger.warning("HF continuous batching failed (%s): using padded generate", e)
                model = None  # a large model must not be held twice
                free_device_memory(device)
                model = load_hf_model(folder, load_format, dtype, device)
                res = run_padded_generate(model, workload, warmup, device)
                res.config["cb_error"] = repr(e)
        elif mode == "generate":
            res = run_padded_generate(model, workload, warmup, device)
        else:
            raise ValueError(f"--hf-mode: unknown mode {mode!r}; choose auto, cb or generate")
    finally:
        del model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if skipped:
        res.config["cb_skipped"] = skipped
    res.config.update(
        dtype=str(dtype).removeprefix("torch."),
        device=device,
        weights="hf random init" if load_format == "dummy" else "from folder",
    )
    return res
