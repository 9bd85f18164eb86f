"""The Triton sampler against the torch reference, on CPU under the Triton interpreter.

Shapes are small because the interpreter runs every program op by op in Python.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed")
tl = pytest.importorskip("triton.language")

from aot_compile import assert_compiles  # noqa: E402

from strixlm.kernels import sampler as kern  # noqa: E402
from strixlm.kernels import sampler_topp as ktp  # noqa: E402
from strixlm.sample.logprobs import gather_logprobs, raw_logprobs  # noqa: E402
from strixlm.sample.metadata import SamplingMetadata, SamplingRow  # noqa: E402
from strixlm.sample.penalties import (  # noqa: E402
    apply_logit_bias,
    apply_penalties,
    apply_suppress_tokens,
)
from strixlm.sample.random import gumbel_noise, hash_bits  # noqa: E402
from strixlm.sample.sampler import Sampler, apply_top_k_top_p_min_p  # noqa: E402
from strixlm.sample.triton_sampler import (  # noqa: E402
    TritonSampler,
    compute_token_logprobs,
    kernels_interpreted,
)

if not kernels_interpreted():
    pytest.skip(
        "triton was imported before TRITON_INTERPRET=1 was set (set it in conftest.py)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # interpreter noise


def run_both(logits: torch.Tensor, rows: list[SamplingRow], **kwargs):
    md = SamplingMetadata.build(rows, logits.device, logits.shape[-1])
    ts = TritonSampler(**kwargs)
    out = ts(logits, md)
    ref = Sampler()(logits, md)
    return out, ref, md, ts


def reference_kept(logits: torch.Tensor, md: SamplingMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, V] bool tokens the reference keeps (greedy rows: all), [B, V] scaled values)."""
    x = apply_logit_bias(logits.float().clone(), md.logit_bias)
    x = apply_suppress_tokens(x, md.suppress_token_ids)
    if not md.no_penalties:
        x = apply_penalties(x, md)
    greedy = md.temperature < 1e-5
    scaled = x / torch.where(greedy, 1.0, md.temperature)[:, None]
    kept = torch.isfinite(apply_top_k_top_p_min_p(scaled, md.top_k, md.top_p, md.min_p))
    kept[greedy] = True
    return kept & torch.isfinite(scaled), scaled


def kernel_kept(scaled: torch.Tensor, ts: TritonSampler) -> torch.Tensor:
    """[B, V] bool: the tokens the kernel's per-row thresholds keep."""
    assert ts.last_thresholds is not None
    return (scaled >= ts.last_thresholds[:, None]) & torch.isfinite(scaled)


# ---------------------------------------------------------------- the hash


