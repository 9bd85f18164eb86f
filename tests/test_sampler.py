"""Tests for the torch sampler (the reference the Triton sampler is checked against)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from strixlm.sample.metadata import SamplingMetadata, SamplingRow
from strixlm.sample.penalties import apply_penalties
from strixlm.sample.random import bits_to_uniform, gumbel_noise, hash_bits
from strixlm.sample.sampler import Sampler, apply_top_k_top_p_min_p

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


def sample(logits: torch.Tensor, rows: list[SamplingRow]):
    md = SamplingMetadata.build(rows, logits.device, logits.shape[-1])
    return Sampler()(logits, md)


def tv_distance(counts: torch.Tensor, probs: torch.Tensor) -> float:
    emp = counts.double() / counts.sum()
    return 0.5 * (emp - probs.double().cpu()).abs().sum().item()


def draw_many(logits_row: torch.Tensor, row: SamplingRow, n: int = 20000) -> torch.Tensor:
    """n draws for one row of logits, with seeds 0..n-1 (one batch, one row per seed)."""
    vocab = logits_row.shape[-1]
    rows = [SamplingRow(**{**row.__dict__, "seed": s}) for s in range(n)]
    out = sample(logits_row[None, :].expand(n, vocab).contiguous(), rows)
    return torch.bincount(out.sampled_token_ids.cpu(), minlength=vocab)


# ---------------------------------------------------------------- the hash


M32 = 0xFFFFFFFF


def py_fmix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & M32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & M32
    return x ^ (x >> 16)


def py_hash(seed: int, position: int, v: int) -> int:
    """The documented hash with Python's unbounded ints (independent of the torch code)."""

    def absorb(k: int, x: int) -> int:
        return py_fmix32(((k ^ x) + 0x9E3779B9) & M32)

    s = seed & ((1 << 64) - 1)
    k = 0x243F6A88
    for word in (s & M32, s >> 32, position & M32, (position >> 32) & M32):
        k = absorb(k, word)
    return py_fmix32(k ^ py_fmix32((v + 0x7F4A7C15) & M32))


def test_hash_matches_spec_bit_for_bit(device: str) -> None:
    seeds = [0, 1, 42, -1, -(2**63), 2**63 - 1, 123456789012345]
    positions = [0, 1, 7, 2**31 - 1, 2**32 + 5, 1000, 3]
    vocab = 300
    h = hash_bits(torch.tensor(seeds, device=device), torch.tensor(positions, device=device), vocab)
    h = h.cpu()
    for b, (s, p) in enumerate(zip(seeds, positions, strict=True)):
        expected = [py_hash(s, p, v) for v in range(vocab)]
        assert h[b].tolist() == expected
    # Pin a few values so a change to the hash (which Triton must mirror) is noticed.
    assert py_hash(0, 0, 0) == hash_bits(torch.tensor([0]), torch.tensor([0]), 1).item()
    assert [py_hash(42, 10, v) for v in range(3)] == hash_bits(
        torch.tensor([42]), torch.tensor([10]), 3
    )[0].tolist()


def test_uniforms_strictly_inside_unit_interval_and_uniform() -> None:
    u = bits_to_uniform(torch.tensor([0, 511, 512, M32, M32 - 512], dtype=torch.int64))
    assert (u > 0).all() and (u < 1).all()
    assert u.tolist() == [2.0**-24, 2.0**-24, 3 * 2.0**-24, 1 - 2.0**-24, 1 - 3 * 2.0**-24]
    seeds = torch.arange(64)
    u = bits_to_uniform(hash_bits(seeds, torch.full((64,), 5), 4096)).double()
    assert abs(u.mean().item() - 0.5) < 0.003
    assert abs(u.var().item() - 1 / 12) < 0.002
    # Adjacent seeds and adjacent token ids are uncorrelated.
    c = torch.corrcoef(torch.stack([u[:-1].flatten(), u[1:].flatten()]))[0, 1]
    assert abs(c.item()) < 0.01
    c = torch.corrcoef(torch.stack([u[:, :-1].flatten(), u[:, 1:].flatten()]))[0, 1]
    assert abs(c.item()) < 0.01


