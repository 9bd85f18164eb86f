"""The memory floor of MoE and hybrid (NemotronH) models: routed experts read per step,
Mamba state traffic, KV for attention layers only. Hand-computed schedules, and parameter
counts against HF transformers' own models (built on the meta device)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from floor_shapes import MOE_COMMON, small_qwen3_moe
from nemotron_h_utils import tiny_nemotron_h_config
from transformers import (
    MixtralConfig,
    MixtralForCausalLM,
    NemotronHForCausalLM,
    Qwen3MoeForCausalLM,
)

from strixlm.benchmarks.memory_floor import (
    expected_experts,
    model_shape,
    schedule_loads,
    step_bytes,
    workload_floor,
)

# The schedule of test_bench_throughput.test_floor_one_slot_by_hand: one slot, budget 4,
# requests (3 in, 2 out) and (2 in, 3 out). Steps: prefill A (3 tokens), decode A (1),
# prefill B (2), decode B (1), decode B (1). KV read 4 + 3 + 4 = 11 tokens, written 8.
REQUESTS = [(3, 2), (2, 3)]
STEP_TOKENS = [3, 1, 2, 1, 1]

MOE = SimpleNamespace(
    hidden_size=8,
    intermediate_size=16,
    moe_intermediate_size=4,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    vocab_size=10,
    model_type="mixtral",
    num_local_experts=4,
    num_experts_per_tok=2,
)

HYBRID = SimpleNamespace(
    hybrid_override_pattern="M*E",
    hidden_size=8,
    vocab_size=10,
    layer_norm_epsilon=1e-5,
    mamba_num_heads=2,
    mamba_head_dim=2,
    n_groups=1,
    ssm_state_size=2,
    conv_kernel=3,
    chunk_size=16,
    use_conv_bias=True,
    use_bias=False,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=3,
    moe_shared_expert_intermediate_size=5,
    intermediate_size=6,
    mlp_bias=False,
)


def test_expected_experts():
    # E = 4, k = 2: a token misses a given expert with probability 1/2.
    assert expected_experts(4, 2, 1) == 2.0
    assert expected_experts(4, 2, 2) == 3.0
    assert expected_experts(4, 2, 3) == 3.5
    assert expected_experts(4, 2, 0) == 0.0
    # Never more than T * k or E; all of them at large batch.
    for t in range(1, 300):
        assert expected_experts(128, 6, t) <= min(128, 6 * t) + 1e-9
    assert expected_experts(128, 6, 256) == pytest.approx(128, abs=1e-3)


def test_moe_floor_by_hand():
    # Per layer: attention 8*8 + 2*8*4 + 8*8 = 192, norms 16, router 8*4 = 32; final norm
    # 8, LM head 80: 2 * 240 + 88 = 568 params. One expert: 3 * 8 * 4 = 96 params.
    shape = model_shape(MOE)
    assert shape["weight_params"] == 568
    assert shape["expert_params"] == 96 and shape["moe_layers"] == 2
    f = workload_floor(MOE, 2, 2, REQUESTS, 1, bandwidth=1.0, max_num_batched_tokens=4)
    assert f["steps"] == 5
    # Experts per layer per step (E=4, k=2): 3.5, 2, 3, 2, 2 = 12.5; one expert in both
    # layers is 2 * 96 * 2 = 384 bytes.
    assert f["mean_experts_per_moe_layer"] == pytest.approx(12.5 / 5)
    assert f["expert_weight_bytes"] == pytest.approx(12.5 * 384)
    assert f["weight_bytes"] == pytest.approx(5 * 568 * 2 + 12.5 * 384)
    assert f["weight_bytes_per_step"] == 568 * 2 + 4 * 384  # every expert
    assert f["weight_bytes_one_token_step"] == 568 * 2 + 2 * 384
    assert f["kv_bytes_per_token"] == 2 * 2 * 1 * 4 * 2
    assert f["kv_read_bytes"] == 11 * 32 and f["kv_write_bytes"] == 8 * 32
    assert f["state_read_bytes"] == f["state_write_bytes"] == 0
    assert f["bytes"] == pytest.approx(5 * 1136 + 4800 + 608)


def test_hybrid_floor_by_hand():
    shape = model_shape(HYBRID)
    # Mamba: inner 2*2 = 4, conv_dim 4 + 2*1*2 = 8, in_proj 8 * (4 + 8 + 2) = 112, conv
    # 8*3 + bias 8, dt_bias/A_log/D 3*2, gated norm 4, out_proj 4*8 = 32: 186.
    # Attention 192; MoE shared expert 2*8*5 = 80; 3 layer norms + final norm 32; LM head 80.
    assert shape["weight_params"] == 186 + 192 + 80 + 32 + 80
    assert shape["fp32_params"] == 4 * 8 + 4  # router + correction bias
    assert shape["expert_params"] == 2 * 8 * 3  # up + down, no gate (ReLU^2)
    assert shape["kv_elems_per_token"] == 2 * 1 * 1 * 4  # the attention layer only
    assert shape["conv_state_elems"] == 8 * 2 and shape["ssm_state_elems"] == 2 * 2 * 2
    f = workload_floor(HYBRID, 2, 2, REQUESTS, 1, bandwidth=1.0, max_num_batched_tokens=4)
    fixed = 570 * 2 + 36 * 4
    assert f["weight_bytes"] == pytest.approx(5 * fixed + 12.5 * 48 * 2)
    assert f["state_bytes_per_request"] == 16 * 2 + 8 * 4
    # Prefills of A and B start from zeros (write only); three decodes read and write.
    assert f["state_read_bytes"] == 3 * 64 and f["state_write_bytes"] == 5 * 64
    assert f["kv_read_bytes"] == 11 * 16 and f["kv_write_bytes"] == 8 * 16
    assert f["bytes"] == pytest.approx(5 * fixed + 1200 + 176 + 128 + 192 + 320)
    assert f["floor_s"] == pytest.approx(f["bytes"])


@pytest.mark.parametrize("cfg", [MOE, HYBRID], ids=["moe", "hybrid"])
def test_step_bytes_sum_to_the_floor(cfg):
    # The per-step split profile_run.py sets beside measured steps adds up to the floor.
    loads = schedule_loads(REQUESTS, 1, 4)
    per_step = step_bytes(model_shape(cfg), 2, 2, loads)
    assert [s.tokens for s in loads] == STEP_TOKENS
    f = workload_floor(cfg, 2, 2, REQUESTS, 1, bandwidth=1.0, max_num_batched_tokens=4)
    assert per_step.sum() == pytest.approx(f["bytes"])
    # The first step (a 3-token prefill: 3.5 experts a layer, 3 KV tokens written) and the
    # last (a decode of B at 3 tokens of KV: 2 experts, 4 read, 1 written).
    fixed, expert, kv, state = (
        f["weight_bytes_one_token_step"] - 2 * (f["expert_weight_bytes"] / 12.5),
        f["expert_weight_bytes"] / 12.5,
        f["kv_bytes_per_token"],
        f["state_bytes_per_request"],
    )
    assert per_step[0] == pytest.approx(fixed + 3.5 * expert + 3 * kv + state)
    assert per_step[-1] == pytest.approx(fixed + 2 * expert + 5 * kv + 2 * state)


def hf_params_read(model) -> int:
    """HF's parameters less the input embedding; a tied LM head counts (it is read)."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    return total - embed.numel() + (head.numel() if head is embed else 0)


