"""Fused MoE: the Triton kernels (under TRITON_INTERPRET=1, fp32/fp16, small shapes) against
the torch reference, the reference and FusedMoE against HF's expert modules, and the
routing functions against HF's router modules. benchmarks/gpu/check_moe.py checks the
kernels on the GPU at real shapes in bf16."""

from __future__ import annotations

import importlib
import os

# Set before triton is imported: @triton.jit picks the interpreter at decoration time.
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

reimport_interpreted("strixlm.kernels.fused_moe")
pytest.importorskip("triton", reason="triton is not installed")

from transformers import NemotronHConfig, Qwen3MoeConfig  # noqa: E402
from transformers.models.nemotron_h.modeling_nemotron_h import (  # noqa: E402
    NemotronHExperts,
    NemotronHTopkRouter,
)
from transformers.models.qwen3_moe.modeling_qwen3_moe import (  # noqa: E402
    Qwen3MoeExperts,
    Qwen3MoeTopKRouter,
)

# import_module, not "from strixlm.kernels import fused_moe": the latter would hand back a
# stale compiled module still attached to the package after reimport_interpreted().
fm = importlib.import_module("strixlm.kernels.fused_moe")
from strixlm.layers.moe import (  # noqa: E402
    FusedMoE,
    parse_expert_weight_name,
    select_experts_sigmoid_bias,
    select_experts_softmax,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

if type(fm._moe_gemm_kernel).__name__ != "InterpretedFunction":
    pytest.skip("the MoE kernels are not running under the interpreter", allow_module_level=True)

HIDDEN, INTER = 48, 40  # not powers of two: the K and N tails are masked
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def make_case(
    num_tokens: int,
    top_k: int,
    num_experts: int,
    activation: str,
    dtype: torch.dtype,
    seed: int = 0,
    experts_used: list[int] | None = None,
):
    g = torch.Generator().manual_seed(seed)
    n_up = 2 * INTER if activation == "silu_gated" else INTER
    x = torch.randn(num_tokens, HIDDEN, generator=g).to(dtype)
    w_up = (torch.randn(num_experts, n_up, HIDDEN, generator=g) * 0.2).to(dtype)
    w_down = (torch.randn(num_experts, HIDDEN, INTER, generator=g) * 0.2).to(dtype)
    pool = torch.tensor(experts_used if experts_used is not None else range(num_experts))
    ids = torch.stack(
        [pool[torch.randperm(len(pool), generator=g)[:top_k]] for _ in range(num_tokens)]
    ).to(torch.int32)
    weights = torch.rand(num_tokens, top_k, generator=g)
    return x, w_up, w_down, weights, ids


def assert_matches_ref(x, w_up, w_down, weights, ids, activation, config=None):
    got = fm.fused_moe_triton(x, w_up, w_down, weights, ids, activation, config)
    ref = fm.fused_moe_ref(x, w_up, w_down, weights, ids, activation)
    assert got.dtype == x.dtype and got.shape == x.shape
    torch.testing.assert_close(got, ref, **TOL[x.dtype])
    return got


# ---- Triton vs the torch reference -----------------------------------------------------


@pytest.mark.parametrize("activation", ["silu_gated", "relu2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("num_tokens, top_k", [(1, 1), (1, 4), (3, 2), (3, 3)])
def test_triton_matches_reference_decode(num_tokens, top_k, activation, dtype):
    # 16 experts: at T = 1 or 3 most of them receive no token.
    case = make_case(num_tokens, top_k, 16, activation, dtype, seed=num_tokens * 10 + top_k)
    assert_matches_ref(*case, activation)


@pytest.mark.parametrize(
    "top_k, activation, dtype",
    [(4, "silu_gated", torch.float16), (2, "relu2", torch.float32)],
    ids=["k4-silu_gated-fp16", "k2-relu2-fp32"],
)
def test_triton_matches_reference_prefill(top_k, activation, dtype):
    case = make_case(64, top_k, 16, activation, dtype, seed=64 + top_k)
    assert_matches_ref(*case, activation)


@pytest.mark.parametrize("activation", ["silu_gated", "relu2"])
def test_idle_experts_and_dropped_slots(activation):
    """Only experts 1, 5 and 6 of 8 get tokens; slots with id -1 or E add nothing."""
    x, w_up, w_down, weights, ids = make_case(
        40, 3, 8, activation, torch.float32, seed=7, experts_used=[1, 5, 6]
    )
    ids[::5, 0] = -1
    ids[2::7, 2] = 8
    got = assert_matches_ref(x, w_up, w_down, weights, ids, activation)
    kept = ids.clone()
    kept_w = weights.clone()
    dropped = (ids < 0) | (ids >= 8)
    kept[dropped], kept_w[dropped] = 1, 0.0  # same as a zero-weight slot on a real expert
    ref = fm.fused_moe_ref(x, w_up, w_down, kept_w, kept, activation)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "config",
    [
        # K in three 16-wide steps, 16-wide N with a wrapped tail, grouped order over 2 rows.
        fm.MoEConfig(16, fm.GemmConfig(16, 16, 2), fm.GemmConfig(16, 16, 2)),
        # One 64-row block holds many experts' worth of padding; K in one step.
        fm.MoEConfig(64, fm.GemmConfig(32, 64, 8), fm.GemmConfig(64, 64, 1)),
    ],
    ids=["small_tiles", "large_tiles"],
)
def test_triton_other_tiles(config):
    case = make_case(24, 2, 8, "silu_gated", torch.float16, seed=3)
    assert_matches_ref(*case, "silu_gated", config)


def test_chunked_prefill(monkeypatch):
    """Token chunks (MAX_CHUNK_TOKENS) give the same result as one pass."""
    monkeypatch.setattr(fm, "MAX_CHUNK_TOKENS", 16)
    assert_matches_ref(*make_case(40, 2, 4, "relu2", torch.float32, seed=5), "relu2")


def _segments(align: fm.MoEAlignment) -> list[tuple[int, list[int]]]:
    """(expert, sorted flat ids incl. padding) per used block, order-free within a block."""
    used = int(align.num_padded.item()) // align.block_m
    out = []
    for b in range(used):
        rows = align.sorted_ids[b * align.block_m : (b + 1) * align.block_m]
        out.append((int(align.block_expert[b]), sorted(rows.tolist())))
    return out


@pytest.mark.parametrize(
    "num_tokens, top_k, num_experts, block_m", [(1, 4, 16, 16), (50, 3, 8, 16), (33, 2, 5, 32)]
)
def test_align_matches_reference(num_tokens, top_k, num_experts, block_m):
    """Same blocks, experts and padding; row order inside an expert may differ (atomics)."""
    g = torch.Generator().manual_seed(num_tokens)
    ids = torch.randint(0, num_experts, (num_tokens, top_k), generator=g, dtype=torch.int32)
    ids[0, 0] = -1  # dropped in both
    got = fm.moe_align(ids, num_experts, block_m)
    ref = fm.moe_align_ref(ids, num_experts, block_m)
    assert int(got.num_padded) == int(ref.num_padded)
    assert got.sorted_ids.shape == ref.sorted_ids.shape
    assert got.num_padded.item() <= got.sorted_ids.numel()

    # The rows of each expert, sorted: atomics may move a row across that expert's blocks.
    def by_expert(a: fm.MoEAlignment) -> dict[int, list[int]]:
        seg: dict[int, list[int]] = {}
        for e, rows in _segments(a):
            seg.setdefault(e, []).extend(rows)
        return {e: sorted(r) for e, r in seg.items()}

    assert by_expert(got) == by_expert(ref)
    assert [e for e, _ in _segments(got)] == [e for e, _ in _segments(ref)]


@pytest.mark.parametrize(
    "num_tokens, top_k, num_experts, block_m",
    [(1, 6, 128, 16), (10, 6, 128, 16), (8, 8, 256, 16), (3, 2, 5, 32), (1, 1, 1, 16)],
)
def test_small_alignment_is_the_reference_exactly(num_tokens, top_k, num_experts, block_m):
    """Decode-sized inputs take the one-program alignment, which keeps rows in flat order
    inside an expert: the used part equals the reference element for element."""
    assert num_tokens * top_k <= fm._ALIGN_SMALL_ROWS
    g = torch.Generator().manual_seed(num_tokens * 7 + top_k)
    ids = torch.randint(0, num_experts, (num_tokens, top_k), generator=g, dtype=torch.int32)
    if ids.numel() > 2:
        ids[0, -1] = -1  # dropped
        ids.view(-1)[1] = num_experts  # out of range: dropped too
    got = fm.moe_align(ids, num_experts, block_m)
    ref = fm.moe_align_ref(ids, num_experts, block_m)
    used = int(ref.num_padded)
    assert int(got.num_padded) == used
    assert torch.equal(got.sorted_ids[:used], ref.sorted_ids[:used])
    assert torch.equal(got.block_expert[: used // block_m], ref.block_expert[: used // block_m])


def test_bad_inputs_are_named():
    x, w_up, w_down, weights, ids = make_case(4, 2, 4, "silu_gated", torch.float32)
    with pytest.raises(ValueError, match="activation"):
        fm.fused_moe(x, w_up, w_down, weights, ids, "gelu")
    with pytest.raises(ValueError, match="relu2"):
        fm.fused_moe(x, w_up, w_down, weights, ids, "relu2")  # w_up is [E, 2I, H]
    with pytest.raises(ValueError, match="routing rows"):
        fm.fused_moe(x[:3], w_up, w_down, weights, ids)
    with pytest.raises(ValueError, match="dtypes"):
        fm.fused_moe(x.half(), w_up, w_down, weights, ids)
    with pytest.raises(ValueError, match="top_k"):
        select_experts_softmax(torch.randn(3, 4), 5, True)


# ---- against HF's modules --------------------------------------------------------------


def _qwen_cfg(norm_topk_prob: bool) -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        hidden_size=HIDDEN,
        moe_intermediate_size=INTER,
        num_experts=8,
        num_experts_per_tok=3,
        norm_topk_prob=norm_topk_prob,
    )


def _nemotron_cfg(n_group: int, topk_group: int) -> NemotronHConfig:
    return NemotronHConfig(
        hidden_size=HIDDEN,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_group=n_group,
        topk_group=topk_group,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        moe_intermediate_size=INTER,
        mlp_hidden_act="relu2",
    )


def _by_expert(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort each row by expert id so selections compare regardless of order."""
    order = ids.long().argsort(dim=-1)
    return weights.float().gather(1, order), ids.long().gather(1, order)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_softmax_routing_matches_hf(norm_topk_prob):
    cfg = _qwen_cfg(norm_topk_prob)
    router = Qwen3MoeTopKRouter(cfg)
    torch.manual_seed(0)
    torch.nn.init.normal_(router.weight, std=0.5)
    x = torch.randn(33, HIDDEN)
    with torch.no_grad():
        logits, ref_w, ref_ids = router(x)
    w, ids = select_experts_softmax(logits, cfg.num_experts_per_tok, norm_topk_prob)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    got, want = _by_expert(w, ids), _by_expert(ref_w, ref_ids)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n_group, topk_group", [(1, 1), (4, 2), (8, 3)])
def test_sigmoid_bias_routing_matches_hf(n_group, topk_group):
    cfg = _nemotron_cfg(n_group, topk_group)
    router = NemotronHTopkRouter(cfg)
    torch.manual_seed(n_group)
    torch.nn.init.normal_(router.weight, std=0.5)
    # A bias large enough to change choices: weights must still come from unbiased scores.
    router.e_score_correction_bias.copy_(torch.randn(16) * 0.5)
    x = torch.randn(41, HIDDEN)
    with torch.no_grad():
        logits, ref_w, ref_ids = router(x)
    w, ids = select_experts_sigmoid_bias(
        logits,
        router.e_score_correction_bias,
        cfg.num_experts_per_tok,
        n_group,
        topk_group,
        True,
        cfg.routed_scaling_factor,
    )
    got, want = _by_expert(w, ids), _by_expert(ref_w, ref_ids)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
    unbiased, _ = select_experts_sigmoid_bias(logits, None, 4, n_group, topk_group, True, 2.5)
    assert not torch.equal(unbiased, w), "the bias changed no choice; the test proves nothing"


def test_qwen3_experts_match_hf_per_expert_tensors():
    """FusedMoE filled from per-expert HF tensors (the checkpoint layout) equals HF's experts."""
    cfg = _qwen_cfg(True)
    hf = Qwen3MoeExperts(cfg)
    torch.manual_seed(1)
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ours = FusedMoE(8, HIDDEN, INTER, "silu_gated")
    for e in range(8):
        gate, up = hf.gate_up_proj[e].chunk(2, dim=0)
        for proj, t in (("gate_proj", gate), ("up_proj", up), ("down_proj", hf.down_proj[e])):
            name = f"model.layers.0.mlp.experts.{e}.{proj}.weight"
            prefix, expert, parsed_proj = parse_expert_weight_name(name)
            assert prefix == "model.layers.0.mlp.experts" and expert == e
            ours.load_expert_weight(expert, parsed_proj, t.detach())
    assert ours.fully_loaded() == {"w_up", "w_down"}
    x = torch.randn(29, HIDDEN)
    w, ids = select_experts_softmax(torch.randn(29, 8), 3, True)
    with torch.no_grad():
        ref = hf(x, ids.long(), w)
        got = ours(x, w, ids)
        triton_out = fm.fused_moe_triton(x, ours.w_up, ours.w_down, w, ids, "silu_gated")
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(triton_out, ref, rtol=1e-5, atol=1e-5)


def test_nemotron_experts_match_hf_stacked_tensors():
    """relu2 experts filled from HF's stacked [E, out, in] tensors equal HF's experts."""
    cfg = _nemotron_cfg(1, 1)
    hf = NemotronHExperts(cfg)
    torch.manual_seed(2)
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ours = FusedMoE(16, HIDDEN, INTER, "relu2")
    assert parse_expert_weight_name("backbone.layers.1.mixer.experts.up_proj")[1:] == (
        None,
        "up_proj",
    )
    ours.load_expert_weight(None, "up_proj", hf.up_proj.detach())
    assert ours.fully_loaded() == {"w_up"}
    ours.load_expert_weight(None, "down_proj", hf.down_proj.detach())
    assert ours.fully_loaded() == {"w_up", "w_down"}
    x = torch.randn(23, HIDDEN)
    w, ids = select_experts_sigmoid_bias(torch.randn(23, 16), torch.zeros(16), 4, 1, 1, True, 2.5)
    with torch.no_grad():
        ref = hf(x, ids.long(), w)
        got = ours(x, w, ids)
        triton_out = fm.fused_moe_triton(x, ours.w_up, ours.w_down, w, ids, "relu2")
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(triton_out, ref, rtol=1e-5, atol=1e-5)


def test_expert_weight_shape_and_range_errors():
    ours = FusedMoE(4, HIDDEN, INTER, "relu2")
    with pytest.raises(KeyError, match="gate_proj"):
        ours.load_expert_weight(0, "gate_proj", torch.zeros(INTER, HIDDEN))
    with pytest.raises(KeyError, match="out of range"):
        ours.load_expert_weight(4, "up_proj", torch.zeros(INTER, HIDDEN))
    with pytest.raises(ValueError, match="expected"):
        ours.load_expert_weight(0, "down_proj", torch.zeros(INTER, HIDDEN))
    assert parse_expert_weight_name("model.layers.0.mlp.gate.weight") is None


ALIGN_AOT = r"""
from strixlm.kernels import fused_moe as fm
sig = dict(ids_ptr="*i32", sorted_ids_ptr="*i32", block_expert_ptr="*i32",
           num_padded_ptr="*i32", n="i32", num_experts="i32", num_blocks="i32")
for e_pad, n_p in ((128, 16), (256, 64)):
    c = dict(N_P=n_p, E_PAD=e_pad, BLOCK_M=16, P_CHUNK=64)
    src = ASTSource(fm._align_small_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
print("compiled")
"""


def test_small_alignment_compiles_for_sm90():
    """The interpreter never compiles; ptxas (shipped with triton) does, without a GPU."""
    assert_compiles(ALIGN_AOT)
