"""Offline API: LLM(model).generate(prompts, SamplingParams) and .chat(messages)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence

from tqdm import tqdm

from strixlm.config import EngineConfig
from strixlm.engine.gc_freeze import frozen_heap
from strixlm.engine.llm_engine import LLMEngine
from strixlm.engine.request import RequestOutput, SamplingParams

Prompt = str | list[int] | dict


class LLM:
    """Runs the engine in this process.

    Keyword arguments are the engine options, named like the CLI flags: tokenizer, dtype,
    device, seed, max_model_len, load_format, max_num_seqs, max_num_batched_tokens,
    enable_chunked_prefill, block_size, enable_prefix_caching, gpu_memory_utilization,
    cpu_kv_cache_bytes, num_gpu_blocks_override, skip_tokenizer_init, enforce_eager,
    attention_backend, async_scheduling (see strixlm/config.py for defaults).
    """

    def __init__(self, model: str | None = None, **engine_options) -> None:
        self.engine = LLMEngine(EngineConfig.from_flat(model=model, **engine_options))

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
        pending = iter(zip(prompts, params, strict=True))
        ids: list[str] = []
        try:
            # Enough requests for the first step's admission, then the rest while the GPU
            # runs that step (the intake of a few hundred prompts is ~10 ms of host work
            # the GPU would otherwise wait through).
            self._submit(pending, ids, self._first_step_share())
            return self._run(ids, len(prompts), pending, use_tqdm)
        except BaseException:
            with contextlib.suppress(Exception):  # the original error is the one to see
                for rid in ids:  # an invalid prompt, or an interrupt: leave nothing behind
                    self.engine.abort_request(rid)
            raise

    def _first_step_share(self) -> tuple[int, int]:
        """(requests, prompt tokens) past which the first step cannot admit more: the
        scheduler admits in order while sequence slots and the token budget last."""
        sc = self.engine.config.scheduler
        return sc.max_num_seqs, sc.max_num_batched_tokens

    def _submit(self, pending, ids: list[str], limit: tuple[int, int] | None = None) -> None:
        """Add requests from `pending` (all, or until past limit); their ids go to ids."""
        max_reqs, max_tokens = limit if limit is not None else (math.inf, math.inf)
        tokens = 0
        for p, sp in pending:
            if isinstance(p, dict):
                p = p.get("prompt_token_ids") or p["prompt"]
            ids.append(self.engine.add_request(p, sp, kind="final"))
            tokens += len(p)  # a text prompt's characters: about its token count or more
            if len(ids) >= max_reqs or tokens > max_tokens:
                return

    def chat(
        self,
        messages: list[dict] | list[list[dict]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
        chat_template_kwargs: dict | None = None,
        reasoning_parser: str | None = None,
    ) -> list[RequestOutput]:
        """Chat-templated generation. With reasoning_parser (deepseek_r1, qwen3,
        nemotron_v3), a `thinking_token_budget` in the sampling params gets the model's
        reasoning markers filled in, read per conversation as the server does."""
        convs = [messages] if messages and isinstance(messages[0], dict) else messages
        tok = self.engine.tokenizer
        kwargs = chat_template_kwargs or {}
        prompts = [
            tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True, **kwargs)
            for c in convs
        ]
        token_lists = [tok.encode(p, add_special_tokens=False) for p in prompts]
        params = sampling_params or SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if reasoning_parser is not None:
            params = self._with_reasoning_markers(params, prompts, reasoning_parser, kwargs)
        return self.generate(token_lists, params, use_tqdm)

    def _with_reasoning_markers(
        self, params: Sequence[SamplingParams], prompts: list[str], parser: str, kwargs: dict
    ) -> list[SamplingParams]:
        from strixlm.engine.thinking_budget import ReasoningMarkers
        from strixlm.parsers.reasoning import get_reasoning_parser

        cls = get_reasoning_parser(parser)  # raises on an unknown name
        base = None
        out = []
        for sp, text in zip(params, prompts, strict=True):
            if sp.thinking_token_budget is not None and sp.reasoning_markers is None:
                if base is None:
                    base = ReasoningMarkers.from_parser(self.engine.tokenizer, cls)
                starts = cls.starts_in_reasoning(text, kwargs)
                sp = dataclasses.replace(sp, reasoning_markers=base.for_prompt(starts))
            out.append(sp)
        return out

    def _run(self, ids: list[str], total: int, pending, use_tqdm: bool) -> list[RequestOutput]:
        """Step until every request is done; the requests still in `pending` are added
        after the first step is launched."""
        done: dict[str, RequestOutput] = {}
        bar = tqdm(total=total, desc="Processed prompts", disable=not use_tqdm, dynamic_ncols=True)
        out_tokens = 0
        with frozen_heap():  # no full collections over the start-up heap mid-run
            while self.engine.has_unfinished():
                outputs = self.engine.step()
                if len(ids) < total:
                    self._submit(pending, ids)
                for ro in outputs:
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
