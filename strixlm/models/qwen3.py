"""Qwen3: the Llama shape with per-head RMSNorm on queries and keys, no QKV bias."""

from __future__ import annotations

from strixlm.models.llama import Attention, LlamaForCausalLM


class Qwen3Attention(Attention):
    qk_norm = True


class Qwen3ForCausalLM(LlamaForCausalLM):
    attention_cls = Qwen3Attention
