"""Persistent decode attention (kernels/paged_decode.py) under TRITON_INTERPRET=1.

Under the interpreter it gives the unified kernel's output bit for bit (same tiles, same
order, same step function) for any number of programs, sequence order, padding and cache
dtype, and matches the torch reference (compiled for the GPU the two loops may round
differently: sweep_decode_attn compares them there within tolerance). The dispatch takes
it only for one-query decode batches big enough to give each program ~2 sequences.
"""

from __future__ import annotations

import copy
import functools
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed")

from test_triton_attention import Batch, rel_err  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402
from strixlm.kernels.qk_norm_rope import QKNormRopeWrite  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Eleven decoding sequences of 2 to 71 tokens: 1 to 5 KV tiles of 16 each.
ROWS = [(c, 1) for c in (12, 1, 70, 33, 5, 48, 16, 64, 2, 29, 40)]
UNIFIED = pa.AttnConfig(16, 16, 4, 2)


def _args(b: Batch):
    return (b.q, b.kv_cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.2)


def _with(b: Batch, **fields) -> Batch:
    """A shallow copy of b with some fields replaced."""
    c = copy.copy(b)
    c.__dict__.update(fields)
    return c


@functools.cache
def _unified(seed: int, segs: int = 1) -> torch.Tensor:
    """The unified kernel's output on the padded fp32 batch of `seed` (Batch is seeded: the
    tests rebuild the same one), split in `segs` segments: the reference several
    parametrizations compare with, computed once (the interpreter makes it seconds)."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=seed, pad_tokens=3, pad_seqs=3)
    cfg = pa.AttnConfig(16, 16, 4, 2, segs)
    return pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)


def _persistent(b: Batch, n_prog: int, seq_order=None, **kw):
    out = torch.full_like(b.q, float("nan"))
    return pdk.paged_decode_persistent(
        *_args(b), out, block_m=16, tile=16, num_warps=4, num_stages=2, k_rows=False,
        sms=132, seq_order=seq_order, num_programs=n_prog, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("n_prog", [1, 2, 3, 5])
def test_persistent_equals_unified_kernel(n_prog):
    """Programs with 2-11 sequences each, padded zero-length sequences among them."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    unified = _unified(2)
    got = _persistent(b, n_prog)
    assert torch.equal(got[: b.t], unified[: b.t])
    ref = pa.paged_attention_ref(
        b.q[: b.t], b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.2
    )
    rel, mx = rel_err(got[: b.t], ref)
    assert rel < 1e-5, (rel, mx)


def test_persistent_sequence_order_and_fp16():
    """Longest-first order with the padded rows last (as the engine builds it), fp16."""
    b = Batch(ROWS, 8, 2, 64, 16, torch.float16, seed=4, pad_tokens=2, pad_seqs=2)
    unified = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED)
    lens = b.seq_lens + [0, 0]
    order = torch.tensor(sorted(range(len(lens)), key=lambda i: -lens[i]), dtype=torch.int32)
    for n_prog in (2, 4):
        got = _persistent(b, n_prog, seq_order=order)
        assert torch.equal(got[: b.t], unified[: b.t]), n_prog


def test_persistent_fp8_cache():
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, cache_dtype=kvw.FP8_DTYPE, seed=6)
    kw = dict(k_scale=0.03, v_scale=0.05)
    unified = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED, **kw)
    got = _persistent(b, 3, **kw)
    assert torch.equal(got[: b.t], unified[: b.t])


