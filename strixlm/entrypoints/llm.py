"""Offline API: LLM(model).generate(prompts, SamplingParams) and .chat(messages)."""

from __future__ import annotations

from collections.abc import Sequence

from tqdm import tqdm

from strixlm.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from strixlm.engine.llm_engine import LLMEngine
from strixlm.engine.request import RequestOutput, SamplingParams

Prompt = str | list[int] | dict


class LLM:
    """Runs the engine in this process.

    Keyword arguments mirror the CLI flags (max_model_len, max_num_seqs,
    max_num_batched_tokens, block_size, enable_prefix_caching, dtype, device, seed,
    load_format, gpu_memory_utilization, ...).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        tokenizer: str | None = None,
        dtype: str = "auto",
        device: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        load_format: str = "auto",
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        enable_chunked_prefill: bool = True,
        block_size: int = 16,
        enable_prefix_caching: bool = True,
        gpu_memory_utilization: float = 0.9,
        cpu_kv_cache_bytes: int = 512 << 20,
        num_gpu_blocks_override: int | None = None,
        skip_tokenizer_init: bool = False,
        enforce_eager: bool = False,
        attention_backend: str = "auto",
        async_scheduling: bool = True,
    ) -> None:
        config = EngineConfig(
            model=ModelConfig(
                model=model,
                tokenizer=tokenizer,
                dtype=dtype,
                max_model_len=max_model_len,
                load_format=load_format,
                seed=seed,
                skip_tokenizer_init=skip_tokenizer_init,
            ),
            cache=CacheConfig(
                block_size=block_size,
                gpu_memory_utilization=gpu_memory_utilization,
                cpu_kv_cache_bytes=cpu_kv_cache_bytes,
                num_gpu_blocks_override=num_gpu_blocks_override,
                enable_prefix_caching=enable_prefix_caching,
            ),
            scheduler=SchedulerConfig(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                enable_chunked_prefill=enable_chunked_prefill,
            ),
            device=device,
            enforce_eager=enforce_eager,
            attention_backend=attention_backend,
            async_scheduling=async_scheduling,
        )
        self.engine = LLMEngine(config)

    @classmethod
    def from_config(cls, config: EngineConfig) -> LLM:
        llm = cls.__new__(cls)
        llm.engine = LLMEngine(config)
        return llm

    def get_tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Prompts are strings, token id lists, or {"prompt_token_ids": [...]} dicts."""
        if isinstance(prompts, str | dict) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        params = sampling_params or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("give one SamplingParams, or one per prompt")
        ids = []
        for p, sp in zip(prompts, params, strict=True):
            if isinstance(p, dict):
                p = p.get("prompt_token_ids") or p["prompt"]
            ids.append(self.engine.add_request(p, sp, kind="final"))
        return self._run(ids, use_tqdm)

    def chat(
        self,
        messages: list[dict] | list[list[dict]],
        sampling_params: SamplingParams | None = None,
        use_tqdm: bool = True,
        chat_template_kwargs: dict | None = None,
    ) -> list[RequestOutput]:
        convs = [messages] if messages and isinstance(messages[0], dict) else messages
        tok = self.engine.tokenizer
        prompts = [
            tok.apply_chat_template(
                c, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
            )
            for c in convs
        ]
        token_lists = [tok.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate(token_lists, sampling_params, use_tqdm)

    def _run(self, ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        done: dict[str, RequestOutput] = {}
        bar = tqdm(
            total=len(ids), desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True
        )
        out_tokens = 0
        while self.engine.has_unfinished():
            for ro in self.engine.step():
                if ro.finished:
                    done[ro.request_id] = ro
                    out_tokens += sum(len(c.token_ids) for c in ro.outputs)
                    bar.update(1)
                    rate = bar.format_dict["rate"]
                    if rate:
                        elapsed = bar.format_dict["elapsed"] or 1e-9
                        bar.set_postfix_str(f"output {out_tokens / elapsed:.1f} tok/s")
        bar.close()
        return [done[i] for i in ids]
