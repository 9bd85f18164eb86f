"""Stream-K decode attention (kernels/paged_decode_streamk.py) under TRITON_INTERPRET=1.

Its tiles are cut into ranges at places the dealt grid never cuts, so it is compared with
the torch reference (fp32: to ~1e-6) rather than bit for bit with the unified kernel; the
cut sequences' parts, their merge and the counters that pick the merging program are what
these tests exercise: static ranges only, dynamic chunks only, both, more programs than
tiles, one sequence over many ranges, graph padding, fp16 and fp8 caches.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed")

from test_triton_attention import Batch, rel_err  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode_streamk as sk  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Eleven decoding sequences of 2 to 71 tokens: 1 to 5 KV tiles of 16 each (27 in all).
ROWS = [(c, 1) for c in (12, 1, 70, 33, 5, 48, 16, 64, 2, 29, 40)]


def _args(b: Batch):
    return (b.q, b.kv_cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.2)


def _streamk(b: Batch, n_prog: int, dyn: int, chunk: int, **kw) -> torch.Tensor:
    out = torch.full_like(b.q, float("nan"))
    got = sk.paged_decode_streamk(
        *_args(b), out, block_m=16, tile=16, num_warps=4, num_stages=2, k_rows=False,
        num_programs=n_prog, dyn_tiles=dyn, chunk=chunk, **kw,
    )  # fmt: skip
    assert got is out
    return out


def _ref(b: Batch) -> torch.Tensor:
    return pa.paged_attention_ref(
        b.q[: b.t], b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.2
    )


def _counters_clear(b: Batch) -> bool:
    return not sk._COUNTERS[(b.q.device, b.hkv)].any()


@pytest.mark.parametrize(
    ("n_prog", "dyn", "chunk"),
    [
        (1, 0, 1),  # one program, one static range: nothing cut
        (3, 0, 1),  # static ranges only: cuts at 9 and 18
        (4, 2, 1),  # static ranges and one-tile chunks
        (5, 1, 3),  # static and three-tile chunks
        (2, 20, 2),  # all dynamic (the static share is zero)
        (40, 4, 2),  # more programs than tiles
    ],
)
def test_streamk_matches_reference_and_resets_counters(n_prog, dyn, chunk):
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    ref = _ref(b)
    first = _streamk(b, n_prog, dyn, chunk)
    rel, mx = rel_err(first[: b.t], ref)
    assert rel < 1e-5, (rel, mx)
    assert _counters_clear(b)
    again = _streamk(b, n_prog, dyn, chunk)  # the same cuts, the same merge order
    assert torch.equal(again[: b.t], first[: b.t])


def test_one_sequence_over_many_ranges():
    """A 300-token sequence (19 tiles) with two short ones: cut into static ranges and
    one-tile chunks, merged from up to a dozen parts."""
    b = Batch([(299, 1), (3, 1), (20, 1)], 4, 2, 32, 4, torch.float32, seed=3)
    for n_prog, dyn, chunk in ((3, 3, 1), (8, 1, 1), (2, 0, 1)):
        got = _streamk(b, n_prog, dyn, chunk)
        rel, mx = rel_err(got[: b.t], _ref(b))
        assert rel < 1e-5, (n_prog, dyn, chunk, rel, mx)
        assert _counters_clear(b)


def test_ranges_bound_holds_for_any_total():
    """The partial slots cover every range the kernel can form: the dynamic region is
    under P * (dyn + 1) tiles for any total."""
    for n_prog in (1, 3, 66):
        for dyn in (0, 1, 4):
            for chunk in (1, 2, 3):
                for total in range(0, 2000, 7):
                    static = max((total - n_prog * dyn) // n_prog, 0)
                    ranges = n_prog + -(-(total - static * n_prog) // chunk)
                    assert ranges <= sk.max_ranges(n_prog, dyn, chunk)


def test_fp16_and_fp8_cache():
    b = Batch(ROWS, 8, 2, 64, 16, torch.float16, seed=4, pad_tokens=2, pad_seqs=2)
    got = _streamk(b, 3, 2, 1)
    rel, mx = rel_err(got[: b.t], _ref(b))
    assert rel < 3e-3, (rel, mx)
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, cache_dtype=kvw.FP8_DTYPE, seed=6)
    kw = dict(k_scale=0.03, v_scale=0.05)
    unified = pa.paged_attention(
        *_args(b), max_query_len=1, max_seq_len=72, config=pa.AttnConfig(16, 16, 4, 2), **kw
    )
    got = _streamk(b, 3, 2, 1, **kw)
    rel, mx = rel_err(got[: b.t], unified[: b.t])
    assert rel < 1e-5, (rel, mx)


def test_dispatch(monkeypatch):
    """paged_attention takes stream-K for the unsplit persistent grid (and the split one
    with STRIXLM_ATTN_STREAMK=2); off, the dealt grid."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=8)
    monkeypatch.setattr(pa, "num_sms", lambda dev: 3)  # 6 programs per kv head
    calls = []
    real = sk.paged_decode_streamk
    monkeypatch.setattr(
        sk, "paged_decode_streamk", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    for segs, mode, want in ((1, 1, 1), (2, 1, 0), (2, 2, 1), (1, 0, 0)):
        monkeypatch.setattr(sk, "STREAMK_MODE", mode)
        calls.clear()
        cfg = pa.AttnConfig(16, 16, 4, 2, num_splits=segs, persistent=True)
        got = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
        assert len(calls) == want, (segs, mode)
        rel, mx = rel_err(got[: b.t], _ref(b))
        assert rel < 1e-5, (segs, mode, rel, mx)
    assert not sk.use_streamk(sk.STREAMK_MAX_SEQS + 1, 1)


def test_no_counters_grown_inside_a_capture(monkeypatch):
    """Counters too small for a launch first seen during a CUDA graph capture are not
    replaced (the zeroing would only run in the graph): the launch returns None and the
    dispatch takes the dealt grid."""
    monkeypatch.setattr(sk, "_COUNTERS", {})
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    dev = torch.device("cuda")
    assert sk.streamk_counters(dev, 2, 8) is None and not sk._COUNTERS
    cpu = torch.device("cpu")  # only CUDA tensors are captured: made as usual
    assert sk.streamk_counters(cpu, 2, 8).numel() == 2 * 2 + 2 * 1024


AOT_SCRIPT = r"""
from strixlm.kernels import paged_decode_streamk as sk

for cache_dt in ("bf16", "fp8e4nv"):
    sig = dict(out_ptr="*bf16", q_ptr="*bf16", k_cache_ptr=f"*{cache_dt}",
               v_cache_ptr=f"*{cache_dt}", block_table_ptr="*i32", seq_lens_ptr="*i32",
               qsl_ptr="*i32", part_acc_ptr="*fp32", part_ml_ptr="*fp32", ctr_ptr="*i32",
               qk_scale="fp32", out_scale="fp32", num_seqs="i32", n_ranges="i32",
               ctr_stride="i32")
    for n in ("qt", "qh", "ot", "oh", "cb", "cs", "ch", "bt"):
        sig["stride_" + n] = "i32"
    sig["timing_ptr"] = "*i64"
    fp8 = cache_dt == "fp8e4nv"
    consts = dict(G=2, HEAD_DIM=128, DIM_P=128, BLOCK_SIZE=16, TILE=64, BLOCK_M=16, BLOCK_G=2,
                  BLOCK_B=256, WINDOW=sk.STREAMK_WINDOW, CHUNK=2, DYN_TILES=4, IEEE=False,
                  K_ROWS=False, FP8_PAIRS=fp8, TIMING=fp8)
    names = list(sig) + list(consts)
    div16 = [n for n in sig if n.endswith("_ptr") or (n.startswith("stride") and n != "stride_bt")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    src = ASTSource(sk._paged_decode_streamk_kernel,
                    {**sig, **{k: "constexpr" for k in consts}}, consts, attrs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=2, num_stages=2))
print("compiled")
"""


def test_streamk_kernel_compiles_for_sm90():
    assert_compiles(AOT_SCRIPT)
