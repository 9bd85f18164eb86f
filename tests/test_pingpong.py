"""The two-half-batch decode forward (models/pingpong.py) on CPU.

Off CUDA the two lanes are one, so these tests check what the GPU run rests on: each half's
metadata is its rows' own decode batch, the layers' pre / attend / post split computes what
their forward does, and a whole engine (CUDA-graph path without capturing, and eager steps)
gives the same greedy tokens with the split on as off. The attention runs the Triton kernels
under the interpreter on the halves' metadata views. A logging stand-in for the lanes
checks the cross-lane lifetimes: no tensor one lane reads is freed where the caching
allocator could hand its block to work not yet ordered after that read. The overlap itself,
and its speed, are GPU measurements (benchmarks/gpu/remeasure/engine.sh: pingpong).
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import weakref

import pytest
import torch
from attention_inputs import one_prompt_metadata

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.kernels import dispatch
from strixlm.kernels import paged_attention as pa
from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.models import pingpong


def decode_metadata(seq_lens: list[int], real: int, order: bool = True) -> AttentionMetadata:
    """A pure decode step of len(seq_lens) rows, the first `real` of them requests (the
    rest graph padding: one-token rows), as DefaultModelState builds it."""
    b = len(seq_lens)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return AttentionMetadata(
        num_tokens=b,
        query_start_loc=torch.arange(b + 1, dtype=torch.int32),
        seq_lens=lens,
        block_table=torch.arange(b * 4, dtype=torch.int32).view(b, 4),
        slot_mapping=torch.arange(100, 100 + b),
        query_start_loc_cpu=list(range(real + 1)),
        query_lens_cpu=[1] * real,
        seq_lens_cpu=seq_lens[:real],
        max_query_len=1,
        max_seq_len=64,
        seq_order=torch.argsort(lens, descending=True, stable=True).to(torch.int32)
        if order
        else None,
    )


def test_half_metadata_is_each_halfs_own_decode_batch():
    md = decode_metadata([5, 9, 7, 30, 2, 1, 1], real=5)  # two padding rows
    a, b = pingpong.half_metadata(md, 0, 3), pingpong.half_metadata(md, 3, 7)
    for half, lo, hi in ((a, 0, 3), (b, 3, 7)):
        n = hi - lo
        assert half.num_tokens == n and half.is_pure_decode
        assert half.query_start_loc.tolist() == list(range(n + 1))
        assert torch.equal(half.seq_lens, md.seq_lens[lo:hi])
        assert torch.equal(half.block_table, md.block_table[lo:hi])
        assert torch.equal(half.slot_mapping, md.slot_mapping[lo:hi])
        assert half.query_start_loc_cpu == list(range(n + 1)) and half.query_lens_cpu == [1] * n
        assert half.max_seq_len == md.max_seq_len  # the graph's upper bound, kept
        # Longest first within the half, as local row indices.
        assert sorted(half.seq_order.tolist()) == list(range(n))
        lens = half.seq_lens[half.seq_order.long()].tolist()
        assert lens == sorted(lens, reverse=True)
    assert a.seq_lens_cpu == [5, 9, 7] and b.seq_lens_cpu == [30, 2, 1, 1]  # padding: 1
    # Views of the step's buffers, so a graph replay's refreshed metadata reaches them.
    assert b.seq_lens.data_ptr() == md.seq_lens[3:].data_ptr()
    assert b.block_table.data_ptr() == md.block_table[3:].data_ptr()
    assert pingpong.half_metadata(decode_metadata([3, 4], 2, order=False), 1, 2).seq_order is None


def test_applies_to_pure_decode_steps_of_min_rows(monkeypatch):
    md = decode_metadata([5] * 8, real=8)
    monkeypatch.setattr(pingpong, "MIN_ROWS", 8)
    monkeypatch.setattr(pingpong, "SMS", 0)
    assert not pingpong.applies(md, 8)  # off by default
    monkeypatch.setattr(pingpong, "SMS", 96)
    assert pingpong.applies(md, 8)
    assert not pingpong.applies(decode_metadata([5] * 7, real=7), 7)  # below MIN_ROWS
    mixed = decode_metadata([5] * 8, real=8)
    mixed.max_query_len = 3
    assert not pingpong.applies(mixed, 10)  # a prefill in the step


def test_lane_knob_is_checked_at_import():
    """A bad STRIXLM_PINGPONG_LANE stops the process at import, naming the knob."""
    env = {**os.environ, "STRIXLM_PINGPONG_LANE": "blue"}
    code = "import strixlm.models.pingpong"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "STRIXLM_PINGPONG_LANE must be 'green' or 'stream'" in run.stderr


def test_attention_stream_picks_the_lane(monkeypatch):
    """'green' asks for the green context's stream; 'stream' never touches green contexts."""
    asked = []
    monkeypatch.setattr(pingpong, "green_stream", lambda n, d: asked.append(n) or "green")
    assert pingpong.attention_stream(112, torch.device("cuda", 0), "green") == "green"
    assert asked == [112]
    made = []
    monkeypatch.setattr(pingpong, "_PLAIN", {})
    monkeypatch.setattr(torch.cuda, "Stream", lambda **kw: made.append(kw) or object())
    first = pingpong.attention_stream(112, torch.device("cuda", 0), "stream")
    assert pingpong.attention_stream(96, torch.device("cuda", 0), "stream") is first
    assert made == [{"device": 0, "priority": -1}] and asked == [112]


