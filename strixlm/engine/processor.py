"""Turns a user's prompt and SamplingParams into validated engine Requests."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

from strixlm.engine.model_info import ModelInfo
from strixlm.engine.request import Request, SamplingParams


class InvalidRequestError(ValueError):
    """Bad user input: the server answers 400 with this message."""


def child_request_id(parent_id: str, index: int, n: int) -> str:
    return parent_id if n == 1 else f"{parent_id}#{index}"


def vocab_error(ids: Iterable[int], vocab: int, what: str = "token id") -> str | None:
    """The message for the first id outside [0, vocab), or None when all are inside."""
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    return None if bad is None else f"{what} {bad} is out of range for vocab size {vocab}"


class InputProcessor:
    def __init__(self, info: ModelInfo, seed: int = 0) -> None:
        self.info = info
        self._rng = random.Random(seed)

    def tokenize(self, prompt: str) -> list[int]:
        tok = self.info.tokenizer
        if tok is None:
            raise InvalidRequestError("this model was loaded without a tokenizer: send token ids")
        return tok.encode(prompt, add_special_tokens=True)

    def make_requests(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> list[Request]:
        """One Request per sample (n > 1 fans out; the prefix cache shares the prompt's blocks)."""
        n_prompt = len(prompt_token_ids)
        max_len = self.info.max_model_len
        if n_prompt == 0:
            raise InvalidRequestError("the prompt is empty")
        if n_prompt >= max_len:
            raise InvalidRequestError(
                f"This model's maximum context length is {max_len} tokens. However, your "
                f"prompt has {n_prompt} tokens, which leaves no room for output."
            )
        vocab = self.info.vocab_size
        if msg := vocab_error(prompt_token_ids, vocab):
            raise InvalidRequestError(msg)
        if any(not 0 <= t < vocab for t in params.stop_token_ids):
            raise InvalidRequestError("stop_token_ids contains an id outside the vocabulary")
        if msg := vocab_error(params.logit_bias or (), vocab, "logit_bias token id"):
            raise InvalidRequestError(msg)
        self._check_thinking_budget(params)
        if params.max_tokens is None:
            params = dataclasses.replace(params, max_tokens=max_len - n_prompt)
        if params.max_tokens > max_len - n_prompt:
            raise InvalidRequestError(
                f"This model's maximum context length is {max_len} tokens. However, you "
                f"requested {n_prompt + params.max_tokens} tokens ({n_prompt} in the prompt, "
                f"{params.max_tokens} for the completion). Please reduce the length."
            )
        if self.info.extra_eos_token_ids and not params.ignore_eos:
            extra = [t for t in self.info.extra_eos_token_ids if t not in params.stop_token_ids]
            params = dataclasses.replace(params, stop_token_ids=params.stop_token_ids + extra)
        reqs = []
        for i in range(params.n):
            # A user seed makes the whole set reproducible; each sample gets its own stream.
            seed = params.seed + i if params.seed is not None else self._rng.getrandbits(63)
            reqs.append(
                Request(
                    child_request_id(request_id, i, params.n),
                    list(prompt_token_ids),
                    params,
                    eos_token_id=self.info.eos_token_id,
                    sampling_seed=seed,
                )
            )
        return reqs

    def _check_thinking_budget(self, params: SamplingParams) -> None:
        if params.thinking_token_budget is None:
            return
        markers = params.reasoning_markers
        if markers is None:
            raise InvalidRequestError(
                "thinking_token_budget needs reasoning_markers (the token ids that open and "
                "close reasoning, e.g. ReasoningMarkers.from_parser(tokenizer, 'qwen3'))"
            )
        vocab = self.info.vocab_size
        if any(not 0 <= t < vocab for t in markers.all_token_ids):
            raise InvalidRequestError("reasoning_markers contain an id outside the vocabulary")
