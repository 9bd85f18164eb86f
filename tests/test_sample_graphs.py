"""Decode steps sampled by the sampling graphs (worker/sample_graphs.py), run on CPU without
capturing: every call runs the graph's function on the persistent buffers, as a replay would,
so a sampling input that is not read from them gives wrong tokens here.

References: HF transformers (greedy), and the same engine without graphs (seeded
temperatures, where the tokens depend on each row's seed and position).
"""

from __future__ import annotations

import pytest
from test_correctness_hf import check_against_hf, encode, hf_reference

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM

MAX_TOKENS = 4


def make_llm(folder: str, graphs: bool) -> LLM:
    llm = LLM(
        folder,
        device="cpu",
        dtype="float32",
        max_model_len=128,
        attention_backend="triton",  # graphs need the device-only attention backend
        max_num_seqs=4,
        enable_prefix_caching=False,
    )
    if graphs:
        llm.engine.core.runner.capture_cuda_graphs(capture=False)
    return llm


@pytest.fixture(scope="module")
def engines(tiny_qwen3_dir):
    return tiny_qwen3_dir, make_llm(tiny_qwen3_dir, True), make_llm(tiny_qwen3_dir, False)


def test_greedy_decode_is_sampled_by_the_graph_and_matches_hf(engines):
    folder, graph_llm, _ = engines
    prompts = encode(folder)[:3]  # 3 rows: decode steps padded to 4 (one dummy row)
    runner = graph_llm.engine.core.runner
    before = runner.sample_graphs.num_replays
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = graph_llm.generate(prompts, params, use_tqdm=False)
    assert runner.sample_graphs.num_replays - before >= MAX_TOKENS - 1
    check_against_hf(outs, hf_reference(folder, prompts, MAX_TOKENS), logprob_check=False)
    table = runner.table
    assert int(table.num_tokens[table.dummy_row]) == 0, "a padded row appended a token"


def test_seeded_temperatures_match_the_eager_sampler(engines):
    """Greedy and seeded random rows in one batch: the graph's variant for temperatures."""
    folder, graph_llm, eager_llm = engines
    prompts = encode(folder)[:3]
    params = [
        SamplingParams(temperature=0.9, seed=11, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True),
        SamplingParams(temperature=1.3, seed=5, max_tokens=MAX_TOKENS, ignore_eos=True),
    ]
    runner = graph_llm.engine.core.runner
    before = runner.sample_graphs.num_replays
    ours = graph_llm.generate(prompts, params, use_tqdm=False)
    assert runner.sample_graphs.num_replays > before
    ref = eager_llm.generate(prompts, params, use_tqdm=False)
    for o, r in zip(ours, ref, strict=True):
        assert o.outputs[0].token_ids == r.outputs[0].token_ids


@pytest.mark.parametrize(
    "extra",
    [
        {"logprobs": 2},
        {"repetition_penalty": 1.3},
        {"min_tokens": MAX_TOKENS, "stop_token_ids": [5]},
        {"top_k": 5, "temperature": 0.8, "seed": 3},
        {"logit_bias": {7: 2.5, 100: -3.0}, "temperature": 0.7, "seed": 2},
    ],
    ids=["logprobs", "penalty", "min_tokens", "top_k", "logit_bias"],
)
def test_other_features_take_the_eager_sampler(engines, extra):
    """A step with any row that needs more than temperatures is sampled eagerly, with the
    same result as the engine without graphs."""
    folder, graph_llm, eager_llm = engines
    prompts = encode(folder)[:2]
    plain = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    kw = {"temperature": 0, "max_tokens": MAX_TOKENS, "ignore_eos": True, **extra}
    params = [plain, SamplingParams(**kw)]
    runner = graph_llm.engine.core.runner
    before = runner.sample_graphs.num_replays
    ours = graph_llm.generate(prompts, params, use_tqdm=False)
    assert runner.sample_graphs.num_replays == before
    ref = eager_llm.generate(prompts, params, use_tqdm=False)
    for o, r in zip(ours, ref, strict=True):
        assert o.outputs[0].token_ids == r.outputs[0].token_ids


@pytest.mark.parametrize("kind", ["greedy", "temperatures"])
def test_sampling_graphs_take_the_fused_lm_head(tiny_qwen3_dir, monkeypatch, kind):
    """In half precision with Triton (here the interpreter, as on CUDA) the greedy variant
    runs the LM head with an argmax epilogue, and by default (up to 32 rows off Hopper) the
    temperature variant the LM head with a Gumbel-max epilogue, instead of logits + the sampler: the
    same tokens as the engine without graphs, which projects and samples eagerly."""
    from strixlm.kernels import lm_head_argmax
    from strixlm.worker import sample_graphs

    def half_llm(graphs: bool) -> LLM:
        llm = LLM(
            tiny_qwen3_dir,
            device="cpu",
            dtype="float16",
            max_model_len=128,
            attention_backend="triton",
            max_num_seqs=4,
            enable_prefix_caching=False,
        )
        if graphs:
            llm.engine.core.runner.capture_cuda_graphs(capture=False)
        return llm

    monkeypatch.setattr(sample_graphs, "use_triton", lambda t: True)
    # Wide vocabulary tiles: the interpreter's cost is per program (384 of the table's
    # 128-column tiles over this vocabulary, 24 of these); the table's configs are checked
    # against torch in test_lm_head_argmax.py.
    wide = lm_head_argmax.LmHeadConfig(16, 2048, 64, 4, 1)
    monkeypatch.setattr(lm_head_argmax, "config_for_rows", lambda m, **_: wide)
    calls = []
    name = "lm_head_argmax" if kind == "greedy" else "lm_head_sample"
    real = getattr(lm_head_argmax, name)
    monkeypatch.setattr(lm_head_argmax, name, lambda h, *a: calls.append(h.shape[0]) or real(h, *a))
    prompts = encode(tiny_qwen3_dir)[:3]
    if kind == "greedy":
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    else:
        params = [
            SamplingParams(temperature=0.9, seed=11, max_tokens=MAX_TOKENS, ignore_eos=True),
            SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True),
            SamplingParams(temperature=1.3, seed=5, max_tokens=MAX_TOKENS, ignore_eos=True),
        ]
    ours = half_llm(True).generate(prompts, params, use_tqdm=False)
    assert calls and set(calls) == {4}  # three rows padded to the captured size 4
    ref = half_llm(False).generate(prompts, params, use_tqdm=False)
    for o, r in zip(ours, ref, strict=True):
        assert o.outputs[0].token_ids == r.outputs[0].token_ids