def test_dispatch_through_paged_attention(monkeypatch):
    """paged_attention routes a config with persistent=True to the persistent kernel."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=8)
    cfg = pa.AttnConfig(16, 16, 4, 2, persistent=True)
    calls = []
    real = pdk.paged_decode_persistent
    monkeypatch.setattr(
        pdk, "paged_decode_persistent", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    got = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
    unified = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED)
    assert calls and torch.equal(got[: b.t], unified[: b.t])


def test_persistent_heuristic(monkeypatch):
    sel = pa.select_config  # Qwen3-0.6B heads on 132 SMs: 66 programs per kv head
    assert pdk.persistent_programs(256, 8, 132) == 66
    cfg = sel(16, 8, 128, 256, 1, 2048, 132)
    assert cfg.persistent and cfg.num_stages == pdk.PERSISTENT_STAGES and cfg.num_splits == 1
    # 1.0 to 1.45 sequences per program (b66-b95): the mid-batch grid, unsplit.
    for b in (66, 82, 83, 95):
        cfg = sel(16, 8, 128, b, 1, 2048, 132)
        assert cfg.persistent and cfg.num_splits == 1
        assert (cfg.tile, cfg.ctas_per_sm) == (pdk.MID_GRID_TILE, pdk.MID_GRID_CTAS)
    for b in (65, 96, 256):
        assert sel(16, 8, 128, b, 1, 2048, 132).ctas_per_sm == 0
    assert sel(16, 8, 128, 71, 1, 2048, 132, fp8=True).ctas_per_sm == 0  # fp8: fp8_grid's
    monkeypatch.setattr(pdk, "MID_GRID_ENABLED", False)  # STRIXLM_ATTN_MID_GRID=0
    assert sel(16, 8, 128, 83, 1, 2048, 132).num_splits == 1  # 1.26 sequences per program
    # Below that, down to 0.6 per program: two segments per sequence.
    assert sel(16, 8, 128, 82, 1, 2048, 132) == sel(16, 8, 128, 40, 1, 2048, 132)
    cfg = sel(16, 8, 128, 40, 1, 2048, 132)
    assert cfg.persistent and cfg.num_splits == 2
    short = 4 * pa.DECODE_TILE - 1  # segments under 2 tiles
    assert not sel(16, 8, 128, 64, 1, short, 132).persistent
    # Fewer: the unified kernel and its own split.
    cfg = sel(16, 8, 128, 39, 1, 2048, 132)
    assert not cfg.persistent and cfg.num_splits == pa.choose_num_splits(
        39, 8, 1, 2048, pa.DECODE_TILE, 132
    )
    assert not sel(16, 8, 128, 1, 1, 8192, 132).persistent
    assert not sel(16, 8, 128, 256, 2, 2048, 132).persistent  # speculative verification
    assert not sel(16, 8, 128, 256, 600, 2048, 132).persistent  # prefill
    # An explicit num_splits keeps the unified kernel below the threshold.
    assert not sel(16, 8, 128, 64, 1, 2048, 132, num_splits=1).persistent
    monkeypatch.setattr(pdk, "PERSISTENT_SPLIT_MIN_ITEMS", 0)  # split off: the unified kernel
    cfg = sel(16, 8, 128, 64, 1, 2048, 132)
    assert not cfg.persistent and cfg.num_splits == 1
    monkeypatch.setattr(pdk, "PERSISTENT_ENABLED", False)  # STRIXLM_ATTN_PERSISTENT=0
    assert not sel(16, 8, 128, 256, 1, 2048, 132).persistent


def test_mid_grid_dispatch(monkeypatch):
    """A batch of 1.0-1.45 sequences a default-grid program takes the mid-batch grid through
    paged_attention: MID_GRID_CTAS programs an SM, MID_GRID_TILE-token tiles over 16-token
    blocks, unsplit, and matches the reference (fp16, longest-first order)."""
    monkeypatch.setattr(pa, "num_sms", lambda device: 4)  # 8 default programs a kv head
    b = Batch(ROWS, 8, 2, 64, 16, torch.float16, seed=9)  # 11 sequences: 1.375 a program
    lens = b.seq_lens
    order = torch.tensor(sorted(range(len(lens)), key=lambda i: -lens[i]), dtype=torch.int32)
    launches, real = [], pdk.paged_decode_persistent
    monkeypatch.setattr(
        pdk, "paged_decode_persistent", lambda *a, **k: launches.append(k) or real(*a, **k)
    )
    got = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=512, seq_order=order)
    (k,) = launches
    assert (k["tile"], k["ctas_per_sm"], k["num_segs"]) == (64, 3, 1)
    assert pdk.persistent_programs(len(lens), 2, 4, k["ctas_per_sm"]) == 6
    ref = pa.paged_attention_ref(b.q.float(), b.kv_cache.float(), b.query_lens, b.seq_lens,
                                 b.block_table, 0.2)  # fmt: skip
    assert rel_err(got[: b.t], ref)[0] < 3e-3


@pytest.mark.parametrize(("segs", "n_prog"), [(2, 1), (2, 5), (4, 3), (8, 7)])
def test_split_persistent_equals_unified_split(segs, n_prog):
    """Each sequence in segs segments dealt as items (empty segments of short sequences
    among them, graph padding too): the unified kernel's split path, bit for bit."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=3, pad_tokens=3, pad_seqs=3)
    unified = _unified(3, segs)
    got = _persistent(b, n_prog, num_segs=segs)
    assert torch.equal(got[: b.t], unified[: b.t])
    ref = pa.paged_attention_ref(
        b.q[: b.t], b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.2
    )
    assert rel_err(got[: b.t], ref)[0] < 1e-5


