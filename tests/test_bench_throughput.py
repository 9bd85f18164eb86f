"""`strixlm bench throughput` end to end on CPU with a tiny model, HF peer included."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from floor_shapes import TINY, small_qwen3
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3ForCausalLM

from strixlm.benchmarks import throughput
from strixlm.benchmarks.memory_floor import measure_copy_bandwidth, model_shape, workload_floor
from strixlm.benchmarks.workload import make_workload, special_token_ids


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


def test_special_ids_from_folder(tiny_bench_model: str) -> None:
    assert {0, 1} <= special_token_ids(tiny_bench_model)


def test_throughput_with_hf_peer(tiny_bench_model: str, tmp_path) -> None:
    out = tmp_path / "bench.json"
    argv = "--device cpu --num-prompts 8 --input-len-range 4 16 --output-len-range 4 16"
    result = throughput.run(
        _args(
            "--model", tiny_bench_model, *argv.split(), "--compare", "hf", "--output-json", str(out)
        )
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
    mf = saved["memory_floor"]
    for key in ("bytes", "steps", "floor_s", "floor_output_tok_s", "bandwidth"):
        assert mf[key] > 0
    assert mf["output_tokens"] == want and mf["dtype_bytes"] == mf["kv_dtype_bytes"] == 4
    assert mf["achieved_fraction"] == pytest.approx(
        saved["strixlm"]["output_tok_s"] / mf["floor_output_tok_s"]
    )


def test_dummy_padded_generate_subset(tiny_bench_model: str, capsys) -> None:
    argv = (
        "--load-format dummy --device cpu --num-prompts 6 --input-len-range 3 8 "
        "--output-len-range 2 6 --compare hf --hf-mode generate --hf-subset 4 --block-size 32"
    )
    result = throughput.run(_args("--model", tiny_bench_model, *argv.split()))
    assert result["strixlm"]["config"]["block_size"] == 32
    assert result["hf"]["config"]["mode"] == "generate"
    assert result["hf"]["num_requests"] == 4 and result["strixlm"]["num_requests"] == 6
    assert result["hf"]["output_tokens"] == sum(len(t) for t in result["hf"]["sample_token_ids"])
    assert "greedy_agreement" not in result  # random weights on both sides: nothing to compare
    printed = capsys.readouterr().out
    assert "first 4 of 6" in printed
    assert "memory floor: " in printed and "% of the floor" in printed
    assert result["memory_floor"]["floor_output_tok_s"] > 0
    # The compute-aware bound: the floor's schedule and bandwidth, plus compute, so never
    # above the floor.
    rl, mf = result["roofline"], result["memory_floor"]
    assert "compute-aware bound: " in printed
    assert rl["bandwidth"] == mf["bandwidth"] and rl["steps"] == mf["steps"]
    assert 0 < rl["bound_output_tok_s"] <= mf["floor_output_tok_s"]
    assert rl["achieved_fraction"] == pytest.approx(
        result["strixlm"]["output_tok_s"] / rl["bound_output_tok_s"]
    )


def test_sampled_workload_is_seeded(tiny_bench_model: str) -> None:
    """--temperature samples each request with its own seed: two runs give the same tokens,
    which differ from the greedy ones."""
    argv = "--device cpu --num-prompts 4 --input-len-range 3 8 --output-len-range 6 6".split()

    def tokens(*extra: str) -> list:
        return throughput.run(_args("--model", tiny_bench_model, *argv, *extra))["strixlm"][
            "sample_token_ids"
        ]

    sampled = tokens("--temperature", "1.0")
    assert sampled == tokens("--temperature", "1.0")
    assert sampled != tokens()
    with pytest.raises(SystemExit, match="--compare runs the peer greedy"):
        throughput.run(_args("--model", tiny_bench_model, "--temperature", "1", "--compare", "hf"))


@pytest.mark.parametrize("bad", ["7", "0", "sixteen"])
def test_bad_block_size_is_a_flag_error(bad: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        _args("--block-size", bad)
    assert e.value.code == 2
    assert "--block-size" in capsys.readouterr().err


def test_floor_one_slot_by_hand() -> None:
    # One slot, budget 4. Step 1: prefill A (3 tokens, writes 3, samples A's 1st token).
    # Step 2: decode A (reads 3 + 1 = 4, writes 1); A is done. Step 3: prefill B (writes 2,
    # samples). Steps 4, 5: decode B (reads 3, then 4; writes 1 each).
    f = workload_floor(TINY, 2, 2, [(3, 2), (2, 3)], 1, bandwidth=7104.0, max_num_batched_tokens=4)
    assert f["weight_bytes_per_step"] == 1360 and f["kv_bytes_per_token"] == 16
    assert f["steps"] == 5
    assert f["kv_read_bytes"] == (4 + 3 + 4) * 16
    assert f["kv_write_bytes"] == (3 + 1 + 2 + 1 + 1) * 16
    assert f["bytes"] == 5 * 1360 + 11 * 16 + 8 * 16 == 7104
    assert f["floor_s"] == pytest.approx(1.0)
    assert f["floor_output_tok_s"] == pytest.approx(5.0)


def test_floor_chunked_prefill_by_hand() -> None:
    # Two slots, budget 2. Step 1: A's first chunk (2 of 3). Step 2: A's last token (reads
    # the 2 before it, samples), then B is admitted with the 1 budget token left. Step 3:
    # decode A (reads 4), B's last prompt token (reads 1 before it, samples; B is done).
    f = workload_floor(TINY, 2, 1, [(3, 2), (2, 1)], 2, bandwidth=1e3, max_num_batched_tokens=2)
    assert f["kv_bytes_per_token"] == 8  # 1-byte KV
    assert f["steps"] == 3
    assert f["kv_read_bytes"] == (2 + 4 + 1) * 8
    assert f["kv_write_bytes"] == (2 + 1 + 1 + 1 + 1) * 8
    assert f["bytes"] == 3 * 1360 + 13 * 8
    assert f["floor_output_tok_s"] == pytest.approx(3 / (f["bytes"] / 1e3))


@pytest.mark.parametrize("tied", [True, False])
def test_floor_parameter_count_matches_hf(tied: bool) -> None:
    """Weights read per step = HF's parameter count, less the input embedding, plus the LM
    head when it is tied (HF counts a tied matrix once)."""
    for cfg, cls in (
        (
            small_qwen3(tied),
            Qwen3ForCausalLM,
        ),
        (
            LlamaConfig(
                hidden_size=64,
                intermediate_size=96,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=1,
                vocab_size=300,
                attention_bias=True,
                tie_word_embeddings=tied,
            ),
            LlamaForCausalLM,
        ),
    ):
        with torch.device("meta"):
            model = cls(cfg)
        total = sum(p.numel() for p in model.parameters())
        embed = model.get_input_embeddings().weight.numel()
        shape = model_shape(cfg)
        assert shape["weight_params"] == total - embed + (embed if tied else 0)
        k_width = model.model.layers[0].self_attn.k_proj.out_features
        assert shape["kv_elems_per_token"] == 2 * cfg.num_hidden_layers * k_width


def test_copy_bandwidth_cpu() -> None:
    assert measure_copy_bandwidth("cpu", nbytes=8 << 20, iters=3) > 1e8


def test_copy_bandwidth_is_the_best_of_several_buffer_pairs(monkeypatch):
    """The floor divides by the best pair's rate (a pair can land in slow memory): eight
    pairs on CUDA, three on CPU, unless told."""
    from strixlm.benchmarks import memory_floor

    rates = iter([3.0, 9.0, 4.0, 1.0, 2.0, 8.0, 5.0, 7.0])
    calls = []

    def once(device, nbytes, iters):
        calls.append(device)
        return next(rates)

    monkeypatch.setattr(memory_floor, "_copy_bandwidth_once", once)
    assert memory_floor.measure_copy_bandwidth("cpu") == 9.0 and len(calls) == 3
    rates, calls[:] = iter([3.0, 9.0, 4.0, 1.0, 2.0, 8.0, 5.0, 10.0]), []
    assert memory_floor.measure_copy_bandwidth("cuda") == 10.0 and len(calls) == 8
    rates, calls[:] = iter([3.0, 9.0]), []
    assert memory_floor.measure_copy_bandwidth("cuda", trials=2) == 9.0 and len(calls) == 2


def test_bandwidth_prints_with_its_precision() -> None:
    """An H100's ~3.00 TB/s copy must not print as "3 TB/s", nor a CPU's as "0.01 TB/s"."""
    assert throughput.format_bandwidth(3_002_432_277_930.0) == "3.00 TB/s"
    assert throughput.format_bandwidth(4.2149e12) == "4.21 TB/s"
    assert throughput.format_bandwidth(12.34e9) == "12.3 GB/s"