def test_gumbel_noise_moments_and_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    import strixlm.sample.random as rnd

    seeds, pos = torch.arange(50), torch.arange(50) * 3
    g = gumbel_noise(seeds, pos, 2000).double()
    assert torch.isfinite(g).all()
    assert abs(g.mean().item() - 0.5772156649) < 0.02  # Euler-Mascheroni
    assert abs(g.var().item() - math.pi**2 / 6) < 0.05
    monkeypatch.setattr(rnd, "_CHUNK_ELEMS", 2000 * 7)  # force several chunks
    assert torch.equal(gumbel_noise(seeds, pos, 2000).double(), g)


# ---------------------------------------------------------------- greedy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_greedy_is_argmax(device: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    logits = torch.randn(16, 1000, device=device).to(dtype)
    out = sample(logits, [SamplingRow(temperature=0.0, seed=i) for i in range(16)])
    assert out.sampled_token_ids.dtype == torch.int64
    assert torch.equal(out.sampled_token_ids, logits.float().argmax(-1))
    assert out.logprobs is None


def test_top_k_1_equals_greedy(device: str) -> None:
    torch.manual_seed(1)
    logits = torch.randn(32, 500, device=device)
    rows = [SamplingRow(temperature=1.3, top_k=1, seed=i, position=i) for i in range(32)]
    assert torch.equal(sample(logits, rows).sampled_token_ids, logits.argmax(-1))


def test_mixed_greedy_and_random_rows(device: str) -> None:
    torch.manual_seed(2)
    logits = torch.randn(8, 100, device=device)
    rows = [SamplingRow(temperature=0.0 if i % 2 else 5.0, seed=i) for i in range(8)]
    md = SamplingMetadata.build(rows, device, 100)
    assert not md.all_greedy
    out = Sampler()(logits, md).sampled_token_ids
    assert torch.equal(out[1::2], logits[1::2].argmax(-1))


def test_caller_logits_not_modified(device: str) -> None:
    logits = torch.randn(4, 50, device=device)
    before = logits.clone()
    rows = [
        SamplingRow(
            temperature=0.7,
            top_p=0.5,
            repetition_penalty=1.5,
            token_ids=[1, 2, 3],
            prompt_len=2,
            suppress_token_ids=[4],
            seed=i,
        )
        for i in range(4)
    ]
    sample(logits, rows)
    assert torch.equal(logits, before)


# ---------------------------------------------------------------- determinism


def test_same_seed_and_position_same_token_in_any_batch(device: str) -> None:
    vocab = 2000
    torch.manual_seed(3)
    probe_logits = torch.randn(vocab, device=device)
    probe = SamplingRow(temperature=1.0, top_p=0.95, seed=1234, position=77)
    alone = sample(probe_logits[None], [probe]).sampled_token_ids.item()
    for trial in range(5):
        g = torch.Generator().manual_seed(trial)
        n = 3 + trial * 4
        others = torch.randn(n, vocab, generator=g).to(device)
        other_rows = [
            SamplingRow(temperature=0.5 + i, top_k=i, seed=99 + i, position=i) for i in range(n)
        ]
        at = trial % (n + 1)
        logits = torch.cat([others[:at], probe_logits[None], others[at:]])
        rows = other_rows[:at] + [probe] + other_rows[at:]
        assert sample(logits, rows).sampled_token_ids[at].item() == alone
    # Repeated calls are identical (no hidden generator state).
    assert sample(probe_logits[None], [probe]).sampled_token_ids.item() == alone


