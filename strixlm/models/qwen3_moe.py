"""Qwen3-MoE: Qwen3 attention with sparse MoE feed-forward layers.

A layer is sparse unless listed in mlp_only_layers or off the decoder_sparse_step cadence
(sparse when (index + 1) % decoder_sparse_step == 0); the others keep a dense gated MLP of
intermediate_size. Routing is softmax top-k (renormalized when norm_topk_prob); the experts
run through FusedMoE. Checkpoints store one tensor per expert (mlp.experts.<e>.<proj>);
the loader stacks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn

from strixlm.layers.attention.backend import AttentionBackend
from strixlm.layers.moe import FusedMoE, parse_expert_weight_name, select_experts_softmax
from strixlm.layers.norm import RMSNorm
from strixlm.layers.rotary import RotaryEmbedding
from strixlm.models.llama import MLP, LlamaForCausalLM, rope_settings
from strixlm.models.qwen3 import Qwen3Attention


def is_sparse_layer(cfg, layer_idx: int) -> bool:
    """HF's rule for which decoder layers carry experts."""
    step = getattr(cfg, "decoder_sparse_step", 1) or 1
    return (
        layer_idx not in (getattr(cfg, "mlp_only_layers", None) or [])
        and cfg.num_experts > 0
        and (layer_idx + 1) % step == 0
    )


class Qwen3MoeSparseBlock(nn.Module):
    def __init__(self, cfg) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = bool(cfg.norm_topk_prob)
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = FusedMoE(
            cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, "silu_gated"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = select_experts_softmax(self.gate(x), self.top_k, self.norm_topk_prob)
        # HF hands the experts weights rounded to the model dtype; do the same.
        weights = weights.to(x.dtype).float()
        return self.experts(x, weights, ids)


class Qwen3MoeDecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx: int, backend_cls, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(
            cfg, backend_cls, bool(getattr(cfg, "attention_bias", False)), rotary
        )
        if is_sparse_layer(cfg, layer_idx):
            self.mlp = Qwen3MoeSparseBlock(cfg)
        else:
            self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, positions, x, residual, md):
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x, md)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Embedding, forward, logits and dense weight loading come from the Llama family."""

    attention_cls = Qwen3Attention

    def __init__(self, cfg, backend_cls: type[AttentionBackend]) -> None:
        nn.Module.__init__(self)  # the layers differ from Llama's; built here, not there
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        theta, scaling = rope_settings(cfg)
        rotary = RotaryEmbedding(head_dim, cfg.max_position_embeddings, theta, scaling)
        self.layers = nn.ModuleList(
            Qwen3MoeDecoderLayer(cfg, i, backend_cls, rotary) for i in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.tie_word_embeddings = bool(getattr(cfg, "tie_word_embeddings", False))
        if not self.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Expert tensors go to their FusedMoE; everything else to the Llama loader. An
        expert bank counts as loaded only once every expert's every projection arrived."""
        banks: dict[str, FusedMoE] = {
            name: m for name, m in self.named_modules() if isinstance(m, FusedMoE)
        }

        def dense(stream: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
            for hf_name, tensor in stream:
                parsed = parse_expert_weight_name(hf_name.removeprefix("model."))
                if parsed is None:
                    yield hf_name, tensor
                    continue
                prefix, expert, proj = parsed
                if prefix not in banks:
                    raise KeyError(
                        f"checkpoint tensor {hf_name!r} has no place in {type(self).__name__}"
                    )
                banks[prefix].load_expert_weight(expert, proj, tensor)

        loaded = super().load_weights(dense(weights))
        for prefix, bank in banks.items():
            loaded.update(f"{prefix}.{param}" for param in bank.fully_loaded())
        return loaded