def test_attention_sm_budget_sizes_the_configs():
    assert pa.num_sms(torch.device("cpu")) == 132
    with dispatch.attention_sm_budget(96):
        assert pa.num_sms(torch.device("cpu")) == 96
        with dispatch.attention_sm_budget(8):
            assert pa.num_sms(torch.device("cpu")) == 8
        assert pa.num_sms(torch.device("cpu")) == 96
    assert dispatch.attention_sms() is None
    # The persistent grid: the budget's SMs, and its programs an SM where it sets them.
    from strixlm.kernels import paged_decode as pdk

    default = pdk.full_grid(8, 96)
    with dispatch.attention_sm_budget(96, ctas_per_sm=5):
        assert pdk.full_grid(8, 96) == 96 * 5 // 8
        assert pdk.full_grid(8, 96, ctas_per_sm=3) == 96 * 3 // 8  # an explicit pick stays
    assert pdk.full_grid(8, 96) == default == 96 * pdk.PERSISTENT_CTAS_PER_SM // 8
    assert dispatch.attention_ctas() == 0
    # Fewer SMs: a small batch's unified grid splits less (fewer programs fill them).
    full = pa.select_config(16, 8, 128, 4, 1, 4096, 132)
    part = pa.select_config(16, 8, 128, 4, 1, 4096, 16)
    assert part.num_splits < full.num_splits


def test_decoder_layer_pre_attend_post_is_its_forward(tiny_qwen3_dir):
    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", skip_tokenizer_init=True)
    model = llm.engine.core.runner.model
    layer = model.layers[0]
    t, block = 5, 16
    md = one_prompt_metadata(t, block)
    x, pos = torch.randn(t, model.config.hidden_size), torch.arange(t)
    attn = layer.self_attn
    saved = attn.kv_cache
    try:
        outs = []
        for split in (False, True):
            attn.kv_cache = torch.zeros(2, 2, block, attn.num_kv_heads, attn.head_dim)
            with torch.no_grad():
                if split:
                    p, res = layer.pre(pos, x.clone(), None, md)
                    y, res = layer.post(attn.attend(p, md), res)
                else:
                    y, res = layer(pos, x.clone(), None, md)
            outs.append((y, res))
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    finally:
        attn.kv_cache = saved


PROMPTS = [[11 + i, 40 + 3 * i, 7, 90 + i][: 2 + i % 3] for i in range(6)]


def greedy(llm: LLM, num_prompts: int, max_tokens: int = 6) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:num_prompts]]
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize(
    "backend,graphs,num_prompts",
    [("triton", True, 6), ("triton", False, 6), ("triton", False, 5), ("torch", False, 6)],
)
def test_engine_tokens_match_with_the_split(
    tiny_qwen3_dir, monkeypatch, backend, graphs, num_prompts
):
    """Six (or five) requests of 2-4 prompt tokens: decode steps of 6 rows (the 8-row graph
    with graphs, its padding rows in the second half), or 5 (halves of 2 and 3 rows). The
    split must be taken, and the tokens must be the unsplit engine's."""

    def make() -> LLM:
        llm = LLM(
            tiny_qwen3_dir,
            device="cpu",
            dtype="float32",
            skip_tokenizer_init=True,
            max_model_len=128,
            attention_backend=backend,
            max_num_seqs=8,
        )
        if graphs:
            llm.engine.core.runner.capture_cuda_graphs(capture=False)
        return llm

    want = greedy(make(), num_prompts)
    calls = []
    real_forward = pingpong.forward

    def counted(*args):
        calls.append(args[3].seq_lens.shape[0])
        return real_forward(*args)

    monkeypatch.setattr(pingpong, "SMS", 8)
    monkeypatch.setattr(pingpong, "MIN_ROWS", 4)
    monkeypatch.setattr(pingpong, "forward", counted)
    got = greedy(make(), num_prompts)
    assert got == want
    assert calls and set(calls) == ({8} if graphs else {num_prompts})


