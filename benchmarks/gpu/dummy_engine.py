"""The engine the GPU scripts measure, built one way: a config from
strixlm/benchmarks/configs (Qwen3-0.6B by default) with dummy bf16 weights and no tokenizer;
and a batch of synthetic prompts brought to steady decoding."""

from __future__ import annotations

import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)

from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402

CONFIGS = os.path.join(ROOT, "strixlm", "benchmarks", "configs")


def dummy_llm(
    max_num_seqs: int,
    *,
    eager: bool = False,
    mem_frac: float = 0.5,
    model: str = "qwen3-0.6b",
    max_model_len: int | None = None,
    device: str = "cuda",
    dtype: str = "bfloat16",
) -> LLM:
    """LLM over CONFIGS/model with dummy weights (gpu_memory_utilization = mem_frac)."""
    return LLM(
        os.path.join(CONFIGS, model),
        load_format="dummy",
        device=device,
        dtype=dtype,
        skip_tokenizer_init=True,
        enforce_eager=eager,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=mem_frac,
        max_model_len=max_model_len,
    )


def start_decoding(engine, batch: int, prompt_len: int, max_tokens: int = 10_000) -> None:
    """Add `batch` greedy requests (distinct prompt_len-token prompts, ignore EOS) and step
    until all are prefilled under the token budget and have decoded a few steps."""
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    for i in range(batch):
        engine.add_request(
            [1000 + (i + j) % 100_000 for j in range(prompt_len)], params, kind="delta"
        )
    budget = engine.config.scheduler.max_num_batched_tokens
    for _ in range(batch * prompt_len // budget + 5):
        engine.step()
