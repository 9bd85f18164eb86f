"""Fast router embeddings: the model on short prompts and a bounded head, a distilled table after.

The budget: all signals plus the decision must take p95 <= 15 ms at ~500 prompt tokens and
<= 60 ms at ~8,000 tokens on a 2-core CPU. The full model costs ~85 ms at 500 tokens and
~1.2 s at 8,000 (fp32 torch), so it cannot see every token of a long prompt. What we do:

* Tokenize by whitespace chunks with a cache (``ChunkTokenizer``). BERT's pre-tokenizer never
  joins text across whitespace, so the ids of a text are the concatenated ids of its chunks;
  warm chunks cost a dict lookup instead of the Rust tokenizer's ~3 us per token. The ids are
  exact (tested against the tokenizer on the routing set and on long prompts).
* Prompts of at most ``full_tokens`` tokens (default 64; 344 of the routing set's 348) go
  through the real model whole, run by ONNX Runtime with int8 weights (``embed_onnx``; ~7 ms
  for 64 tokens on one core, cosine ~0.99 to the fp32 model).
* Longer prompts: the first ``head_tokens`` (default 16, ~2 ms) go through the model; every id
  after them is looked up in a static table distilled from the same model (``embed_static``),
  and the tail's mean is normalized. The two are combined the way the plain embedder combines
  its 256-token windows (each unit vector weighted by its token count):
  ``normalize(n_head * head + n_tail * tail)``. A long prompt is thus chunked, not truncated:
  every token moves the embedding (tested with a phrase planted at the end of 8,000 tokens).

Trade-off, measured with ``python -m strixlm.router.bench_overhead --quality`` (static table
refitted without the held-out half of the routing set): routing-set prompts agree with the full
model at cosine 0.990 on average and domain predictions agree on 95% of held-out rows; prompts
of ~500 and ~8,000 tokens only reach cosine ~0.52 (a bag of words cannot reproduce 256-token
attention) and their domain label agrees with the full embedding's in ~88% of cases.
Latency on the 2-core dev machine, starter.yaml, all signals and the decision: p95 ~11 ms at
500 tokens, ~32 ms at 8,000.

Rejected (measured here): torch fp32 on the whole prompt (85 ms / 1.2 s); torch dynamic int8
(55 / 850 ms); ONNX int8 on the whole prompt (~27 ms per 256-token window, ~0.9 s at 8,000);
a 32-token head for long prompts (+2 ms at p50, worse p95, no measurable quality gain since the
head weighs 32/500 of a 500-token prompt); the table's isolated-token states without the
alignment map (cosine ~0.24 on long prompts); batching several texts through ONNX Runtime
(activations are quantized per call, so padding shifts results; texts run one at a time).
"""

from __future__ import annotations

import functools
from itertools import chain
from pathlib import Path

import numpy as np

from strixlm.router.embed_onnx import OnnxEncoder
from strixlm.router.embed_static import load_table
from strixlm.router.embedder import DIM, model_dir

FULL_TOKENS = 64  # prompts up to this many tokens are embedded entirely by the model
HEAD_TOKENS = 16  # longer prompts: this many through the model, the rest from the table
CHUNK_CACHE_MAX = 200_000  # distinct whitespace chunks kept (~100 bytes each)


class ChunkTokenizer:
    """Exact WordPiece ids (no special tokens) of a text, with a cache keyed by whitespace chunk."""

    def __init__(self, folder: Path, max_entries: int = CHUNK_CACHE_MAX) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.max_entries = max_entries
        self._cache: dict[str, tuple[int, ...]] = {}

    def _fill(self, chunks: list[str]) -> None:
        cache = self._cache
        missing = [c for c in dict.fromkeys(chunks) if c not in cache]
        if len(cache) + len(missing) > self.max_entries:
            cache.clear()  # crude but O(1) amortized; a cold cache only costs tokenizer time
        for chunk, enc in zip(
            missing, self.tokenizer.encode_batch(missing, add_special_tokens=False), strict=True
        ):
            cache[chunk] = tuple(enc.ids)

    def chunk_ids(self, text: str) -> list[tuple[int, ...]]:
        chunks = text.split()
        cache = self._cache
        try:
            return [cache[c] for c in chunks]
        except KeyError:
            self._fill(chunks)
            return [cache[c] for c in chunks]

    def ids(self, text: str) -> np.ndarray:
        parts = self.chunk_ids(text)
        return np.fromiter(chain.from_iterable(parts), dtype=np.int64)

    def count(self, text: str) -> int:
        return sum(map(len, self.chunk_ids(text)))


