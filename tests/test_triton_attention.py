"""Triton KV write and paged attention against the torch references (TRITON_INTERPRET=1).

Small shapes: the interpreter runs every program in numpy. fp32 and fp16 only (the
interpreter's tl.dot on bf16 operands is wrong). Tolerances, on ||out - ref|| / ||ref||:
fp32 1e-5 (both sides accumulate in fp32; only summation order differs, ~1e-7 observed);
fp16 3e-3 (the kernel rounds P to fp16 before P @ V, as flash attention does; fp16 has a
2**-11 ~ 5e-4 unit roundoff, so a few ulps of relative error on the output).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, or kernels compile for GPU

import random  # noqa: E402
import zlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed")

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.layers.attention.metadata import AttentionMetadata  # noqa: E402
from strixlm.layers.attention.torch_paged import TorchPagedAttention  # noqa: E402
from strixlm.layers.attention.triton_paged import TritonPagedAttention  # noqa: E402

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover
    InterpretedFunction = ()  # type: ignore[assignment]

if not isinstance(kvw._kv_write_kernel, InterpretedFunction):
    pytest.skip(
        "strixlm kernels were imported before TRITON_INTERPRET=1 was set (compiled for GPU); "
        "run this module on its own or first",
        allow_module_level=True,
    )

# The interpreter warns on numpy scalar conversions in its own code; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOL = {torch.float32: 1e-5, torch.float16: 3e-3}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    diff = (out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)
    return diff.item(), (out.float() - ref.float()).abs().max().item()


class Batch:
    """A random step: per sequence (cached context, new queries); blocks shuffled."""

    def __init__(
        self,
        rows: list[tuple[int, int]],
        hq: int,
        hkv: int,
        d: int,
        bs: int,
        dtype: torch.dtype,
        cache_dtype: torch.dtype | None = None,
        seed: int = 0,
        spare_blocks: int = 5,
        pad_tokens: int = 0,
        pad_seqs: int = 0,
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        rng = random.Random(seed)
        self.hq, self.hkv, self.d, self.bs = hq, hkv, d, bs
        self.query_lens = [q for _, q in rows]
        self.seq_lens = [c + q for c, q in rows]
        nblks = [-(-s // bs) for s in self.seq_lens]
        num_blocks = sum(nblks) + spare_blocks
        perm = list(range(num_blocks))
        rng.shuffle(perm)  # non-contiguous, out-of-order blocks, as a pool hands them out
        width = max(nblks)
        bt = torch.zeros((len(rows) + pad_seqs, width), dtype=torch.int32)
        it = iter(perm)
        for i, n in enumerate(nblks):
            bt[i, :n] = torch.tensor([next(it) for _ in range(n)], dtype=torch.int32)
        self.block_table = bt
        t = sum(self.query_lens)
        self.num_tokens = t + pad_tokens
        slots = []
        for i, (c, q) in enumerate(rows):
            for p in range(c, c + q):
                slots.append(int(bt[i, p // bs]) * bs + p % bs)
        self.slots = torch.tensor(slots + [-1] * pad_tokens, dtype=torch.int64)
        cd = cache_dtype or dtype
        cache = torch.randn((2, num_blocks, bs, hkv, d), generator=g)
        self.kv_cache = cache.to(cd) if cd != kvw.FP8_DTYPE else (cache * 8).to(cd)
        self.q = torch.randn((self.num_tokens, hq, d), generator=g).to(dtype)
        self.k = torch.randn((self.num_tokens, hkv, d), generator=g).to(dtype)
        self.v = torch.randn((self.num_tokens, hkv, d), generator=g).to(dtype)
        qsl = [0]
        for q in self.query_lens:
            qsl.append(qsl[-1] + q)
        qsl_dev = qsl + [qsl[-1]] * pad_seqs  # padded sequences: zero queries, zero length
        decode = [i for i, q in enumerate(self.query_lens) if q == 1]
        self.md = AttentionMetadata(
            num_tokens=t,
            query_start_loc=torch.tensor(qsl_dev, dtype=torch.int32),
            seq_lens=torch.tensor(self.seq_lens + [0] * pad_seqs, dtype=torch.int32),
            block_table=bt,
            slot_mapping=self.slots,
            query_start_loc_cpu=qsl,
            query_lens_cpu=self.query_lens,
            seq_lens_cpu=self.seq_lens,
            max_query_len=max(self.query_lens),
            max_seq_len=max(self.seq_lens),
            decode_rows=torch.tensor(decode, dtype=torch.int64) if decode else None,
            max_decode_seq_len=max((self.seq_lens[i] for i in decode), default=0),
        )
        self.t = t


# ------------------------------------------------------------------------- KV write


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_kv_write_skips_padding(dtype):
    b = Batch([(5, 3), (0, 6), (9, 1)], 4, 2, 32, 4, dtype, pad_tokens=3)
    poison = torch.full_like(b.kv_cache, 1234.0)
    got, ref = poison.clone(), poison.clone()
    kvw.write_kv(got, b.k, b.v, b.slots)
    kvw.write_kv_ref(ref, b.k, b.v, b.slots)
    assert torch.equal(got, ref)
    # Exactly the real tokens' slots changed; the rest still hold the poison.
    written = torch.zeros(2 * b.kv_cache[0].numel() // (b.hkv * b.d), dtype=torch.bool)
    written.view(2, -1)[:, b.slots[b.slots >= 0]] = True
    flat = got.view(2, -1, b.hkv, b.d)
    assert (flat[~written.view(2, -1)] == 1234.0).all()
    assert torch.equal(flat[0, b.slots[: b.t]], b.k[: b.t])


def test_kv_write_fp8_bit_exact():
    b = Batch([(3, 7), (0, 5)], 4, 2, 32, 4, torch.float32, cache_dtype=kvw.FP8_DTYPE)
    k = b.k * 40  # exercise saturation at +-448 and the subnormal range
    k[0, 0, :4] = torch.tensor([1e-3, -3e-3, 500.0 * 0.5, -1e4])
    # Negative values that round to zero keep their sign in torch's cast (-0.0, byte 0x80).
    k[1, 0, :4] = torch.tensor([-1e-5, -0.0, 1e-5, -(2.0**-11)])
    got = torch.zeros_like(b.kv_cache)
    ref = torch.zeros_like(b.kv_cache)
    kvw.write_kv(got, k, b.v, b.slots, k_scale=0.5, v_scale=0.03)
    kvw.write_kv_ref(ref, k, b.v, b.slots, k_scale=0.5, v_scale=0.03)
    assert torch.equal(got.view(torch.uint8), ref.view(torch.uint8))


# ------------------------------------------------------------------------- attention

PREFILL = [(0, 13), (0, 7)]
CHUNKED = [(20, 9), (37, 16), (5, 3)]
DECODE = [(11, 1), (40, 1), (3, 1), (66, 1)]
MIXED = [(30, 1), (0, 11), (17, 5), (45, 1), (8, 2)]

CASES = [
    # rows, hq, hkv, d, bs, dtype, num_splits
    (PREFILL, 4, 4, 32, 4, torch.float32, 1),
    (PREFILL, 8, 2, 64, 16, torch.float16, 1),
    (CHUNKED, 4, 2, 32, 4, torch.float32, 1),
    (CHUNKED, 8, 2, 64, 16, torch.float16, 1),
    (CHUNKED, 4, 1, 32, 4, torch.float32, 4),
    (DECODE, 4, 1, 32, 4, torch.float32, 1),
    (DECODE, 4, 2, 64, 16, torch.float16, 4),
    (DECODE, 2, 2, 32, 4, torch.float32, 3),
    (MIXED, 8, 2, 32, 4, torch.float32, 1),
    (MIXED, 4, 1, 64, 16, torch.float16, 2),
    (MIXED, 4, 4, 32, 16, torch.float32, 8),
    (MIXED, 6, 2, 48, 4, torch.float32, 2),  # G = 3 and a head dim that is not a power of 2
]


def _ids(case) -> str:
    rows, hq, hkv, d, bs, dtype, ns = case
    kind = {id(PREFILL): "prefill", id(CHUNKED): "chunked", id(DECODE): "decode"}.get(
        id(rows), "mixed"
    )
    return f"{kind}-g{hq // hkv}-d{d}-bs{bs}-{str(dtype)[6:]}-split{ns}"


def _run_backends(b: Batch, num_splits, scale=None):
    scale = scale if scale is not None else b.d**-0.5
    ref_be = TorchPagedAttention(b.hq, b.hkv, b.d, scale)
    tri_be = TritonPagedAttention(b.hq, b.hkv, b.d, scale)
    tri_be.num_splits = num_splits
    ref_cache, tri_cache = b.kv_cache.clone(), b.kv_cache.clone()
    t = b.t
    ref = ref_be.forward(b.q[:t], b.k[:t], b.v[:t], ref_cache, b.md)
    out = tri_be.forward(b.q, b.k, b.v, tri_cache, b.md)
    assert torch.equal(ref_cache, tri_cache)
    return out[:t], ref


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_attention_matches_torch(case):
    rows, hq, hkv, d, bs, dtype, ns = case
    b = Batch(rows, hq, hkv, d, bs, dtype, seed=zlib.crc32(_ids(case).encode()))
    out, ref = _run_backends(b, ns)
    rel, mx = rel_err(out, ref)
    print(f"{_ids(case)}: rel {rel:.2e} max {mx:.2e}")
    assert rel < TOL[dtype], (rel, mx)


@pytest.mark.parametrize("backend", [TorchPagedAttention, TritonPagedAttention])
def test_forward_is_write_kv_then_attend(backend):
    """The backend interface: forward = write_kv + attend, bit for bit; attend alone reads
    what a separate write (e.g. the fused Qwen3 q/k norm + rotary launch) put in the cache."""
    b = Batch([(7, 1), (0, 9), (20, 4)], 4, 2, 32, 4, torch.float32, seed=5)
    be = backend(b.hq, b.hkv, b.d, b.d**-0.5)
    c1, c2 = b.kv_cache.clone(), b.kv_cache.clone()
    out = be.forward(b.q, b.k, b.v, c1, b.md)
    be.write_kv(b.k, b.v, c2, b.md)
    assert torch.equal(c1, c2)
    assert torch.equal(be.attend(b.q, c2, b.md), out)
    assert be.kv_write_is_kernel_compatible == (backend is TritonPagedAttention)


@pytest.mark.parametrize("num_splits", [1, 4])
def test_fp8_cache_matches_dequantized_reference(num_splits):
    b = Batch(MIXED, 4, 2, 32, 4, torch.float32, cache_dtype=kvw.FP8_DTYPE, seed=7)
    ks, vs = 0.02, 0.05
    cache = b.kv_cache.clone()
    kvw.write_kv(cache, b.k, b.v, b.slots, ks, vs)
    out = pa.paged_attention(
        b.q,
        cache,
        b.md.query_start_loc,
        b.md.seq_lens,
        b.block_table,
        b.d**-0.5,
        max_query_len=b.md.max_query_len,
        max_seq_len=b.md.max_seq_len,
        k_scale=ks,
        v_scale=vs,
        num_splits=num_splits,
    )
    # The reference attends over the dequantized cache (writing nothing new).
    deq = kvw.dequantize_cache(cache, ks, vs)
    md = b.md
    ref_be = TorchPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5)
    ref = ref_be.forward(b.q, b.k[:0], b.v[:0], deq, _no_write(md))
    rel, mx = rel_err(out, ref)
    print(f"fp8 split{num_splits}: rel {rel:.2e} max {mx:.2e}")
    assert rel < 1e-5, (rel, mx)


LONG = [(70, 1), (45, 23), (0, 40), (100, 2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    "cfg", [None, pa.AttnConfig(16, 16, 4, 2), pa.AttnConfig(64, 16, 4, 2)], ids=str
)
def test_fp8_steps_read_their_new_rows_unquantized(monkeypatch, dtype, cfg):
    """Over an fp8 cache the unified kernel reads each sequence's new tokens from the step's
    K / V rows: the reference is the dequantized cache with those tokens exact. Read back
    from the cache (STRIXLM_ATTN_FP8_FRESH=0) the output misses that reference by the
    quantization error, which shows the test can tell the two apart."""
    b = Batch(LONG, 4, 2, 32, 4, dtype, cache_dtype=kvw.FP8_DTYPE, seed=11)
    ks, vs = 0.02, 0.05
    cache = b.kv_cache.clone()
    kvw.write_kv(cache, b.k, b.v, b.slots, ks, vs)
    ref_cache = kvw.dequantize_cache(cache, ks, vs)
    kvw.write_kv_ref(ref_cache, b.k.float(), b.v.float(), b.slots)
    ref_be = TorchPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5)
    ref = ref_be.forward(b.q.float(), b.k[:0], b.v[:0], ref_cache, _no_write(b.md))

    def run(**kw):
        return pa.paged_attention(
            b.q, cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, b.d**-0.5,
            max_query_len=b.md.max_query_len, max_seq_len=b.md.max_seq_len, k_scale=ks,
            v_scale=vs, config=cfg, **kw,
        )  # fmt: skip

    tol = TOL[dtype]
    fresh = run(k_new=b.k, v_new=b.v)
    rel, mx = rel_err(fresh, ref)
    print(f"fresh {dtype} {cfg}: rel {rel:.2e} max {mx:.2e}")
    assert rel < tol, (rel, mx)
    assert rel_err(run(), ref)[0] > 10 * tol  # no rows given: the quantized cache
    monkeypatch.setattr(pa, "FP8_FRESH_ENABLED", False)
    assert rel_err(run(k_new=b.k, v_new=b.v), ref)[0] > 10 * tol
    if cfg is None:  # the backend hands its k / v over
        monkeypatch.setattr(pa, "FP8_FRESH_ENABLED", True)
        be = TritonPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5)
        be.k_scale, be.v_scale = ks, vs
        assert torch.equal(be.forward(b.q, b.k, b.v, b.kv_cache.clone(), b.md), fresh)


def test_fp8_mixed_split_leaves_decodes_to_the_decode_kernel(monkeypatch):
    """With the mixed-step split on, paged_attention hands a mixed fp8 step's decodes to
    paged_decode_fp8 (decodes_only) and the unified kernel skips them: the prompt and chunk
    rows match the reference, the decode rows keep what the decode kernel wrote. The Gluon
    kernel has no interpreter; a recorder takes its place here, and the GPU probe
    (bench_fp8_decode.py --split-mixed) checks the two launches together."""
    from strixlm.kernels import paged_decode_fp8 as pdf8

    b = Batch(LONG, 4, 2, 32, 4, torch.float16, cache_dtype=kvw.FP8_DTYPE, seed=12)
    ks, vs = 0.02, 0.05
    cache = b.kv_cache.clone()
    kvw.write_kv(cache, b.k, b.v, b.slots, ks, vs)
    ref_be = TorchPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5)
    ref = ref_be.forward(
        b.q.float(), b.k[:0], b.v[:0], kvw.dequantize_cache(cache, ks, vs), _no_write(b.md)
    )
    calls = []

    def decode_kernel(q, kv_cache, qsl, seq_lens, bt, scale, out, **kw):
        calls.append(kw)
        out.fill_(7.0)  # every row: the unified kernel must overwrite all but the decodes

    monkeypatch.setattr(pdf8, "MIXED_SPLIT", True)
    monkeypatch.setattr(pdf8, "supports", lambda *a: True)  # the Gluon kernel's gate
    monkeypatch.setattr(pdf8, "paged_decode_fp8", decode_kernel)
    monkeypatch.setattr(pa, "FP8_FRESH_ENABLED", False)  # the reference reads the cache
    out = pa.paged_attention(
        b.q, cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, b.d**-0.5,
        max_query_len=b.md.max_query_len, max_seq_len=b.md.max_seq_len, k_scale=ks,
        v_scale=vs,
    )  # fmt: skip
    assert len(calls) == 1 and calls[0]["decodes_only"]
    qsl = b.md.query_start_loc_cpu
    decode_rows = [qsl[i] for i, n in enumerate(b.md.query_lens_cpu) if n == 1]
    other = [r for r in range(b.md.num_tokens) if r not in decode_rows]
    assert decode_rows and other
    assert torch.all(out[decode_rows] == 7.0)
    assert rel_err(out[other], ref[other])[0] < TOL[torch.float16]


@pytest.mark.parametrize(
    "cfg",
    [
        pa.AttnConfig(16, 16, 4, 2),
        pa.AttnConfig(32, 32, 4, 2),
        pa.AttnConfig(16, 16, 4, 2, 3),
        pa.AttnConfig(16, 32, 4, 2, 1, k_rows=False),
        pa.AttnConfig(16, 16, 4, 2, 3, k_rows=False),
        # check_attention.py --sweep's long-prefill extremes (STRIXLM_ATTN_PREFILL_CONFIG)
        pa.AttnConfig(64, 128, 2, 3),
        pa.AttnConfig(128, 64, 8, 2),
    ],
    ids=str,
)
def test_explicit_configs(cfg):
    """Small tiles and query blocks: many full-visibility (unmasked) tiles and diagonals."""
    b = Batch(LONG, 4, 2, 32, 4, torch.float32, seed=5)
    ref_cache = b.kv_cache.clone()
    ref = TorchPagedAttention(b.hq, b.hkv, b.d, 0.2).forward(b.q, b.k, b.v, ref_cache, b.md)
    out = pa.paged_attention(
        b.q,
        ref_cache,
        b.md.query_start_loc,
        b.md.seq_lens,
        b.block_table,
        0.2,
        max_query_len=b.md.max_query_len,
        max_seq_len=b.md.max_seq_len,
        config=cfg,
    )
    rel, mx = rel_err(out, ref)
    print(f"{cfg}: rel {rel:.2e} max {mx:.2e}")
    assert rel < 1e-5, (rel, mx)


def _no_write(md: AttentionMetadata) -> AttentionMetadata:
    return AttentionMetadata(**{**md.__dict__, "slot_mapping": md.slot_mapping[:0]})


@pytest.mark.parametrize("rows", [MIXED, DECODE], ids=["mixed", "decode"])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_graph_padding(num_splits, rows):
    """Padded tokens (slot -1) and padded zero-length sequences; host maxima as upper bounds
    (decode rows take the one-program-per-sequence grid, mixed rows the query-tile search)."""
    pad_tokens = 5 if rows is MIXED else 3  # decode graphs pad one token per padded sequence
    b = Batch(rows, 4, 2, 32, 4, torch.float32, seed=3, pad_tokens=pad_tokens, pad_seqs=3)
    b.md.max_seq_len = 128
    b.md.max_query_len = 16 if rows is MIXED else 1
    cache = b.kv_cache.clone()
    be = TritonPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5)
    be.num_splits = num_splits
    out = be.forward(b.q, b.k, b.v, cache, b.md)
    ref_cache = b.kv_cache.clone()
    md = AttentionMetadata(
        **{
            **b.md.__dict__,
            "query_start_loc": b.md.query_start_loc[: len(rows) + 1],
            "seq_lens": b.md.seq_lens[: len(rows)],
            "block_table": b.block_table[: len(rows)],
            "slot_mapping": b.slots[: b.t],
            "max_seq_len": max(b.seq_lens),
            "max_query_len": max(b.query_lens),
        }
    )
    ref = TorchPagedAttention(b.hq, b.hkv, b.d, b.d**-0.5).forward(
        b.q[: b.t], b.k[: b.t], b.v[: b.t], ref_cache, md
    )
    assert torch.equal(cache, ref_cache)
    rel, mx = rel_err(out[: b.t], ref)
    print(f"padded split{num_splits}: rel {rel:.2e} max {mx:.2e}")
    assert rel < 1e-5, (rel, mx)


@pytest.mark.parametrize("num_splits", [1, 2])
def test_sequence_order_changes_nothing_but_scheduling(num_splits):
    """The decode grid may take sequences in any order (longest first in the engine): same
    output, bit for bit; padded zero-length rows may sit anywhere in the order."""
    b = Batch(DECODE, 4, 2, 32, 4, torch.float32, seed=5, pad_tokens=2, pad_seqs=2)
    b.md.max_query_len = 1
    args = (b.q, b.kv_cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.2)
    kw = dict(max_query_len=1, max_seq_len=max(b.seq_lens), num_splits=num_splits)
    plain = pa.paged_attention(*args, **kw)
    for order in ([5, 4, 3, 2, 1, 0], [3, 1, 4, 0, 2, 5]):
        seq_order = torch.tensor(order, dtype=torch.int32)
        got = pa.paged_attention(*args, **kw, seq_order=seq_order)
        assert torch.equal(got[: b.t], plain[: b.t]), order


def test_reference_matches_torch_backend():
    b = Batch(MIXED, 4, 2, 32, 4, torch.float32, seed=11)
    cache = b.kv_cache.clone()
    kvw.write_kv_ref(cache, b.k, b.v, b.slots)
    ref = pa.paged_attention_ref(b.q, cache, b.query_lens, b.seq_lens, b.block_table, 0.17)
    tor = TorchPagedAttention(b.hq, b.hkv, b.d, 0.17).forward(
        b.q, b.k[:0], b.v[:0], cache, _no_write(b.md)
    )
    assert rel_err(ref, tor)[0] < 1e-5


def test_split_heuristic():
    # Few long decodes: split until ~2 CTAs per SM, segments >= 128 tokens; many sequences
    # or prefill: no split.
    assert pa.choose_num_splits(1, 8, 1, 8192, 64, 132) == 64
    assert pa.choose_num_splits(1, 8, 1, 512, 64, 132) == 4
    assert pa.choose_num_splits(256, 8, 1, 8192, 64, 132) == 1
    assert pa.choose_num_splits(64, 8, 1, 2048, 64, 132) == 1
    assert pa.choose_num_splits(1, 8, 512, 8192, 64, 132) == 1
    assert pa.choose_num_splits(4, 8, 1, 64, 64, 132) == 1
    cfg = pa.select_config(16, 8, 128, 16, 1, 2048, 132)
    assert cfg.block_m >= 16 and cfg.tile >= 16 and cfg.num_splits == 4


@pytest.mark.parametrize("num_splits", [1, 2, 4])
def test_tiles_with_short_segments(num_splits):
    """One-query decodes at 64-token tiles over 4-token blocks, segments down to under a
    tile (a 37-token context in 4 segments), and the decode graphs' padding (one-token rows
    past the real ones)."""
    rows = [(36, 1), (99, 1), (0, 1), (63, 1), (64, 1)]
    b = Batch(rows, 4, 2, 32, 4, torch.float32, seed=11)
    cache = b.kv_cache.clone()
    ref = TorchPagedAttention(b.hq, b.hkv, b.d, 0.2).forward(b.q, b.k, b.v, cache.clone(), b.md)
    kvw.write_kv_ref(cache, b.k, b.v, b.slots)
    cfg = pa.AttnConfig(16, 64, 2, 3, num_splits)
    out = pa.paged_attention(
        b.q, cache, b.md.query_start_loc, b.md.seq_lens, b.block_table, 0.2,
        max_query_len=1, max_seq_len=40960, config=cfg,
    )  # fmt: skip
    rel, mx = rel_err(out, ref)
    assert rel < TOL[torch.float32], (rel, mx)


def test_torch_fallback_path(monkeypatch):
    """STRIXLM_DISABLE_TRITON=1 (and plain CPU installs) run the references; same results."""
    monkeypatch.setenv("STRIXLM_DISABLE_TRITON", "1")
    b = Batch(MIXED, 4, 2, 32, 4, torch.float32, seed=13)
    assert not TritonPagedAttention.use_triton(b.q.device)
    out, ref = _run_backends(b, None)
    assert rel_err(out, ref)[0] < 1e-5


AOT_SCRIPT = r"""
from strixlm.kernels import kv_write as kvw, paged_attention as pa

