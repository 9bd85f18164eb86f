"""Selection: static order, weighted distribution, latency preference (EWMA), Elo updates and
ranking, failed endpoints last; candidates expanded from a config's backends."""

from __future__ import annotations

import json
import math
import random

import pytest

from strixlm.router.config import ModelRef, validate_data
from strixlm.router.config_plugins import (
    EloSelection,
    LatencySelection,
    StaticSelection,
    WeightedSelection,
)
from strixlm.router.proxy_backends import BackendPool
from strixlm.router.selection import (
    GLOBAL,
    Candidate,
    EloRatings,
    Endpoint,
    Ewma,
    SelectionStats,
    make_selector,
)


def cand(model: str, backend: str = "b", ref_weight: float = 1.0, ep_weight: float = 1.0):
    ep = Endpoint(backend, model, f"http://{backend}/v1", ep_weight)
    return Candidate(ModelRef(model=model, weight=ref_weight), ep)


def names(ranked: list[Candidate]) -> list[str]:
    return [c.endpoint.model for c in ranked]


def test_static_keeps_config_order_and_demotes_failed():
    stats = SelectionStats()
    sel = make_selector(StaticSelection(), stats)
    cands = [cand("a"), cand("b"), cand("c")]
    assert names(sel.rank(cands, None)) == ["a", "b", "c"]
    stats.mark_failed("b/a")
    assert names(sel.rank(cands, None)) == ["b", "c", "a"]
    stats.down_until["b/a"] = 0.0  # cooldown over: back in its place
    assert names(sel.rank(cands, None)) == ["a", "b", "c"]
    stats.mark_failed("b/b")
    stats.mark_ok("b/b")  # a success clears it at once
    assert names(sel.rank(cands, None)) == ["a", "b", "c"]


def test_weighted_distribution_follows_weights():
    # Ref weight times backend weight: 3*1, 1*1, 2*2 -> first pick 3/8, 1/8, 4/8.
    cands = [cand("x", ref_weight=3), cand("y"), cand("z", ref_weight=2, ep_weight=2)]
    sel = make_selector(WeightedSelection(method="weighted", seed=7), SelectionStats())
    n = 8000
    firsts = [sel.rank(cands, None)[0].endpoint.model for _ in range(n)]
    for model, p in (("x", 3 / 8), ("y", 1 / 8), ("z", 4 / 8)):
        freq = firsts.count(model) / n
        assert abs(freq - p) < 4 * math.sqrt(p * (1 - p) / n), (model, freq, p)
    # Every ranking is a permutation: failover can still reach every candidate.
    assert all(sorted(names(sel.rank(cands, None))) == ["x", "y", "z"] for _ in range(50))


def test_weighted_seed_is_reproducible():
    cands = [cand("x"), cand("y"), cand("z")]
    a = make_selector(WeightedSelection(method="weighted", seed=3), SelectionStats())
    b = make_selector(WeightedSelection(method="weighted", seed=3), SelectionStats())
    assert [names(a.rank(cands, None)) for _ in range(20)] == [
        names(b.rank(cands, None)) for _ in range(20)
    ]


def test_ewma():
    e = Ewma()
    e.observe(0.100, 0.5)
    e.observe(0.200, 0.5)
    e.observe(0.200, 0.5)
    assert e.value == pytest.approx(0.175) and e.samples == 3


@pytest.mark.parametrize("metric", ["ttft", "total"])
def test_latency_prefers_fast_and_measures_new(metric):
    stats = SelectionStats()
    cfg = LatencySelection(method="latency", metric=metric, explore=0.0, ewma_alpha=0.5)
    sel = make_selector(cfg, stats)
    slow, fast, new = cand("slow"), cand("fast"), cand("new")
    # TTFT and total disagree, so each metric gives its own order.
    stats.observe_latency("b/slow", 0.050, 0.900, 0.5)
    stats.observe_latency("b/fast", 0.080, 0.300, 0.5)
    want = ["new", "slow", "fast"] if metric == "ttft" else ["new", "fast", "slow"]
    assert names(sel.rank([slow, fast, new], None)) == want  # unmeasured first
    stats.observe_latency("b/new", 1.0, 2.0, 0.5)
    assert names(sel.rank([slow, fast, new], None))[-1] == "new"
    # The EWMA follows a backend that becomes slow.
    for _ in range(4):
        stats.observe_latency("b/fast" if metric == "ttft" else "b/slow", 2.0, 2.0, 0.5)
    assert names(sel.rank([slow, fast, new], None))[0] == ("slow" if metric == "ttft" else "fast")


