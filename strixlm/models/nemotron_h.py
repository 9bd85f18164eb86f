"""NemotronH (Nemotron-H, Nemotron 3 Nano / Super): a hybrid Mamba-2 / attention / MoE stack.

Every layer is pre-norm + one mixer + residual; the mixer is chosen per layer by the
pattern (M = Mamba-2, * = attention without rotary embedding, E = MoE, - = ReLU^2 MLP).
The MoE routes with a sigmoid router in fp32 (correction bias for the choice only,
renormalised top-k times routed_scaling_factor), adds a shared expert, and with
moe_latent_size runs its routed experts in a smaller latent width between fc1_latent_proj
and fc2_latent_proj. Checkpoint tensors live under `backbone.` (or `model.`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from strixlm.layers.attention.backend import AttentionBackend
from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.layers.linear import Linear, fp32_linear
from strixlm.layers.mamba2 import HybridMetadata, Mamba2Dims, Mamba2Mixer
from strixlm.layers.moe import FusedMoE, parse_expert_weight_name, select_experts_sigmoid_bias
from strixlm.layers.norm import RMSNorm

MAMBA, ATTENTION, MOE, MLP = "M", "*", "E", "-"
# layers_block_type names (current and older transformers) -> pattern characters.
_BLOCK_TYPES = {
    "mamba": MAMBA,
    "linear_attention": MAMBA,
    "attention": ATTENTION,
    "full_attention": ATTENTION,
    "moe": MOE,
    "mlp": MLP,
}


def config_float(value) -> float:
    """A float from config.json, including {"__float__": "Infinity"} (how transformers
    writes non-finite floats) and strings such as "inf"."""
    if isinstance(value, dict) and "__float__" in value:
        value = value["__float__"]
    return float(value)


def layer_pattern(cfg) -> str:
    """The per-layer mixer kinds as a pattern string, from layers_block_type or
    hybrid_override_pattern."""
    types = getattr(cfg, "layers_block_type", None)
    if isinstance(types, list | tuple) and types:
        bad = sorted({t for t in types if t not in _BLOCK_TYPES})
        if bad:
            raise ValueError(f"layers_block_type has unknown layer types {bad}")
        return "".join(_BLOCK_TYPES[t] for t in types)
    pattern = getattr(cfg, "hybrid_override_pattern", None)
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("NemotronH config needs layers_block_type or hybrid_override_pattern")
    bad = sorted(set(pattern) - {MAMBA, ATTENTION, MOE, MLP})
    if bad:
        raise ValueError(f"hybrid_override_pattern has unknown layer kinds {bad} (M * E -)")
    return pattern


def _cfg(cfg, *names, default=None):
    """First attribute present among names (current and legacy config spellings)."""
    for n in names:
        v = getattr(cfg, n, None)
        if v is not None:
            return v
    return default


def mamba_dims(cfg) -> Mamba2Dims:
    limit = _cfg(cfg, "time_step_limit", "mamba_dt_limit", default=(0.0, math.inf))
    return Mamba2Dims(
        hidden_size=cfg.hidden_size,
        num_heads=cfg.mamba_num_heads,
        head_dim=cfg.mamba_head_dim,
        n_groups=_cfg(cfg, "n_groups", "mamba_n_groups", default=1),
        state_size=cfg.ssm_state_size,
        conv_kernel=_cfg(cfg, "conv_kernel", "mamba_d_conv", default=4),
        chunk_size=_cfg(cfg, "chunk_size", "mamba_chunk_size", default=128),
        use_conv_bias=bool(_cfg(cfg, "use_conv_bias", "mamba_conv_bias", default=True)),
        use_bias=bool(getattr(cfg, "use_bias", False)),
        norm_eps=float(cfg.layer_norm_epsilon),
        dt_limit=(config_float(limit[0]), config_float(limit[1])),
    )


class NemotronHAttention(nn.Module):
    """Grouped-query attention with no positional embedding (the Mamba layers carry order)."""

    def __init__(self, cfg, backend_cls: type[AttentionBackend]) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        # HF's NemotronH attention has no biases whatever `attention_bias` says (it is the
        # numerical reference, and released checkpoints carry none).
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=False)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, bias=False)
        self.attn = backend_cls(
            self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5
        )
        self.kv_cache: torch.Tensor | None = None  # bound by the runner

    def forward(self, x: torch.Tensor, md: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        o = self.attn.forward(
            q.view(t, self.num_heads, self.head_dim),
            k.view(t, self.num_kv_heads, self.head_dim),
            v.view(t, self.num_kv_heads, self.head_dim),
            self.kv_cache,
            md,
        )
        return self.o_proj(o.reshape(t, self.q_size))


class NemotronHMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, bias: bool) -> None:
        super().__init__()
        self.up_proj = Linear(hidden, inter, bias=bias)
        self.down_proj = Linear(inter, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.up_proj.forward_relu2(x))


class NemotronHMoE(nn.Module):
    def __init__(self, cfg) -> None:
        super().__init__()
        hidden = cfg.hidden_size
        n_exp = cfg.n_routed_experts
        inter = cfg.moe_intermediate_size
        self.latent = getattr(cfg, "moe_latent_size", None)
        width = self.latent or hidden
        bias = bool(getattr(cfg, "mlp_bias", False))
        self.top_k = cfg.num_experts_per_tok
        self.n_group = getattr(cfg, "n_group", 1) or 1
        self.topk_group = getattr(cfg, "topk_group", 1) or 1
        self.renormalize = bool(getattr(cfg, "norm_topk_prob", True))
        self.routed_scaling_factor = float(getattr(cfg, "routed_scaling_factor", 1.0))
        # The router stays fp32 whatever the model dtype (HF keeps it so too).
        self.gate_weight = nn.Parameter(torch.empty(n_exp, hidden, dtype=torch.float32))
        self.e_score_correction_bias = nn.Parameter(
            torch.zeros(n_exp, dtype=torch.float32), requires_grad=False
        )
        self.experts = FusedMoE(n_exp, width, inter, "relu2")
        self.shared_experts = NemotronHMLP(hidden, cfg.moe_shared_expert_intermediate_size, bias)
        if self.latent:
            self.fc1_latent_proj = Linear(hidden, self.latent, bias=bias)
            self.fc2_latent_proj = Linear(self.latent, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = fp32_linear(x, self.gate_weight)
        weights, ids = select_experts_sigmoid_bias(
            logits,
            self.e_score_correction_bias,
            self.top_k,
            self.n_group,
            self.topk_group,
            self.renormalize,
            self.routed_scaling_factor,
        )
        h = self.fc1_latent_proj(x) if self.latent else x
        h = self.experts(h, weights, ids)
        if self.latent:
            h = self.fc2_latent_proj(h)
        return h + self.shared_experts(x)


class NemotronHBlock(nn.Module):
    def __init__(self, kind: str, mixer: nn.Module, hidden: int, eps: float) -> None:
        super().__init__()
        self.kind = kind
        self.norm = RMSNorm(hidden, eps)
        self.mixer = mixer


class NemotronHForCausalLM(nn.Module):
    def __init__(self, cfg, backend_cls: type[AttentionBackend]) -> None:
        super().__init__()
        self.config = cfg
        self.pattern = layer_pattern(cfg)
        hidden, eps = cfg.hidden_size, float(cfg.layer_norm_epsilon)
        dims = mamba_dims(cfg) if MAMBA in self.pattern else None
        mlp_bias = bool(getattr(cfg, "mlp_bias", False))
        self.embeddings = nn.Embedding(cfg.vocab_size, hidden)
        layers = []
        for kind in self.pattern:
            if kind == MAMBA:
                mixer = Mamba2Mixer(dims)
            elif kind == ATTENTION:
                mixer = NemotronHAttention(cfg, backend_cls)
            elif kind == MOE:
                mixer = NemotronHMoE(cfg)
            else:
                mixer = NemotronHMLP(hidden, cfg.intermediate_size, mlp_bias)
            layers.append(NemotronHBlock(kind, mixer, hidden, eps))
        self.layers = nn.ModuleList(layers)
        self.norm_f = RMSNorm(hidden, eps)
        self.tie_word_embeddings = bool(getattr(cfg, "tie_word_embeddings", False))
        if not self.tie_word_embeddings:
            self.lm_head = nn.Linear(hidden, cfg.vocab_size, bias=False)

    def attention_layers(self) -> list[NemotronHAttention]:
        return [layer.mixer for layer in self.layers if layer.kind == ATTENTION]

    def mamba_layers(self) -> list[Mamba2Mixer]:
        return [layer.mixer for layer in self.layers if layer.kind == MAMBA]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        md: HybridMetadata | AttentionMetadata,
    ) -> torch.Tensor:
        # A pattern without Mamba layers runs on the default (attention-only) metadata.
        attn_md, mamba_md = (md.attn, md.mamba) if isinstance(md, HybridMetadata) else (md, None)
        x = self.embeddings(input_ids)
        residual = None
        for layer in self.layers:
            if residual is None:
                residual = x
                x = layer.norm(x)
            else:
                x, residual = layer.norm(x, residual)
            if layer.kind == MAMBA:
                x = layer.mixer(x, mamba_md)
            elif layer.kind == ATTENTION:
                x = layer.mixer(x, attn_md)
            else:
                x = layer.mixer(x)
        x, _ = self.norm_f(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor, upcast: bool = True) -> torch.Tensor:
        """Logits [T, vocab]: float32, or the model dtype for consumers that upcast as they
        read (the Triton sampler), which saves writing and re-reading a float32 copy."""
        logits = torch.matmul(hidden, self.lm_head_weight().t())
        return logits.float() if upcast else logits

    def lm_head_weight(self) -> torch.Tensor:
        """[vocab, hidden]: what compute_logits multiplies by (the greedy sampling graph
        takes its argmax without writing the logits)."""
        return self.embeddings.weight if self.tie_word_embeddings else self.lm_head.weight

    # ---- weights -----------------------------------------------------------------------
    # HF name fragment -> (our name, which of q/k/v).
    _qkv = {".q_proj.": 0, ".k_proj.": 1, ".v_proj.": 2}
    _renames = {
        ".mixer.conv1d.weight": ".mixer.conv_weight",
        ".mixer.conv1d.bias": ".mixer.conv_bias",
        ".mixer.gate.weight": ".mixer.gate_weight",
        ".mixer.gate.e_score_correction_bias": ".mixer.e_score_correction_bias",
    }

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy checkpoint tensors into our parameters; returns the names of params loaded.

        Accepts per-expert tensors (experts.{e}.up_proj.weight, the released checkpoints)
        and stacked ones (experts.up_proj, transformers' in-memory layout). Multi-token
        prediction weights (mtp.*) are not used.
        """
        params = dict(self.named_parameters())
        modules = dict(self.named_modules())
        loaded: set[str] = set()
        expert_banks: dict[str, FusedMoE] = {}
        for hf_name, tensor in weights:
            name = hf_name.removeprefix("backbone.").removeprefix("model.")
            if name.startswith("mtp.") or "rotary_emb" in name:
                continue
            if name == "lm_head.weight" and self.tie_word_embeddings:
                continue
            expert = parse_expert_weight_name(name)
            if expert is not None:
                prefix, index, proj = expert
                bank = modules.get(prefix)
                if not isinstance(bank, FusedMoE):
                    raise KeyError(f"checkpoint tensor {hf_name!r} has no expert bank here")
                bank.load_expert_weight(index, proj, tensor)
                expert_banks[prefix] = bank
                continue
            target, view = self._place(name, params)
            if name.endswith(".mixer.conv1d.weight"):
                tensor = tensor.squeeze(1)  # [conv_dim, 1, width] -> [conv_dim, width]
            if tuple(tensor.shape) != tuple(view.shape):
                raise ValueError(
                    f"checkpoint tensor {hf_name!r} has shape {tuple(tensor.shape)}, "
                    f"expected {tuple(view.shape)}"
                )
            with torch.no_grad():
                view.copy_(tensor.to(view.dtype))
            loaded.add(target)
        for prefix, bank in expert_banks.items():
            loaded |= {f"{prefix}.{p}" for p in bank.fully_loaded()}
        return loaded

    def _place(self, name: str, params: dict) -> tuple[str, torch.Tensor]:
        """(our parameter's name, the view of it that the tensor fills)."""

        def param(n: str) -> torch.Tensor:
            if n not in params:
                raise KeyError(f"checkpoint tensor {name!r} has no place in NemotronHForCausalLM")
            return params[n]

        for frag, shard in self._qkv.items():
            if frag in name:
                target = name.replace(frag, ".qkv_proj.")
                p = param(target)
                mixer = self.layers[int(name.split(".")[1])].mixer
                sizes = [mixer.q_size, mixer.kv_size, mixer.kv_size]
                return target, p.narrow(0, sum(sizes[:shard]), sizes[shard])
        for src, dst in self._renames.items():
            if name.endswith(src):
                name = name[: -len(src)] + dst
                break
        return name, param(name)
