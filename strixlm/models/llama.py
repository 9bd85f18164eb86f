"""Llama-family decoder (Llama, SmolLM2, Qwen2), our own implementation on layers/.

Q, K and V projections are stacked into one matmul, gate and up into another; the loader
maps Hugging Face's separate weights into the stacked ones.

In the decoder layer the attention and MLP outputs (o_proj, down_proj) may stay split-K
partials (Linear.forward_partials): their only consumer there is the next add + RMSNorm,
which sums them in its own kernel. Called on their own, Attention and MLP return tensors.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from strixlm.kernels.dispatch import use_triton
from strixlm.layers.attention.backend import AttentionBackend
from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.layers.linear import Linear
from strixlm.layers.norm import RMSNorm
from strixlm.layers.rotary import RotaryEmbedding
from strixlm.layers.splitk_partials import SplitKPartials


def rope_settings(cfg) -> tuple[float, dict | None]:
    params = getattr(cfg, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    scaling = params if params.get("rope_type", "default") != "default" else None
    legacy = getattr(cfg, "rope_scaling", None)
    if scaling is None and legacy and legacy.get("rope_type", legacy.get("type")) != "default":
        scaling = dict(legacy, rope_type=legacy.get("rope_type", legacy.get("type")))
    return float(theta), scaling


class Attention(nn.Module):
    qk_norm = False

    def __init__(
        self, cfg, backend_cls: type[AttentionBackend], bias: bool, rotary: RotaryEmbedding
    ) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = Linear(self.q_size, cfg.hidden_size, bias=False)
        self.rotary = rotary  # shared by all layers: its cos/sin tables are large
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.attn = backend_cls(
            self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5
        )
        self.kv_cache: torch.Tensor | None = None  # bound by the runner after allocation

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        md: AttentionMetadata,
        partials: bool = False,
    ) -> torch.Tensor | SplitKPartials:
        """partials: the output may be o_proj's split-K partials (for an RMSNorm consumer)."""
        t = x.shape[0]
        o = self._project_and_attend(positions, x, md).reshape(t, self.q_size)
        return self.o_proj.forward_partials(o) if partials else self.o_proj(o)

    def _project_and_attend(
        self, positions: torch.Tensor, x: torch.Tensor, md: AttentionMetadata
    ) -> torch.Tensor:
        """qkv projection, q/k norm + rotary (fused where it can be), attention."""
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        prologue = None  # the q/k norm + rotary + K/V write, left to the attention backend
        if self.qk_norm and self._fuse_qk_norm_rope(q):
            if self._fuse_kv_write(q):
                # One launch that also writes K/V, which the backend runs (inside its decode
                # kernel where that is opted in).
                prologue = self._qk_norm_rope_write(positions, k, v, md)
            else:
                self._qk_norm_rope_inplace(positions, q, k)
        elif self.qk_norm:
            q, k = self.rotary(positions, self.q_norm(q), self.k_norm(k))
        else:
            q, k = self.rotary(positions, q, k)
        if prologue is not None:
            return self.attn.attend(q, self.kv_cache, md, qk_prologue=prologue)
        return self.attn.forward(q, k, v, self.kv_cache, md)

    def _fuse_qk_norm_rope(self, q: torch.Tensor) -> bool:
        """q_norm, k_norm and rotary as one in-place launch: where all three would run Triton
        and the in-place result keeps q's dtype."""
        qn, kn = self.q_norm, self.k_norm
        return use_triton(q) and qn.weight.dtype == kn.weight.dtype == q.dtype and qn.eps == kn.eps

    def _fuse_kv_write(self, q: torch.Tensor) -> bool:
        """The cache write joins the fused launch when the backend's own write has the
        kv_write kernel's semantics and would run that kernel here (its attend then takes
        the launch as qk_prologue)."""
        return (
            self.kv_cache is not None
            and self.attn.kv_write_is_kernel_compatible
            and self.attn.use_triton(q.device)
        )

    def _qk_norm_rope_write(self, positions, k, v, md: AttentionMetadata):
        """The fused launch with the cache write, as arguments for the backend's attend."""
        from strixlm.kernels.qk_norm_rope import QKNormRopeWrite

        qn, kn, rot, attn = self.q_norm, self.k_norm, self.rotary, self.attn
        return QKNormRopeWrite(
            k, v, positions, qn.weight, kn.weight, qn.eps, rot.cos, rot.sin, md.slot_mapping,
            attn.k_scale, attn.v_scale,
        )  # fmt: skip

    def _qk_norm_rope_inplace(self, positions, q, k):
        from strixlm.kernels.qk_norm_rope import qk_norm_rope_inplace

        qn, kn, rot = self.q_norm, self.k_norm, self.rotary
        qk_norm_rope_inplace(positions, q, k, qn.weight, kn.weight, qn.eps, rot.cos, rot.sin)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden, 2 * inter, bias=bias)
        self.down_proj = Linear(inter, hidden, bias=bias)

    def forward(self, x: torch.Tensor, partials: bool = False) -> torch.Tensor | SplitKPartials:
        """partials: the output may be down_proj's split-K partials (for an RMSNorm consumer).
        Where a fused gate_up + SiLU kernel applies, the activation comes out of it; else the
        down projection applies it (in the GEMV's loads, or as its own launch)."""
        h = self.gate_up_proj.forward_gate_up_silu(x)
        if h is None:
            return self.down_proj.forward_silu_mul(self.gate_up_proj(x), partials)
        return self.down_proj.forward_partials(h) if partials else self.down_proj(h)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, attn_cls: type[Attention], backend_cls, qkv_bias: bool, rotary) -> None:
        super().__init__()
        self.self_attn = attn_cls(cfg, backend_cls, qkv_bias, rotary)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, getattr(cfg, "mlp_bias", False))
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, positions, x: torch.Tensor | SplitKPartials, residual: torch.Tensor | None, md
    ) -> tuple[torch.Tensor | SplitKPartials, torch.Tensor]:
        """x: the embedding (residual None) or the previous layer's MLP output, which may be
        partials; so may the returned MLP output. Only RMSNorms with a residual take them."""
        if residual is None:
            residual = x
            x = self.input_layernorm(x)
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x, md, partials=True)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x, partials=True), residual


