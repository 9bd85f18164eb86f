"""The LM head with an argmax epilogue (strixlm/kernels/lm_head_argmax.py): greedy tokens
against torch.argmax over the rounded logits under the Triton interpreter, ties, bad input,
and an sm90 compile of the measured configs.

fp16 only in the interpreter (it is not a reference for bf16 dots); bf16 gets the compile.
"""

from __future__ import annotations

import dataclasses
import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

reimport_interpreted("strixlm.kernels.lm_head_argmax")

import strixlm.kernels.lm_head_argmax as lha  # noqa: E402

SMALL = lha.LmHeadConfig(16, 64, 32, 4, 2)
SMALL_TMA = lha.LmHeadConfig(16, 64, 32, 4, 2, tma=True)
# Three programs walk the tiles under the interpreter (dispatch.persistent_sms).
SMALL_PERSIST = lha.LmHeadConfig(16, 64, 32, 4, 2, tma=True, persistent=True)
SMALL_PERSIST2 = lha.LmHeadConfig(16, 64, 32, 4, 2, tma=True, persistent=True, programs_per_sm=2)
CONFIGS = [SMALL, SMALL_TMA, SMALL_PERSIST, SMALL_PERSIST2]
IDS = ["pointer", "tma", "persistent", "persistent2"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
@pytest.mark.parametrize("m,k", [(1, 64), (5, 80), (37, 64)])
def test_tokens_match_argmax_of_rounded_logits(m, k, cfg):
    # 300 columns: the last vocabulary tile is partly past the end; k = 80 leaves a partial
    # K step of the 32-wide loop (which the TMA config leaves to the pointer-load kernel).
    h = torch.randn(m, k, generator=_gen(m)).to(torch.float16)
    w = torch.randn(300, k, generator=_gen(100 + m)).to(torch.float16)
    got = lha.lm_head_argmax(h, w, cfg)
    assert got.dtype == torch.int64 and got.shape == (m,)
    assert torch.equal(got, lha.lm_head_argmax_ref(h, w))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_ties_resolve_to_the_lowest_index_within_and_across_tiles(cfg):
    h = torch.randn(3, 64, generator=_gen(1)).to(torch.float16)
    w = (torch.randn(300, 64, generator=_gen(2)) * 0.01).to(torch.float16)
    peak = h[0].sign() * 0.5  # one direction every row scores high on
    for col in (250, 70, 75, 299):  # tiles 3, 1, 1, 4 of 64 columns: the same row each
        w[col] = peak
    h[1:] = h[0]
    got = lha.lm_head_argmax(h, w, cfg)
    assert got.tolist() == [70, 70, 70]
    assert torch.equal(got, lha.lm_head_argmax_ref(h, w))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_sampling_epilogue_draws_the_samplers_tokens(cfg):
    """Gumbel-max in the epilogue: the torch Sampler's tokens over the rounded logits, for
    temperature and greedy rows gathered by state-table row, with large seeds too."""
    from strixlm.sample.metadata import SamplingMetadata, SamplingRow
    from strixlm.sample.sampler import Sampler

    m, k, v = 21, 64, 300
    h = torch.randn(m, k, generator=_gen(7)).to(torch.float16)
    w = torch.randn(v, k, generator=_gen(8)).to(torch.float16)
    table_rows = 40
    rows = torch.randperm(table_rows, generator=_gen(9))[:m].to(torch.int32)
    temps = torch.rand(table_rows, generator=_gen(10)) * 2 + 0.2
    temps[rows[::5].long()] = 0.0  # some greedy rows
    seeds = torch.randint(-(2**62), 2**62, (table_rows,), generator=_gen(11))
    positions = torch.randint(0, 5000, (table_rows,), generator=_gen(12)).to(torch.int32)
    got = lha.lm_head_sample(h, w, rows, temps, seeds, positions, cfg)
    r = rows.long()
    samp_rows = [
        SamplingRow(temperature=float(temps[i]), seed=int(seeds[i]), position=int(positions[i]))
        for i in r
    ]
    logits = (h.float() @ w.float().t()).to(h.dtype).float()
    ref = Sampler()(logits, SamplingMetadata.build(samp_rows, "cpu", v)).sampled_token_ids
    assert torch.equal(got, ref)
    greedy = temps[r] == 0
    assert torch.equal(got[greedy], lha.lm_head_argmax_ref(h, w)[greedy])
    assert not torch.equal(got, lha.lm_head_argmax_ref(h, w))  # the noise moved some rows


def test_rejects_what_it_cannot_run():
    w = torch.randn(300, 64).to(torch.float16)
    with pytest.raises(ValueError, match="half-precision"):
        lha.lm_head_argmax(torch.randn(2, 64), w)  # float32 hidden
    with pytest.raises(ValueError, match="half-precision"):
        lha.lm_head_argmax(torch.randn(2, 64).to(torch.bfloat16), w)  # dtypes differ
    with pytest.raises(ValueError, match="half-precision"):
        lha.lm_head_argmax(torch.randn(2, 48).to(torch.float16), w[:, :48].t().contiguous().t())
    assert lha.lm_head_argmax(torch.empty(0, 64, dtype=torch.float16), w).shape == (0,)


def test_table_covers_every_row_count():
    seen = [lha.config_for_rows(m) for m in (1, 16, 17, 64, 65, 256, 512, 4096)]
    assert all(isinstance(c, lha.LmHeadConfig) for c in seen)
    assert seen[-1] == lha._TABLE[-1][1]  # past the table: its last config
    assert not any(c.tma for c in seen)
    tma = [lha.config_for_rows(m, tma=True) for m in (1, 16, 96, 97, 224, 4096)]
    assert tma[:2] == seen[:2]  # pointer loads below 17 rows
    persist = dataclasses.replace(lha._TMA_TABLE[-1][1], persistent=True)
    assert all(c.tma for c in tma[2:]) and tma[-1] == persist
    sample = [lha.config_for_rows(m, tma=True, sample=True) for m in (32, 33, 256)]
    assert not sample[0].tma and sample[1].tma
    assert sample[2] == dataclasses.replace(lha._SAMPLE_TMA_TABLE[-1][1], persistent=True)
    assert lha.fused_sample_max_rows(torch.device("cpu")) == 32


def test_persistent_walk_from_129_rows_on_tma_tiles_only():
    """The persistent grid takes the TMA tables' tiles from PERSISTENT_MIN_ROWS (129) rows:
    at 128 rows it measured slower on the H200, and pointer-load tiles never take it."""
    assert lha.PERSISTENT_MIN_ROWS == 129
    for sample in (False, True):
        picks = {m: lha.config_for_rows(m, tma=True, sample=sample) for m in (96, 128, 129, 256)}
        if sample:  # sampling keeps its table below 129 rows (greedy walks the small table)
            assert not picks[96].persistent and not picks[128].persistent
        assert picks[129].persistent and picks[256].persistent
        assert picks[129].tma and picks[256].tma
    assert not any(lha.config_for_rows(m).persistent for m in (129, 256, 4096))


def test_small_rows_walk_64_row_tma_tiles_when_greedy():
    """Greedy on Hopper, 17-128 rows: 64-row TMA tiles on a persistent grid of one program an
    SM (128 columns wide up to 64 rows, 256 above); sampling and pointer loads keep their
    tables."""
    assert lha.SMALL_PERSISTENT_MIN_ROWS == 17
    picks = {m: lha.config_for_rows(m, tma=True) for m in (16, 17, 64, 65, 128, 129)}
    assert not picks[16].persistent and not picks[16].tma
    for m in (17, 64, 65, 128):
        assert picks[m].persistent and picks[m].tma and picks[m].block_m == 64
    assert picks[17] == picks[64] and picks[64].block_n == 128
    assert picks[65] == picks[128] and picks[128].block_n == 256
    assert all(c.programs_per_sm == 1 for c in picks.values())
    above = next(c for up_to, c in lha._TMA_TABLE if up_to >= 129)  # the table's 129-row tile
    assert picks[129] == dataclasses.replace(above, persistent=True)
    assert not lha.config_for_rows(64, tma=True, sample=True).persistent
    assert not any(lha.config_for_rows(m).persistent for m in (17, 64, 128))


AOT = r"""
from strixlm.kernels import lm_head_argmax as l
target = GPUTarget("cuda", 90, 32)
rows = dict(rows_ptr="*i32", temp_ptr="*fp32", seed_ptr="*i64", pos_ptr="*i32", M="i32",
            V="i32", S="i32")
first = l._TABLE[0][1]
wide = l.LmHeadConfig(128, 256, 64, 8, 3)
# Every table's configs with the epilogue they ship with, and pointer-load sampling once.
jobs = [(c, False, c.tma) for c in {c for _, c in l._TABLE + l._TMA_TABLE}]
jobs += [(c, True, c.tma) for c in {c for _, c in l._SAMPLE_TMA_TABLE}]
jobs += [(c, False, True) for _, c in l._SMALL_PERSISTENT_TABLE]  # greedy only
jobs += [(first, True, False), (wide, True, False)]
# The persistent walk of the TMA table's widest tiles, greedy and sampling.
persist = l.LmHeadConfig(128, 256, 64, 8, 3, tma=True, persistent=True)
jobs += [(persist, False, True), (persist, True, True)]
for cfg, sample, tma in jobs:
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages, enable_fp_fusion=not sample)
    c = dict(K=1024, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PDL=True, SAMPLE=sample, PRECISE=True,
             TMA=tma, PERSIST=cfg.persistent)
    if tma:
        ops = dict(h=f"tensordesc<bf16[{bm},{bk}]>", w=f"tensordesc<bf16[{bn},{bk}]>")
    else:
        ops = dict(h="*bf16", w="*bf16")
    sig = dict(**ops, val_ptr="*fp32", idx_ptr="*i32", **rows, stride_h="i32", stride_w="i32")
    kern = l._lm_head_argmax_kernel
    k = triton.compile(ASTSource(kern, {**sig, **{n: "constexpr" for n in c}}, c),
                       target=target, options=opts)
    assert "mma" in k.asm["ptx"] and (not tma or "cp.async.bulk.tensor" in k.asm["ptx"]), cfg
    assert k.metadata.shared <= 227 * 1024, (cfg, k.metadata.shared)
print("compiled")
"""


def test_kernel_compiles_for_sm90():
    """bf16: the table's configs, the sampling epilogue and the TMA loader (TMA loads in its
    PTX), each within the H200's shared memory."""
    assert_compiles(AOT)