def all_params(shape: dict[str, int]) -> int:
    experts = shape["moe_layers"] * shape["num_experts"] * shape["expert_params"]
    return shape["weight_params"] + shape["fp32_params"] + experts


@pytest.mark.parametrize("latent, bias", [(None, False), (16, True)])
def test_nemotron_h_params_match_hf(latent, bias):
    # (HF's NemotronH attention has no biases whatever attention_bias says.)
    cfg = tiny_nemotron_h_config("M*EM-E*M", latent, mlp_bias=bias, use_bias=bias)
    with torch.device("meta"):
        model = NemotronHForCausalLM(cfg)
    shape = model_shape(cfg)
    bias = sum(b.numel() for n, b in model.named_buffers() if "e_score_correction_bias" in n)
    assert all_params(shape) == hf_params_read(model) + bias
    router = sum(p.numel() for n, p in model.named_parameters() if n.endswith("gate.weight"))
    assert shape["fp32_params"] == router + bias
    k_width = model.model.layers[1].mixer.k_proj.out_features
    assert shape["kv_elems_per_token"] == 2 * 2 * k_width  # two attention layers of eight


def test_nano_config_shape():
    from transformers import AutoConfig

    from strixlm.benchmarks.throughput import CONFIGS_DIR

    cfg = AutoConfig.from_pretrained(CONFIGS_DIR / "nemotron-3-nano-30b-a3b")
    shape = model_shape(cfg)
    with torch.device("meta"):  # HF builds the config the peer loads with dummy weights
        model = NemotronHForCausalLM(cfg)
    bias = sum(b.numel() for n, b in model.named_buffers() if "e_score_correction_bias" in n)
    assert all_params(shape) == hf_params_read(model) + bias
    # Nemotron 3 Nano 30B-A3B: ~31.6B parameters, ~3.2B active per token (embedding aside).
    assert all_params(shape) + shape["embedding_params_not_read"] == pytest.approx(31.58e9, 1e-3)
    one_token = shape["weight_params"] + shape["fp32_params"] + 23 * 6 * shape["expert_params"]
    assert one_token == pytest.approx(3.23e9, rel=1e-2)
    assert shape["kv_elems_per_token"] == 2 * 6 * 2 * 128
    # 23 Mamba layers: conv 6144 x 3 (bf16) and SSM 64 x 64 x 128 (fp32) each.
    assert shape["conv_state_elems"] == 23 * 6144 * 3
    assert shape["ssm_state_elems"] == 23 * 64 * 64 * 128


