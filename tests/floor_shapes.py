"""Model shapes small enough to work a memory floor or a roofline out by hand."""

from types import SimpleNamespace

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