def build(fn, sig, consts, warps, stages=1):
    names = list(sig) + list(consts)
    div16 = [n for n in sig if n.endswith("_ptr") or (n.startswith("stride") and n != "stride_bt")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    sig = {**sig, **{k: "constexpr" for k in consts}}
    src = ASTSource(fn, sig, consts, attrs)
    opts = dict(num_warps=warps, num_stages=stages)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)

def attn(dt, cache_dt, cfg, seq_grid, has_order, early=False, ahead=True, fresh=False,
         skip_decodes=False):
    sig = dict(out_ptr=f"*{dt}", q_ptr=f"*{dt}", k_cache_ptr=f"*{cache_dt}",
               v_cache_ptr=f"*{cache_dt}", block_table_ptr="*i32", seq_lens_ptr="*i32",
               qsl_ptr="*i32", order_ptr="*i32", segm_acc_ptr="*fp32", segm_max_ptr="*fp32",
               segm_sum_ptr="*fp32", k_new_ptr=f"*{dt}", v_new_ptr=f"*{dt}", qk_scale="fp32",
               out_scale="fp32", new_qk_scale="fp32", new_v_inv="fp32", num_seqs="i32")
    for n in ("qt", "qh", "ot", "oh", "cb", "cs", "ch", "bt", "nt", "nh"):
        sig["stride_" + n] = "i32"
    c = dict(NUM_Q_HEADS=16, G=2, HEAD_DIM=128, DIM_P=128, BLOCK_SIZE=16, TILE=cfg.tile,
             BLOCK_M=cfg.block_m, BLOCK_Q=cfg.block_m // 2, NUM_SEGS=cfg.num_splits,
             SPLIT=cfg.num_splits > 1, IEEE=False, K_ROWS=cfg.k_rows, SEQ_GRID=seq_grid,
             HAS_ORDER=has_order, FP8_PAIRS=cache_dt == "fp8e4nv", PDL=has_order or early,
             EARLY=early, AHEAD=ahead, FRESH=fresh, SKIP_DECODES=skip_decodes)
    k = build(pa._paged_attn_kernel, sig, c, cfg.num_warps, cfg.num_stages)
    ptx = k.asm["ptx"]
    # AHEAD (block ids a tile ahead) double-buffers K / V at the decode config's 3 stages.
    kv_tile = 2 * cfg.tile * 128 * 2
    if seq_grid and not c["FP8_PAIRS"]:
        assert (k.metadata.shared >= 2 * kv_tile) == ahead, (ahead, k.metadata.shared)
    # EARLY: the sequence lookup's loads come before the wait, q and K/V after it.
    wait = ptx.find("griddepcontrol.wait")
    if c["PDL"]:
        assert (ptx.find("ld.global") < wait) == early and "ld.global" in ptx[wait:], early

