"""Fused MoE routing kernel (strixlm.kernels.moe_routing) against the torch routing in
strixlm.layers.moe, on CPU under the Triton interpreter: same ids (exactly, in topk order)
and the same weights (1e-6 relative). Random logits, so no ties."""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


reimport_interpreted("strixlm.kernels.moe_routing")
pytest.importorskip("triton", reason="triton is not installed")
mr = importlib.import_module("strixlm.kernels.moe_routing")

from strixlm.layers import moe  # noqa: E402
from strixlm.layers.moe import select_experts_sigmoid_bias, select_experts_softmax  # noqa: E402

if type(mr._moe_routing_kernel).__name__ != "InterpretedFunction":
    pytest.skip("the routing kernel is not running under the interpreter", allow_module_level=True)

# (experts, top_k): Nemotron 3 Nano's 128/6, Qwen3-MoE's 128/8, k = 1, and E = 60 (padded).
SHAPES = [(128, 6), (128, 8), (64, 1), (60, 4)]


def _logits(num_tokens: int, num_experts: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(num_tokens, num_experts, generator=g) * 2.0


def _bias(num_experts: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(num_experts, generator=g) * 0.5


def _assert_same(got, want) -> None:
    (w, ids), (rw, rids) = got, want
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == rw.shape and ids.shape == rids.shape
    assert torch.equal(ids, rids), f"{ids}\n!=\n{rids}"
    torch.testing.assert_close(w, rw, rtol=1e-6, atol=1e-30)


def _ref_sigmoid(logits, bias, top_k, renormalize, scale):
    return select_experts_sigmoid_bias(
        logits, bias, top_k, 1, 1, renormalize, scale, use_triton=False
    )


@pytest.mark.parametrize("num_tokens", [1, 5])
@pytest.mark.parametrize("num_experts, top_k", SHAPES)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("renormalize, scale", [(True, 2.5), (True, 1.0), (False, 2.5)])
def test_sigmoid_matches_torch(num_tokens, num_experts, top_k, with_bias, renormalize, scale):
    logits = _logits(num_tokens, num_experts, seed=num_experts + top_k + num_tokens)
    bias = _bias(num_experts, num_tokens) if with_bias else None
    got = mr.route_sigmoid_bias(logits, bias, top_k, renormalize, scale)
    _assert_same(got, _ref_sigmoid(logits, bias, top_k, renormalize, scale))


def test_sigmoid_scale_one_without_renormalize():
    logits, bias = _logits(5, 128, 7), _bias(128, 7)
    got = mr.route_sigmoid_bias(logits, bias, 6, False, 1.0)
    _assert_same(got, _ref_sigmoid(logits, bias, 6, False, 1.0))


def test_bias_steers_choice_only():
    """The bias changes which experts win, but the weights stay the unbiased scores."""
    logits, bias = _logits(5, 128, 3), _bias(128, 3) * 4
    w, ids = mr.route_sigmoid_bias(logits, bias, 6, False, 1.0)
    _, unbiased_ids = mr.route_sigmoid_bias(logits, None, 6, False, 1.0)
    assert not torch.equal(ids, unbiased_ids), "the bias changed no choice"
    torch.testing.assert_close(w, torch.sigmoid(logits).gather(1, ids.long()), rtol=1e-6, atol=0)
    # ids come in topk order: descending by the biased score.
    keys = (torch.sigmoid(logits) + bias).gather(1, ids.long())
    assert bool((keys[:, :-1] >= keys[:, 1:]).all())


@pytest.mark.parametrize("num_tokens", [1, 5])
@pytest.mark.parametrize("num_experts, top_k", SHAPES)
@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_matches_torch(num_tokens, num_experts, top_k, renormalize):
    logits = _logits(num_tokens, num_experts, seed=3 * num_experts + top_k + num_tokens)
    got = mr.route_softmax(logits, top_k, renormalize)
    _assert_same(got, select_experts_softmax(logits, top_k, renormalize, use_triton=False))


def test_strided_logits():
    """Rows with a stride past E (a slice of a wider buffer) and a column stride != 1."""
    wide = _logits(5, 160, 11)
    logits = wide[:, 16:144]  # row stride 160
    assert not logits.is_contiguous()
    bias = _bias(128, 11)
    got = mr.route_sigmoid_bias(logits, bias, 6, True, 2.5)
    _assert_same(got, _ref_sigmoid(logits.contiguous(), bias, 6, True, 2.5))
    transposed = _logits(128, 5, 12).t()  # [5, 128], strides (1, 5)
    got = mr.route_softmax(transposed, 8, True)
    _assert_same(got, select_experts_softmax(transposed.contiguous(), 8, True, use_triton=False))
    strided_bias = torch.randn(256)[::2]
    got = mr.route_sigmoid_bias(logits, strided_bias, 6, True, 2.5)
    _assert_same(got, _ref_sigmoid(logits, strided_bias.contiguous(), 6, True, 2.5))


def test_half_logits_upcast_like_float():
    logits = _logits(5, 128, 13).half()
    got = mr.route_softmax(logits, 8, True)
    _assert_same(got, select_experts_softmax(logits, 8, True, use_triton=False))


@pytest.mark.parametrize("num_experts, top_k", [(1024, 16), (1, 1)])
def test_kernel_limits(num_experts, top_k):
    logits, bias = _logits(3, num_experts, 5), _bias(num_experts, 5)
    got = mr.route_sigmoid_bias(logits, bias, top_k, True, 2.5)
    _assert_same(got, _ref_sigmoid(logits, bias, top_k, True, 2.5))
    got = mr.route_softmax(logits, top_k, False)
    _assert_same(got, select_experts_softmax(logits, top_k, False, use_triton=False))


def test_ties_pick_the_lowest_index():
    """The kernel's own rule (torch.topk leaves tie order unspecified, so no comparison)."""
    logits = torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0, 0.0]])
    w, ids = mr.route_sigmoid_bias(logits, None, 4, False, 1.0)
    assert ids.tolist() == [[1, 3, 0, 2]]
    half, hi = torch.sigmoid(torch.tensor(0.0)).item(), torch.sigmoid(torch.tensor(1.0)).item()
    torch.testing.assert_close(w, torch.tensor([[hi, hi, half, half]]), rtol=1e-6, atol=0)


