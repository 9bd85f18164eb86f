"""Shared fixtures: the embedded SmolLM2 model and tiny random Llama / Qwen3 folders.

Tiny models carry SmolLM2's tokenizer so text prompts work; their weights come from
transformers' own random init and transformers is the numerical reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Without a GPU, Triton kernels run in the interpreter. Set before anything imports triton
# (importing torch does not): @triton.jit picks interpreter or compiler at definition time.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from interpreted_triton import skip_repeated_lang_patching

    skip_repeated_lang_patching()

# One small cache for the whole session, so the GGUF converts once per CI run.
os.environ.setdefault("STRIXLM_CACHE", str(Path.home() / ".cache" / "strixlm-test"))
# pytest-xdist workers (pyproject's addopts) share the cores.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))


# The longest modules on two cores (servers to boot, caches to build, interpreted engines)
# start first, so that the two pytest-xdist workers finish together instead of one running
# a long module alone at the end (pyproject's addopts keep this order: no reordering by
# test count). The router's fast encoder (ONNX export, int8, static table) is built on a
# cold cache by the first router module, in-process; the router servers come later and
# find it.
SLOW_MODULES_FIRST = (
    "test_router_fast_embedder.py",
    "test_chat_tools_server.py",
    "test_prompt_logprobs.py",
    "test_gguf_loader.py",
    "test_triton_sampler.py",
    "test_paged_decode.py",
    "test_correctness_hf.py",
    "test_router_e2e.py",
    "test_openai_server.py",
    "test_thinking_budget_server.py",
    "test_hybrid_graphs.py",
    "test_mixed_graphs.py",
    "test_cli.py",
    "test_sample_graphs.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(SLOW_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: others as found


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    from strixlm.models.default_model import ensure_default_model

    return str(ensure_default_model())  # converted once, under a lock, by one worker


def _save_tiny(kind: str, out: Path, tokenizer_src: str) -> str:
    from transformers import (
        AutoTokenizer,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    common = dict(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(1234)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False, **common))
    else:
        model = Qwen3ForCausalLM(
            Qwen3Config(head_dim=32, rope_theta=1e6, tie_word_embeddings=True, **common)
        )
    # Larger-than-default weights make the logits spread, so greedy choices are not ties.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.2)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer_src).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, smollm2_dir) -> str:
    return _save_tiny("llama", tmp_path_factory.mktemp("tiny-llama"), smollm2_dir)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory, smollm2_dir) -> str:
    return _save_tiny("qwen3", tmp_path_factory.mktemp("tiny-qwen3"), smollm2_dir)


@pytest.fixture(scope="session")
def tiny_qwen3_moe_dir(tmp_path_factory, smollm2_dir) -> str:
    """Tiny random Qwen3-MoE: layers 0 and 2 sparse (8 experts, top 2), layer 1 dense."""
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[1],
        max_position_embeddings=1024,
        rope_theta=1e6,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(4321)
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():  # spread logits and router scores, as in _save_tiny
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.2)
    out = tmp_path_factory.mktemp("tiny-qwen3-moe")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(smollm2_dir).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tiny_bench_model(tmp_path_factory) -> str:
    """A tiny Qwen3 with real (saved) weights and no tokenizer, for the benchmark commands'
    tests; a wide init keeps greedy outputs varied."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder = tmp_path_factory.mktemp("tiny-qwen3")
    cfg = Qwen3Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(folder)
    return str(folder)


@pytest.fixture
def type_lines(monkeypatch):
    """type_lines(lines): input() returns these lines, then raises EOFError (Ctrl-D), as
    a user at `strixlm chat` would type them."""

    def feed(lines: list[str]) -> None:
        it = iter(lines)

        def fake_input(prompt: str = "") -> str:
            try:
                return next(it)
            except StopIteration:
                raise EOFError from None

        monkeypatch.setattr("builtins.input", fake_input)

    return feed
