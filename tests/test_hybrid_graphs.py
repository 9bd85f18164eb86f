"""The CUDA-graph decode path of hybrid (NemotronH) models, run on CPU without capturing.

The runner's capture_cuda_graphs(capture=False) builds each padded size's metadata once, as
a capture does, and every "replay" calls the model on those objects; only the static buffers
are refreshed per step. So a metadata tensor that is not refreshed in place gives wrong
tokens here, as it would on the GPU. The attention runs the Triton kernels (the interpreter
on CPU), the one backend graphs are captured with; HF transformers is the reference.
"""

from __future__ import annotations

import math

import pytest
import torch
from nemotron_h_utils import HFReference, one_torch_thread, random_prompts, save_tiny_nemotron_h

from strixlm.engine.request import Request, SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.layers.mamba2 import Mamba2Mixer
from strixlm.models.nemotron_h import mamba_dims
from strixlm.worker.input_batch import InputBuffers, gather_inputs
from strixlm.worker.model_states.block_zeroing import NO_ZERO_ENV, POISON_ENV
from strixlm.worker.model_states.hybrid import HybridModelState
from strixlm.worker.model_states.hybrid_layout import (
    AttentionShape,
    MambaStateShape,
    plan_hybrid_layout,
)
from strixlm.worker.states import RequestStateTable

PATTERN = "M*EM-E*M"
MAX_NUM_SEQS = 8

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


@pytest.fixture(scope="module", autouse=True)
def _single_torch_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    return save_tiny_nemotron_h(tmp_path_factory.mktemp("nemotron-h-graphs"), PATTERN)


@pytest.fixture(scope="module")
def hf(folder) -> HFReference:
    return HFReference(folder)


def make_llm(folder: str, graphs: bool, **kw) -> LLM:
    llm = LLM(
        folder,
        device="cpu",
        dtype="float32",
        skip_tokenizer_init=True,
        max_model_len=256,
        attention_backend="triton",
        max_num_seqs=MAX_NUM_SEQS,
        **kw,
    )
    if graphs:
        llm.engine.core.runner.capture_cuda_graphs(capture=False)
    return llm


def tokens_and_logprobs(outs):
    return [(o.outputs[0].token_ids, [lp.logprob for lp in o.outputs[0].logprobs]) for o in outs]


# ---- end to end: graph path == eager == HF ------------------------------------------------


def test_graph_path_matches_eager_and_hf(folder, hf):
    """Five requests with different output lengths: decode steps of 5, 4, 3, 2, 1 rows,
    padded to 8, 4, 4, 2, 1 (padded rows on the null block's state slot)."""
    prompts = random_prompts([1, 7, 16, 17, 33], seed=3)
    lengths = [3, 6, 4, 5, 6]
    params = [
        SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=5) for n in lengths
    ]
    graph_llm = make_llm(folder, graphs=True)
    ours = graph_llm.generate(prompts, params, use_tqdm=False)
    graphs = graph_llm.engine.core.runner.graphs
    assert graphs.hybrid and graphs.num_replays >= 5
    assert graphs.num_padded_rows > 0
    eager = make_llm(folder, graphs=False).generate(prompts, params, use_tqdm=False)
    for (t_g, l_g), (t_e, l_e) in zip(
        tokens_and_logprobs(ours), tokens_and_logprobs(eager), strict=True
    ):
        assert t_g == t_e
        assert all(abs(a - b) < 1e-4 for a, b in zip(l_g, l_e, strict=True))
    for prompt, out, n in zip(prompts, ours, lengths, strict=True):
        hf.check([prompt], [out], n)


def test_decode_steps_sampled_in_sampling_graphs(folder, hf):
    """Greedy requests without logprobs: the decode steps sample and append their tokens
    in the sampling graphs (worker/sample_graphs.py), with padded rows on the dummy row."""
    llm = make_llm(folder, graphs=True)
    prompts = random_prompts([5, 12, 30], seed=7)
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    outs = llm.generate(prompts, greedy, use_tqdm=False)
    runner = llm.engine.core.runner
    assert runner.sample_graphs.num_replays >= 3
    assert int(runner.table.num_tokens[runner.table.dummy_row]) == 0
    hf.check(prompts, outs, 4)


def test_one_token_prompts_start_from_zero_state(folder, hf, monkeypatch):
    """A step of one-token prompts is decode-shaped, so it replays the graph although the
    rows have no state yet. Their Mamba blocks last held earlier requests' state, here
    poisoned with NaN on free: the slots must be zeroed before the replay."""
    monkeypatch.delenv(NO_ZERO_ENV, raising=False)
    monkeypatch.setenv(POISON_ENV, "1")
    llm = make_llm(folder, graphs=True, num_gpu_blocks_override=8)
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=5)
    llm.generate(random_prompts([40, 9, 60], seed=5), greedy, use_tqdm=False)
    graphs = llm.engine.core.runner.graphs
    replays = graphs.num_replays
    prompts = random_prompts([1, 1, 1], seed=11)
    outs = llm.generate(prompts, greedy, use_tqdm=False)
    assert graphs.num_fresh_rows == 3
    assert graphs.num_replays - replays == 4  # the first step too
    hf.check(prompts, outs, 4)


