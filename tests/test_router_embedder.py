"""Router embedder: shape/normalization, chunking, semantic sanity, sentence-transformers parity."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from strixlm.router import embedder as emb_mod

if importlib.util.find_spec(emb_mod.PACKAGE) is None:
    pytest.skip(
        f"model package missing; install with: {emb_mod.INSTALL_HINT}", allow_module_level=True
    )

QUERY = "How do I sort a list in Python?"
RELATED = "Python list sorting"
UNRELATED = "Best pasta recipe"


@pytest.fixture(scope="module")
def emb() -> emb_mod.Embedder:
    return emb_mod.get_embedder()


def _long_text(n_words: int = 700) -> str:
    words = ["router", "kernel", "python", "attention", "sorting", "cache", "tensor", "batch"]
    return " ".join(words[i % len(words)] + str(i % 13) for i in range(n_words))


def _plain(emb: emb_mod.Embedder, text: str) -> torch.Tensor:
    """Reference: one truncated sequence, mean pooling, normalize (sentence-transformers way)."""
    enc = emb.tokenizer([text], truncation=True, max_length=emb.max_seq_length, return_tensors="pt")
    with torch.inference_mode():
        out = emb.model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (out * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1)[0]


def test_shape_dtype_normalized(emb):
    texts = [QUERY, RELATED, UNRELATED, "", _long_text()]
    out = emb.embed(texts)
    assert out.shape == (len(texts), 384)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(len(texts)), atol=1e-5, rtol=0)
    assert emb.embed_one(QUERY).shape == (384,)
    assert emb.embed([]).shape == (0, 384)


def test_batched_equals_single(emb):
    texts = [QUERY, _long_text(), UNRELATED]
    batched = emb.embed(texts)
    for i, t in enumerate(texts):
        torch.testing.assert_close(batched[i], emb.embed_one(t), atol=1e-5, rtol=0)


def test_short_prompt_matches_plain_path(emb):
    assert len(emb.windows(QUERY)) == 1
    torch.testing.assert_close(emb.embed_one(QUERY), _plain(emb, QUERY), atol=1e-5, rtol=0)


def test_long_prompt_is_chunked(emb):
    text = _long_text()
    n_ids = len(emb.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
    wins = emb.windows(text)
    assert n_ids > emb.max_seq_length
    assert len(wins) == -(-n_ids // (emb.max_seq_length - 2))
    assert all(len(w) <= emb.max_seq_length for w in wins)
    assert sum(len(w) - 2 for w in wins) == n_ids
    assert all(w[0] == emb.cls_id and w[-1] == emb.sep_id for w in wins)
    # Not the truncated embedding, and equal to the count-weighted mix of window embeddings.
    got = emb.embed_one(text)
    assert torch.dot(got, _plain(emb, text)) < 0.9999
    with torch.inference_mode():
        per = emb._forward(wins)
    weights = torch.tensor([len(w) - 2 for w in wins], dtype=torch.float32)
    expect = torch.nn.functional.normalize((per * weights[:, None]).sum(0), dim=-1)
    torch.testing.assert_close(got, expect, atol=1e-5, rtol=0)


def test_semantic_sanity(emb):
    q, rel, unrel = emb.embed([QUERY, RELATED, UNRELATED])
    sim_rel = float(q @ rel)
    sim_unrel = float(q @ unrel)
    assert sim_rel > sim_unrel + 0.3, (sim_rel, sim_unrel)


def test_matches_sentence_transformers(emb):
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("sentence_transformers not installed (deliberately not a dependency)")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(emb.folder), device="cpu")
    texts = [QUERY, RELATED, UNRELATED, "A slightly longer sentence about GPU kernels and caches."]
    ref = torch.as_tensor(st.encode(texts, convert_to_numpy=True, normalize_embeddings=True))
    got = emb.embed(texts)
    cos = torch.nn.functional.cosine_similarity(got, ref.float(), dim=-1)
    assert bool((cos > 0.9999).all()), cos
