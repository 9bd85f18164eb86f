"""strixlm's Qwen3-MoE against HF transformers on a tiny random model (fp32, CPU):
the sparse block and the full logits, then greedy tokens alone, batched and after
preemption. The model's experts run through FusedMoE (the torch reference on CPU; the
Triton kernel is compared with that reference in test_fused_moe.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from attention_inputs import one_prompt_metadata
from test_correctness_hf import GREEDY, SMALL_KV, check_against_hf, encode, hf_reference
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3MoeConfig
from transformers import Qwen3MoeForCausalLM as HFQwen3Moe
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from strixlm.entrypoints.llm import LLM
from strixlm.layers.attention.torch_paged import TorchPagedAttention
from strixlm.models.loader import load_model
from strixlm.models.qwen3_moe import Qwen3MoeForCausalLM, Qwen3MoeSparseBlock
from strixlm.models.registry import get_model_class

MAX_TOKENS = 16


@pytest.fixture(scope="module")
def hf_model(tiny_qwen3_moe_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_qwen3_moe_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def our_model(tiny_qwen3_moe_dir):
    cfg = AutoConfig.from_pretrained(tiny_qwen3_moe_dir)
    assert get_model_class(cfg) is Qwen3MoeForCausalLM
    return load_model(cfg, tiny_qwen3_moe_dir, "auto", TorchPagedAttention, "cpu", torch.float32)


@pytest.fixture(scope="module")
def refs(tiny_qwen3_moe_dir):
    prompts = encode(tiny_qwen3_moe_dir)
    return prompts, hf_reference(tiny_qwen3_moe_dir, prompts, MAX_TOKENS)


@pytest.mark.parametrize(
    "sparse_step, mlp_only, expected",
    [
        (1, [], [1, 1, 1, 1, 1, 1]),
        (2, [], [0, 1, 0, 1, 0, 1]),
        (1, [0, 3], [0, 1, 1, 0, 1, 1]),
        (3, [2], [0, 0, 0, 0, 0, 1]),
    ],
)
def test_sparse_layers_follow_hf(sparse_step, mlp_only, expected):
    """decoder_sparse_step and mlp_only_layers pick the same sparse layers as HF."""
    cfg = Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=16,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=sparse_step,
        mlp_only_layers=mlp_only,
    )
    hf = HFQwen3Moe(cfg)
    ours = Qwen3MoeForCausalLM(cfg, TorchPagedAttention)
    hf_sparse = [isinstance(layer.mlp, Qwen3MoeSparseMoeBlock) for layer in hf.model.layers]
    our_sparse = [isinstance(layer.mlp, Qwen3MoeSparseBlock) for layer in ours.layers]
    assert hf_sparse == [bool(e) for e in expected]
    assert our_sparse == hf_sparse


def test_checkpoint_loads_completely(our_model, tiny_qwen3_moe_dir):
    """Every parameter was filled, and a checkpoint short of one expert tensor is refused."""
    from strixlm.models.loader import iterate_safetensors

    names = {n for n, _ in our_model.named_parameters()}
    fresh = Qwen3MoeForCausalLM(our_model.config, TorchPagedAttention)
    assert fresh.load_weights(iterate_safetensors(tiny_qwen3_moe_dir)) == names
    fresh = Qwen3MoeForCausalLM(our_model.config, TorchPagedAttention)
    partial = (
        (n, t)
        for n, t in iterate_safetensors(tiny_qwen3_moe_dir)
        if n != "model.layers.2.mlp.experts.5.up_proj.weight"
    )
    assert names - fresh.load_weights(partial) == {"layers.2.mlp.experts.w_up"}


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_feed_forward_matches_hf(hf_model, our_model, layer):
    """The sparse blocks (routing + experts) and the dense one, on the same input."""
    torch.manual_seed(layer)
    x = torch.randn(37, hf_model.config.hidden_size)
    with torch.no_grad():
        ref = hf_model.model.layers[layer].mlp(x[None])[0]
        got = our_model.layers[layer].mlp(x)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_prompt_logits_match_hf(hf_model, our_model, refs):
    """Logits at every position of the longest prompt, against HF's forward."""
    prompts, _ = refs
    ids = max(prompts, key=len)
    block_size = 16
    md = one_prompt_metadata(len(ids), block_size)
    for attn in our_model.attention_layers():
        attn.kv_cache = torch.zeros(
            2, md.block_table.shape[1] + 1, block_size, attn.num_kv_heads, attn.head_dim
        )
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0].float()
        hidden = our_model(torch.tensor(ids), torch.arange(len(ids)), md)
        got = our_model.compute_logits(hidden)
    for attn in our_model.attention_layers():
        attn.kv_cache = None
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def _llm(folder: str, **options) -> LLM:
    return LLM(folder, device="cpu", dtype="float32", max_model_len=512, **options)


def test_greedy_alone_and_batched_match_hf(tiny_qwen3_moe_dir, refs):
    prompts, ref = refs
    params = replace(GREEDY, max_tokens=MAX_TOKENS)
    llm = _llm(tiny_qwen3_moe_dir, enable_prefix_caching=False, cpu_kv_cache_bytes=SMALL_KV)
    some = [0, 3, 6]  # alone: the shortest, a middle and the longest prompt
    alone = [llm.generate([prompts[i]], params, use_tqdm=False)[0] for i in some]
    check_against_hf(alone, [ref[i] for i in some])
    check_against_hf(llm.generate(prompts, params, use_tqdm=False), ref)


def test_preemption_and_prefix_cache_keep_tokens(tiny_qwen3_moe_dir, refs):
    """4-token blocks, an 8-token step budget, a pool too small for the batch: the first
    pass preempts, the second hits the prefix cache; the tokens stay HF's."""
    prompts, ref = refs
    params = replace(GREEDY, max_tokens=MAX_TOKENS)
    llm = _llm(
        tiny_qwen3_moe_dir, block_size=4, max_num_batched_tokens=8, num_gpu_blocks_override=32
    )
    check_against_hf(llm.generate(prompts, params, use_tqdm=False), ref)
    assert llm.engine.core.scheduler.num_preemptions > 0
    again = llm.generate(prompts, params, use_tqdm=False)
    assert any(o.num_cached_tokens > 0 for o in again), "second pass found no cached prefix"
    check_against_hf(again, ref)