attn("bf16", "fp8e4nv", pa.select_config(16, 8, 128, 1, 1, 8192, 132), True, True)
attn("bf16", "bf16", pa.select_config(16, 8, 128, 256, 1, 2048, 132), True, True)
attn("bf16", "bf16", pa.select_config(16, 8, 128, 256, 1, 2048, 132), True, True, ahead=False)
attn("bf16", "bf16", pa.select_config(16, 8, 128, 1, 2048, 2048, 132), False, False)
attn("fp16", "fp8e4nv", pa.select_config(16, 8, 128, 1, 2048, 2048, 132), False, False)
attn("bf16", "fp8e4nv", pa.select_config(16, 8, 128, 64, 512, 4096, 132), False, False, fresh=True)
attn("bf16", "fp8e4nv", pa.select_config(16, 8, 128, 64, 512, 4096, 132), False, False, fresh=True,
     skip_decodes=True)
attn("bf16", "bf16", pa.select_config(16, 8, 128, 256, 1, 2048, 132), True, True, early=True)
attn("bf16", "bf16", pa.select_config(16, 8, 128, 1, 2048, 2048, 132), False, False, early=True)
sig = dict(out_ptr="*bf16", segm_acc_ptr="*fp32", segm_max_ptr="*fp32", segm_sum_ptr="*fp32",
           out_scale="fp32", stride_ot="i32", stride_oh="i32")
