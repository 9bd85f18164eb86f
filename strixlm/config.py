"""Engine configuration: plain dataclasses, built from CLI flags or the offline API."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """'auto' means bf16 on CUDA and fp32 on CPU (CPU bf16 matmuls are slow and inexact)."""
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"--dtype: unknown dtype {name!r}; choose auto, {', '.join(_DTYPES)}")
    return _DTYPES[name]


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise ValueError(f"--device: unknown device {name!r}; choose auto, cpu or cuda")
    return name


@dataclass
class ModelConfig:
    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    load_format: str = "auto"  # auto | safetensors | gguf | dummy
    seed: int = 0
    served_model_name: str | None = None
    skip_tokenizer_init: bool = False
    # Accepted for vLLM compatibility; strixlm runs its own model implementations.
    trust_remote_code: bool = False


@dataclass
class CacheConfig:
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    # On CPU there is no device memory to measure: the KV cache gets this many bytes.
    cpu_kv_cache_bytes: int = 512 << 20
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = True
    # "auto" stores K/V in the model dtype; "fp8" (e4m3, per-layer scales of 1.0) halves
    # the cache's bytes per token.
    kv_cache_dtype: str = "auto"


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True


@dataclass
class EngineConfig:
    model: ModelConfig
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    device: str = "auto"
    log_stats_interval_s: float = 10.0
    # CUDA graphs for decode steps; --enforce-eager turns them off.
    enforce_eager: bool = False
    # Plan step N+1 on the host while the device runs step N.
    async_scheduling: bool = True
    attention_backend: str = "auto"  # auto (triton on CUDA, torch on CPU) | torch | triton
    # Devices per engine: only 1 until tensor parallelism lands (accepted so vLLM command
    # lines that say 1 work, and others fail clearly).
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        self.device = resolve_device(self.device)
        if self.cache.block_size <= 0 or self.cache.block_size & (self.cache.block_size - 1):
            raise ValueError("--block-size must be a positive power of two")
        if not 0.0 < self.cache.gpu_memory_utilization <= 1.0:
            raise ValueError("--gpu-memory-utilization must be in (0, 1]")
        if self.scheduler.max_num_seqs <= 0:
            raise ValueError("--max-num-seqs must be positive")
        if self.cache.kv_cache_dtype not in ("auto", "fp8", "fp8_e4m3"):
            raise ValueError("--kv-cache-dtype must be auto or fp8 (fp8_e4m3)")
        if self.cache.kv_cache_dtype != "auto" and self.attention_backend == "torch":
            raise ValueError("--kv-cache-dtype fp8 needs the triton attention backend")
        if self.attention_backend not in ("auto", "torch", "triton"):
            raise ValueError("--attention-backend must be auto, torch or triton")
        if self.scheduler.max_num_batched_tokens <= 0:
            raise ValueError("--max-num-batched-tokens must be positive")
        if self.tensor_parallel_size != 1:
            raise ValueError(
                f"--tensor-parallel-size {self.tensor_parallel_size}: tensor parallelism is "
                "not implemented yet; strixlm runs a model on one device (use 1)"
            )

    @classmethod
    def from_flat(cls, **kwargs) -> EngineConfig:
        """Build from flat keyword arguments named like the sub-configs' fields (the shape
        of CLI flags and of LLM(...) keywords); an unknown name is an error."""
        parts: dict[str, dict] = {"model": {}, "cache": {}, "scheduler": {}, "engine": {}}
        owners = {
            **{f.name: "model" for f in fields(ModelConfig)},
            **{f.name: "cache" for f in fields(CacheConfig)},
            **{f.name: "scheduler" for f in fields(SchedulerConfig)},
            **{f.name: "engine" for f in fields(cls) if f.name not in parts},
        }
        for key, value in kwargs.items():
            if key not in owners:
                raise TypeError(f"unknown engine option {key!r}")
            parts[owners[key]][key] = value
        return cls(
            model=ModelConfig(**parts["model"]),
            cache=CacheConfig(**parts["cache"]),
            scheduler=SchedulerConfig(**parts["scheduler"]),
            **parts["engine"],
        )

    @property
    def torch_dtype(self) -> torch.dtype:
        return resolve_dtype(self.model.dtype, self.device)

    @property
    def kv_torch_dtype(self) -> torch.dtype:
        if self.cache.kv_cache_dtype == "auto":
            return self.torch_dtype
        return torch.float8_e4m3fn