def test_split_persistent_order_fp8_and_dispatch():
    """Longest-first order over an fp8 cache with fp16 queries; paged_attention with the
    heuristic's config for a batch of ~0.7 sequences per program (two segments)."""
    b = Batch(ROWS, 8, 2, 64, 16, torch.float16, cache_dtype=kvw.FP8_DTYPE, seed=5)
    kw = dict(k_scale=0.03, v_scale=0.05)
    lens = b.seq_lens
    order = torch.tensor(sorted(range(len(lens)), key=lambda i: -lens[i]), dtype=torch.int32)
    unified = pa.paged_attention(
        *_args(b), max_query_len=1, max_seq_len=72, config=pa.AttnConfig(16, 16, 4, 2, 2), **kw
    )
    # 11 sequences over 2 kv heads on 4 SMs: 8 programs per head, 1.4 per program.
    cfg = pa.select_config(8, 2, 64, len(lens), 1, 512, 4)  # 512: an upper bound
    assert cfg.persistent and cfg.num_splits == 1
    cfg = pa.select_config(8, 2, 64, len(lens), 1, 512, 8)  # 16 programs per head: 0.69
    assert cfg.persistent and cfg.num_splits == 2
    got = _persistent(b, 4, seq_order=order, num_segs=2, **kw)
    assert torch.equal(got[: b.t], unified[: b.t])
    via = pa.paged_attention(
        *_args(b), max_query_len=1, max_seq_len=512, seq_order=order, config=cfg, **kw
    )
    deq = kvw.dequantize_cache(b.kv_cache, 0.03, 0.05)
    ref = pa.paged_attention_ref(b.q.float(), deq.float(), b.query_lens, b.seq_lens,
                                 b.block_table, 0.2)  # fmt: skip
    assert rel_err(via[: b.t], ref)[0] < 3e-3


def test_fp8_cache_with_16_bit_queries():
    """fp16 q over an fp8 cache computes in fp16 (both kernels) and matches the reference
    on the dequantized cache."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float16, cache_dtype=kvw.FP8_DTYPE, seed=9)
    kw = dict(k_scale=0.03, v_scale=0.05)
    deq = kvw.dequantize_cache(b.kv_cache, 0.03, 0.05)
    ref = pa.paged_attention_ref(b.q.float(), deq.float(), b.query_lens, b.seq_lens,
                                 b.block_table, 0.2)  # fmt: skip
    unified = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED, **kw)
    got = _persistent(b, 3, **kw)
    for out in (unified, got):
        rel, mx = rel_err(out[: b.t], ref)
        assert rel < 3e-3, (rel, mx)


@pytest.mark.parametrize("frac", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("n_prog", [1, 3])
def test_dynamic_sequences_equal_unified_and_reset_counters(frac, n_prog):
    """The shortest sequences handed out through the atomic counters (graph padding among
    them): the unified kernel's output bit for bit, twice in a row (each launch leaves the
    counters at zero for the next), and the counters are zero after."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=5, pad_tokens=3, pad_seqs=3)
    unified = _unified(5)
    lens = b.seq_lens + [0] * 3
    order = torch.tensor(sorted(range(len(lens)), key=lambda i: -lens[i]), dtype=torch.int32)
    for _ in range(2):
        got = _persistent(b, n_prog, seq_order=order, dynamic_frac=frac)
        assert torch.equal(got[: b.t], unified[: b.t])
    assert pdk.dynamic_count(len(lens), frac) == int(len(lens) * frac)
    if frac:
        assert not pdk.dynamic_counters(b.q.device, 2).any()


