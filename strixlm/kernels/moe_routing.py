"""Fused MoE routing in Triton: router logits -> (topk_weights fp32 [T, k], ids int32 [T, k]).

One launch replaces the chain of small torch kernels that routing takes per MoE layer
(sigmoid / softmax, + bias, topk, gather, sum, divide, multiply). The torch reference is
strixlm.layers.moe (select_experts_sigmoid_bias with n_group == 1, select_experts_softmax),
whose semantics this follows:

  sigmoid router: scores = sigmoid(logits) in fp32; experts are ranked by scores + bias (the
      bias, when given, only steers the choice); the weights are the unbiased scores of the
      chosen experts, renormalized as w / (sum(w) + 1e-20) if asked, then times `scale`.
  softmax router: scores = softmax(logits) over the E experts in fp32, ranked by themselves;
      renormalized as w / sum(w) if asked.

One program per token holds the whole row in one power-of-two block (E <= 1024) and picks
the k best (k <= 16) by k rounds of "max, then the lowest index holding it, then mask it
out". The output is in torch.topk's order, descending by the ranking key. For distinct keys
the choice and order equal torch.topk's. Ties: the lowest expert index wins. torch.topk
promises no order for ties and does not always agree (on CPU a row of equal values comes
back highest index first), so tied keys may pick different experts than the torch path;
real router logits practically never tie. NaN logits give an unspecified choice (torch
ranks NaN first); an id of E or more may then be written, which fused_moe treats as no
expert.

Logits may be fp32, fp16 or bf16 with any strides; they are upcast to fp32 in the kernel,
exactly what `.float()` does in the reference. Shapes are checked on the host, device values
never (the launch is CUDA-graph safe). On CUDA, exp is libdevice's expf (what torch's
sigmoid / softmax kernels call); under the interpreter it is tl.exp.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

MAX_EXPERTS = 1024
MAX_TOP_K = 16
_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _exp(x, PRECISE: tl.constexpr):
    # libdevice expf is CUDA's expf, what torch.sigmoid / torch.softmax run on the GPU
    # (tl.exp is the faster ex2.approx); the interpreter has no libdevice.
    if PRECISE:
        return libdevice.exp(x)
    else:
        return tl.exp(x)


@triton.jit
def _moe_routing_kernel(
    logits_ptr,
    bias_ptr,
    weights_ptr,
    ids_ptr,
    num_experts,
    logit_s0,
    logit_s1,
    bias_stride,
    eps,
    scale,
    TOP_K: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SOFTMAX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    PRECISE: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_E)
    valid = offs < num_experts
    x = tl.load(logits_ptr + tok * logit_s0 + offs * logit_s1, mask=valid, other=0.0)
    x = x.to(tl.float32)
    if SOFTMAX:
        x = tl.where(valid, x, float("-inf"))
        e = _exp(x - tl.max(x, axis=0), PRECISE)
        e = tl.where(valid, e, 0.0)
        scores = e / tl.sum(e, axis=0)
        key = scores
    else:
        scores = 1.0 / (1.0 + _exp(-x, PRECISE))
        if HAS_BIAS:
            b = tl.load(bias_ptr + offs * bias_stride, mask=valid, other=0.0)
            key = scores + b.to(tl.float32)
        else:
            key = scores

    # k rounds of selection; `avail` drops padding lanes and the experts already taken.
    avail = valid
    slots = tl.arange(0, BLOCK_K)
    top_w = tl.zeros([BLOCK_K], dtype=tl.float32)
    top_id = tl.zeros([BLOCK_K], dtype=tl.int32)
    for i in tl.static_range(TOP_K):
        best = tl.max(tl.where(avail, key, float("-inf")), axis=0)
        # The lowest available index holding the max (BLOCK_E if none: NaN keys only).
        pick = tl.min(tl.where(avail & (key == best), offs, BLOCK_E), axis=0)
        hit = offs == pick
        w = tl.sum(tl.where(hit, scores, 0.0), axis=0)  # exact: one term plus zeros
        top_w = tl.where(slots == i, w, top_w)
        top_id = tl.where(slots == i, pick, top_id)
        avail = avail & ~hit

    if RENORMALIZE:
        top_w = top_w / (tl.sum(top_w, axis=0) + eps)
    top_w = top_w * scale
    out_mask = slots < TOP_K
    tl.store(weights_ptr + tok * TOP_K + slots, top_w, mask=out_mask)
    tl.store(ids_ptr + tok * TOP_K + slots, top_id, mask=out_mask)


def _check(logits: torch.Tensor, top_k: int) -> None:
    if logits.dim() != 2:
        raise ValueError(f"router logits must be 2D [T, E], got shape {tuple(logits.shape)}")
    if logits.dtype not in _LOGIT_DTYPES:
        raise ValueError(f"router logits dtype {logits.dtype} is not one of {_LOGIT_DTYPES}")
    num_experts = logits.shape[1]
    if not 1 <= num_experts <= MAX_EXPERTS:
        raise ValueError(f"{num_experts} experts: the routing kernel takes 1..{MAX_EXPERTS}")
    if not 1 <= top_k <= min(num_experts, MAX_TOP_K):
        raise ValueError(
            f"top_k {top_k} is not in 1..{min(num_experts, MAX_TOP_K)} "
            f"({num_experts} experts, at most {MAX_TOP_K} in the routing kernel)"
        )


def _launch(
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    top_k: int,
    softmax: bool,
    renormalize: bool,
    eps: float,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    num_tokens, num_experts = logits.shape
    weights = torch.empty(num_tokens, top_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(num_tokens, top_k, dtype=torch.int32, device=logits.device)
    if num_tokens == 0:
        return weights, ids
    block_e = triton.next_power_of_2(num_experts)
    _moe_routing_kernel[(num_tokens,)](
        logits,
        logits if bias is None else bias,  # a placeholder pointer when there is no bias
        weights,
        ids,
        num_experts,
        logits.stride(0),
        logits.stride(1),
        0 if bias is None else bias.stride(0),
        eps,
        scale,
        TOP_K=top_k,
        BLOCK_E=block_e,
        BLOCK_K=triton.next_power_of_2(top_k),
        SOFTMAX=softmax,
        HAS_BIAS=bias is not None,
        RENORMALIZE=renormalize,
        PRECISE=logits.is_cuda,
        # One warp up to 256 experts: every reduction stays within the warp.
        num_warps=max(1, min(4, block_e // 256)),
    )
    return weights, ids


def route_sigmoid_bias(
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    top_k: int,
    renormalize: bool = True,
    scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid router (DeepSeek-V3 / NemotronH, one expert group): logits [T, E], optional
    correction bias [E] -> (weights fp32 [T, k], ids int32 [T, k])."""
    _check(logits, top_k)
    if bias is not None:
        if bias.shape != (logits.shape[1],):
            raise ValueError(
                f"bias shape {tuple(bias.shape)} does not match {logits.shape[1]} experts"
            )
        if not bias.is_floating_point():
            raise ValueError(f"bias dtype {bias.dtype} is not a float type")
        if bias.device != logits.device:
            raise ValueError(f"bias is on {bias.device}, logits on {logits.device}")
    return _launch(logits, bias, top_k, False, bool(renormalize), 1e-20, float(scale))


def route_softmax(
    logits: torch.Tensor, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax router (Qwen-MoE / Mixtral): logits [T, E] -> (weights fp32 [T, k],
    ids int32 [T, k]); renormalize divides the kept probabilities by their plain sum."""
    _check(logits, top_k)
    return _launch(logits, None, top_k, True, bool(renormalize), 0.0, 1.0)