def test_positions_and_seeds_change_the_draw(device: str) -> None:
    logits = torch.zeros(200, 1000, device=device)  # uniform: every draw is pure noise
    same_seed = [SamplingRow(seed=7, position=p) for p in range(200)]
    diff_seed = [SamplingRow(seed=s, position=5) for s in range(200)]
    assert len(set(sample(logits, same_seed).sampled_token_ids.tolist())) > 150
    assert len(set(sample(logits, diff_seed).sampled_token_ids.tolist())) > 150


# ---------------------------------------------------------------- distributions


@pytest.mark.parametrize("temperature", [1.0, 0.6, 2.5])
def test_distribution_matches_softmax(device: str, temperature: float) -> None:
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, -2.0, 0.3, 0.8], device=device)
    counts = draw_many(logits, SamplingRow(temperature=temperature, position=11))
    assert tv_distance(counts, torch.softmax(logits / temperature, -1)) < 0.02


def test_distribution_over_positions_with_one_seed(device: str) -> None:
    logits = torch.tensor([0.1, 1.0, -0.3, 2.0, 0.0, 0.7, -1.0, 0.2, 1.2, -0.1], device=device)
    n = 20000
    rows = [SamplingRow(seed=2024, position=p) for p in range(n)]
    out = sample(logits[None].expand(n, 10).contiguous(), rows).sampled_token_ids
    counts = torch.bincount(out.cpu(), minlength=10)
    assert tv_distance(counts, torch.softmax(logits, -1)) < 0.02


def ref_truncated_probs(logits: list[float], t: float, k: int, p: float, min_p: float):
    """Straightforward top-k -> top-p -> min-p on one row, as a probability list."""
    n = len(logits)
    scaled = [x / t for x in logits]
    order = sorted(range(n), key=lambda i: -scaled[i])
    keep = set(order[:k] if k > 0 else order)
    z = sum(math.exp(scaled[i]) for i in keep)
    if p < 1.0:
        acc, kept = 0.0, set()
        for i in order:
            if i not in keep:
                continue
            kept.add(i)
            acc += math.exp(scaled[i]) / z
            if acc >= p:
                break
        keep = kept
    mx = max(scaled[i] for i in keep)
    keep = {i for i in keep if math.exp(scaled[i] - mx) >= min_p}
    z = sum(math.exp(scaled[i]) for i in keep)
    return torch.tensor([math.exp(scaled[i]) / z if i in keep else 0.0 for i in range(n)])


@pytest.mark.parametrize(
    "t,k,p,min_p",
    [
        (1.0, 4, 1.0, 0.0),
        (1.0, 0, 0.7, 0.0),
        (0.8, 0, 1.0, 0.3),
        (1.5, 6, 0.8, 0.0),
        (1.0, 7, 0.9, 0.15),
        (1.0, 0, 0.05, 0.0),  # smaller than the top token: exactly one token stays
    ],
)
def test_filters_sample_the_truncated_distribution(
    device: str, t: float, k: int, p: float, min_p: float
) -> None:
    values = [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, -2.0, 0.3, 0.8]
    ref = ref_truncated_probs(values, t, k, p, min_p)
    row = SamplingRow(temperature=t, top_k=k, top_p=p, min_p=min_p, position=3)
    counts = draw_many(torch.tensor(values, device=device), row)
    assert (counts[ref == 0] == 0).all(), "a filtered token was sampled"
    assert tv_distance(counts, ref) < 0.02


def test_filter_function_per_row_matches_reference() -> None:
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(40, 30, generator=g) * 2
    ks = torch.randint(0, 35, (40,), generator=g, dtype=torch.int32)
    ps = torch.rand(40, generator=g).clamp(min=0.05)
    ps[::4] = 1.0
    mps = torch.rand(40, generator=g) * 0.5
    mps[::3] = 0.0
    out = apply_top_k_top_p_min_p(logits, ks, ps, mps)
    for b in range(40):
        k = int(ks[b]) if int(ks[b]) < 30 else 0
        ref = ref_truncated_probs(logits[b].tolist(), 1.0, k, float(ps[b]), float(mps[b]))
        assert torch.equal(torch.isfinite(out[b]), ref > 0), b
        assert torch.equal(out[b][ref > 0], logits[b][ref > 0])