c = dict(NUM_Q_HEADS=16, HEAD_DIM=128, DIM_P=128, NUM_SEGS=3, SEGS_P=4, PDL=True)
build(pa._merge_segments_kernel, sig, c, 4)
sig = dict(k_ptr="*bf16", v_ptr="*bf16", kc_ptr="*fp8e4nv", vc_ptr="*fp8e4nv", slot_ptr="*i64",
           k_scale="fp32", v_scale="fp32", stride_kt="i32", stride_kh="i32", stride_vt="i32",
           stride_vh="i32", stride_cb="i32", stride_cs="i32", stride_ch="i32")
c = dict(NUM_HEADS=8, HEAD_DIM=128, HEADS_P=8, DIM_P=128, BLOCK_SIZE=16, FP8=True)
build(kvw._kv_write_kernel, sig, c, 4)
print("compiled")
"""


def test_kernels_compile_for_sm90():
    """The interpreter never compiles; ptxas (shipped with triton) does, without a GPU."""
    assert_compiles(AOT_SCRIPT)


def test_fp8_pairs_is_default_and_compiled_only(monkeypatch):
    """The byte-pair fp8 read (inline PTX) is on by default for compiled kernels, never
    taken under the interpreter, nor for fp32 q or a 16-bit cache, and
    STRIXLM_ATTN_FP8_PAIRS=0 turns it off."""
    q = torch.zeros(1, 4, 32, dtype=torch.float16)
    cache = torch.zeros(2, 1, 4, 2, 32).to(kvw.FP8_DTYPE)
    assert pa.FP8_PAIRS_ENABLED or os.environ.get("STRIXLM_ATTN_FP8_PAIRS") == "0"
    monkeypatch.setattr(pa, "FP8_PAIRS_ENABLED", True)
    assert not pa.fp8_pairs(q, cache)  # the interpreter cannot run inline PTX
    monkeypatch.setattr(pa, "interpreter_active", lambda: False)
    assert pa.fp8_pairs(q, cache)
    assert not pa.fp8_pairs(q.float(), cache)
    assert not pa.fp8_pairs(q, cache.to(torch.float16))
    assert not pa.fp8_pairs(torch.zeros(1, 4, 48, dtype=torch.float16), cache)
    monkeypatch.setattr(pa, "FP8_PAIRS_ENABLED", False)  # STRIXLM_ATTN_FP8_PAIRS=0
    assert not pa.fp8_pairs(q, cache)
