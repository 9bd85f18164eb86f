"""all-MiniLM-L6-v2 on ONNX Runtime with int8 weights: the router's fast contextual encoder.

Why: on a 2-core CPU the eager transformers model needs ~10 ms even for 16 tokens (the matmuls
are the cost, not Python). ONNX Runtime with dynamically quantized MatMuls (int8 weights per
output channel, activations quantized per call; VNNI where the CPU has it) runs 32 tokens in
about 3 ms with 2 threads, and its mean-pooled embeddings agree with the fp32 model to a
cosine of about 0.996 (tests/test_router_fast_embedder.py checks >= 0.98).

The model is exported once with the TorchScript-based ``torch.onnx.export``, quantized with
``onnxruntime.quantization.quantize_dynamic`` and cached under the user cache dir
(``cache_dir()``), keyed by the model files and ``RECIPE``; later starts load the cached file.
Needs the ``onnxruntime`` and ``onnx`` packages (dependencies of strixlm).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from strixlm import file_lock
from strixlm.router.embedder import DIM, EmbedderUnavailable, model_dir

RECIPE = "onnx-int8-v1"
INSTALL_HINT = "pip install onnxruntime onnx"
# One intra-op thread: on a 2-core machine a second pool thread costs more in wake-ups and in
# contention with the request's other work than it saves on a 32-token head (measured).
DEFAULT_THREADS = 1


def cache_dir() -> Path:
    """Where derived router artifacts live: $STRIXLM_CACHE_DIR, else the XDG cache dir."""
    root = os.environ.get("STRIXLM_CACHE_DIR")
    if root:
        return Path(root) / "router"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "strixlm" / "router"


def model_key(folder: Path, recipe: str) -> str:
    """Short hash naming a derived artifact: the model's config and weights file, and a recipe."""
    h = hashlib.sha256(recipe.encode())
    h.update((folder / "config.json").read_bytes())
    st = (folder / "model.safetensors").stat()
    h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def atomic_path(final: Path) -> Path:
    """A temp path beside ``final`` to write to, then ``os.replace`` (readers never see halves)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=final.name + ".", suffix=".tmp", dir=final.parent)
    os.close(fd)
    return Path(tmp)


def _import_ort():
    try:
        import onnxruntime
    except ImportError:
        raise EmbedderUnavailable(
            f"the router's fast encoder needs ONNX Runtime; install it with: {INSTALL_HINT}"
        ) from None
    return onnxruntime


def export_int8(folder: Path, out: Path) -> None:
    """Exports the model to ONNX (last_hidden_state output) and writes an int8 copy to ``out``."""
    import torch
    from transformers import AutoModel

    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise EmbedderUnavailable(
            f"quantizing the router encoder needs onnxruntime and onnx: {INSTALL_HINT}"
        ) from None

    model = AutoModel.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)

    class Encoder(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            types = torch.zeros_like(input_ids)
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=types
            )
            return out.last_hidden_state

    # A padded example: tracing with an all-ones mask could bake in a mask-free attention path.
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).long()
    fp32 = atomic_path(out.with_suffix(".fp32.onnx"))
    dyn = {0: "batch", 1: "tokens"}
    try:
        with torch.inference_mode():
            torch.onnx.export(
                Encoder(model.eval()),
                (ids, mask),
                str(fp32),
                input_names=["input_ids", "attention_mask"],
                output_names=["hidden"],
                dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "hidden": dyn},
                opset_version=17,
                dynamo=False,
            )
        tmp = atomic_path(out)
        logging.disable(logging.WARNING)  # quantize_dynamic nags about optional pre-processing
        try:
            quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        os.replace(tmp, out)
    finally:
        fp32.unlink(missing_ok=True)


class OnnxEncoder:
    """Mean-pooled, L2-normalized MiniLM embeddings of token-id sequences, on ONNX Runtime."""

    def __init__(self, folder: str | Path | None = None, *, threads: int | None = None) -> None:
        ort = _import_ort()
        self.folder = Path(folder) if folder is not None else model_dir()
        self.path = cache_dir() / f"minilm-{model_key(self.folder, RECIPE)}.int8.onnx"
        if not self.path.is_file():
            with file_lock.exclusive(self.path):
                if not self.path.is_file():  # not built meanwhile by another process
                    export_int8(self.folder, self.path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or DEFAULT_THREADS
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle pool threads would otherwise spin after each run, stealing a core from the
        # signals that run next on a 2-core machine.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(self.path), opts, providers=["CPUExecutionProvider"]
        )

    def forward(self, seqs: list[list[int]]) -> np.ndarray:
        """[len(seqs), 384] unit vectors; each sequence already has [CLS]/[SEP]."""
        longest = max(len(s) for s in seqs)
        ids = np.zeros((len(seqs), longest), dtype=np.int64)
        mask = np.zeros((len(seqs), longest), dtype=np.int64)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = s
            mask[i, : len(s)] = 1
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32).reshape(len(seqs), DIM)
