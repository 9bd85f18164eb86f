"""`strixlm bench throughput` end to end on CPU with a tiny model, HF peer included."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from strixlm.benchmarks import throughput
from strixlm.benchmarks.workload import make_workload, special_token_ids


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A tiny Qwen3 with real (saved) weights; a wide init keeps greedy outputs varied."""
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    cfg = Qwen3Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(folder)
    return str(folder)


def _args(*argv: str) -> argparse.Namespace:
    return throughput.add_args(argparse.ArgumentParser()).parse_args([*argv, "--no-tqdm"])


def test_workload_is_seeded_and_in_range() -> None:
    avoid = {0, 1, 2}
    a = make_workload(16, (4, 9), (3, 5), 64, seed=7, avoid_ids=avoid)
    b = make_workload(16, (4, 9), (3, 5), 64, seed=7, avoid_ids=avoid)
    assert a.prompts == b.prompts and a.output_lens == b.output_lens
    assert all(4 <= len(p) <= 9 for p in a.prompts)
    assert all(3 <= n <= 5 for n in a.output_lens)
    assert not {t for p in a.prompts for t in p} & avoid
    assert make_workload(16, (4, 9), (3, 5), 64, seed=8).prompts != a.prompts
    assert a.subset(3).prompts == a.prompts[:3]


def test_special_ids_from_folder(tiny_model: str) -> None:
    assert {0, 1} <= special_token_ids(tiny_model)


def test_throughput_with_hf_peer(tiny_model: str, tmp_path) -> None:
    out = tmp_path / "bench.json"
    argv = "--device cpu --num-prompts 8 --input-len-range 4 16 --output-len-range 4 16"
    result = throughput.run(
        _args("--model", tiny_model, *argv.split(), "--compare", "hf", "--output-json", str(out))
    )
    saved = json.loads(out.read_text())
    assert saved["ratio"] == pytest.approx(result["ratio"])
    want = saved["workload"]["output_tokens"]
    for key in ("strixlm", "hf"):
        r = saved[key]
        assert r["num_requests"] == 8
        assert r["output_tokens"] == want  # exactly the asked lengths, EOS ignored
        assert r["output_tok_s"] > 0 and r["elapsed_s"] > 0
    assert saved["ratio"] > 0
    assert saved["hardware"]["cpu_count"] and saved["versions"]["transformers"]
    # Real weights: greedy outputs of both engines agree on the sampled requests.
    assert saved["strixlm"]["sample_token_ids"] == saved["hf"]["sample_token_ids"]
    assert saved["greedy_agreement"]["identical"] == saved["greedy_agreement"]["requests"] == 4
    assert len({t for seq in saved["hf"]["sample_token_ids"] for t in seq}) > 4  # not degenerate


def test_dummy_padded_generate_subset(tiny_model: str, capsys) -> None:
    argv = (
        "--load-format dummy --device cpu --num-prompts 6 --input-len-range 3 8 "
        "--output-len-range 2 6 --compare hf --hf-mode generate --hf-subset 4"
    )
    result = throughput.run(_args("--model", tiny_model, *argv.split()))
    assert result["hf"]["config"]["mode"] == "generate"
    assert result["hf"]["num_requests"] == 4 and result["strixlm"]["num_requests"] == 6
    assert result["hf"]["output_tokens"] == sum(len(t) for t in result["hf"]["sample_token_ids"])
    assert "greedy_agreement" not in result  # random weights on both sides: nothing to compare
    assert "first 4 of 6" in capsys.readouterr().out
