"""Fresh prompts' attention from the step's own k / v (strixlm/kernels/prefill_attention.py,
the unified kernel's FRESH branch), under the Triton interpreter, against the torch reference
and the cache path.

fp16 only: the interpreter's descriptor loads of bf16 come back wrong (see test_tma_linear.py).
"""

from __future__ import annotations

import importlib
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
_MODULES = (
    "strixlm.kernels.kv_write",
    "strixlm.kernels.paged_attention",
    "strixlm.kernels.prefill_attention",
)
reimport_interpreted(*_MODULES)
kvw, pa, pfa = (importlib.import_module(n) for n in _MODULES)

from test_triton_attention import Batch, rel_err  # noqa: E402

# Fresh prompts (one shorter than a tile, one a single token, one over several query and key
# tiles), a chunk after a cached prefix, decodes; then graph padding.
ROWS = [(0, 37), (20, 5), (30, 1), (0, 1), (0, 70), (13, 1)]


def _run(b: Batch, step_kv, monkeypatch, calls: list) -> torch.Tensor:
    real = pfa.fresh_descriptors
    monkeypatch.setattr(pfa, "fresh_descriptors", lambda *a: calls.append(1) or real(*a))
    return pa.paged_attention(
        b.q, b.kv_cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.3,
        max_query_len=b.md.max_query_len, max_seq_len=b.md.max_seq_len, step_kv=step_kv,
    )  # fmt: skip


@pytest.mark.parametrize("block_n", [16, 32, 64])
def test_fresh_rows_match_the_reference_and_the_cache_path(monkeypatch, block_n):
    monkeypatch.setattr(pfa, "ENABLED", True)
    monkeypatch.setattr(pfa, "BLOCK_N", block_n)
    b = Batch(ROWS, 4, 2, 32, 4, torch.float16, seed=3, pad_tokens=3, pad_seqs=2)
    kvw.write_kv_ref(b.kv_cache, b.k, b.v, b.slots)
    ref = pa.paged_attention_ref(
        b.q, b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.3
    )  # fmt: skip
    calls: list = []
    fresh = _run(b, (b.k, b.v), monkeypatch, calls)
    assert calls == [1]
    cached = _run(b, None, monkeypatch, calls)
    assert calls == [1]
    t = b.t
    assert rel_err(fresh[:t], ref[:t])[0] < 3e-3
    # Rows with a cached prefix and decodes take the cache path either way.
    for i, (c, q) in enumerate(ROWS):
        lo = sum(x for _, x in ROWS[:i])
        if c > 0:
            assert torch.equal(fresh[lo : lo + q], cached[lo : lo + q])
        else:
            assert rel_err(fresh[lo : lo + q], cached[lo : lo + q])[0] < 3e-3


def test_the_fresh_path_reads_the_step_kv_not_the_cache(monkeypatch):
    """With the cache's copies of the fresh rows' K/V spoiled, the fresh path still matches
    the reference over the intact cache: it never reads them back."""
    monkeypatch.setattr(pfa, "ENABLED", True)
    rows = [(0, 37), (0, 20)]
    b = Batch(rows, 4, 2, 32, 4, torch.float16, seed=5)
    kvw.write_kv_ref(b.kv_cache, b.k, b.v, b.slots)
    ref = pa.paged_attention_ref(b.q, b.kv_cache, b.query_lens, b.seq_lens, b.block_table, 0.3)
    b.kv_cache.fill_(100.0)
    got = _run(b, (b.k, b.v), monkeypatch, [])
    assert rel_err(got[: b.t], ref[: b.t])[0] < 3e-3


def test_fits_only_what_tma_can_read(monkeypatch):
    q = torch.randn(8, 4, 32).half()
    k = torch.randn(8, 2, 32).half()
    assert not pfa.prefill_fits(q, k, k)  # opt-in
    monkeypatch.setattr(pfa, "ENABLED", True)
    k = torch.randn(8, 2, 32).half()
    assert pfa.prefill_fits(q, k, k)
    assert not pfa.prefill_fits(q.float(), k.float(), k.float())  # fp32: unified kernel
    assert not pfa.prefill_fits(q, k.transpose(0, 1).contiguous().transpose(0, 1), k)
    assert not pfa.prefill_fits(torch.randn(8, 4, 24).half(), torch.randn(8, 2, 24).half(),
                                torch.randn(8, 2, 24).half())  # fmt: skip


def test_an_fp8_cache_keeps_the_unified_kernel(monkeypatch):
    """Attention must read what the cache holds: fp8-rounded K/V, not the step's."""
    monkeypatch.setattr(pfa, "ENABLED", True)
    b = Batch(ROWS, 4, 2, 32, 4, torch.float16, cache_dtype=kvw.FP8_DTYPE, seed=4)
    calls: list = []
    _run(b, (b.k, b.v), monkeypatch, calls)
    assert calls == []


AOT = r"""
from strixlm.kernels import paged_attention as pa
from strixlm.kernels import prefill_attention as p
target = GPUTarget("cuda", 90, 32)
for dt in ("bf16", "fp16"):
    # The prefill config of the unified kernel at the Qwen3-0.6B head shape, with FRESH.
    bn, d = p.BLOCK_N, 128
    sig = dict(out_ptr=f"*{dt}", q_ptr=f"*{dt}", k_cache_ptr=f"*{dt}", v_cache_ptr=f"*{dt}",
               block_table_ptr="*i32", seq_lens_ptr="*i32", qsl_ptr="*i32", order_ptr="*i32",
               segm_acc_ptr="*fp32", segm_max_ptr="*fp32", segm_sum_ptr="*fp32",
               fresh_k_desc=f"tensordesc<{dt}[{bn},{d}]>",
               fresh_v_desc=f"tensordesc<{dt}[{bn},{d}]>", merge_ctr_ptr="*i32",
               qk_scale="fp32", out_scale="fp32", num_seqs="i32")
    for n in ("qt", "qh", "ot", "oh", "cb", "cs", "ch", "bt"):
        sig["stride_" + n] = "i32"
    c = dict(NUM_Q_HEADS=16, G=2, HEAD_DIM=d, DIM_P=d, BLOCK_SIZE=16, TILE=32, BLOCK_M=64,
             BLOCK_Q=32, NUM_SEGS=1, SPLIT=False, IEEE=False, K_ROWS=False, SEQ_GRID=False,
             HAS_ORDER=False, FP8_PAIRS=False, FRESH=True, FRESH_N=bn, MERGE=False,
             PDL=True)
    src = ASTSource(pa._paged_attn_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    k = triton.compile(src, target=target, options=dict(num_warps=4, num_stages=3))
    assert "cp.async.bulk.tensor" in k.asm["ptx"] and "wgmma" in k.asm["ptx"]
    assert k.metadata.shared <= 227 * 1024, k.metadata.shared
print("compiled")
"""


def test_kernel_compiles_for_sm90_with_tma_and_wgmma():
    """The unified kernel's prefill config with the FRESH branch at the Qwen3-0.6B head
    shape (G 2, D 128), bf16 and fp16, within the H200's shared memory."""
    assert_compiles(AOT)