@triton.jit
def _noise_kernel(seed_ptr, pos_ptr, h_ptr, g_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    key = kern._row_key(tl.load(seed_ptr + row), tl.load(pos_ptr + row))
    h = kern._fmix32(key ^ kern._fmix32(offs.to(tl.uint32) + 0x7F4A7C15))
    tl.store(h_ptr + row * V + offs, h.to(tl.int64), mask=offs < V)
    tl.store(g_ptr + row * V + offs, kern._gumbel(key, offs, False), mask=offs < V)


def test_hash_and_gumbel_match_reference_bits() -> None:
    seeds = torch.tensor([0, 1, 42, -1, -(2**63), 2**63 - 1, 123456789012345])
    positions = torch.tensor([0, 1, 7, 2**31 - 1, 2**32 + 5, 1000, 3])
    vocab = 300
    h = torch.empty(7, vocab, dtype=torch.int64)
    g = torch.empty(7, vocab)
    _noise_kernel[(7,)](seeds, positions, h, g, vocab, BLOCK=512)
    assert torch.equal(h, hash_bits(seeds, positions, vocab))
    # The interpreter's log is numpy's (may differ from torch's CPU log by an ulp); on CUDA
    # both are libdevice logf and equal bit for bit (benchmarks/gpu/check_sampler.py).
    torch.testing.assert_close(g, gumbel_noise(seeds, positions, vocab), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- greedy and plain sampling


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_is_argmax(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    logits = (torch.randn(16, 2000) * 3).to(dtype)
    out, ref, _, _ = run_both(logits, [SamplingRow(temperature=0.0) for _ in range(16)])
    assert out.sampled_token_ids.dtype == torch.int64
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    assert torch.equal(out.sampled_token_ids, logits.float().argmax(-1))


@pytest.mark.parametrize("num_splits", [1, 3])
def test_greedy_ties_take_the_first_index(num_splits: int) -> None:
    """The all-greedy loop keeps a best per lane (tiles of 4 x 16 here): ties in one lane,
    across lanes, across chunks, and a row of equal values all resolve to the lowest id."""
    vocab = 300
    logits = torch.randn(5, vocab).clamp(max=2.0)
    logits[0, [5, 69, 133]] = 9.0  # one lane (64 apart), three tiles
    logits[1, [100, 37, 290]] = 9.0  # different lanes and chunks
    logits[2, 299] = 9.0  # the last token
    logits[3] = 1.0  # all equal
    logits[4, [250, 251]] = float("inf")
    out, _, _, _ = run_both(
        logits, [SamplingRow(temperature=0.0)] * 5, num_splits=num_splits, block=16
    )
    assert out.sampled_token_ids.tolist() == [5, 37, 299, 0, 250]
    assert torch.equal(out.sampled_token_ids, logits.argmax(-1))


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_random_tokens_identical(temperature: float) -> None:
    torch.manual_seed(1)
    n, vocab = 16, 2500
    logits = torch.randn(n, vocab) * 2
    rows = [SamplingRow(temperature=temperature, seed=1000 + i, position=7 * i) for i in range(n)]
    rows[3] = SamplingRow(temperature=0.0)  # a greedy row in a random batch
    out, ref, _, _ = run_both(logits, rows)
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)


def test_uniform_logits_are_pure_noise_and_identical() -> None:
    logits = torch.zeros(16, 3000)  # every draw is decided by the Gumbel noise alone
    rows = [SamplingRow(seed=-(2**40) + s, position=2**33 + s) for s in range(16)]
    out, ref, _, _ = run_both(logits, rows)
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    assert len(set(out.sampled_token_ids.tolist())) > 12


# ---------------------------------------------------------------- filters


def mixed_filter_rows(n: int) -> list[SamplingRow]:
    configs = [
        dict(top_k=5),
        dict(top_k=37),
        dict(top_p=0.6),
        dict(top_p=0.95),
        dict(min_p=0.05),
        dict(top_k=40, top_p=0.5),
        dict(top_k=200, top_p=0.9, min_p=0.01),
        dict(top_p=0.02),  # below the top token's mass: one value survives
        dict(),
        dict(temperature=0.0, top_k=3, top_p=0.5),  # greedy ignores filters
        dict(top_k=1),
        dict(top_p=0.8, min_p=0.2),
    ]
    rows = []
    for i in range(n):
        cfg = {"temperature": 0.5 + 0.25 * (i % 5), **configs[i % len(configs)]}
        rows.append(SamplingRow(seed=31 * i + 5, position=i, **cfg))
    return rows


@pytest.mark.parametrize(
    "kwargs,dtype",
    [({}, torch.float32), ({"num_splits": 3, "block": 1024}, torch.float32), ({}, torch.bfloat16)],
    ids=["one-chunk", "three-chunks", "bf16"],
)
def test_filters_same_set_and_tokens(kwargs: dict, dtype: torch.dtype) -> None:
    """The radix path's thresholds keep the reference's sets; both top-p paths (radix and
    rejection) sample the reference's tokens."""
    torch.manual_seed(2)
    n, vocab = 12, 3000
    logits = (torch.randn(n, vocab) * 2.5).to(dtype)
    out, ref, md, ts = run_both(logits, mixed_filter_rows(n), topp_rejection=False, **kwargs)
    assert not md.no_top_k_top_p_min_p
    kept, scaled = reference_kept(logits, md)
    ours = kernel_kept(scaled, ts)
    for b in range(n):
        assert torch.equal(ours[b], kept[b]), f"row {b}: filtered set differs"
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    rej = TritonSampler(topp_rejection=True, **kwargs)(logits, md).sampled_token_ids
    assert torch.equal(rej, ref.sampled_token_ids)


def test_ties_at_the_thresholds_are_kept() -> None:
    # Integer logits: whole groups of tokens share the k-th value and the top-p boundary.
    g = torch.Generator().manual_seed(3)
    n, vocab = 8, 1500
    logits = torch.randint(-6, 6, (n, vocab), generator=g).float()
    rows = [
        SamplingRow(top_k=[10, 100, 0, 50][i % 4], top_p=[1.0, 0.3, 0.7, 0.5][i % 4], seed=i)
        for i in range(n)
    ]
    out, ref, md, ts = run_both(logits, rows, topp_rejection=False)
    kept, scaled = reference_kept(logits, md)
    assert torch.equal(kernel_kept(scaled, ts), kept)
    assert (kept.sum(-1) > torch.tensor([10, 100, 1, 50] * 2)).all()  # ties widened every set
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    rej = TritonSampler(topp_rejection=True)(logits, md).sampled_token_ids
    assert torch.equal(rej, ref.sampled_token_ids)


# ---------------------------------------------------------------- penalties and suppression


def test_penalties_and_suppression() -> None:
    g = torch.Generator().manual_seed(4)
    n, vocab = 10, 1200
    logits = torch.randn(n, vocab, generator=g) * 2
    logits[:, 7] = 12.0  # a favourite token, suppressed in half the rows
    rows = []
    for i in range(n):
        length = int(torch.randint(0, 60, (1,), generator=g))
        hist = torch.randint(0, 40, (length,), generator=g).tolist() + [vocab + 5]  # ignored
        rows.append(
            SamplingRow(
                temperature=[0.0, 0.8, 1.3][i % 3],
                top_k=[0, 30][i % 2],
                presence_penalty=[0.0, 0.5, -1.0, 2.0][i % 4],
                frequency_penalty=[0.0, 0.3, 1.0, -0.5][(i // 2) % 4],
                repetition_penalty=[1.0, 1.3, 0.7][i % 3],
                token_ids=hist,
                prompt_len=int(torch.randint(0, length + 1, (1,), generator=g)),
                suppress_token_ids=[7, 3, vocab + 1] if i % 2 == 0 else [],
                seed=i,
                position=i,
            )
        )
    md = SamplingMetadata.build(rows, "cpu", vocab)
    assert not md.no_penalties
    ts = TritonSampler()
    ref = Sampler()(logits, md).sampled_token_ids
    for _ in range(2):  # the stats buffer is reused and must come back clean
        out = ts(logits, md).sampled_token_ids
        assert torch.equal(out, ref)
        assert ts._stats.buf is not None and not ts._stats.buf.any()
    assert 7 not in out[::2].tolist()
    kept, scaled = reference_kept(logits, md)
    assert torch.equal(kernel_kept(scaled, ts), kept)


def test_logit_bias_same_tokens_and_raw_logprobs() -> None:
    """Biases go on the float32 values before penalties and filters, as in the reference;
    +100 all but forces a token, -100 all but bans one; logprobs stay those of the raw
    logits (vLLM's default); the caller's bf16 logits are left as they were."""
    g = torch.Generator().manual_seed(9)
    n, vocab = 8, 1500
    logits = (torch.randn(n, vocab, generator=g) * 2).to(torch.bfloat16)
    logits[:, 11] = 14.0  # every row's favourite, banned in some rows
    before = logits.clone()

    def rows(bias: bool) -> list[SamplingRow]:
        biases = [{11: -100.0}, {42: 100.0}, {11: -100.0, 5: 3.5, vocab + 2: 9.0}, {7: 0.25}]
        return [
            SamplingRow(
                temperature=[0.0, 0.9, 1.4][i % 3],
                top_k=[0, 40][i % 2],
                repetition_penalty=[1.0, 1.2][i % 2],
                token_ids=[5, 11, 42],
                prompt_len=1,
                logit_bias=biases[i % 4] if bias and i < 6 else None,
                seed=i,
                position=3 * i,
                num_logprobs=3,
            )
            for i in range(n)
        ]

    out, ref, md, ts = run_both(logits, rows(True))
    assert len(md.logit_bias) == 6
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    tokens = out.sampled_token_ids.tolist()
    assert tokens[1] == 42 and tokens[5] == 42  # +100 wins over the favourite's 14
    assert 11 not in (tokens[0], tokens[2], tokens[4])  # -100 bans it
    assert tokens[6] == 11  # the unbiased greedy row keeps it
    kept, scaled = reference_kept(logits, md)
    assert torch.equal(kernel_kept(scaled, ts), kept)
    # Raw logprobs: the bias does not enter them, so the top ones are the unbiased run's
    # and the sampled token's is its raw logprob.
    unbiased, _, _, _ = run_both(logits, rows(False))
    assert out.logprobs is not None and unbiased.logprobs is not None
    assert torch.equal(out.logprobs.top_ids, unbiased.logprobs.top_ids)
    assert torch.equal(out.logprobs.top_logprobs, unbiased.logprobs.top_logprobs)
    raw = torch.log_softmax(logits.float(), dim=-1)
    expect = raw.gather(1, out.sampled_token_ids[:, None])[:, 0]
    torch.testing.assert_close(out.logprobs.sampled_logprobs, expect)
    assert torch.equal(logits, before)


def test_caller_logits_not_modified() -> None:
    logits = torch.randn(4, 500)
    before = logits.clone()
    rows = [
        SamplingRow(temperature=0.7, top_p=0.5, repetition_penalty=1.5, token_ids=[1, 2, 3],
                    prompt_len=2, suppress_token_ids=[4], seed=i, num_logprobs=2)
        for i in range(4)
    ]  # fmt: skip
    out, ref, _, _ = run_both(logits, rows)
    assert torch.equal(logits, before)
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)


# ---------------------------------------------------------------- logprobs


@pytest.mark.parametrize("k,kwargs", [(0, {}), (5, {}), (20, {"num_splits": 2, "block": 1024})])
def test_logprobs_match_reference(k: int, kwargs: dict) -> None:
    torch.manual_seed(5)
    n, vocab = 6, 1800
    logits = torch.randn(n, vocab) * 2
    rows = [
        SamplingRow(temperature=0.9, top_k=50, repetition_penalty=2.0, token_ids=[0, 1],
                    prompt_len=2, seed=i, num_logprobs=k if i else None)
        for i in range(n)
    ]  # fmt: skip
    out, ref, _, _ = run_both(logits, rows, **kwargs)
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    lp, rlp = out.logprobs, ref.logprobs
    assert lp is not None and rlp is not None
    torch.testing.assert_close(lp.sampled_logprobs, rlp.sampled_logprobs, rtol=0, atol=2e-6)
    assert torch.equal(lp.sampled_ranks, rlp.sampled_ranks)
    assert lp.top_ids.shape == (n, k) and lp.top_logprobs.dtype == torch.float32
    assert torch.equal(lp.top_ids, rlp.top_ids)
    torch.testing.assert_close(lp.top_logprobs, rlp.top_logprobs, rtol=0, atol=2e-6)


def test_compute_token_logprobs_chunk_by_chunk() -> None:
    torch.manual_seed(6)
    n, vocab, k = 24, 2100, 4
    logits = torch.randn(n, vocab) * 3
    tokens = torch.randint(0, vocab, (n,))
    parts = [compute_token_logprobs(logits[i : i + 8], tokens[i : i + 8], k) for i in (0, 8, 16)]
    lp, rank, ids, top = (torch.cat(p) for p in zip(*parts, strict=True))
    ref = gather_logprobs(raw_logprobs(logits), tokens, k)
    torch.testing.assert_close(lp, ref.sampled_logprobs, rtol=0, atol=2e-6)
    assert torch.equal(rank, ref.sampled_ranks)
    assert torch.equal(ids, ref.top_ids)
    torch.testing.assert_close(top, ref.top_logprobs, rtol=0, atol=2e-6)


def test_top_logprobs_ties_prefer_lower_ids() -> None:
    logits = torch.zeros(2, 1500)
    logits[0, [900, 30, 400]] = 1.0
    lp, rank, ids, top = compute_token_logprobs(logits, torch.tensor([30, 5]), 5)
    assert ids[0].tolist() == [30, 400, 900, 0, 1]
    assert ids[1].tolist() == [0, 1, 2, 3, 4]
    assert rank.tolist() == [1, 1]
    torch.testing.assert_close(top[0, 0], lp[0])


# ---------------------------------------------------------------- dispatch


def test_cpu_without_interpreter_uses_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import strixlm.sample.triton_sampler as mod

    def boom(*args, **kwargs):
        raise AssertionError("the Triton path ran on CPU")

    monkeypatch.setattr(mod, "sample_tokens", boom)
    monkeypatch.setattr(mod, "_triton_token_logprobs", boom)
    logits = torch.randn(3, 100)
    rows = [SamplingRow(top_k=5, seed=i, num_logprobs=2) for i in range(3)]
    out, ref, _, _ = run_both(logits, rows, interpret=False)  # an engine's choice on CPU
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the default follows the variable
    out, _, _, _ = run_both(logits, rows)
    assert torch.equal(out.sampled_token_ids, ref.sampled_token_ids)
    ids = compute_token_logprobs(logits, out.sampled_token_ids, 2)[2]
    assert out.logprobs is not None and torch.equal(ids, out.logprobs.top_ids)


def test_empty_batch() -> None:
    out = TritonSampler()(torch.empty(0, 32), SamplingMetadata.build([], "cpu", 32))
    assert out.sampled_token_ids.shape == (0,)


AOT = r"""
from strixlm.kernels import sampler as m
ptr = "*fp32"
sig = dict(X="*bf16", xs="i32", ST="*i32", temp_ptr=ptr, topk_ptr="*i32", topp_ptr=ptr,
           lmp_ptr=ptr, rep_ptr=ptr, freq_ptr=ptr, pres_ptr=ptr, seed_ptr="*i64",
           pos_ptr="*i64", part_max_ptr=ptr, hist_ptr="*i32", tks_ptr="*i32", rowbuf_ptr=ptr,
           mass_ptr=ptr, cnt_ptr="*i32", tps_ptr="*i32", tpf_ptr=ptr, out_val_ptr=ptr,
           out_idx_ptr="*i32", thr_ptr=ptr, state_ptr="*i32", B="i32", V="i32", S="i32",
           CHUNK="i32")
target = GPUTarget("cuda", 90, 32)
for greedy in (True, False):
    c = dict(FILTER=not greedy, HAS_TOPK=not greedy, HAS_TOPP=not greedy, ALL_GREEDY=greedy,
             HAS_STATS=False, HAS_PEN=False, PRECISE=True, BLOCK=1024, RS=16,
             TOPP_STATE=not greedy)
    src = ASTSource(m.sample_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    triton.compile(src, target=target, options=dict(num_warps=8))
# Top-p by rejection: the draw (round 0 and later), the check and the settle kernels.
from strixlm.kernels import sampler_topp as t
rows = {k: sig[k] for k in ("X", "xs", "ST", "temp_ptr", "topk_ptr", "topp_ptr", "lmp_ptr",
                            "rep_ptr", "freq_ptr", "pres_ptr")}
part = dict(part_max_ptr=ptr, hist_ptr="*i32", tks_ptr="*i32")
dims = dict(B="i32", V="i32", S="i32", CHUNK="i32")
flags = dict(HAS_TOPK=True, HAS_STATS=True, HAS_PEN=True, BLOCK=1024, RS=16)
for rnd in (0, 1):
    s = {**rows, "seed_ptr": "*i64", "pos_ptr": "*i64", **part, "state_ptr": "*i32",
         "cand_ptr": "*i32", "cand_s_ptr": ptr, "zpart_ptr": ptr, "mpart_ptr": ptr,
         "cval_ptr": ptr, "cidx_ptr": "*i32", **dims}
    c = dict(ROUND=rnd, PRECISE=True, **flags)
    src = ASTSource(t.topp_draw_kernel, {**s, **{k: "constexpr" for k in c}}, c)
    triton.compile(src, target=target, options=dict(num_warps=8))
s = {**rows, **part, "state_ptr": "*i32", "cand_ptr": "*i32", "cand_s_ptr": ptr,
     "mpart_ptr": ptr, "cval_ptr": ptr, "cidx_ptr": "*i32", **dims}
c = dict(SP=64, **flags)
triton.compile(ASTSource(t.topp_check_kernel, {**s, **{k: "constexpr" for k in c}}, c),
               target=target, options=dict(num_warps=8))
s = dict(state_ptr="*i32", temp_ptr=ptr, topp_ptr=ptr, cand_ptr="*i32", zpart_ptr=ptr,
         mpart_ptr=ptr, S="i32")
triton.compile(ASTSource(t.topp_settle_kernel, {**s, "RS": "constexpr"}, {"RS": 16}),
               target=target, options=dict(num_warps=4))
print("compiled")
"""


def test_sample_kernel_compiles_for_sm90() -> None:
    """The interpreter never compiles: the all-greedy and the sampling loop must, and the
    top-p rejection kernels."""
    assert_compiles(AOT)


# ---------------------------------------------------------------- top-p by rejection


def test_topp_rejection_rounds_and_fallback_give_the_reference_tokens(monkeypatch) -> None:
    """Nearly flat rows and small p: the first draw often lands outside the nucleus, so rows
    settle in round 1, 2 or 3, or fall back to the radix passes. Every mix gives the
    reference's tokens; more rounds settle more rows (NaN threshold = settled by a draw)."""
    g = torch.Generator().manual_seed(6)
    n, vocab = 12, 800
    logits = torch.randn(n, vocab, generator=g) * 0.3
    rows = [
        SamplingRow(top_p=[0.05, 0.2, 0.5][i % 3], top_k=[0, 300][i % 2], seed=100 + i,
                    position=i, min_p=0.0)
        for i in range(n)
    ]  # fmt: skip
    md = SamplingMetadata.build(rows, "cpu", vocab)
    ref = Sampler()(logits, md).sampled_token_ids
    settled = []
    for rounds in (1, 2, 3):
        monkeypatch.setattr(ktp, "ROUNDS", rounds)
        ts = TritonSampler(topp_rejection=True, num_splits=2, block=512)
        assert torch.equal(ts(logits, md).sampled_token_ids, ref), rounds
        settled.append(int(torch.isnan(ts.last_thresholds).sum()))
    print("settled after 1, 2, 3 rounds:", settled)
    assert 0 < settled[0] < settled[1] <= settled[2] <= n, settled
    assert settled[0] < n  # some rows needed the radix fallback after one round


def test_topp_rejection_is_the_default(monkeypatch) -> None:
    logits = torch.randn(4, 700)
    md = SamplingMetadata.build([SamplingRow(top_p=0.7, seed=i) for i in range(4)], "cpu", 700)
    ts = TritonSampler()
    monkeypatch.delenv("STRIXLM_SAMPLER_TOPP_REJECTION", raising=False)
    ts(logits, md)
    assert torch.isnan(ts.last_thresholds).any()  # rows a draw settled have no cutoff
    monkeypatch.setenv("STRIXLM_SAMPLER_TOPP_REJECTION", "0")
    ts(logits, md)
    assert not torch.isnan(ts.last_thresholds).any()  # the radix passes set every cutoff


def test_launch_constexprs_do_not_follow_the_row_count(monkeypatch) -> None:
    """The chunk count S follows the batch's row count; no compile-time argument may follow
    it, or each new count compiles (or loads, synchronizing the device) a kernel mid-run."""
    seen: dict[str, set] = {}

    class Recorder:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            launch = self.kernel[grid]

            def run(*args, **kw):
                consts = {k: v for k, v in kw.items() if k.isupper()}
                seen.setdefault(self.name, set()).add(tuple(sorted(consts.items())))
                return launch(*args, **kw)

            return run

    for mod, name in ((kern, "argmax_finalize_kernel"), (kern, "logprobs_finalize_kernel"),
                      (ktp, "topp_check_kernel")):  # fmt: skip
        monkeypatch.setattr(mod, name, Recorder(name, getattr(mod, name)))
    # 14 tiles of 16 (the last one partial): room for both chunk counts, and few programs.
    for rows, splits in ((3, 2), (5, 7)):
        logits = torch.randn(rows, 220)
        md = SamplingMetadata.build(
            [SamplingRow(top_p=0.8, seed=i, num_logprobs=2) for i in range(rows)], "cpu", 220
        )
        TritonSampler(num_splits=splits, block=16, topp_rejection=True)(logits, md)
    assert set(seen) == {"argmax_finalize_kernel", "logprobs_finalize_kernel", "topp_check_kernel"}
    for name, variants in seen.items():
        assert len(variants) == 1, (name, variants)


def test_runtime_specialization_does_not_follow_the_row_count(monkeypatch) -> None:
    """Triton also specializes each int on being 1 or a multiple of 16, and each pointer on
    16-byte alignment. The runner's per-row parameters are rows of one gathered [6, B]
    tensor (SamplingTable.gather), whose alignment follows B mod 4: the kernels must not
    specialize on those, or each class of batch size builds a variant mid-run (three
    sample_kernel builds of 144-220 ms in a server's first second on the H200)."""
    import numpy as np
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import native_specialize_impl

    from strixlm.engine.request import SamplingParams
    from strixlm.worker.sampling_table import SamplingTable
    from strixlm.worker.states import RowInfo

    names = ("sample_kernel", "filter_pass_kernel", "topp_draw_kernel", "topp_check_kernel",
             "topp_settle_kernel", "argmax_finalize_kernel")  # fmt: skip
    seen: dict[tuple[str, str], set] = {}
    current = {"config": ""}  # the config being run, for the recorders

    def recorder(name, kernel):
        pinned = set(kernel.kwargs.get("do_not_specialize") or [])
        run = kernel.run

        def record(*args, grid, warmup, **kw):
            spec = tuple(
                native_specialize_impl(CUDABackend, a, False, n not in pinned, True)
                for n, a in zip(kernel.arg_names, args, strict=False)
                if isinstance(a, (torch.Tensor, int)) and not isinstance(a, bool)
            )
            seen.setdefault((current["config"], name), set()).add(spec)
            return run(*args, grid=grid, warmup=warmup, **kw)

        return record

    for name in names:
        mod = kern if hasattr(kern, name) else ktp
        monkeypatch.setattr(getattr(mod, name), "run", recorder(name, getattr(mod, name)))
    vocab = 220
    configs = {
        "greedy": SamplingParams(temperature=0.0),
        "temperature": SamplingParams(temperature=0.8),
        "filters and penalties": SamplingParams(
            temperature=0.8, top_p=0.8, top_k=50, min_p=0.01, presence_penalty=0.5,
            frequency_penalty=0.2, repetition_penalty=1.1,
        ),
    }  # fmt: skip
    for config, params in configs.items():
        current["config"] = config
        for b in (1, 2, 3, 4, 5, 8):
            table = SamplingTable(16, vocab, "cpu")
            rows = np.arange(3, 3 + b)  # rows off the start, as in a running server
            for r in rows:
                table.add(int(r), RowInfo(f"r{r}", params, int(r), 4, None))
            table.flush()
            num_tokens = torch.full((16,), 5, dtype=torch.int32)
            token_ids = torch.zeros(16, 8, dtype=torch.int32)
            rows_dev = torch.as_tensor(rows, dtype=torch.int32)
            md = table.metadata(rows, rows_dev, num_tokens, num_tokens.numpy(), token_ids, [])
            TritonSampler(num_splits=2, block=16)(torch.randn(b, vocab), md)
    assert {c for c, _ in seen} == set(configs)
    assert ("filters and penalties", "topp_draw_kernel") in seen
    for key, variants in seen.items():
        assert len(variants) == 1, (key, variants)