class FastEmbedder:
    """``embed(texts) -> [N, 384]`` unit vectors (numpy fp32); see the module docstring."""

    dim = DIM

    def __init__(
        self,
        folder: str | Path | None = None,
        *,
        full_tokens: int = FULL_TOKENS,
        head_tokens: int = HEAD_TOKENS,
        threads: int | None = None,
        reference=None,
    ) -> None:
        if not 1 <= head_tokens <= full_tokens:
            raise ValueError(
                f"need 1 <= head_tokens <= full_tokens (got {head_tokens}, {full_tokens})"
            )
        self.folder = Path(folder) if folder is not None else model_dir()
        self.full_tokens = full_tokens
        self.head_tokens = head_tokens
        self.chunker = ChunkTokenizer(self.folder)
        self.encoder = OnnxEncoder(self.folder, threads=threads)
        # fp32 in memory (47 MB): gathering rows then needs no conversion per request.
        self.table = load_table(self.folder, reference).astype(np.float32)
        vocab = self.chunker.tokenizer.get_vocab()
        self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]

    # -- tokens -------------------------------------------------------------------------------

    def token_ids(self, text: str) -> np.ndarray:
        """Exact WordPiece ids of ``text`` without [CLS]/[SEP], int64."""
        return self.chunker.ids(text)

    def count_tokens(self, text: str) -> int:
        return self.chunker.count(text)

    # -- embeddings ---------------------------------------------------------------------------

    def contextual_tokens(self, n_tokens: int) -> int:
        """How many leading tokens of an ``n_tokens`` prompt go through the model."""
        return n_tokens if n_tokens <= self.full_tokens else self.head_tokens

    def _head_seq(self, ids: np.ndarray) -> list[int]:
        return [self.cls_id, *ids[: self.contextual_tokens(len(ids))].tolist(), self.sep_id]

    def _combine(self, head: np.ndarray, ids: np.ndarray) -> np.ndarray:
        n_head = self.contextual_tokens(len(ids))
        tail_ids = ids[n_head:]
        if len(tail_ids) == 0:
            return head
        uniq, counts = np.unique(tail_ids, return_counts=True)
        # A weighted sum, not `counts @ table`: the BLAS matrix-vector product wakes
        # OpenBLAS worker threads that compete with the server on a small CPU (p95 at 8k
        # tokens dropped from ~61 to ~27 ms with one BLAS thread).
        tail = (self.table[uniq] * counts.astype(np.float32)[:, None]).sum(axis=0)
        tail /= max(float(np.linalg.norm(tail)), 1e-12)
        out = n_head * head + len(tail_ids) * tail
        return (out / max(float(np.linalg.norm(out)), 1e-12)).astype(np.float32)

    def embed_ids(self, ids: np.ndarray) -> np.ndarray:
        """Embedding of an already tokenized text (``token_ids``), [384] fp32 unit vector."""
        head = self.encoder.forward([self._head_seq(ids)])[0]
        return self._combine(head, ids)

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed_ids(self.token_ids(text))

    def embed(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 384], each text run alone: activations are quantized per call, so a
        batch (and its padding) would shift results (cosine ~0.97 for very short texts)."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings; use embed_one() for one string")
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.embed_one(text)
        return out


@functools.lru_cache(maxsize=1)
def get_fast_embedder() -> FastEmbedder:
    """Process-wide fast embedder; the first call may build cached artifacts (see modules)."""
    return FastEmbedder()