@pytest.mark.parametrize(("segs", "frac", "n_prog"), [(2, 0.5, 3), (2, 1.0, 4), (4, 0.3, 5)])
def test_dynamic_segments_equal_unified_split(segs, frac, n_prog):
    """Split grids hand out the segments of their shortest sequences (empty segments of
    short sequences and graph padding among them): the unified kernel's split path bit for
    bit, twice in a row, and the counters are zero after."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=9, pad_tokens=3, pad_seqs=3)
    unified = _unified(9, segs)
    lens = b.seq_lens + [0] * 3
    order = torch.tensor(sorted(range(len(lens)), key=lambda i: -lens[i]), dtype=torch.int32)
    for _ in range(2):
        got = _persistent(b, n_prog, seq_order=order, num_segs=segs, dynamic_frac=frac)
        assert torch.equal(got[: b.t], unified[: b.t])
    assert not pdk.dynamic_counters(b.q.device, 2).any()


def test_no_dynamic_counters_allocated_inside_a_capture(monkeypatch):
    """Counters first asked for during a CUDA graph capture are not made (their zeroing
    would only run in the graph): that launch deals every sequence instead."""
    monkeypatch.setattr(pdk, "_COUNTERS", {})
    dev = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert pdk.dynamic_counters(dev, 2) is None and not pdk._COUNTERS
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=5)
    unified = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED)
    got = _persistent(b, 3, dynamic_frac=0.5)  # CPU tensors: allocated, used, reset
    assert torch.equal(got[: b.t], unified[: b.t]) and len(pdk._COUNTERS) == 1


def _qk_batch(cache_dtype=None, dtype=torch.float32, seed=11):
    """A decode batch whose q/k/v are raw projections (views of one qkv buffer, as the
    model's), with Qwen3-style norm weights, rotary tables and each token's slot."""
    from strixlm.layers.rotary import RotaryEmbedding

    hq, hkv, d = 4, 2, 32
    b = Batch(ROWS, hq, hkv, d, 4, dtype, cache_dtype=cache_dtype, seed=seed, pad_tokens=2,
              pad_seqs=2)  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(b.num_tokens, (hq + 2 * hkv) * d, generator=g) * 2).to(dtype)

    def views(qkv):
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        return q.view(-1, hq, d), k.view(-1, hkv, d), v.view(-1, hkv, d)

    positions = torch.tensor([c for c, _ in ROWS] + [0, 0], dtype=torch.int64)
    rot = RotaryEmbedding(d, 128, 1e6)
    qw, kw = ((1 + 0.3 * torch.randn(d, generator=g)).to(dtype) for _ in range(2))
    scales = (0.03, 0.05) if cache_dtype == kvw.FP8_DTYPE else (1.0, 1.0)

    def prologue(k, v):
        return QKNormRopeWrite(k, v, positions, qw, kw, 1e-6, rot.cos, rot.sin, b.slots,
                               *scales)  # fmt: skip

    return b, qkv, views, prologue, scales


@pytest.mark.parametrize("cache_dtype", [None, kvw.FP8_DTYPE])
@pytest.mark.parametrize("n_prog", [1, 3, 5])
def test_fused_qk_prologue_equals_separate_launch(cache_dtype, n_prog):
    """The persistent kernel's q/k norm + rotary + K/V write: the same q, k, cache bytes and
    output, bit for bit, as qk_norm_rope_inplace's launch followed by the plain kernel."""
    b, qkv, views, prologue, scales = _qk_batch(cache_dtype)
    kw = dict(k_scale=scales[0], v_scale=scales[1])
    qkv2 = qkv.clone()
    q, k, v = views(qkv)
    q2, k2, v2 = views(qkv2)
    cache2 = b.kv_cache.clone()
    prologue(k2, v2).run(q2, cache2)
    b2 = _with(b, q=q2, kv_cache=cache2)
    want = _persistent(b2, n_prog, **kw)
    b1 = _with(b, q=q, kv_cache=b.kv_cache)
    got = _persistent(b1, n_prog, qk=prologue(k, v), **kw)
    raw = torch.uint8 if cache_dtype == kvw.FP8_DTYPE else torch.int32
    assert torch.equal(b.kv_cache.view(raw), cache2.view(raw))
    assert torch.equal(qkv[: b.t], qkv2[: b.t])
    assert torch.equal(got[: b.t], want[: b.t])


def test_qk_prologue_dispatch(monkeypatch):
    """paged_attention fuses the prologue only into an unsplit persistent grid; a split or
    unified grid (or without STRIXLM_ATTN_FUSE_QK=1) gets the separate launch first, and all give
    the same output."""
    from strixlm.kernels import qk_norm_rope as qknr

    launches = []
    real = qknr.qk_norm_rope_inplace
    monkeypatch.setattr(qknr, "qk_norm_rope_inplace",
                        lambda *a, **kw: launches.append(1) or real(*a, **kw))  # fmt: skip
    monkeypatch.setattr(pa, "FUSED_QK_ENABLED", True)  # STRIXLM_ATTN_FUSE_QK=1
    outs = []
    for cfg, fused in (
        (pa.AttnConfig(16, 16, 4, 2, persistent=True), True),
        (pa.AttnConfig(16, 16, 4, 2, 2, persistent=True), False),
        (UNIFIED, False),
        (None, False),  # fusion switched off below
    ):
        if cfg is None:
            monkeypatch.setattr(pa, "FUSED_QK_ENABLED", False)
            cfg = pa.AttnConfig(16, 16, 4, 2, persistent=True)
        b, qkv, views, prologue, _ = _qk_batch()
        q, k, v = views(qkv)
        launches.clear()
        b1 = _with(b, q=q, kv_cache=b.kv_cache)
        outs.append(pa.paged_attention(*_args(b1), max_query_len=1, max_seq_len=72,
                                       config=cfg, qk_prologue=prologue(k, v)))  # fmt: skip
        assert len(launches) == (0 if fused else 1), cfg
    for out in outs[1:]:
        assert rel_err(out[: b.t], outs[0][: b.t])[0] < 1e-5


def test_qwen3_attention_fuses_its_prologue(monkeypatch):
    """Qwen3Attention on the Triton path (forced, as on CUDA) hands its q/k norm + rotary +
    K/V write to the persistent decode kernel: no separate launch, and the same output and
    cache as with fusion off."""
    from types import SimpleNamespace

    from strixlm.kernels import qk_norm_rope as qknr
    from strixlm.layers.attention.triton_paged import TritonPagedAttention
    from strixlm.layers.rotary import RotaryEmbedding
    from strixlm.models import llama
    from strixlm.models.qwen3 import Qwen3Attention

    cfg = SimpleNamespace(num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                          hidden_size=64, rms_norm_eps=1e-6)  # fmt: skip
    torch.manual_seed(0)
    attn = Qwen3Attention(cfg, TritonPagedAttention, False, RotaryEmbedding(32, 128, 1e6))
    for p in attn.parameters():
        p.data.normal_(0, 0.3 if p.dim() > 1 else 1.0).add_(1.0 if p.dim() == 1 else 0.0)
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=12, pad_tokens=2, pad_seqs=2)
    x = torch.randn(b.num_tokens, 64)
    positions = torch.tensor([c for c, _ in ROWS] + [0, 0], dtype=torch.int64)
    monkeypatch.setattr(llama, "use_triton", lambda t: True)
    monkeypatch.setattr(pa, "num_sms", lambda dev: 2)  # 4 programs per kv head: persistent
    launches = []
    real = qknr.qk_norm_rope_inplace
    monkeypatch.setattr(qknr, "qk_norm_rope_inplace",
                        lambda *a, **kw: launches.append(1) or real(*a, **kw))  # fmt: skip
    results = []
    for fused in (True, False):
        monkeypatch.setattr(pa, "FUSED_QK_ENABLED", fused)
        attn.kv_cache = b.kv_cache.clone()
        launches.clear()
        with torch.no_grad():
            out = attn(positions, x, b.md)
        assert len(launches) == (0 if fused else 1)
        results.append((out[: b.t], attn.kv_cache))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


