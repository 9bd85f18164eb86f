"""Fast router embedder: exact chunk-cached token ids, ONNX int8 vs the fp32 model, the static
tail (long prompts chunked, not truncated), and the cached artifacts.

The first run on a machine builds the ONNX file and the static table under the user cache dir
(~20-40 s on 2 cores); later runs load them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from strixlm.router import embedder as emb_mod

if importlib.util.find_spec(emb_mod.PACKAGE) is None:
    pytest.skip(f"model package missing: {emb_mod.INSTALL_HINT}", allow_module_level=True)
pytest.importorskip("onnxruntime")

from strixlm.router.embed_fast import ChunkTokenizer, FastEmbedder, get_fast_embedder  # noqa: E402
from strixlm.router.embed_static import table_path  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "strixlm" / "router" / "data" / "routing_set.jsonl"
ROWS = [json.loads(x) for x in DATA.read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def ref() -> emb_mod.Embedder:
    return emb_mod.get_embedder()


@pytest.fixture(scope="module")
def fast() -> FastEmbedder:
    return get_fast_embedder()


def long_text(n_words: int, seed: int = 0) -> str:
    rnd = np.random.default_rng(seed)
    prompts = [r["prompt"] for r in ROWS if r["domain"] == "law"]
    words = " ".join(prompts).split()
    return " ".join(words[i] for i in rnd.integers(0, len(words), n_words))


def test_chunk_tokenizer_is_exact(ref, fast):
    texts = [r["prompt"] for r in ROWS] + [
        long_text(3000),
        "tabs\tand\nnewlines  and   runs of spaces",
        "",
        "   ",
        "naïve café — déjà vu 東京 🙂",
    ]
    for t in texts:
        assert fast.token_ids(t).tolist() == ref.token_ids(t), t[:60]
        assert fast.count_tokens(t) == len(ref.token_ids(t))


def test_chunk_cache_is_bounded(fast):
    small = ChunkTokenizer(fast.folder, max_entries=50)
    text = " ".join(f"word{i}" for i in range(120))
    assert small.ids(text).tolist() == fast.token_ids(text).tolist()
    assert len(small._cache) <= 120


def test_onnx_int8_agrees_with_fp32(ref, fast):
    prompts = [r["prompt"] for r in ROWS[::7]]
    seqs = [ref.windows(p)[0] for p in prompts]
    got = np.concatenate([fast.encoder.forward([s]) for s in seqs])
    with torch.inference_mode():
        want = ref._forward(seqs).numpy()
    cos = (got * want).sum(1)
    assert cos.min() >= 0.98, cos.min()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_short_prompts_are_embedded_fully(ref, fast):
    prompts = [r["prompt"] for r in ROWS if len(ref.token_ids(r["prompt"])) <= fast.full_tokens]
    assert len(prompts) > 300
    cos = (fast.embed(prompts) * ref.embed(prompts).numpy()).sum(1)
    # int8 weights and activations: measured mean 0.993, min 0.955 on this set.
    assert cos.mean() >= 0.985 and cos.min() >= 0.93, (cos.mean(), cos.min())


def test_embed_many_matches_one_by_one(fast):
    texts = ["How do I sort a list in Python?", "hi", "", long_text(900)]
    many = fast.embed(texts)
    single = np.stack([fast.embed_one(t) for t in texts])
    assert many.shape == (4, 384) and many.dtype == np.float32
    np.testing.assert_allclose(many, single, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(many, axis=1), 1.0, atol=1e-5)
    assert fast.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        fast.embed("a string")


def test_long_prompt_uses_head_plus_table(fast):
    text = long_text(2000)
    ids = fast.token_ids(text)
    assert len(ids) > fast.full_tokens
    assert fast.contextual_tokens(len(ids)) == fast.head_tokens
    head = fast.encoder.forward([fast._head_seq(ids)])[0]
    tail_ids = ids[fast.head_tokens :]
    tail = fast.table[tail_ids].sum(0)
    tail /= np.linalg.norm(tail)
    expect = fast.head_tokens * head + len(tail_ids) * tail
    expect /= np.linalg.norm(expect)
    np.testing.assert_allclose(fast.embed_one(text), expect, atol=1e-5)


def test_planted_phrase_at_the_end_moves_the_embedding(fast):
    """Not truncated: the last words of an 8k-token prompt change it, towards their topic."""
    base = long_text(6500, seed=1)
    assert fast.count_tokens(base) > 7000
    planted = base + " Write a poem about the ocean, a poem with rhymes about waves and the sea."
    topic = fast.embed_one("write a poem about the ocean")
    before, after = fast.embed_one(base), fast.embed_one(planted)
    # ~20 of ~7,000 tokens: a small move, but truncation (or a head-only model) would give 0.
    assert not np.allclose(before, after, atol=1e-5)
    gain = float(after @ topic) - float(before @ topic)
    assert gain > 1e-3, gain
    # Control: the same number of words from the prompt's own topic does not move it that way.
    control = base + " " + long_text(18, seed=2)
    assert float(fast.embed_one(control) @ topic) - float(before @ topic) < gain


def test_table_is_cached(fast):
    path = table_path(fast.folder)
    assert path.is_file()
    stored = np.load(path)
    assert stored.shape == (fast.chunker.tokenizer.get_vocab_size(), 384)
    np.testing.assert_array_equal(stored.astype(np.float32), fast.table)
    assert fast.encoder.path.is_file()


def test_bad_head_settings_are_refused():
    with pytest.raises(ValueError, match="head_tokens"):
        FastEmbedder(full_tokens=8, head_tokens=16)


def test_concurrent_starts_build_the_table_once(fast, tmp_path, monkeypatch):
    """Two routers starting together: one builds the missing table, the other waits for it
    and loads it instead of building its own."""
    import threading
    import time

    from strixlm.router import embed_static

    monkeypatch.setenv("STRIXLM_CACHE_DIR", str(tmp_path))  # an empty cache
    builds = []

    def slow_build(reference):
        builds.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other start to arrive mid-build
        return np.zeros((4, 384), dtype=np.float16)

    monkeypatch.setattr(embed_static, "build_table", slow_build)
    tables = []
    starts = [
        threading.Thread(target=lambda r=r: tables.append(embed_static.load_table(fast.folder, r)))
        for r in ("one", "two")
    ]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    assert len(builds) == 1 and len(tables) == 2
    assert table_path(fast.folder).is_relative_to(tmp_path)
    assert not list(tmp_path.rglob("*.tmp"))
