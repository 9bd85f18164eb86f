"""Mixture-of-experts layers: routing functions and the FusedMoE expert bank.

Routing returns (topk_weights fp32 [T, k], topk_ids int32 [T, k]); FusedMoE holds every
expert's weights stacked ([E, N_up, H] and [E, H, I], HF's 3D-experts layout) and runs them
with strixlm.kernels.fused_moe (Triton on CUDA, the torch reference elsewhere).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from strixlm.kernels.dispatch import use_triton as triton_for
from strixlm.kernels.fused_moe import ACTIVATIONS, fused_moe

__all__ = [
    "FusedMoE",
    "fused_moe",
    "parse_expert_weight_name",
    "select_experts_sigmoid_bias",
    "select_experts_softmax",
]

# ---- routing ---------------------------------------------------------------------------
# On CUDA the routing runs as one Triton launch (strixlm.kernels.moe_routing); the torch code
# below is the reference and runs elsewhere. use_triton=True forces the kernel (tests run it
# on CPU under TRITON_INTERPRET=1), False forces torch, None picks.

# The kernel's limits (strixlm.kernels.moe_routing: MAX_EXPERTS, MAX_TOP_K, logit dtypes);
# past them the automatic choice keeps torch.
_TRITON_MAX_EXPERTS, _TRITON_MAX_TOP_K = 1024, 16
_TRITON_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _use_triton(router_logits: torch.Tensor, top_k: int, use_triton: bool | None) -> bool:
    if use_triton is not None:
        return use_triton
    return (
        triton_for(router_logits)
        and router_logits.dtype in _TRITON_LOGIT_DTYPES
        and router_logits.shape[1] <= _TRITON_MAX_EXPERTS
        and top_k <= _TRITON_MAX_TOP_K
    )


def select_experts_softmax(
    router_logits: torch.Tensor, top_k: int, renormalize: bool, *, use_triton: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen-MoE / Mixtral routing: softmax over all experts in fp32, keep the top k, and
    (norm_topk_prob) rescale the kept probabilities to sum to one."""
    _check_top_k(router_logits, top_k)
    if _use_triton(router_logits, top_k, use_triton):
        # Imported here so CPU-only runs never import triton.
        from strixlm.kernels.moe_routing import route_softmax

        return route_softmax(router_logits, top_k, renormalize)
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def select_experts_sigmoid_bias(
    router_logits: torch.Tensor,
    e_score_correction_bias: torch.Tensor | None,
    top_k: int,
    n_group: int = 1,
    topk_group: int = 1,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    *,
    use_triton: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 / NemotronH routing (HF's NemotronHTopkRouter semantics).

    Scores are sigmoid(logits) in fp32. The correction bias only steers the choice: experts
    are ranked by score + bias, while the weights are the unbiased scores of the chosen ones.
    With n_group > 1 the experts form n_group equal groups, each group is ranked by the sum
    of its two best biased scores, and only experts of the best topk_group groups compete.
    The chosen weights are renormalized to sum to one (if asked), then scaled by
    routed_scaling_factor. The grouped variant (n_group > 1) always runs in torch.
    """
    _check_top_k(router_logits, top_k)
    if n_group == 1 and _use_triton(router_logits, top_k, use_triton):
        from strixlm.kernels.moe_routing import route_sigmoid_bias

        return route_sigmoid_bias(
            router_logits, e_score_correction_bias, top_k, renormalize, routed_scaling_factor
        )
    num_tokens, num_experts = router_logits.shape
    scores = torch.sigmoid(router_logits.float())
    choice = scores if e_score_correction_bias is None else scores + e_score_correction_bias
    if n_group > 1:
        if num_experts % n_group or not 1 <= topk_group <= n_group:
            raise ValueError(
                f"{num_experts} experts cannot form {n_group} groups choosing {topk_group}"
            )
        per_group = num_experts // n_group
        if per_group < 2:
            raise ValueError(f"group routing ranks groups by two experts; {per_group} per group")
        grouped = choice.view(num_tokens, n_group, per_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
        best_groups = group_scores.topk(topk_group, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best_groups, True)
        keep = keep.unsqueeze(-1).expand(-1, -1, per_group).reshape(num_tokens, num_experts)
        choice = choice.masked_fill(~keep, float("-inf"))
    ids = torch.topk(choice, top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def _check_top_k(router_logits: torch.Tensor, top_k: int) -> None:
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [T, E], got {tuple(router_logits.shape)}")
    if not 1 <= top_k <= router_logits.shape[1]:
        raise ValueError(f"top_k {top_k} is not in 1..{router_logits.shape[1]} experts")


# ---- the expert bank -------------------------------------------------------------------

# "...experts.<e>.<proj>.weight": HF checkpoints store one tensor per expert and projection.
_PER_EXPERT = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<expert>\d+)\.(?P<proj>\w+)\.weight$")
# "...experts.<proj>": HF v5's in-memory 3D layout, should a checkpoint be saved that way.
_STACKED = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<proj>gate_up_proj|up_proj|down_proj)$")


def parse_expert_weight_name(name: str) -> tuple[str, int | None, str] | None:
    """(prefix ending in ".experts", expert index or None for a stacked tensor, projection),
    or None when the name is not an expert weight."""
    m = _PER_EXPERT.match(name)
    if m:
        return m["prefix"], int(m["expert"]), m["proj"]
    m = _STACKED.match(name)
    if m:
        return m["prefix"], None, m["proj"]
    return None


class FusedMoE(nn.Module):
    """E experts of the same shape, run together by the fused MoE kernel.

    silu_gated: w_up[e] = [gate; up] ([2I, H]); relu2: w_up[e] = up ([I, H]).
    hidden_size is what the experts see (the latent size in NemotronH's LatentMoE).
    """

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        activation: str = "silu_gated",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.activation = activation
        n_up = 2 * intermediate_size if activation == "silu_gated" else intermediate_size
        self.w_up = nn.Parameter(torch.empty(num_experts, n_up, hidden_size))
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))
        # Pieces copied so far, so a checkpoint missing one expert's tensor is caught.
        self._loaded: set[tuple[str, int | None]] = set()

    def forward(
        self, hidden: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
    ) -> torch.Tensor:
        return fused_moe(hidden, self.w_up, self.w_down, topk_weights, topk_ids, self.activation)

    # ---- weights -----------------------------------------------------------------------
    @property
    def gated(self) -> bool:
        return self.activation == "silu_gated"

    def _target(self, proj: str) -> tuple[torch.Tensor, int, int]:
        """(parameter, first row, rows) that an HF projection of one expert fills."""
        inter = self.intermediate_size
        if proj == "down_proj":
            return self.w_down, 0, self.hidden_size
        if proj == "gate_proj" and self.gated:
            return self.w_up, 0, inter
        if proj == "up_proj":
            return self.w_up, inter if self.gated else 0, inter
        if proj == "gate_up_proj" and self.gated:
            return self.w_up, 0, 2 * inter
        raise KeyError(f"no {proj!r} in {self.activation} experts")

    def load_expert_weight(self, expert: int | None, proj: str, tensor: torch.Tensor) -> None:
        """Copy an HF expert tensor: per expert ([out, in], expert = its index) or stacked
        over experts ([E, out, in], expert = None). proj: gate_proj, up_proj, down_proj, or
        gate_up_proj (stacked, gated only)."""
        param, row0, rows = self._target(proj)
        if expert is None:
            dst = param.narrow(1, row0, rows)
        elif 0 <= expert < self.num_experts:
            dst = param[expert].narrow(0, row0, rows)
        else:
            raise KeyError(f"expert {expert} is out of range for {self.num_experts} experts")
        if tuple(tensor.shape) != tuple(dst.shape):
            raise ValueError(
                f"{proj} of expert {expert}: shape {tuple(tensor.shape)}, "
                f"expected {tuple(dst.shape)}"
            )
        with torch.no_grad():
            dst.copy_(tensor.to(param.dtype))
        pieces = ("gate_proj", "up_proj") if proj == "gate_up_proj" else (proj,)
        for piece in pieces:
            if expert is None:
                self._loaded.update((piece, e) for e in range(self.num_experts))
            else:
                self._loaded.add((piece, expert))

    def fully_loaded(self) -> set[str]:
        """Names ("w_up", "w_down") of the parameters whose every expert slice was loaded."""

        def complete(projs: tuple[str, ...]) -> bool:
            return all((p, e) in self._loaded for p in projs for e in range(self.num_experts))

        up_projs = ("gate_proj", "up_proj") if self.gated else ("up_proj",)
        done = set()
        if complete(up_projs):
            done.add("w_up")
        if complete(("down_proj",)):
            done.add("w_down")
        return done

    def extra_repr(self) -> str:
        return (
            f"experts={self.num_experts}, hidden={self.hidden_size}, "
            f"intermediate={self.intermediate_size}, activation={self.activation}"
        )