class RecordingWindows(pingpong.WeightWindows):
    """The GEMM lane's L2 windows with the driver left out (CUDA only): logs the byte
    ranges forward asks for."""

    def __init__(self, packed, log: list) -> None:
        self.packed, self.log = packed, log

    def _set(self, lo: int, hi: int) -> None:
        self.log.append((lo, hi))

    def clear(self) -> None:
        self.log.append("clear")


def test_l2_windows_follow_the_gemm_lanes_reads(tiny_qwen3_dir, monkeypatch):
    """With STRIXLM_PINGPONG_L2_MB on, loading packs the layer weights, and each split
    forward windows the first qkv, then each layer's chunk (o_proj .. next qkv), then
    clears; the tokens stay the unsplit engine's."""
    kwargs = dict(device="cpu", dtype="float32", skip_tokenizer_init=True, max_num_seqs=8)
    want = greedy(LLM(tiny_qwen3_dir, **kwargs), 6)
    monkeypatch.setattr(pingpong, "SMS", 8)
    monkeypatch.setattr(pingpong, "MIN_ROWS", 4)
    monkeypatch.setattr(pingpong, "L2_MB", 64)
    log: list = []
    monkeypatch.setattr(
        pingpong,
        "weight_windows",
        lambda model, lanes: RecordingWindows(model.pingpong_weights, log),
    )
    llm = LLM(tiny_qwen3_dir, **kwargs)
    packed = llm.engine.core.runner.model.pingpong_weights
    assert greedy(llm, 6) == want
    n = len(packed.qkv)
    one = [packed.qkv[0]] + [packed.chunk(i) for i in range(n)] + ["clear"]
    assert log and len(log) % len(one) == 0
    assert log == one * (len(log) // len(one))


def test_l2_packing_only_with_the_split_and_the_window_on(tiny_qwen3_dir, monkeypatch):
    for sms, mb in ((0, 64), (8, 0)):
        monkeypatch.setattr(pingpong, "SMS", sms)
        monkeypatch.setattr(pingpong, "L2_MB", mb)
        llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", skip_tokenizer_init=True)
        assert not hasattr(llm.engine.core.runner.model, "pingpong_weights")


# ---- the lanes' ordering: what a freed block may be reused for ---------------------------


class RecordingLanes(pingpong.Lanes):
    """Lanes that log, in issue order, what the CUDA ones would queue: events marked on a
    lane, a lane waiting on one, and (through the wrappers below) which lane allocates and
    uses each cross-lane tensor and when Python frees it."""

    def __init__(self, device, sms) -> None:
        self.cuda = False
        self.log: list[tuple] = LOG
        self.current = "gemm"
        self.events = 0

    def _mark(self, lane: str) -> int:
        self.events += 1
        self.log.append(("mark", lane, self.events))
        return self.events

    def fork(self) -> None:
        self.log.append(("wait", "attn", self._mark("gemm")))

    def join(self) -> None:
        self.log.append(("wait", "gemm", self._mark("attn")))

    @contextlib.contextmanager
    def on_attn(self):
        self.current = "attn"
        try:
            yield
        finally:
            self.current = "gemm"

    def mark(self, on_attn: bool) -> int:
        return self._mark("attn" if on_attn else "gemm")

    def wait(self, ev, on_attn: bool) -> None:
        self.log.append(("wait", "attn" if on_attn else "gemm", ev))


LOG: list[tuple] = []


def unsafe_frees(log: list[tuple]) -> list[str]:
    """Tensors whose block the allocator could hand out while the other lane may still read
    it. A freed block goes to the next allocation on the lane that allocated it, so any work
    queued on that lane (an "alloc" or "use" entry: kernels allocate) after the free must
    come after that lane waited on an event the other lane marked after its last use."""
    owner, last_use, marks, problems = {}, {}, {}, []
    pending: list[tuple[str, str, str, int]] = []  # (name, owner, user lane, used at)
    for i, entry in enumerate(log):
        kind, lane = entry[0], entry[1]
        if kind == "mark":
            marks[entry[2]] = (lane, i)
        elif kind == "wait":
            m_lane, m_at = marks[entry[2]]
            pending = [p for p in pending if not (p[1] == lane and m_lane == p[2] and m_at > p[3])]
        elif kind == "free":
            name = entry[1]
            if name in last_use:
                user, at = last_use.pop(name)
                pending.append((name, owner[name], user, at))
        else:  # alloc or use: work queued on `lane`, which may allocate
            problems += [p[0] for p in pending if p[1] == lane and p[0] not in problems]
            name = entry[2]
            if kind == "alloc":
                owner[name] = lane
            elif lane != owner[name]:
                last_use[name] = (lane, i)
    return problems


def test_cross_lane_tensors_outlive_their_last_use(tiny_qwen3_dir, monkeypatch):
    """One decode step through the split with every pre / attend / post logged: no tensor
    that crosses the lanes (projections: made on the GEMM lane, read by attention;
    attention outputs: made on the attention lane, read by post) is freed while its block
    could go to work not yet ordered after that read."""
    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", skip_tokenizer_init=True)
    model = llm.engine.core.runner.model
    LOG.clear()
    lanes_box: list[RecordingLanes] = []

    def make_lanes(device, sms):
        lanes_box.append(RecordingLanes(device, sms))
        return lanes_box[-1]

    tags: dict[int, str] = {}

    def track(obj, lane: str, name: str) -> None:
        tags[id(obj)] = name
        LOG.append(("alloc", lane, name))
        weakref.finalize(obj, LOG.append, ("free", name))

    def use(obj) -> None:
        LOG.append(("use", lanes_box[-1].current, tags[id(obj)]))

    for li, layer in enumerate(model.layers):
        attn = layer.self_attn

        def pre(positions, x, residual, md, _layer=layer, _li=li):
            p, res = type(_layer).pre(_layer, positions, x, residual, md)
            track(p, "gemm", f"projected L{_li} rows{md.seq_lens.shape[0]}@{len(tags)}")
            return p, res

        def attend(p, md, _attn=attn, _li=li):
            use(p)
            o = type(_attn).attend(_attn, p, md)
            track(o, lanes_box[-1].current, f"out L{_li}@{len(tags)}")
            return o

        def post(o, residual, _layer=layer):
            use(o)
            return type(_layer).post(_layer, o, residual)

        monkeypatch.setattr(layer, "pre", pre)
        monkeypatch.setattr(attn, "attend", attend)
        monkeypatch.setattr(layer, "post", post)
    monkeypatch.setattr(pingpong, "Lanes", make_lanes)
    md = decode_metadata([3, 5, 4, 6, 2, 7], real=6)
    md.block_table = torch.arange(1, 7, dtype=torch.int32).view(6, 1)
    for a in model.attention_layers():
        a.kv_cache = torch.zeros(2, 8, 16, a.num_kv_heads, a.head_dim)
    ids, pos = torch.arange(6), torch.tensor([2, 4, 3, 5, 1, 6])
    with torch.no_grad():
        pingpong.forward(model, ids, pos, md)
    gc.collect()
    kinds = {e[0] for e in LOG}
    assert {"alloc", "use", "free", "mark", "wait"} <= kinds
    crossing = [e for e in LOG if e[0] == "use" and e[1] == "attn"]
    assert len(crossing) == 2 * len(model.layers)  # every attention read a projection
    assert unsafe_frees(LOG) == []
    # The checker itself: an output freed right after its post, before the attention lane
    # waited on anything the GEMM lane marked after that post, is flagged.
    used = [("alloc", "attn", "o"), ("use", "gemm", "o"), ("free", "o"), ("mark", "gemm", 99)]
    assert unsafe_frees(used + [("alloc", "attn", "next")]) == ["o"]
    assert unsafe_frees(used + [("wait", "attn", 99), ("alloc", "attn", "next")]) == []
    early = [("alloc", "attn", "o"), ("mark", "gemm", 98), ("use", "gemm", "o"), ("free", "o")]
    assert unsafe_frees(early + [("wait", "attn", 98), ("alloc", "attn", "x")]) == ["o"]
