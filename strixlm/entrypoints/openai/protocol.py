"""OpenAI-compatible request and response models (plus vLLM's sampling extras).

Unknown request fields are ignored, as OpenAI and vLLM do; a field of the wrong type fails
validation, which the server answers with a 400 error object.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_serializer


class OpenAIBase(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---- errors ----------------------------------------------------------------------------
class ErrorInfo(OpenAIBase):
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None


class ErrorResponse(OpenAIBase):
    error: ErrorInfo


# ---- requests --------------------------------------------------------------------------
class StreamOptions(OpenAIBase):
    include_usage: bool = False


class SamplingRequest(OpenAIBase):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # vLLM extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    # Extra keys (tool_calls, tool_call_id, ...) pass through to the chat template.
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None


class FunctionName(OpenAIBase):
    name: str


class NamedToolChoice(OpenAIBase):
    type: Literal["function"] = "function"
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    # Kept as sent (the chat template renders them); validated by the chat handler.
    tools: list[dict[str, Any]] | None = None
    # None: "auto" when tools are given, else "none" (OpenAI's default).
    tool_choice: ToolChoice | None = None
    # Accepted for compatibility; calls are returned as the model writes them.
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    # vLLM extras
    chat_template_kwargs: dict[str, Any] | None = None
    chat_template: str | None = None  # refused: the server applies the model's own
    include_reasoning: bool = True
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    # Reasoning tokens before the engine closes the reasoning (needs --reasoning-parser).
    # Strict: 1.5, "8" and true are 400s, not silently coerced.
    thinking_token_budget: StrictInt | None = None


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    # vLLM extra: logprobs of the prompt tokens (and the top-k) in choices[].prompt_logprobs
    prompt_logprobs: StrictInt | None = None


class TokenizeRequest(OpenAIBase):
    """vLLM's /tokenize: a text prompt, or chat messages rendered by the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    # None: true for a prompt, false for messages (the template holds the special tokens).
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(OpenAIBase):
    model: str | None = None
    tokens: list[StrictInt]


# ---- responses -------------------------------------------------------------------------
class PromptTokensDetails(OpenAIBase):
    cached_tokens: int = 0


class UsageInfo(OpenAIBase):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(OpenAIBase):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatChoiceLogprobs(OpenAIBase):
    content: list[ChatTokenLogprob] | None = None


class FunctionCall(OpenAIBase):
    name: str
    arguments: str  # JSON text


class ToolCall(OpenAIBase):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatResponseMessage(OpenAIBase):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    # The reasoning a reasoning parser split off: `reasoning_content` (DeepSeek's and
    # vLLM's name) and `reasoning` (vLLM's newer name) carry the same text.
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ChatCompletionChoice(OpenAIBase):
    index: int
    message: ChatResponseMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


def _unix() -> int:
    return int(time.time())


class ChatCompletionResponse(OpenAIBase):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=_unix)
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    system_fingerprint: str | None = None


class DeltaBase(OpenAIBase):
    @model_serializer(mode="wrap")
    def _drop_none(self, handler):
        # OpenAI's deltas carry only the keys that changed.
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaFunctionCall(DeltaBase):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(DeltaBase):
    """The first delta of a call has id, type and name; later ones argument fragments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(DeltaBase):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatCompletionStreamChoice(OpenAIBase):
    index: int
    delta: DeltaMessage
    logprobs: ChatChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionChunk(OpenAIBase):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=_unix)
    model: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class CompletionLogprobs(OpenAIBase):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(OpenAIBase):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    # vLLM's shape: None for the first prompt token, then {token_id: {logprob, rank,
    # decoded_token}} with the prompt token and the top-k.
    prompt_logprobs: list[dict[str, dict[str, float | int | str]] | None] | None = None


class CompletionResponse(OpenAIBase):
    """Both the full response and each streamed chunk (OpenAI uses one object type)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=_unix)
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None


class ModelCard(OpenAIBase):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=_unix)
    owned_by: str = "strixlm"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None


class TokenizeResponse(OpenAIBase):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeResponse(OpenAIBase):
    prompt: str


class ModelList(OpenAIBase):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)