def test_no_tokens():
    w, ids = mr.route_softmax(torch.empty(0, 128), 8, True)
    assert w.shape == (0, 8) and ids.shape == (0, 8) and ids.dtype == torch.int32


def test_validation_errors():
    logits = _logits(3, 16, 0)
    with pytest.raises(ValueError, match="2D"):
        mr.route_softmax(logits[0], 2, True)
    with pytest.raises(ValueError, match="2D"):
        mr.route_sigmoid_bias(logits[None], None, 2, True, 1.0)
    with pytest.raises(ValueError, match="top_k 17"):
        mr.route_softmax(logits, 17, True)
    with pytest.raises(ValueError, match="top_k 0"):
        mr.route_sigmoid_bias(logits, None, 0, True, 1.0)
    with pytest.raises(ValueError, match="at most 16"):
        mr.route_softmax(_logits(2, 64, 0), 17, True)
    with pytest.raises(ValueError, match="2048 experts"):
        mr.route_softmax(_logits(2, 2048, 0), 4, True)
    with pytest.raises(ValueError, match="dtype"):
        mr.route_softmax(logits.double(), 2, True)
    with pytest.raises(ValueError, match="bias shape"):
        mr.route_sigmoid_bias(logits, torch.zeros(15), 2, True, 1.0)
    with pytest.raises(ValueError, match="bias dtype"):
        mr.route_sigmoid_bias(logits, torch.zeros(16, dtype=torch.int64), 2, True, 1.0)


def test_layer_functions_forced_triton_match_torch():
    """select_experts_* with use_triton=True run the kernel; on CPU the default is torch."""
    logits, bias = _logits(5, 128, 21), _bias(128, 21)
    assert not moe._use_triton(logits, 6, None)
    args = (logits, bias, 6, 1, 1, True, 2.5)
    _assert_same(
        select_experts_sigmoid_bias(*args, use_triton=True),
        select_experts_sigmoid_bias(*args),
    )
    _assert_same(
        select_experts_softmax(logits, 8, True, use_triton=True),
        select_experts_softmax(logits, 8, True),
    )
    # Grouped routing is not fused: forcing Triton still gives the torch result.
    grouped = (logits, bias, 6, 8, 4, True, 2.5)
    _assert_same(
        select_experts_sigmoid_bias(*grouped, use_triton=True),
        select_experts_sigmoid_bias(*grouped),
    )
    with pytest.raises(ValueError, match="top_k"):
        select_experts_softmax(logits, 129, True, use_triton=True)
