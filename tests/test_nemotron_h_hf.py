"""NemotronH against HF transformers: greedy tokens and logprobs for tiny random models with
Mamba, attention, MoE (plain and LatentMoE) and MLP layers; prompts crossing Mamba chunk
(16) and attention block boundaries; alone, batched, in chunked prefill and after
preemption. Config parsing and weight loading too."""

from __future__ import annotations

import json
import math

import pytest
import torch
from nemotron_h_utils import (
    HFReference,
    one_torch_thread,
    random_prompts,
    save_tiny_nemotron_h,
)

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.layers.attention.torch_paged import TorchPagedAttention
from strixlm.models.nemotron_h import NemotronHForCausalLM, config_float, layer_pattern


@pytest.fixture(scope="module", autouse=True)
def _single_torch_thread():
    with one_torch_thread():
        yield


PATTERN = "M*EM-E*M"
LENGTHS = [1, 7, 16, 17, 33, 80]
# Three requests that cross the 48-token attention block while decoding: in a 6-block pool
# one of them must be preempted.
PREEMPT_LENGTHS = [44, 45, 46, 13, 80]
MAX_TOKENS = 6
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)


@pytest.fixture(scope="module", params=["moe", "latent_moe"])
def case(request, tmp_path_factory):
    latent = 32 if request.param == "latent_moe" else None
    folder = save_tiny_nemotron_h(tmp_path_factory.mktemp(request.param), PATTERN, latent)
    return folder, HFReference(folder), random_prompts(LENGTHS, seed=3)


def raised_block_size(llm: LLM) -> int:
    return llm.engine.core.runner.block_size


def make_llm(folder: str, **kw) -> LLM:
    opts = dict(device="cpu", dtype="float32", skip_tokenizer_init=True, max_model_len=256)
    opts.update(kw)
    return LLM(folder, **opts)


def assert_no_leaks(llm: LLM) -> None:
    core = llm.engine.core
    assert core.kv_manager.num_free_blocks() == core.num_blocks - 1


def test_alone_and_batched_match_hf(case):
    folder, hf, prompts = case
    llm = make_llm(folder, num_gpu_blocks_override=64)
    # 5.6 KiB of Mamba state per layer over 128 bytes of K per token: 48-token blocks.
    assert llm.engine.core.runner.layout is not None and raised_block_size(llm) == 48
    alone = [llm.generate([p], GREEDY, use_tqdm=False)[0] for p in prompts]
    hf.check(prompts, alone, MAX_TOKENS)
    batched = llm.generate(prompts, GREEDY, use_tqdm=False)
    hf.check(prompts, batched, MAX_TOKENS)
    assert_no_leaks(llm)


def test_chunked_prefill_and_preemption_match_hf(case):
    """An 8-token step budget splits prompts mid-chunk (Mamba state carried across steps);
    a 6-block pool forces a preemption, after which the request restarts from zero state."""
    folder, hf, _ = case
    prompts = random_prompts(PREEMPT_LENGTHS, seed=3)
    llm = make_llm(folder, max_num_batched_tokens=8, num_gpu_blocks_override=7)
    assert raised_block_size(llm) == 48
    outs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.engine.core.scheduler.num_preemptions > 0
    hf.check(prompts, outs, MAX_TOKENS)
    assert_no_leaks(llm)


# ---- config and weights --------------------------------------------------------------------


def test_config_with_infinity_and_layer_spellings(tmp_path):
    from transformers import AutoConfig

    save_tiny_nemotron_h(tmp_path, "M*E-")
    raw = json.loads((tmp_path / "config.json").read_text())
    # transformers writes the infinite dt limit as {"__float__": "Infinity"}.
    assert raw["time_step_limit"][1] == {"__float__": "Infinity"}
    cfg = AutoConfig.from_pretrained(tmp_path)
    assert layer_pattern(cfg) == "M*E-"
    model = NemotronHForCausalLM(cfg, TorchPagedAttention)
    assert model.mamba_layers()[0].dims.dt_limit == (0.0, math.inf)
    assert config_float({"__float__": "Infinity"}) == math.inf
    assert config_float("-inf") == -math.inf

    class Legacy:  # older checkpoints: layers_block_type with mamba / attention
        layers_block_type = ["mamba", "attention", "moe", "mlp"]

    class Pattern:
        layers_block_type = None
        hybrid_override_pattern = "M-*E"

    assert layer_pattern(Legacy) == "M*E-"
    assert layer_pattern(Pattern) == "M-*E"
    Pattern.hybrid_override_pattern = "M*X"
    with pytest.raises(ValueError, match="unknown layer kinds"):
        layer_pattern(Pattern)


def test_stacked_and_per_expert_weights_load_alike(case):
    """The released per-expert tensors (what save_pretrained writes) and transformers'
    in-memory stacked ones (model.*.experts.up_proj) give the same parameters; a missing
    expert is reported."""
    from strixlm.models.loader import iterate_safetensors

    folder, hf, _ = case
    cfg = hf.model.config
    a = NemotronHForCausalLM(cfg, TorchPagedAttention)
    b = NemotronHForCausalLM(cfg, TorchPagedAttention)
    loaded_a = a.load_weights(iterate_safetensors(folder))
    loaded_b = b.load_weights(hf.model.state_dict().items())
    everything = {n for n, _ in a.named_parameters()}
    assert loaded_a == everything and loaded_b == everything
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa, pb), name
    partial = [(n, t) for n, t in iterate_safetensors(folder) if ".experts.3.up_proj" not in n]
    missing = everything - NemotronHForCausalLM(cfg, TorchPagedAttention).load_weights(partial)
    assert missing == {"layers.2.mixer.experts.w_up", "layers.5.mixer.experts.w_up"}