AOT_SCRIPT = r"""
from strixlm.kernels import paged_decode as pdk

for cache_dt in ("bf16", "fp8e4nv"):
    sig = dict(out_ptr="*bf16", q_ptr="*bf16", k_cache_ptr=f"*{cache_dt}",
               v_cache_ptr=f"*{cache_dt}", block_table_ptr="*i32", seq_lens_ptr="*i32",
               qsl_ptr="*i32", order_ptr="*i32", segm_acc_ptr="*fp32", segm_max_ptr="*fp32",
               segm_sum_ptr="*fp32", qk_scale="fp32", out_scale="fp32", num_seqs="i32",
               n_static="i32", ctr_ptr="*i32")
    for n in ("qt", "qh", "ot", "oh", "cb", "cs", "ch", "bt"):
        sig["stride_" + n] = "i32"
    sig.update(k_ptr="*bf16", v_ptr="*bf16", pos_ptr="*i64", slot_ptr="*i64", qw_ptr="*bf16",
               kw_ptr="*bf16", cos_ptr="*fp32", sin_ptr="*fp32")
    for n in ("stride_kt", "stride_kh", "stride_vt", "stride_vh", "pos_stride", "cos_stride",
              "sin_stride"):
        sig[n] = "i32"
    sig.update(qk_eps="fp32", k_scale="fp32", v_scale="fp32", timing_ptr="*i64")
    # The bf16 cache compiles the split grid without the q/k prologue, fp8 the unsplit
    # grid with it (the prologue's fp8 cache write included); both with dynamic items.
    fp8 = cache_dt == "fp8e4nv"
    # The bf16 one with the block ids a tile ahead and the item lookup at item ends (the
    # engine's default): K / V then take two 32-token buffers each in shared memory
    # (2 x 2 x 32 x 128 x 2 bytes).
    consts = dict(NUM_Q_HEADS=16, G=2, HEAD_DIM=128, DIM_P=128, BLOCK_SIZE=16, TILE=32,
                  BLOCK_M=16, MAX_ITEMS=8, NUM_SEGS=1 if fp8 else 4,
                  IEEE=False, K_ROWS=False, HAS_ORDER=True, FP8_PAIRS=fp8, FUSE_QK=fp8,
                  BLOCK_G=2, HALF=64, FP8=fp8, TIMING=fp8, DYNAMIC=True,
                  PDL=fp8, AHEAD=not fp8, LEAN=False)
    names = list(sig) + list(consts)
    div16 = [n for n in sig if n.endswith("_ptr") or (n.startswith("stride") and n != "stride_bt")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(pdk._paged_decode_persistent_kernel,
                    {**sig, **{k: "constexpr" for k in consts}}, consts, attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=2, num_stages=3))
    assert ("griddepcontrol.wait" in k.asm["ptx"]) == fp8  # PDL: the wait after the deal
    assert (k.metadata.shared >= 2 * 2 * 32 * 128 * 2) == (not fp8), k.metadata.shared
print("compiled")
"""