class LlamaForCausalLM(nn.Module):
    attention_cls: type[Attention] = Attention

    def __init__(self, cfg, backend_cls: type[AttentionBackend]) -> None:
        super().__init__()
        self.config = cfg
        qkv_bias = self._qkv_bias(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        theta, scaling = rope_settings(cfg)
        rotary = RotaryEmbedding(head_dim, cfg.max_position_embeddings, theta, scaling)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, self.attention_cls, backend_cls, qkv_bias, rotary)
            for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.tie_word_embeddings = bool(getattr(cfg, "tie_word_embeddings", False))
        if not self.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @staticmethod
    def _qkv_bias(cfg) -> bool:
        return bool(getattr(cfg, "attention_bias", False))

    def attention_layers(self) -> list[Attention]:
        return [layer.self_attn for layer in self.layers]

    def forward(self, input_ids, positions, md: AttentionMetadata) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, md)
        x, _ = self.norm(x, residual)  # x may be the last layer's partials
        return x

    def compute_logits(self, hidden: torch.Tensor, upcast: bool = True) -> torch.Tensor:
        """Logits [T, vocab]: float32, or the model dtype for consumers that upcast as they
        read (the Triton sampler), which saves writing and re-reading a float32 copy."""
        logits = torch.matmul(hidden, self.lm_head_weight().t())
        return logits.float() if upcast else logits

    def lm_head_weight(self) -> torch.Tensor:
        """[vocab, hidden]: what compute_logits multiplies by (the greedy sampling graph
        takes its argmax without writing the logits)."""
        return self.embed_tokens.weight if self.tie_word_embeddings else self.lm_head.weight

    # ---- weights -----------------------------------------------------------------------
    _stacked = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy HF-named tensors into our parameters; returns the names of params loaded."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for hf_name, tensor in weights:
            name = hf_name.removeprefix("model.")
            if "rotary_emb" in name:
                continue
            if name == "lm_head.weight" and self.tie_word_embeddings:
                continue
            target, shard = name, None
            for src, (dst, idx) in self._stacked.items():
                if f".{src}." in name:
                    target, shard = name.replace(f".{src}.", f".{dst}."), idx
                    break
            if target not in params:
                raise KeyError(
                    f"checkpoint tensor {hf_name!r} has no place in {type(self).__name__}"
                )
            p = params[target]
            with torch.no_grad():
                if shard is None:
                    p.copy_(tensor.to(p.dtype))
                else:
                    self._shard_view(target, p, shard).copy_(tensor.to(p.dtype))
            loaded.add(target)
        return loaded

    def _shard_view(self, target: str, p: torch.Tensor, shard: int) -> torch.Tensor:
        if "qkv_proj" in target:
            attn = self.layers[0].self_attn
            sizes = [attn.q_size, attn.kv_size, attn.kv_size]
        else:
            half = p.shape[0] // 2
            sizes = [half, half]
        start = sum(sizes[:shard])
        return p.narrow(0, start, sizes[shard])


class Qwen2ForCausalLM(LlamaForCausalLM):
    @staticmethod
    def _qkv_bias(cfg) -> bool:
        return True