@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral"])
def test_moe_params_match_hf(kind):
    if kind == "qwen3_moe":
        cfg = small_qwen3_moe()
        cls = Qwen3MoeForCausalLM
    else:
        cfg = MixtralConfig(**MOE_COMMON, intermediate_size=16, num_local_experts=8)
        cls = MixtralForCausalLM
    with torch.device("meta"):
        model = cls(cfg)
    shape = model_shape(cfg)
    assert shape["moe_layers"] == (2 if kind == "qwen3_moe" else 3)
    assert all_params(shape) == hf_params_read(model)


def test_throughput_command_on_hybrid_model(tmp_path, capsys):
    """`strixlm bench throughput` on a tiny NemotronH with the HF peer: "auto" skips HF's
    continuous batching (no Mamba cache there) for padded generate, the greedy outputs of
    both engines agree, and the floor counts Mamba state."""
    import argparse

    from nemotron_h_utils import save_tiny_nemotron_h

    from strixlm.benchmarks import throughput

    folder = save_tiny_nemotron_h(tmp_path / "nh", "M*EM-E*M")
    argv = (
        f"--model {folder} --device cpu --num-prompts 4 --input-len-range 3 20 "
        "--output-len-range 2 6 --compare hf --hf-mode auto --no-tqdm"
    )
    args = throughput.add_args(argparse.ArgumentParser()).parse_args(argv.split())
    result = throughput.run(args)
    hf = result["hf"]["config"]
    assert hf["mode"] == "generate" and "linear_attention" in hf["cb_skipped"]
    assert "cb_error" not in hf
    assert result["greedy_agreement"]["identical"] == result["greedy_agreement"]["requests"]
    mf = result["memory_floor"]
    assert mf["state_read_bytes"] > 0 and mf["state_write_bytes"] > mf["state_read_bytes"]
    assert mf["expert_weight_bytes"] > 0
    assert "memory floor: " in capsys.readouterr().out


def test_throughput_command_fp8_kv_floor(tiny_llama_dir, capsys, monkeypatch):
    """--kv-cache-dtype fp8 reaches the engine, and the floor counts one byte per KV element:
    a quarter of the float32 run's KV bytes for the same requests, the same weight bytes."""
    import argparse

    from strixlm.benchmarks import throughput
    from strixlm.benchmarks.workload import make_workload

    # On CPU every fp8 step runs the attention kernels in the interpreter, and the command's
    # warm-up (8 requests of 8-16 tokens) took most of them; one 2-token request still warms.
    def short_warmup(vocab_size, avoid_ids=None, seed=0, n=4, input_len_range=(16, 32)):
        return make_workload(1, input_len_range, (2, 2), vocab_size, seed + 1, avoid_ids)

    monkeypatch.setattr(throughput, "warmup_workload", short_warmup)

    def run(kv: str) -> dict:
        argv = (
            f"--model {tiny_llama_dir} --device cpu --num-prompts 3 --input-len-range 3 12 "
            f"--output-len-range 2 4 --no-tqdm --dtype float32 --kv-cache-dtype {kv}"
        )
        args = throughput.add_args(argparse.ArgumentParser()).parse_args(argv.split())
        return throughput.run(args)["memory_floor"]

    full, fp8 = run("auto"), run("fp8")
    assert (full["kv_dtype_bytes"], fp8["kv_dtype_bytes"]) == (4, 1)
    assert fp8["kv_read_bytes"] * 4 == full["kv_read_bytes"] > 0
    assert fp8["weight_bytes"] == full["weight_bytes"]
    assert "memory floor with 1-byte fp8 KV: " in capsys.readouterr().out