def test_latency_explores_sometimes():
    stats = SelectionStats()
    for i, m in enumerate("abc"):
        stats.observe_latency(f"b/{m}", 0.1 * (i + 1), 0.1, 0.3)
    sel = make_selector(LatencySelection(method="latency", explore=0.2), stats, seed=1)
    firsts = [
        sel.rank([cand("a"), cand("b"), cand("c")], None)[0].endpoint.model for _ in range(2000)
    ]
    assert 0.75 < firsts.count("a") / 2000 < 0.85  # explore 20%: another one goes first


def test_elo_update_matches_formula():
    elo = EloRatings()
    elo.update("m1", "m2", scopes=[GLOBAL], k=32, initial=1500)
    assert elo.rating("m1", GLOBAL, 1500) == pytest.approx(1516.0)
    assert elo.rating("m2", GLOBAL, 1500) == pytest.approx(1484.0)
    # Second game: expected score of m1 is 1 / (1 + 10^(-32/400)).
    e = 1 / (1 + 10 ** (-32 / 400))
    elo.update("m1", "m2", scopes=[GLOBAL], k=32, initial=1500)
    assert elo.rating("m1", GLOBAL, 1500) == pytest.approx(1516 + 32 * (1 - e))
    total = elo.rating("m1", GLOBAL, 1500) + elo.rating("m2", GLOBAL, 1500)
    assert total == pytest.approx(3000.0)  # zero-sum
    # A tie moves the stronger player down.
    before = elo.rating("m1", GLOBAL, 1500)
    elo.update("m1", "m2", scopes=[GLOBAL], k=32, initial=1500, tie=True)
    assert elo.rating("m1", GLOBAL, 1500) < before
    assert elo.games[GLOBAL] == {"m1": 3, "m2": 3}


def test_elo_selector_uses_decision_scope_then_global():
    stats = SelectionStats()
    sel = make_selector(EloSelection(method="elo", initial_rating=1000), stats)
    cands = [cand("m1"), cand("m2"), cand("m3")]
    assert names(sel.rank(cands, "code")) == ["m1", "m2", "m3"]  # all equal: config order
    stats.elo.update("m3", "m1", scopes=[GLOBAL], k=32, initial=1000)
    assert names(sel.rank(cands, "code")) == ["m3", "m2", "m1"]
    stats.elo.update("m2", "m3", scopes=["code"], k=32, initial=1000)
    stats.elo.update("m2", "m3", scopes=["code"], k=32, initial=1000)
    assert names(sel.rank(cands, "code"))[0] == "m2"  # code has its own ratings
    assert names(sel.rank(cands, "math")) == ["m3", "m2", "m1"]  # falls back to global


def test_elo_ratings_persist(tmp_path):
    path = tmp_path / "elo" / "ratings.json"
    elo = EloRatings(str(path))
    elo.update("a", "b", scopes=[GLOBAL, "d"], k=16, initial=1200)
    saved = json.loads(path.read_text())
    assert saved["ratings"]["d"] == {"a": 1208.0, "b": 1192.0}
    again = EloRatings(str(path))
    assert again.rating("a", "d", 1200) == 1208.0 and again.has_scope("d")
    path.write_text("{not json")
    assert EloRatings(str(path)).ratings == {}  # unreadable: start fresh, do not crash


def test_candidates_from_backends():
    cfg = validate_data(
        {
            "backends": [
                {"name": "x", "base_url": "http://x/v1", "models": ["m1", "m2"], "weight": 2},
                {"name": "y", "base_url": "http://y/v1", "models": ["m2"]},
                {"name": "z", "base_url": "http://z/v1"},  # discovers
            ],
            "decisions": [{"name": "d", "models": [{"model": "m2"}]}],
        }
    )
    pool = BackendPool(cfg)
    assert pool.missing_models()
    got = pool.candidates([ModelRef(model="m2")])
    assert [c.endpoint.key for c in got] == ["x/m2", "y/m2"] and got[0].weight == 2.0
    assert [c.endpoint.key for c in pool.candidates([ModelRef(backend="x")])] == ["x/m1", "x/m2"]
    pool.backends["z"].models = ["m9"]
    assert [c.endpoint.key for c in pool.candidates([ModelRef()])] == [
        "x/m1", "x/m2", "y/m2", "z/m9"
    ]  # fmt: skip
    assert [e.key for e in pool.serving("m9")] == ["z/m9"]


def test_selector_randomness_is_private():
    # Ranking must not consume the global random stream (tests and users seed it).
    random.seed(0)
    expect = random.random()
    random.seed(0)
    sel = make_selector(WeightedSelection(method="weighted"), SelectionStats())
    sel.rank([cand("a"), cand("b")], None)
    assert random.random() == expect