def test_one_token_prompts_without_zeroing_read_stale_state(folder, monkeypatch):
    """Control for the test above: skipping the zeroing lets the poisoned state through."""
    monkeypatch.delenv(NO_ZERO_ENV, raising=False)
    monkeypatch.setenv(POISON_ENV, "1")
    monkeypatch.setattr(HybridModelState, "zero_fresh_states", lambda self, b, md, layers: 0)
    llm = make_llm(folder, graphs=True, num_gpu_blocks_override=8)
    greedy = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True, logprobs=1)
    llm.generate(random_prompts([40, 9, 60], seed=5), greedy, use_tqdm=False)
    outs = llm.generate(random_prompts([1, 1, 1], seed=11), greedy, use_tqdm=False)
    assert any(math.isnan(lp) for _, lps in tokens_and_logprobs(outs) for lp in lps)


# ---- the metadata of a captured step -------------------------------------------------------

BLOCK = 16
# Groups: 0 attention, 1 and 2 Mamba.
BLOCKS = {"a": [[3, 4], [7], [9]], "b": [[5], [8], [10]], "c": [[6], [11], [12]]}


def decode_table() -> tuple[RequestStateTable, InputBuffers]:
    table = RequestStateTable(4, 64, 4, 3, "cpu")
    for rid, blocks in BLOCKS.items():
        n = 17 if rid == "a" else 5
        req = Request(rid, list(range(3, 3 + n)), SamplingParams(max_tokens=4))
        table.add(req, blocks, n - 1)  # the last prompt token is this step's input
    table.flush(list(table.rows.values()))
    return table, InputBuffers(16, 4, "cpu", table.block_table.shape[-1])


def test_graph_metadata_lives_in_static_buffers():
    table, bufs = decode_table()
    state = HybridModelState(BLOCK, "cpu", (1, 3), decode_rows=False)
    mamba_bufs = state.graph_buffers(4)
    order = ["c", "a", "b"]
    batch = gather_inputs(table, bufs, order, [1, 1, 1], BLOCK, 4)
    md = state.prepare_graph(table, batch, 64, mamba_bufs)
    m = md.mamba
    assert m.is_decode and m.num_tokens == 4
    assert m.state_indices.data_ptr() == mamba_bufs.state_indices.data_ptr()
    assert m.state_indices.shape == (2, 4) and m.state_indices[1].is_contiguous()
    want = [[BLOCKS[r][g][0] for r in order] + [0] for g in (1, 2)]  # padded row: block 0
    assert m.state_indices.tolist() == want
    assert m.has_initial_state.tolist() == [True] * 4
    assert md.attn.block_table.data_ptr() == bufs.block_table.data_ptr()  # static
    assert md.attn.block_table[:3, :2].tolist() == [[6, 0], [3, 4], [5, 0]]
    assert md.attn.seq_lens.tolist() == [5, 17, 5, 1]  # the dummy row: one token
    # The next step, other rows in another order: same buffers, new contents.
    table.remove("c")
    batch = gather_inputs(table, bufs, ["b", "a"], [1, 1], BLOCK, 2)
    md2 = state.prepare_graph(table, batch, 64, mamba_bufs)
    assert md2.mamba.state_indices.data_ptr() == mamba_bufs.state_indices.data_ptr()
    assert md2.mamba.state_indices.tolist() == [[8, 7], [10, 9]]
    assert mamba_bufs.state_indices[:, :2].tolist() == [[8, 7], [10, 9]]


def test_zero_fresh_states_touches_only_fresh_rows(folder):
    """On the pool's strided state views: the fresh row's slot in each layer's own group is
    zeroed, nothing else (other blocks, or the same block's other layers' halves)."""
    from transformers import AutoConfig

    table, bufs = decode_table()
    fresh = Request("new", [42], SamplingParams(max_tokens=2))
    table.add(fresh, [[13], [14], [15]], 0)  # no computed tokens: no state yet
    table.flush([table.rows["new"]])
    state = HybridModelState(BLOCK, "cpu", (1, 3), decode_rows=False)
    d = mamba_dims(AutoConfig.from_pretrained(folder))
    shape = MambaStateShape(
        d.conv_dim, d.conv_kernel, d.num_heads, d.head_dim, d.state_size, torch.float32
    )
    # Two attention layers (group 0, two slots) and 8 Mamba layers: groups 1 and 2, four
    # layers each (two per slot, one per half).
    layout = plan_hybrid_layout(AttentionShape(2, 16, torch.float32), 2, shape, 8, BLOCK)
    assert layout.mamba_group_range == (1, 3)
    pool = layout.allocate(16, "cpu")
    pool.fill_(0x3F)
    layers = []
    for i in range(8):
        layer = Mamba2Mixer(d)
        layer.conv_states, layer.ssm_states = layout.mamba_views(pool, i)
        layer.state_group = layout.mamba[i].group - 1
        layers.append(layer)
    batch = gather_inputs(table, bufs, ["a", "new", "b"], [1, 1, 1], BLOCK, 4)
    md = state.prepare_graph(table, batch, 64, state.graph_buffers(4))
    assert state.zero_fresh_states(batch, md, layers) == 1
    for layer in layers:
        own = 14 if layer.state_group == 0 else 15
        for states in (layer.conv_states, layer.ssm_states):
            zero = {i for i in range(16) if not bool(states[i].any())}
            # Its own slot; the other group's block shares this layer's place in the page.
            assert own in zero and zero <= {14, 15}
    # No other byte of the pool changed.
    zeroed = 8 * (shape.conv_bytes + shape.ssm_bytes)
    assert int((pool != 0x3F).sum()) == int((pool == 0).sum()) == zeroed
