"""Cuts to the decode kernels' tile loops under TRITON_INTERPRET=1: each gives the code
it replaced bit for bit (or within fp32 rounding, where it sums in another order), with NaN
in every cache slot no sequence holds. The loop changes themselves are sm90 SASS effects,
checked in test_sass_tile_loop.py; their GPU figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed")

from test_paged_decode import ROWS, _args, _persistent  # noqa: E402
from test_triton_attention import Batch, rel_err  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _poison_unused_slots(b: Batch) -> None:
    """NaN in every cache slot no sequence holds (past each sequence's end, spare blocks):
    a kernel that lets a NaN into a sum gives NaN."""
    used = torch.zeros(b.kv_cache.shape[1] * b.bs, dtype=torch.bool)
    for i, n in enumerate(b.seq_lens):
        p = torch.arange(n)
        used[b.block_table[i, p // b.bs].long() * b.bs + p % b.bs] = True
    flat = b.kv_cache.view(2, -1, b.hkv, b.d)
    flat[:, ~used] = float("nan")


@pytest.mark.parametrize("segs", [1, 2])
def test_lean_loop_changes_no_value(monkeypatch, segs):
    """STRIXLM_ATTN_LEAN_LOOP (the default: q loaded once an item, only the running max reset
    at item ends) gives the per-tile loop's output bit for bit, over items of 1-5 tiles,
    split segments and padded rows, with NaN in every slot no sequence holds."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    _poison_unused_slots(b)
    monkeypatch.setattr(pdk, "LEAN_LOOP", False)
    before = _persistent(b, 3, num_segs=segs)[: b.t]
    assert torch.isfinite(before).all()
    monkeypatch.setattr(pdk, "LEAN_LOOP", True)
    assert torch.equal(_persistent(b, 3, num_segs=segs)[: b.t], before)


@pytest.mark.parametrize("segs", [1, 2])
@pytest.mark.parametrize("n_prog,dynamic", [(1, 0.6), (1, 0.0), (2, 0.0), (3, None), (5, 0.0)])
def test_item_rows_change_no_value(monkeypatch, segs, n_prog, dynamic):
    """STRIXLM_ATTN_ITEM_ROWS (default): every dealt item's q rows in the one q tile, each
    row with its own softmax state, gives the lean loop's output bit for bit: programs of
    one to eight dealt items (with dynamic ones after them, or none), split segments, padded
    rows, NaN in every slot no sequence holds; and a deal whose rows would not fit the tile
    (n_prog 1, no dynamic share: 11 items of 2 rows) keeps the lean loop. So do scores
    masked by the causal limit alone (STRIXLM_ATTN_CAUSAL_SCORES, default, only with item
    rows: alone it was slower)."""
    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    _poison_unused_slots(b)
    monkeypatch.setattr(pdk, "ITEM_ROWS", False)
    monkeypatch.setattr(pdk, "CAUSAL_SCORES", False)
    before = _persistent(b, n_prog, num_segs=segs, dynamic_frac=dynamic)[: b.t]
    assert torch.isfinite(before).all()
    for rows, causal in ((True, False), (True, True)):
        monkeypatch.setattr(pdk, "ITEM_ROWS", rows)
        monkeypatch.setattr(pdk, "CAUSAL_SCORES", causal)
        got = _persistent(b, n_prog, num_segs=segs, dynamic_frac=dynamic)[: b.t]
        assert torch.equal(got, before), (rows, causal)


@pytest.mark.parametrize("segs", [1, 2])
def test_aligned_tiles_change_no_value(monkeypatch, segs):
    """STRIXLM_ATTN_ALIGNED_TILES (tiles a multiple of the block size: a token's slot and
    block index within its tile hoisted out of the loops), with and without the per-block
    K / V pointers (STRIXLM_ATTN_BLOCK_PTRS), gives the same bits in the unified kernel
    (decodes with K loaded as [D, TILE] and as rows, split, and prompts with a prefix) and
    the persistent kernel (dealt and dynamic items, at tiles of one and two blocks)."""
    from strixlm.kernels import attn_tiles

    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    _poison_unused_slots(b)
    mixed = Batch([(12, 5), (0, 9), (33, 1), (5, 20), (6, 1)], 4, 2, 32, 4, torch.float32,
                  seed=3, pad_tokens=2, pad_seqs=1)  # fmt: skip
    cfg = pa.AttnConfig(16, 16, 4, 2, segs)
    rows_cfg = pa.AttnConfig(16, 16, 4, 2, segs, k_rows=True)

    def run(aligned: bool, block_ptrs: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(attn_tiles, "ALIGNED_TILES", aligned)  # the launchers' PER_BLOCK
        monkeypatch.setattr(attn_tiles, "BLOCK_PTRS", block_ptrs)
        monkeypatch.setattr(attn_tiles, "_ALIGNED_TILES", triton.language.constexpr(aligned))
        assert attn_tiles.per_block_tiles(16, 4, False, b.kv_cache[0], b.kv_cache[1]) == (
            aligned and block_ptrs
        )
        decode = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
        k_rows = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=rows_cfg)
        prompts = pa.paged_attention(*_args(mixed), max_query_len=20, max_seq_len=39, config=cfg)
        two_blocks = pdk.paged_decode_persistent(
            *_args(b), torch.full_like(b.q, float("nan")), block_m=16, tile=32, num_warps=4,
            num_stages=2, k_rows=False, sms=132, num_programs=3, num_segs=segs,
        )  # fmt: skip
        return [decode[: b.t], k_rows[: b.t], _persistent(b, 3, num_segs=segs)[: b.t],
                two_blocks[: b.t], prompts[: mixed.t]]  # fmt: skip

    before = run(False, False)
    assert all(torch.isfinite(x).all() for x in before)
    for aligned, block_ptrs in ((True, False), (True, True)):
        for got, want in zip(run(aligned, block_ptrs), before, strict=True):
            assert torch.equal(got, want), (aligned, block_ptrs)


@pytest.mark.parametrize("segs", [1, 2])
def test_deferred_sums_match_the_default(monkeypatch, segs):
    """STRIXLM_ATTN_DEFER_SUM (default): each row's softmax sum carried per score element and
    summed where the row is stored. The unified kernel (decodes, split, prompts with a
    prefix, and an fp8 step's own rows read unquantized) and the persistent kernel (dealt and
    dynamic items, tiles of one and two blocks) give the default's output within fp32
    rounding (the same terms in another order), with NaN in every slot no sequence holds."""
    from strixlm.kernels import attn_tiles

    b = Batch(ROWS, 4, 2, 32, 4, torch.float32, seed=2, pad_tokens=3, pad_seqs=3)
    _poison_unused_slots(b)
    mixed = Batch([(12, 5), (0, 9), (33, 1), (5, 20), (6, 1)], 4, 2, 32, 4, torch.float32,
                  seed=3, pad_tokens=2, pad_seqs=1)  # fmt: skip
    fp8 = Batch([(70, 1), (45, 23), (0, 40)], 4, 2, 32, 4, torch.float32,
                cache_dtype=kvw.FP8_DTYPE, seed=11)  # fmt: skip
    cfg = pa.AttnConfig(16, 16, 4, 2, segs)

    def run(defer: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(attn_tiles, "_DEFER_SUM", triton.language.constexpr(defer))
        decode = pa.paged_attention(*_args(b), max_query_len=1, max_seq_len=72, config=cfg)
        prompts = pa.paged_attention(*_args(mixed), max_query_len=20, max_seq_len=39, config=cfg)
        fresh = pa.paged_attention(
            *_args(fp8), max_query_len=40, max_seq_len=70, k_scale=0.02, v_scale=0.05,
            config=pa.AttnConfig(64, 16, 4, 2), k_new=fp8.k, v_new=fp8.v,
        )  # fmt: skip
        two_blocks = pdk.paged_decode_persistent(
            *_args(b), torch.full_like(b.q, float("nan")), block_m=16, tile=32, num_warps=4,
            num_stages=2, k_rows=False, sms=132, num_programs=3, num_segs=segs,
        )  # fmt: skip
        return [decode[: b.t], _persistent(b, 3, num_segs=segs)[: b.t], two_blocks[: b.t],
                prompts[: mixed.t], fresh[: fp8.t]]  # fmt: skip

    before = run(False)
    deferred = run(True)
    assert all(torch.isfinite(x).all() for x in before + deferred)
    for got, want in zip(deferred, before, strict=True):
        rel, mx = rel_err(got, want)
        assert rel < 1e-6, (rel, mx)
    ref = pa.paged_attention_ref(b.q[: b.t], b.kv_cache, b.query_lens, b.seq_lens,
                                 b.block_table, 0.2)  # fmt: skip
    assert rel_err(deferred[1], ref)[0] < 1e-5


def test_per_block_tiles_needs_whole_blocks_and_aligned_rows():
    """The launchers take per-block K / V pointers only where the kernels' alignment claim
    holds: tiles of whole blocks, 16-byte aligned rows, and no fp8 byte-pair loads."""
    from strixlm.kernels import attn_tiles

    cache = torch.zeros(2, 8, 16, 2, 128, dtype=torch.bfloat16)
    kc, vc = cache[0], cache[1]
    assert attn_tiles.per_block_tiles(32, 16, False, kc, vc)
    assert attn_tiles.per_block_tiles(16, 16, False, kc, vc)
    assert not attn_tiles.per_block_tiles(16, 32, False, kc, vc)  # a tile inside a block
    assert not attn_tiles.per_block_tiles(32, 16, True, kc, vc)  # fp8 pairs
    odd = torch.zeros(2, 8, 16, 2, 68, dtype=torch.bfloat16)  # 136-byte rows
    assert not attn_tiles.per_block_tiles(32, 16, False, odd[0], odd[1])
    shifted = torch.zeros(2 * 8 * 16 * 2 * 128 + 1, dtype=torch.bfloat16)[1:].view(cache.shape)
    assert not attn_tiles.per_block_tiles(32, 16, False, shifted[0], shifted[1])