def test_filters_never_sample_filtered_tokens_large_vocab(device: str) -> None:
    torch.manual_seed(6)
    n, vocab = 256, 3000
    logits = torch.randn(n, vocab, device=device) * 3
    rows = [
        SamplingRow(
            temperature=1.2,
            top_k=1 + i % 20,
            top_p=0.3 + (i % 7) / 10,
            min_p=(i % 5) / 10,
            seed=i,
            position=i,
        )
        for i in range(n)
    ]
    md = SamplingMetadata.build(rows, device, vocab)
    out = Sampler()(logits, md).sampled_token_ids
    allowed = apply_top_k_top_p_min_p(logits / 1.2, md.top_k, md.top_p, md.min_p)
    assert torch.isfinite(allowed.gather(1, out[:, None])).all()


def test_filter_flags_skip_work() -> None:
    v = 100
    md = SamplingMetadata.build([SamplingRow(top_k=v), SamplingRow(top_k=-1)], "cpu", v)
    assert md.no_top_k_top_p_min_p and md.no_penalties and not md.all_greedy
    md = SamplingMetadata.build([SamplingRow(temperature=0.0, top_p=0.5)], "cpu", v)
    assert md.no_top_k_top_p_min_p and md.all_greedy
    md = SamplingMetadata.build([SamplingRow(min_p=0.1), SamplingRow()], "cpu", v)
    assert not md.no_top_k_top_p_min_p


# ---------------------------------------------------------------- penalties


def ref_penalties(
    logits: list[float], hist: list[int], prompt_len: int, pres: float, freq: float, rep: float
) -> list[float]:
    out = list(logits)
    outputs = Counter(hist[prompt_len:])
    seen = set(hist)
    for t in range(len(out)):
        if t in seen:
            out[t] = out[t] / rep if out[t] > 0 else out[t] * rep
        out[t] -= freq * outputs[t] + pres * (1.0 if outputs[t] > 0 else 0.0)
    return out


