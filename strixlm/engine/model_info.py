"""What the engine needs to know about a model before it runs: config, limits, stop ids."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer, PretrainedConfig

from strixlm.config import ModelConfig

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
)


@dataclass
class ModelInfo:
    name: str  # the served model name
    folder: str | None  # HF-style folder holding weights (None for a dummy model from a config)
    hf_config: PretrainedConfig
    max_model_len: int
    eos_token_id: int | None
    # Extra end-of-sequence ids from generation_config.json (e.g. Qwen's <|im_end|>).
    extra_eos_token_ids: list[int] = field(default_factory=list)
    tokenizer: object | None = None

    @property
    def vocab_size(self) -> int:
        return self.hf_config.vocab_size


def _generation_eos_ids(folder: str) -> list[int]:
    path = os.path.join(folder, "generation_config.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        eos = json.load(f).get("eos_token_id")
    if eos is None:
        return []
    return list(eos) if isinstance(eos, list) else [eos]


def load_model_info(cfg: ModelConfig) -> ModelInfo:
    if cfg.model and os.path.isdir(cfg.model):
        folder, default_name = cfg.model, None
    else:
        from strixlm.models.default_model import resolve_model_path

        folder_path, default_name = resolve_model_path(cfg.model)
        folder = str(folder_path)
    hf_config = AutoConfig.from_pretrained(folder)
    limit = getattr(hf_config, "max_position_embeddings", None) or 2048
    max_len = cfg.max_model_len or limit
    if max_len > limit:
        raise ValueError(
            f"--max-model-len {max_len} exceeds the model's max_position_embeddings ({limit})"
        )
    tokenizer = None
    # A bare config.json (dummy weights) has no tokenizer: transformers would still build an
    # empty one from the model type, which decodes every id to "" (and hides all text).
    bare = cfg.tokenizer is None and not any((Path(folder) / f).exists() for f in _TOKENIZER_FILES)
    if not cfg.skip_tokenizer_init and not (bare and cfg.load_format == "dummy"):
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer or folder)
        except (OSError, ValueError):
            if cfg.load_format != "dummy":
                raise
            # A dummy model from a bare config.json runs on token ids alone.
            tokenizer = None
    gen_eos = _generation_eos_ids(folder)
    eos = tokenizer.eos_token_id if tokenizer is not None else None
    if eos is None:
        cfg_eos = getattr(hf_config, "eos_token_id", None)
        eos = cfg_eos[0] if isinstance(cfg_eos, list) else cfg_eos
        eos = eos if eos is not None else (gen_eos[0] if gen_eos else None)
    name = cfg.served_model_name or default_name or cfg.model.rstrip("/").split("/")[-1]
    return ModelInfo(
        name=name,
        folder=folder,
        hf_config=hf_config,
        max_model_len=max_len,
        eos_token_id=eos,
        extra_eos_token_ids=[e for e in gen_eos if e != eos],
        tokenizer=tokenizer,
    )
