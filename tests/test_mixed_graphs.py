"""The CUDA-graph path for steps with prefill (prefill chunks beside decodes), run on CPU
without capturing.

The runner's capture_cuda_graphs(capture=False) builds each token bucket's metadata once, as
a capture does, and every "replay" runs the model on those objects; only the persistent
buffers are refreshed per step, so an input that is not refreshed in place gives wrong
tokens here as it would on the GPU. Attention runs the Triton kernels (the interpreter), the
backend graphs capture. HF transformers is the reference.
"""

from __future__ import annotations

import pytest
from test_correctness_hf import check_against_hf, encode, hf_reference

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.worker.input_batch import InputBuffers, gather_inputs
from strixlm.worker.mixed_graphs import MixedGraphs, mixed_buckets
from strixlm.worker.states import RequestStateTable

MAX_NUM_SEQS = 4
BUDGET = 32  # tokens per step: long prompts are chunked beside running decodes
MAX_TOKENS = 4  # every step runs interpreted attention; 4 still mixes and replays decode graphs


def make_llm(folder: str, graphs: bool) -> LLM:
    llm = LLM(
        folder,
        device="cpu",
        dtype="float32",
        max_model_len=256,
        attention_backend="triton",
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=BUDGET,
        enable_prefix_caching=False,
    )
    if graphs:
        llm.engine.core.runner.capture_cuda_graphs(capture=False)
    return llm


@pytest.fixture(scope="module")
def qwen3(tiny_qwen3_dir):
    prompts = encode(tiny_qwen3_dir)
    return tiny_qwen3_dir, prompts, hf_reference(tiny_qwen3_dir, prompts, MAX_TOKENS)


def test_mixed_steps_through_graph_path_match_eager_and_hf(qwen3):
    folder, prompts, refs = qwen3
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)
    llm = make_llm(folder, graphs=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    runner = llm.engine.core.runner
    assert runner.mixed_graphs.num_replays > 0, "no mixed step took the graph path"
    assert runner.graphs.num_replays > 0
    check_against_hf(outs, refs)
    eager = make_llm(folder, graphs=False).generate(prompts, params, use_tqdm=False)
    for o, e in zip(outs, eager, strict=True):
        assert o.outputs[0].token_ids == e.outputs[0].token_ids
        for a, b in zip(o.outputs[0].logprobs, e.outputs[0].logprobs, strict=True):
            assert abs(a.logprob - b.logprob) < 1e-4


def test_bucket_choice():
    g = MixedGraphs.__new__(MixedGraphs)
    g.buckets, g.max_num_seqs = [32, 64, 128], 48
    assert g.bucket(20, 3) == 32
    assert g.bucket(33, 3) == 64
    assert g.bucket(64, 49) is None  # more requests than the bucket's rows
    assert g.bucket(100, 48) == 128
    assert g.bucket(129, 1) is None  # past the largest bucket: eager
    assert mixed_buckets(8192, 8192)[-3:] == [4096, 6144, 8192]
    assert mixed_buckets(2048, 8192)[-1] == 2048
    assert mixed_buckets(100, 8192) == [32, 64]


def test_token_padding_writes_no_cache_slots():
    """Padded rows are zero-length sequences; padded tokens map to slot -1 (stale slots in
    the persistent buffer would otherwise overwrite real cache entries)."""
    table = RequestStateTable(4, 64, 8, 1, "cpu")
    bufs = InputBuffers(32, 4, "cpu", table.block_table.shape[-1])
    bufs.slot_mapping.fill_(7)  # stale values from an earlier step
    from strixlm.engine.request import Request

    req = Request("a", list(range(10)), SamplingParams(max_tokens=4))
    row = table.add(req, [[1, 2]], 0)
    table.flush([row])
    batch = gather_inputs(table, bufs, ["a"], [10], 8, num_reqs_padded=4, num_tokens_padded=16)
    assert batch.num_tokens_padded == 16 and batch.num_reqs == 1
    assert batch.query_start_loc.tolist() == [0, 10, 10, 10, 10]
    slots = batch.slot_mapping.tolist()
    assert slots[:10] == [8 + i for i in range(8)] + [16, 17]
    assert slots[10:] == [-1] * 6
    assert batch.seq_lens_dev[0].item() == 10
    assert batch.seq_order.tolist() == [0, 1, 2, 3]  # the one real row, then the padding
    with pytest.raises(ValueError, match="do not fit"):
        gather_inputs(table, bufs, ["a"], [20], 8, num_reqs_padded=4, num_tokens_padded=16)


def test_seq_order_is_longest_context_first():
    table = RequestStateTable(4, 64, 8, 1, "cpu")
    bufs = InputBuffers(32, 4, "cpu", table.block_table.shape[-1])
    from strixlm.engine.request import Request

    rows = []
    for rid, n in (("a", 5), ("b", 20), ("c", 9)):
        req = Request(rid, list(range(n)), SamplingParams(max_tokens=4))
        rows.append(table.add(req, [[1, 2, 3]], n - 1))  # all but the last prompt token done
    table.flush(rows)
    batch = gather_inputs(table, bufs, ["a", "b", "c"], [1, 1, 1], 8, num_reqs_padded=4)
    assert batch.seq_lens == [5, 20, 9]
    assert batch.seq_order.tolist() == [1, 2, 0, 3]  # b, c, a, then the padded row


def test_fused_qk_norm_rope_and_cache_write_through_the_engine(qwen3, monkeypatch):
    """The CUDA path of Qwen3 attention (one launch for q/k norm, rotary and the K/V cache
    write; the backend then only reads the cache), forced on under the interpreter, through
    chunked prefill, mixed steps and decode: the same tokens as HF."""
    from strixlm.kernels import qk_norm_rope
    from strixlm.models import llama

    folder, prompts, refs = qwen3
    calls = {"fused_write": 0}
    fused = qk_norm_rope.qk_norm_rope_inplace

    def counting(*a, **kw):
        calls["fused_write"] += kw.get("kv_cache") is not None
        return fused(*a, **kw)

    monkeypatch.setattr(llama, "use_triton", lambda x: True)
    monkeypatch.setattr(qk_norm_rope, "qk_norm_rope_inplace", counting)
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=5)
    outs = make_llm(folder, graphs=True).generate(prompts, params, use_tqdm=False)
    assert calls["fused_write"] > 0
    check_against_hf(outs, refs)