def test_persistent_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)


def test_tile_cuts_compile_for_sm90():
    """The deferred row sum (read at import), item rows and causal scores (all the default)
    on the engine's default loop (ids ahead, lean), in both of AOT_SCRIPT's kernels: the
    bf16 split grid and the fp8 grid with the q/k prologue. The interpreter cannot tell
    whether sm90 compiles."""
    script = AOT_SCRIPT.replace(
        "AHEAD=not fp8, LEAN=False)", "AHEAD=True, LEAN=True, ITEM_ROWS=True, CAUSAL=True)"
    ).replace("== (not fp8), k.metadata.shared", "or fp8, k.metadata.shared")
    assert script.count("ITEM_ROWS=True") == 1 and "or fp8, k.metadata" in script
    opt_in = "import os\nos.environ['STRIXLM_ATTN_DEFER_SUM'] = '1'\n"
    assert_compiles(opt_in + script + "from strixlm.kernels import attn_tiles\n"
                    "assert attn_tiles.DEFER_SUM\n")  # fmt: skip


@pytest.mark.parametrize("segs", [1, 2])
def test_block_ids_ahead_change_no_value(monkeypatch, segs):
    """The block ids loaded a tile ahead (BLOCKS_AHEAD / UNIFIED_AHEAD) only move loads:
    both kernels give the same bits with them off, for dealt, dynamic and split items and
    for the unified kernel's prefill-style (mixed) and split decode batches. With them on
    the dealt loop finds its items' fields where an item ends instead of at every tile:
    checked with one program a head (every item, graph padding's zero-tile ones among them,
    in one walk) and with three, against the unified kernel too."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    mixed = Batch([(40, 9), (3, 3), (70, 1), (17, 17)], 4, 2, 32, 4, torch.float32, seed=4)
    outs = {}
    for ahead in (False, True):
        monkeypatch.setattr(pdk, "BLOCKS_AHEAD", ahead)
        monkeypatch.setattr(pa, "UNIFIED_AHEAD", ahead)
        persistent = []
        for n_prog in (1, 3):
            persistent.append(_persistent(b, n_prog, num_segs=segs, dynamic_frac=0.0)[: b.t])
            persistent.append(_persistent(b, n_prog, num_segs=segs, dynamic_frac=0.6)[: b.t])
        cfg = pa.AttnConfig(16, 16, 4, 2, segs)
        split = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
        m = pa.paged_attention(
            *_args(mixed), max_query_len=17, max_seq_len=70, config=pa.AttnConfig(32, 16, 4, 2)
        )
        outs[ahead] = (*persistent, split[: b.t], m[: mixed.t])
    for off, on in zip(outs[False], outs[True], strict=True):
        assert torch.equal(off, on)
    unified = _unified(2, segs)[: b.t]
    assert torch.equal(outs[True][0], unified) and torch.equal(outs[True][2], unified)


def test_fp8_caches_take_their_own_grid(monkeypatch):
    """Over fp8 caches the persistent grid runs FP8_CTAS_PER_SM programs an SM (registers
    capped at FP8_MAXNREG so that they fit) when each of them gets FP8_GRID_MIN_ITEMS items
    or more; otherwise, and over other caches, PERSISTENT_CTAS_PER_SM with no cap."""
    assert pdk.persistent_programs(1000, 8, 132) == 132 * pdk.PERSISTENT_CTAS_PER_SM // 8
    assert pdk.persistent_programs(1000, 8, 132, 6) == 132 * 6 // 8
    assert pdk.persistent_programs(10, 8, 132, 6) == 10  # at most one per sequence
    if "STRIXLM_ATTN_FP8_CTAS" not in os.environ:
        assert pdk.FP8_CTAS_PER_SM == 6 and pdk.FP8_MAXNREG == 168
    monkeypatch.setattr(pdk, "FP8_CTAS_PER_SM", 6)
    monkeypatch.setattr(pdk, "FP8_MAXNREG", 168)
    monkeypatch.setattr(pdk, "FP8_GRID_MIN_ITEMS", 1.3)
    # 8 kv heads on 132 SMs: 99 six-grid programs a head, so 129 items is the first to
    # give them 1.3 each; b48 split in two (96 items) keeps the bf16 grid.
    assert pdk.fp8_grid(128, 8, 132) == (None, 0)
    assert pdk.fp8_grid(96, 8, 132) == (None, 0)
    assert pdk.fp8_grid(129, 8, 132) == (6, 168)
    assert pdk.fp8_grid(512, 8, 132) == (6, 168)
    monkeypatch.setattr(pdk, "FP8_CTAS_PER_SM", 0)  # the A/B switch: the bf16 grid always
    assert pdk.fp8_grid(512, 8, 132) == (None, 0)
    # The launch asks for the fp8 grid only over an fp8 cache with enough items a program,
    # and stays correct with either grid.
    monkeypatch.setattr(pdk, "FP8_CTAS_PER_SM", 7)
    asked, real = [], pdk.persistent_programs
    monkeypatch.setattr(pdk, "persistent_programs", lambda *a: asked.append(a[3:]) or real(*a))
    kw = dict(k_scale=0.03, v_scale=0.05)
    for cache_dtype, min_items in ((None, 0.0), (kvw.FP8_DTYPE, 0.0), (kvw.FP8_DTYPE, 2.0)):
        monkeypatch.setattr(pdk, "FP8_GRID_MIN_ITEMS", min_items)
        b = Batch(ROWS, 4, 2, 32, 4, torch.float32, cache_dtype=cache_dtype, seed=6)
        unified = pa.paged_attention(
            *_args(b), max_query_len=1, max_seq_len=72, config=UNIFIED, **kw
        )
        asked.clear()
        assert torch.equal(_persistent(b, None, **kw)[: b.t], unified[: b.t])
        # fp8_grid's own check comes first when it asks; the launch's is last.
        assert asked[-1] == ((7,) if cache_dtype and not min_items else (None,))


def test_fp8_batches_split_in_two_below_two_items_a_six_grid_program(monkeypatch):
    """Over fp8 caches a batch the persistent grid would run unsplit is split in two while
    it has fewer than FP8_SPLIT_BELOW sequences a six-grid program; the dispatch takes the
    split and still matches the reference."""
    monkeypatch.setattr(pdk, "FP8_CTAS_PER_SM", 6)
    monkeypatch.setattr(pdk, "FP8_SPLIT_BELOW", 1.8)

    def segs(b: int, fp8: bool) -> int:  # Qwen3-0.6B's heads on an H200
        cfg = pa.select_config(16, 8, 128, b, 1, 2048, 132, fp8=fp8)
        return cfg.num_splits if cfg.persistent else 0

    # 99 six-grid programs a kv head: split below 178.2 sequences; bf16 caches never.
    assert [segs(b, True) for b in (64, 96, 178, 179, 256)] == [2, 2, 2, 1, 1]
    assert [segs(b, False) for b in (64, 96, 178, 179, 256)] == [2, 1, 1, 1, 1]
    monkeypatch.setattr(pdk, "FP8_SPLIT_BELOW", 0.0)
    assert segs(96, True) == 1
    monkeypatch.setattr(pdk, "FP8_SPLIT_BELOW", 1.8)
    # 11 sequences over 2 kv heads on 4 SMs: 8 bf16-grid programs a head (unsplit), 11
    # six-grid ones (one each), so two segments; 22 items then take the six-grid.
    monkeypatch.setattr(pa, "num_sms", lambda device: 4)
    launches, real = [], pdk.paged_decode_persistent
    monkeypatch.setattr(
        pdk, "paged_decode_persistent", lambda *a, **k: launches.append(k) or real(*a, **k)
    )
    b = Batch(ROWS, 8, 2, 64, 16, torch.float16, cache_dtype=kvw.FP8_DTYPE, seed=5)
    kw = dict(k_scale=0.03, v_scale=0.05)
    got = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=512, **kw)
    assert [k["num_segs"] for k in launches] == [2]
    assert pdk.fp8_grid(22, 2, 4) == (6, pdk.FP8_MAXNREG)
    deq = kvw.dequantize_cache(b.kv_cache, 0.03, 0.05)
    ref = pa.paged_attention_ref(b.q.float(), deq.float(), b.query_lens, b.seq_lens,
                                 b.block_table, 0.2)  # fmt: skip
    assert rel_err(got[: b.t], ref)[0] < 3e-3


@pytest.mark.parametrize("segs", [1, 2])
def test_clamped_block_ids_change_no_value(monkeypatch, segs):
    """STRIXLM_ATTN_CLAMP_IDS (the default): masked tiles' block ids are loaded unmasked,
    their index clamped to the last block in range. The unified and persistent kernels give
    the same output as with masked id loads, over partial tiles, split segments and padded
    rows."""
    from strixlm.kernels import attn_tiles

    monkeypatch.setattr(attn_tiles, "_CLAMP_IDS", triton.language.constexpr(False))
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    cfg = pa.AttnConfig(16, 16, 4, 2, segs)
    masked = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
    persistent = _persistent(b, 3, num_segs=segs)
    monkeypatch.setattr(attn_tiles, "_CLAMP_IDS", triton.language.constexpr(True))
    clamped = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
    assert torch.equal(clamped[: b.t], masked[: b.t])
    assert torch.equal(_persistent(b, 3, num_segs=segs)[: b.t], persistent[: b.t])