def test_penalties_match_reference(device: str) -> None:
    g = torch.Generator().manual_seed(7)
    vocab, n = 40, 12
    logits = torch.randn(n, vocab, generator=g) * 3
    rows = []
    for i in range(n):
        length = int(torch.randint(0, 30, (1,), generator=g))
        hist = torch.randint(0, vocab, (length,), generator=g).tolist()
        prompt_len = int(torch.randint(0, length + 1, (1,), generator=g))
        rows.append(
            SamplingRow(
                temperature=0.0,
                presence_penalty=[0.0, 0.5, -1.0, 2.0][i % 4],
                frequency_penalty=[0.0, 0.3, 1.0, -0.5][(i // 2) % 4],
                repetition_penalty=[1.0, 1.3, 0.7][i % 3],
                token_ids=hist,
                prompt_len=prompt_len,
            )
        )
    md = SamplingMetadata.build(rows, device, vocab)
    assert not md.no_penalties and md.token_ids is not None
    got = apply_penalties(logits.to(device), md).cpu()
    for b, r in enumerate(rows):
        ref = ref_penalties(
            logits[b].tolist(),
            list(r.token_ids),
            r.prompt_len,
            r.presence_penalty,
            r.frequency_penalty,
            r.repetition_penalty,
        )
        torch.testing.assert_close(got[b], torch.tensor(ref), rtol=1e-5, atol=1e-5)
    # Greedy sampling sees the penalized logits.
    assert torch.equal(Sampler()(logits.to(device), md).sampled_token_ids.cpu(), got.argmax(-1))


def test_repetition_penalty_steers_greedy(device: str) -> None:
    logits = torch.tensor([[3.0, 2.9, -1.0, -1.05]], device=device)
    row = SamplingRow(temperature=0.0, repetition_penalty=1.2, token_ids=[0, 2], prompt_len=1)
    # 3.0 / 1.2 = 2.5 < 2.9, so token 1 wins.
    assert sample(logits, [row]).sampled_token_ids.item() == 1
    logits = torch.tensor([[0.0, 5.0, 4.0]], device=device)
    row = SamplingRow(temperature=0.0, frequency_penalty=0.6, token_ids=[9, 1, 1], prompt_len=1)
    # Token 9 is outside this vocab and ignored; 5.0 - 2 * 0.6 = 3.8 < 4.0.
    assert sample(logits, [row]).sampled_token_ids.item() == 2


# ---------------------------------------------------------------- suppression


def test_suppressed_tokens_never_sampled(device: str) -> None:
    torch.manual_seed(8)
    n, vocab = 400, 20
    logits = torch.randn(n, vocab, device=device)
    logits[:, 3] = 10.0  # the favourite token (think EOS below min_tokens)
    rows = [
        SamplingRow(
            temperature=0.0 if i % 3 == 0 else 1.0,
            seed=i,
            position=i,
            suppress_token_ids=[3, 5] if i % 2 == 0 else [],
        )
        for i in range(n)
    ]
    out = sample(logits, rows).sampled_token_ids.cpu()
    assert not ({3, 5} & set(out[::2].tolist()))
    assert (out[1::2] == 3).float().mean() > 0.9  # unsuppressed rows still pick it


# ---------------------------------------------------------------- logprobs


@pytest.mark.parametrize("k", [0, 1, 5])
def test_logprobs_from_raw_logits(device: str, k: int) -> None:
    torch.manual_seed(9)
    n, vocab = 10, 300
    logits = torch.randn(n, vocab, device=device) * 2
    rows = [
        SamplingRow(
            temperature=0.9,
            top_k=5,
            repetition_penalty=2.0,
            token_ids=[0, 1],
            prompt_len=2,
            suppress_token_ids=[7],
            seed=i,
            num_logprobs=k if i else None,
        )
        for i in range(n)
    ]
    out = sample(logits, rows)
    lp = out.logprobs
    assert lp is not None
    ref = torch.log_softmax(logits.float(), -1)
    tok = out.sampled_token_ids
    torch.testing.assert_close(lp.sampled_logprobs, ref.gather(1, tok[:, None]).squeeze(1))
    ref_ranks = (ref > ref.gather(1, tok[:, None])).sum(-1) + 1
    assert torch.equal(lp.sampled_ranks, ref_ranks)
    assert lp.top_ids.shape == (n, k) and lp.top_logprobs.shape == (n, k)
    if k:
        top_vals, top_ids = ref.topk(k, -1)
        assert torch.equal(lp.top_ids, top_ids)
        torch.testing.assert_close(lp.top_logprobs, top_vals)
        assert lp.top_logprobs.dtype == torch.float32


def test_logprobs_rank_of_greedy_is_one_and_half_precision(device: str) -> None:
    logits = torch.randn(6, 64, device=device).to(torch.bfloat16)
    rows = [SamplingRow(temperature=0.0, num_logprobs=2) for _ in range(6)]
    lp = sample(logits, rows).logprobs
    assert lp is not None
    assert (lp.sampled_ranks == 1).all()
    torch.testing.assert_close(lp.sampled_logprobs, lp.top_logprobs[:, 0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_random_sampling(device: str, dtype: torch.dtype) -> None:
    torch.manual_seed(10)
    logits = torch.randn(64, 512, device=device).to(dtype)
    rows = [SamplingRow(temperature=0.8, top_p=0.9, min_p=0.05, seed=i) for i in range(64)]
    out = sample(logits, rows).sampled_token_ids
    ref = sample(logits.float(), rows).sampled_token_ids
    assert torch.equal(out, ref)  # upcast is exact, so the draw is the same


def test_empty_batch(device: str) -> None:
    out = sample(torch.empty(0, 32, device=device), [])
    assert out.sampled_token_ids.shape == (0,)
