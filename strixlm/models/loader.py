"""Build a model from a Hugging Face style folder (or random weights for benchmarks)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import torch
from safetensors import safe_open
from torch import nn
from tqdm import tqdm

from strixlm.layers.attention.backend import AttentionBackend
from strixlm.models.registry import get_model_class


def iterate_safetensors(folder: str) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {folder}")
    for f in tqdm(files, desc="Loading safetensors shards", disable=len(files) < 2):
        with safe_open(f, framework="pt") as sf:
            for name in sf.keys():
                yield name, sf.get_tensor(name)


def init_dummy_weights(model: nn.Module, seed: int) -> None:
    """Small random weights: enough for throughput work, keeps activations finite.

    Drawn on each parameter's device: a CUDA generator fills a 30B-parameter model in
    seconds, where the CPU one takes minutes (so CUDA and CPU runs get different values)."""
    gens: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
                continue
            if p.device not in gens:
                gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            w = torch.empty(p.shape, dtype=torch.float32, device=p.device)
            p.copy_(w.uniform_(-0.02, 0.02, generator=gens[p.device]).to(p.dtype))


def load_model(
    hf_config,
    folder: str | None,
    load_format: str,
    backend_cls: type[AttentionBackend],
    device: str,
    dtype: torch.dtype,
    seed: int = 0,
) -> nn.Module:
    cls = get_model_class(hf_config)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(hf_config, backend_cls)
    finally:
        torch.set_default_dtype(old)
    if load_format == "dummy":
        init_dummy_weights(model, seed)
    else:
        if folder is None:
            raise ValueError("a model folder is needed unless --load-format dummy")
        loaded = model.load_weights(iterate_safetensors(folder))
        missing = {n for n, _ in model.named_parameters()} - loaded
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[:3]}")
    return model.eval()
