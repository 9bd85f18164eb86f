"""Model shapes small enough to work a memory floor or a roofline out by hand, and small
HF configs whose meta-device models the parameter and FLOP counts are checked against."""

from types import SimpleNamespace

from transformers import Qwen3Config, Qwen3MoeConfig

# A 1-layer model for hand computation: attention 8*8 (q) + 2*8*4 (k, v) + 8*8 (o) = 192,
# MLP 3*8*16 = 384, two norms 16: 592 per layer, + final norm 8 + LM head 10*8 = 680
# parameters read per step (the embedding gather counts as nothing); at 2 bytes, 1360 B.
# KV per token: 2 (K, V) * 1 layer * 1 head * 4 dims * 2 bytes = 16 B.
TINY = SimpleNamespace(
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    vocab_size=10,
    model_type="llama",
)


def small_qwen3(tied: bool) -> Qwen3Config:
    return Qwen3Config(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=300,
        tie_word_embeddings=tied,
    )


# Shared with Mixtral's test config in test_memory_floor.py.
MOE_COMMON = dict(
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=100,
    num_experts_per_tok=2,
)


def small_qwen3_moe() -> Qwen3MoeConfig:
    """Layers 0 and 2 sparse (8 experts, top 2), layer 1 dense."""
    return Qwen3MoeConfig(
        **MOE_COMMON,
        head_dim=8,
        intermediate_size=48,
        moe_intermediate_size=16,
        num_experts=8,
        mlp_only_layers=[1],
    )
