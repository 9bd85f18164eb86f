"""Requests as the engine sees them, their sampling parameters, and what comes back."""

from __future__ import annotations

import enum
import math
import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from strixlm.engine.thinking_budget import ReasoningMarkers

MAX_TOP_LOGPROBS = 20
_FLOAT_FIELDS = (
    "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty",
)  # fmt: skip


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or -1) disables
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    max_tokens: int | None = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top logprobs per token beside the sampled one
    # Logprob of every prompt token (after the first) and the top-k at its position.
    prompt_logprobs: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    # Reasoning tokens allowed before the engine closes the reasoning itself (None: no cap).
    # Needs reasoning_markers; the server fills them from --reasoning-parser.
    thinking_token_budget: int | None = None
    reasoning_markers: ReasoningMarkers | None = None
    # Token id -> value added to its logit before penalties and sampling, as OpenAI's
    # logit_bias (values in [-100, 100]; -100 all but bans a token, 100 all but forces it).
    logit_bias: dict[int, float] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self._validate()
        if self.logit_bias:  # plain ints and floats from here on
            self.logit_bias = {int(t): float(b) for t, b in self.logit_bias.items()}
        else:
            self.logit_bias = None

    def _validate(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(msg)

        if self.n < 1:
            bad(f"n must be at least 1, got {self.n}")
        # NaN fails no comparison below and inf would pass some (JSON parsers accept both).
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, numbers.Real) and not math.isfinite(value):
                bad(f"{name} must be a finite number, got {value}")
        if self.temperature < 0:
            bad(f"temperature must be non-negative, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            bad(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            bad(f"top_k must be -1 (disable) or at least 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            bad(f"min_p must be in [0, 1], got {self.min_p}")
        if not -2.0 <= self.presence_penalty <= 2.0:
            bad(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            bad(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if self.repetition_penalty <= 0.0:
            bad(f"repetition_penalty must be positive, got {self.repetition_penalty}")
        if self.max_tokens is not None and self.max_tokens < 1:
            bad(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            bad(f"min_tokens must be non-negative, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            bad(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            bad(f"logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {self.logprobs}")
        plp = self.prompt_logprobs
        if plp is not None and (
            isinstance(plp, bool) or not isinstance(plp, int) or not 0 <= plp <= MAX_TOP_LOGPROBS
        ):
            bad(f"prompt_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {plp!r}")
        if any(not s for s in self.stop):
            bad("stop strings must not be empty")
        budget = self.thinking_token_budget
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 0
        ):
            bad(f"thinking_token_budget must be a non-negative integer, got {budget!r}")
        if self.logit_bias is not None and not isinstance(self.logit_bias, Mapping):
            bad(f"logit_bias must map token ids to biases, got {self.logit_bias!r}")
        for token, bias in (self.logit_bias or {}).items():
            # numbers.*: numpy and torch scalars are fine too.
            if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                bad(f"logit_bias keys must be token ids, got {token!r}")
            if (
                isinstance(bias, bool)
                or not isinstance(bias, numbers.Real)
                or not (math.isfinite(bias) and -100.0 <= bias <= 100.0)
            ):
                bad(f"logit_bias values must be in [-100, 100], got {bias!r} for token {token}")
        if self.reasoning_markers is not None and not isinstance(
            self.reasoning_markers, ReasoningMarkers
        ):
            bad("reasoning_markers must be a ReasoningMarkers")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self in (
            RequestStatus.FINISHED_STOPPED,
            RequestStatus.FINISHED_LENGTH,
            RequestStatus.FINISHED_ABORTED,
        )


@dataclass
class TokenLogprob:
    """Logprob of one generated token and the top alternatives at that position."""

    token_id: int
    logprob: float
    rank: int
    top: list[tuple[int, float]]


@dataclass
class Request:
    """Engine-side state of one sequence (a prompt with n > 1 becomes n of these)."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_id: int | None = None
    arrival_time: float = field(default_factory=time.monotonic)
    # Seed for the stateless sampler; assigned by the engine when the user gave none.
    sampling_seed: int = 0

    def __post_init__(self) -> None:
        self.status = RequestStatus.WAITING
        self.output_token_ids: list[int] = []
        self.all_token_ids: list[int] = list(self.prompt_token_ids)
        self.num_computed_tokens = 0
        # Tokens sampled by launched steps whose values the host has not seen yet (async
        # scheduling plans step N+1 before step N's token arrives; at most one).
        self.num_output_placeholders = 0
        self.num_cached_tokens = -1  # prefix-cache hit length at first scheduling
        self.num_preemptions = 0
        self.stop_reason: int | str | None = None
        self.block_hashes: list[int] = []
        self.first_token_time: float | None = None
        # Prompt logprobs gathered chunk by chunk (entry j is prompt token j + 1); sent
        # with the first sampled token, once (a recompute after preemption adds nothing).
        self.prompt_logprobs: list[TokenLogprob] = []
        self.prompt_logprobs_sent = False

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def max_tokens(self) -> int:
        mt = self.sampling_params.max_tokens
        return mt if mt is not None else 1 << 62

    def append_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    @property
    def finish_reason(self) -> str | None:
        return self.status.value if self.status.finished else None


@dataclass
class EngineCoreOutput:
    """What the engine core emits for one request after a step."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    num_cached_tokens: int = 0
    # Once per request, with its first token: None for the first prompt token, then one
    # TokenLogprob per prompt token (its logprob given the tokens before it, and the top-k).
    prompt_logprobs: list[TokenLogprob | None] | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    num_cached_tokens: int = 0
    # SamplingParams.prompt_logprobs: None for the first prompt token, then a TokenLogprob
    # per prompt token (token_id is the prompt token). In delta outputs, sent once.
    prompt_logprobs: list[TokenLogprob | None] | None = None
