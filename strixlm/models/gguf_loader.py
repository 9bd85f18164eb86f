"""GGUF -> Hugging Face conversion: config, dequantized tensors and tokenizer.

A GGUF file (llama.cpp's format) is turned into the HF-style folder the rest of strixlm
loads: config.json, model.safetensors, generation_config.json, tokenizer files.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from safetensors.torch import save_file

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".strixlm_complete"

_ARCHS: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}

# Tensors llama.cpp adds that HF models do not have (rope_freqs: llama3 rope factors).
_SKIPPED = {"rope_freqs"}

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")


def _field(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _f32(x: float) -> float:
    # GGUF stores float32: 1e-5 reads back as 9.99999974e-06; keep the short form.
    return float(str(np.float32(x)))


def _scalar(value: Any) -> Any:
    # Some GGUFs store per-layer arrays (e.g. head_count_kv); HF wants one number.
    return max(value) if isinstance(value, list) else value


def read_gguf_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Build an HF config.json dict from the GGUF metadata."""
    return _config_from_reader(gguf.GGUFReader(str(path)))


def _config_from_reader(reader: gguf.GGUFReader) -> dict[str, Any]:
    arch = _field(reader, "general.architecture")
    if arch not in _ARCHS:
        raise ValueError(f"GGUF architecture {arch!r} is not supported (have: {sorted(_ARCHS)})")
    hf_arch, model_type = _ARCHS[arch]

    def get(key: str, default: Any = None) -> Any:
        return _scalar(_field(reader, f"{arch}.{key}", default))

    hidden = int(get("embedding_length"))
    n_heads = int(get("attention.head_count"))
    n_kv = int(get("attention.head_count_kv", n_heads))
    vocab = get("vocab_size")
    if vocab is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else _embedding_rows(reader)
    names = {t.name for t in reader.tensors}

    cfg: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(get("feed_forward_length")),
        "num_hidden_layers": int(get("block_count")),
        "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv,
        "head_dim": int(get("attention.key_length", hidden // n_heads)),
        "hidden_act": "silu",
        "rms_norm_eps": _f32(get("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": _f32(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "float32",
    }
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    scaling = get("rope.scaling.type")
    if scaling and scaling != "none":
        cfg["rope_parameters"] = cfg["rope_scaling"] = {
            "rope_type": scaling,
            "rope_theta": cfg["rope_theta"],
            "factor": _f32(get("rope.scaling.factor", 1.0)),
        }
        orig = get("rope.scaling.original_context_length")
        if orig:
            cfg["rope_scaling"]["original_max_position_embeddings"] = int(orig)
    if model_type == "llama":
        cfg["attention_bias"] = "blk.0.attn_q.bias" in names
        cfg["mlp_bias"] = False
    elif model_type == "qwen3":
        cfg["attention_bias"] = "blk.0.attn_q.bias" in names
    if model_type in ("qwen2", "qwen3"):
        cfg["use_sliding_window"] = False
    for key in ("bos", "eos", "padding", "unknown"):
        tid = _field(reader, f"tokenizer.ggml.{key}_token_id")
        if tid is not None:
            cfg[{"padding": "pad", "unknown": "unk"}.get(key, key) + "_token_id"] = int(tid)
    return cfg


def _embedding_rows(reader: gguf.GGUFReader) -> int:
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[-1])  # ne order: [hidden, vocab]
    raise ValueError("GGUF has no vocab size, tokenizer tokens, or token_embd tensor")


def hf_tensor_name(gguf_name: str) -> str | None:
    """Map a llama.cpp tensor name to its HF name; None for tensors HF does not use."""
    m = _BLOCK_RE.match(gguf_name)
    if m:
        layer, part, kind = m.groups()
        if part not in _BLOCK_NAMES:
            raise ValueError(f"unknown GGUF tensor {gguf_name!r}")
        return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    base, _, kind = gguf_name.rpartition(".")
    if base in _SKIPPED:
        return None
    if base not in _GLOBAL_NAMES:
        raise ValueError(f"unknown GGUF tensor {gguf_name!r}")
    return f"{_GLOBAL_NAMES[base]}.{kind}"


def _unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp's converter reorders each head's Q/K rows from HF's half-split rotary
    # layout to the interleaved one: reshape(n_head, 2, d/2).swapaxes(1, 2). Undo it.
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def iter_gguf_tensors(
    reader: gguf.GGUFReader, config: dict[str, Any], dtype: torch.dtype = torch.float32
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (hf_name, tensor) one at a time, so conversion never holds two copies."""
    permute = config["model_type"] == "llama"
    for t in reader.tensors:
        name = hf_tensor_name(t.name)
        if name is None:
            continue
        # dequantize returns row-major data whose shape is ne reversed: HF's [out, in].
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
        if permute and (".q_proj." in name or ".k_proj." in name):
            heads = config["num_attention_heads" if ".q_proj." in name else "num_key_value_heads"]
            w = _unpermute_rotary(w, heads)
        # F32 tensors come back as read-only views of the memory-mapped file: copy those.
        w = np.ascontiguousarray(w, dtype=np.float32)
        if not w.flags.writeable:
            w = w.copy()
        yield name, torch.from_numpy(w).to(dtype)


def load_gguf_tensors(
    path: str | os.PathLike[str], dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Dequantize every tensor of a GGUF file into an HF-named state dict."""
    reader = gguf.GGUFReader(str(path))
    return dict(iter_gguf_tensors(reader, _config_from_reader(reader), dtype))


def _write_tokenizer(gguf_path: Path, out: Path, reader: gguf.GGUFReader) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    template = _field(reader, "tokenizer.chat_template")
    if template:
        tok.chat_template = template
    tok.save_pretrained(str(out))
    # transformers 5 puts the template in chat_template.jinja; our own loader and older
    # tools read tokenizer_config.json, so keep it there too.
    cfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg.pop("is_local", None)
    tcfg.pop("local_files_only", None)
    if template:
        tcfg["chat_template"] = template
    for key in ("bos", "eos", "pad", "unk"):
        value = getattr(tok, f"{key}_token", None)
        if value is not None:
            tcfg[f"{key}_token"] = str(value)
    add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    if add_bos is not None:
        tcfg["add_bos_token"] = bool(add_bos)
    cfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n")


def _write_weights(
    reader: gguf.GGUFReader,
    config: dict[str, Any],
    out: Path,
    dtype: torch.dtype,
    max_shard_bytes: int,
) -> None:
    # Size every shard up front so a small model lands in one model.safetensors file.
    itemsize = torch.empty((), dtype=dtype).element_size()
    total = sum(int(np.prod(t.shape)) * itemsize for t in reader.tensors)
    if total <= max_shard_bytes:
        save_file(
            dict(iter_gguf_tensors(reader, config, dtype)),
            str(out / "model.safetensors"),
            metadata={"format": "pt"},
        )
        return
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    size, index = 0, 0

    def flush() -> None:
        nonlocal shard, size, index
        index += 1
        fname = f"model-{index:05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
        shard, size = {}, 0

    for name, tensor in iter_gguf_tensors(reader, config, dtype):
        nbytes = tensor.numel() * itemsize
        if shard and size + nbytes > max_shard_bytes:
            flush()
        shard[name] = tensor
        size += nbytes
    if shard:
        flush()
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")


def convert_gguf_to_hf_folder(
    gguf_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    dtype: torch.dtype = torch.float32,
    max_shard_bytes: int = 4 << 30,
    marker: dict[str, Any] | None = None,
) -> Path:
    """Convert a GGUF file into an HF folder at out_dir, atomically.

    Everything is written into a temp dir beside out_dir and renamed at the end, so a
    crash never leaves a half folder. `marker` is stored in the COMPLETE_MARKER file.
    """
    gguf_path, out = Path(gguf_path), Path(out_dir)
    reader = gguf.GGUFReader(str(gguf_path))
    config = _config_from_reader(reader)
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder should not be
    try:
        _write_weights(reader, config, tmp, dtype, max_shard_bytes)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = {
            k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config
        }
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        _write_tokenizer(gguf_path, tmp, reader)
        info = {"source": gguf_path.name, **(marker or {})}
        (tmp / COMPLETE_MARKER).write_text(json.dumps(info) + "\n")
        _replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _replace_dir(src: Path, dst: Path) -> None:
    # os.replace cannot overwrite a non-empty dir: move the old one aside first.
    old = None
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
    try:
        os.replace(src, dst)
    except OSError:
        if old is not None and not dst.exists():
            os.replace(old, dst)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
