"""`strixlm bench latency` end to end on CPU with a tiny model, HF peer included."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from strixlm.benchmarks import latency
from strixlm.entrypoints.cli import build_parser


def _args(*argv: str) -> argparse.Namespace:
    return latency.add_args(argparse.ArgumentParser()).parse_args(list(argv))


def test_latency_with_hf_peer(tiny_bench_model: str, tmp_path, capsys) -> None:
    out = tmp_path / "latency.json"
    argv = "--device cpu --batch-size 3 --input-len 20 --output-len 6"
    argv += " --num-iters-warmup 1 --num-iters 4 --compare hf --no-tqdm"
    result = latency.run(
        _args("--model", tiny_bench_model, *argv.split(), "--output-json", str(out))
    )
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "latency"
    for key in ("strixlm", "hf"):
        r = saved[key]
        assert r["iterations"] == len(r["e2e_s"]) == len(r["prefill_s"]) == 4
        pct = [r["e2e_percentiles_s"][f"p{p}"] for p in latency.PERCENTILES]
        assert pct == sorted(pct) and min(r["e2e_s"]) <= pct[0] and pct[-1] <= max(r["e2e_s"])
        assert r["e2e_mean_s"] == pytest.approx(np.mean(r["e2e_s"]))
        want = (np.median(r["e2e_s"]) - np.median(r["prefill_s"])) / 5
        assert r["decode_ms_per_token"] == pytest.approx(1e3 * max(want, 0.0))
        assert r["output_tok_s"] == pytest.approx(3 * 6 / r["e2e_mean_s"])
    # The same weights and prompts: both engines' greedy tokens agree.
    assert saved["greedy_agreement"] == {"requests": 3, "identical": 3}
    assert saved["decode_ratio"] == pytest.approx(
        saved["hf"]["decode_ms_per_token"] / saved["strixlm"]["decode_ms_per_token"]
    )
    printed = capsys.readouterr().out
    assert (
        "decode ms/token, hf / strixlm" in printed and "greedy outputs identical on 3/3" in printed
    )
    assert result["strixlm"]["decode_ms_per_token"] > 0


def test_every_run_has_fresh_prompts(tiny_bench_model: str) -> None:
    """No prompt repeats across runs (the prefix cache must never serve one), and every
    engine gets the same batches."""
    args = _args("--batch-size", "4", "--input-len", "12", "--num-iters", "5")
    batches = latency.prompt_batches(args, 512, {0, 1})
    prompts = [tuple(p) for pair in batches for batch in pair for p in batch]
    assert len(batches) == 3 + 5 and len(prompts) == 8 * 2 * 4
    assert len(set(prompts)) == len(prompts)
    assert all(len(p) == 12 and not {0, 1} & set(p) for p in prompts)
    assert latency.prompt_batches(args, 512, {0, 1}) == batches


@pytest.mark.parametrize(
    "argv, flag",
    [
        ("--output-len 1", "--output-len"),
        ("--batch-size 0", "--batch-size"),
        ("--input-len x", "--input-len"),
        ("--num-iters -2", "--num-iters"),
    ],
)
def test_bad_flags_name_the_flag(argv: str, flag: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["bench", "latency", *argv.split()])
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def test_too_long_for_the_model_is_a_clear_error(tiny_bench_model: str) -> None:
    args = _args(
        "--model", tiny_bench_model, "--device", "cpu", "--input-len", "250", "--output-len", "10"
    )
    with pytest.raises(ValueError, match="exceeds the model's 256 positions"):
        latency.run(args)


def test_percentile_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 30):
        xs = sorted(rng.random(n).tolist())
        for p in latency.PERCENTILES:
            assert latency._percentile(xs, p) == pytest.approx(np.percentile(xs, p))
