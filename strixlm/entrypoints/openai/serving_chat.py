"""/v1/chat/completions: chat template -> engine -> chat.completion (or SSE chunks).

With `--reasoning-parser` / `--tool-call-parser` the generated text of each choice goes
through chat_parsing.ChoiceOutput: reasoning is returned as `reasoning_content` and
`reasoning`, tool calls as `tool_calls` (streamed as OpenAI-shaped deltas). The reasoning
parser also tells the engine how reasoning looks in tokens, for `thinking_token_budget`
(strixlm/engine/thinking_budget.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.client_disconnect import unless_disconnected
from strixlm.engine.client import EngineDeadError
from strixlm.engine.request import MAX_TOP_LOGPROBS, SamplingParams, TokenLogprob
from strixlm.engine.thinking_budget import ReasoningMarkers
from strixlm.entrypoints.openai.chat_parsing import (
    ChatParsingOptions,
    ChoiceOutput,
    OutputDelta,
    ToolPlan,
    finish_reason,
    merge_call_deltas,
    plan_tools,
    template_messages,
)
from strixlm.entrypoints.openai.protocol import (
    ChatChoiceLogprobs,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    ChatResponseMessage,
    ChatTokenLogprob,
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    FunctionCall,
    PromptTokensDetails,
    ToolCall,
    TopLogprob,
    UsageInfo,
)
from strixlm.entrypoints.openai.serving import (
    APIError,
    OutputStream,
    ServingBase,
    TextChunks,
    TokenStrings,
    bad_value,
    parse_body,
    server_error,
    sse,
    stream_error_event,
    traced_body,
)
from strixlm.parsers.reasoning import get_reasoning_parser
from strixlm.parsers.tools import get_tool_parser

logger = logging.getLogger(__name__)

FIELDS = ChatCompletionRequest.model_fields


def clamp_logprob(v: float) -> float:
    # JSON has no -inf; vLLM sends -9999.0 for impossible tokens.
    return -9999.0 if math.isnan(v) or v < -9999.0 else v


def usage(n_prompt: int, n_completion: int, cached: int) -> UsageInfo:
    return UsageInfo(
        prompt_tokens=n_prompt,
        completion_tokens=n_completion,
        total_tokens=n_prompt + n_completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def special_tags(tokenizer, tags: list[str]) -> bool:
    """Whether any parser tag is a special token (skip_special_tokens would drop it)."""
    if tokenizer is None or not tags:
        return False
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(added, "special", False):
            special.add(getattr(added, "content", str(added)))
    return any(t in special for t in tags)


def join_deltas(a: OutputDelta, b: OutputDelta) -> OutputDelta:
    return OutputDelta(
        a.reasoning + b.reasoning, a.content + b.content, merge_call_deltas(a.calls + b.calls)
    )


def delta_message(d: OutputDelta) -> DeltaMessage:
    calls = [
        DeltaToolCall(
            index=c.index,
            id=c.id,
            type="function" if c.id is not None else None,
            function=DeltaFunctionCall(name=c.name, arguments=c.arguments),
        )
        for c in d.calls
    ]
    return DeltaMessage(
        content=d.content or None,
        reasoning_content=d.reasoning or None,
        reasoning=d.reasoning or None,
        tool_calls=calls or None,
    )


class ServingChat(ServingBase):
    def __init__(self, client, metrics=None, parsing: ChatParsingOptions | None = None) -> None:
        super().__init__(client, metrics)
        self.tokens = TokenStrings(client.info.tokenizer)
        self.parsing = parsing or ChatParsingOptions()
        self.keep_special_tags = special_tags(client.info.tokenizer, self.parsing.tags)

    def choice_output(
        self, req: ChatCompletionRequest, plan: ToolPlan, prompt_text: str
    ) -> ChoiceOutput | None:
        """A fresh parsing pipeline for one choice, or None when nothing is parsed."""
        reasoning = None
        if self.parsing.reasoning_parser:
            cls = get_reasoning_parser(self.parsing.reasoning_parser)
            reasoning = cls.for_request(prompt_text, req.chat_template_kwargs)
        tools = None
        if plan.parse and self.parsing.tool_call_parser:
            tools = get_tool_parser(self.parsing.tool_call_parser)(plan.toolset)
        if reasoning is None and tools is None:
            return None
        return ChoiceOutput(reasoning, tools, req.include_reasoning)

    async def create(self, raw: Request) -> Response:
        req = await parse_body(raw, ChatCompletionRequest)
        self.check_common(req)
        if req.top_logprobs is not None:
            if not req.logprobs:
                raise APIError("top_logprobs requires logprobs to be true", param="top_logprobs")
            if not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
                raise APIError(
                    f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {req.top_logprobs}",
                    param="top_logprobs",
                )
        fmt = (req.response_format or {}).get("type", "text")
        if fmt != "text":
            raise APIError(f"response_format {fmt!r} is not supported", param="response_format")
        plan = plan_tools(req, self.parsing)
        prompt_ids, prompt_text = self.render(req, plan)
        max_tokens = (
            req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        )
        params = self.sampling_params(
            req, max_tokens, (req.top_logprobs or 0) if req.logprobs else None
        )
        if self.keep_special_tags:
            params.skip_special_tokens = False  # the parsers must see their tags
        params = self.thinking_budget(req, params, prompt_text)
        outputs = [self.choice_output(req, plan, prompt_text) for _ in range(req.n)]
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        logger.debug("%s: %d prompt tokens, %s", rid, len(prompt_ids), params)
        stream = await self.start(prompt_ids, params, rid, prompt_text, FIELDS)
        if req.stream:
            return StreamingResponse(
                traced_body(rid, self.stream(req, rid, stream, len(prompt_ids), outputs)),
                media_type="text/event-stream",
            )
        work = self.full(req, rid, stream, len(prompt_ids), outputs, plan)
        resp = await unless_disconnected(raw, work)
        if resp is None:
            return Response(status_code=499)  # nobody is listening
        return JSONResponse(resp.model_dump())

    @functools.cached_property
    def reasoning_markers(self) -> ReasoningMarkers:
        """The reasoning parser's tags in this model's token ids (computed once)."""
        cls = get_reasoning_parser(self.parsing.reasoning_parser)
        return ReasoningMarkers.from_parser(self.client.info.tokenizer, cls)

    def thinking_budget(
        self, req: ChatCompletionRequest, params: SamplingParams, prompt_text: str
    ) -> SamplingParams:
        """Attach `thinking_token_budget` and the markers the engine needs to enforce it."""
        budget = req.thinking_token_budget
        if budget is None:
            return params
        if not self.parsing.reasoning_parser:
            raise APIError(
                "thinking_token_budget needs to know where reasoning ends: start the server "
                "with --reasoning-parser",
                param="thinking_token_budget",
            )
        cls = get_reasoning_parser(self.parsing.reasoning_parser)
        starts = cls.starts_in_reasoning(prompt_text, req.chat_template_kwargs or {})
        try:
            markers = self.reasoning_markers.for_prompt(starts)
            return dataclasses.replace(
                params, thinking_token_budget=budget, reasoning_markers=markers
            )
        except ValueError as e:
            raise bad_value(e, FIELDS) from None

    def render(self, req: ChatCompletionRequest, plan: ToolPlan) -> tuple[list[int], str]:
        tok = self.client.info.tokenizer
        if tok is None:
            raise APIError("this model was loaded without a tokenizer; chat is unavailable")
        if req.continue_final_message and req.add_generation_prompt:
            raise APIError(
                "continue_final_message and add_generation_prompt cannot both be true",
                param="continue_final_message",
            )
        if req.chat_template is not None:  # vLLM too refuses them unless told to trust them
            raise APIError(
                "chat_template in a request is not supported: the server applies the model's "
                "chat template",
                param="chat_template",
            )
        messages = []
        for i, m in enumerate(req.messages):
            d = m.model_dump(exclude_none=True)
            # An assistant turn that only calls tools has content null; templates read
            # message['content'] regardless, so it is "" for them.
            d["content"] = "" if m.content is None else m.content
            if isinstance(m.content, list):
                texts = []
                for part in m.content:
                    if part.type != "text":
                        raise APIError(
                            f"content part type {part.type!r} is not supported (text only)",
                            param=f"messages.{i}.content",
                        )
                    if part.text is None:
                        raise APIError(
                            "a content part of type 'text' needs a 'text' string",
                            param=f"messages.{i}.content",
                        )
                    texts.append(part.text)
                d["content"] = "\n".join(texts)
            messages.append(d)
        messages = template_messages(messages)
        kwargs = dict(req.chat_template_kwargs or {})
        if plan.template_tools:
            kwargs["tools"] = plan.template_tools
        try:
            text = tok.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
                **kwargs,
            )
        except Exception as e:  # template errors are the user's input (messages, kwargs)
            raise APIError(f"could not apply the chat template: {e}", param="messages") from None
        # The template already holds the special tokens (BOS etc.): do not add them again.
        return tok.encode(text, add_special_tokens=False), text

    def logprobs(self, lps: list[TokenLogprob], k: int) -> ChatChoiceLogprobs:
        content = []
        for lp in lps:
            text, raw = self.tokens.get(lp.token_id)
            top = []
            for tid, v in lp.top[:k]:
                t, b = self.tokens.get(tid)
                top.append(TopLogprob(token=t, logprob=clamp_logprob(v), bytes=b))
            content.append(
                ChatTokenLogprob(
                    token=text, logprob=clamp_logprob(lp.logprob), bytes=raw, top_logprobs=top
                )
            )
        return ChatChoiceLogprobs(content=content)

    async def full(
        self,
        req: ChatCompletionRequest,
        rid: str,
        stream: OutputStream,
        n_prompt: int,
        outputs: list[ChoiceOutput | None],
        plan: ToolPlan,
    ) -> ChatCompletionResponse:
        n = req.n
        texts: list[list[str]] = [[] for _ in range(n)]
        lps: list[list[TokenLogprob]] = [[] for _ in range(n)]
        counts = [0] * n
        finish: list[str | None] = [None] * n
        stop: list[int | str | None] = [None] * n
        cached = 0
        try:
            async for ro in stream:
                cached = ro.num_cached_tokens
                for c in ro.outputs:
                    texts[c.index].append(c.text)
                    counts[c.index] += len(c.token_ids)
                    lps[c.index].extend(c.logprobs or [])
                    if c.finish_reason is not None:
                        finish[c.index], stop[c.index] = c.finish_reason, c.stop_reason
        except EngineDeadError as e:
            raise server_error(str(e)) from None
        finally:
            self.done(rid, sum(f is None for f in finish))
            await stream.close()
        k = req.top_logprobs or 0
        choices = []
        for i in range(n):
            message, reason = self.message(rid, "".join(texts[i]), finish[i], outputs[i], plan)
            choices.append(
                ChatCompletionChoice(
                    index=i,
                    message=message,
                    logprobs=self.logprobs(lps[i], k) if req.logprobs else None,
                    finish_reason=reason,
                    stop_reason=stop[i],
                )
            )
        return ChatCompletionResponse(
            id=rid,
            model=self.client.info.name,
            choices=choices,
            usage=usage(n_prompt, sum(counts), cached),
        )

    def message(
        self,
        rid: str,
        text: str,
        reason: str | None,
        out: ChoiceOutput | None,
        plan: ToolPlan,
    ) -> tuple[ChatResponseMessage, str | None]:
        """One choice's message and finish_reason from its complete text."""
        if out is None:
            return ChatResponseMessage(content=text), reason
        d = join_deltas(out.feed(text), out.finish())
        calls = out.tool_calls
        if plan.choice in ("required", "function") and not calls:
            logger.info("%s: tool_choice %r but the model called no tool", rid, plan.choice)
        message = ChatResponseMessage(
            content=d.content or None,
            reasoning_content=d.reasoning or None,
            reasoning=d.reasoning or None,
            tool_calls=[
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in calls
            ],
        )
        return message, finish_reason(reason, calls)

    async def stream(
        self,
        req: ChatCompletionRequest,
        rid: str,
        stream: OutputStream,
        n_prompt: int,
        outputs: list[ChoiceOutput | None],
    ) -> AsyncIterator[str]:
        created = int(time.time())
        model = self.client.info.name
        exclude = None if req.include_usage else {"usage"}
        k = req.top_logprobs or 0
        counts = [0] * req.n
        finished = [False] * req.n
        cached = 0

        def chunk(i: int, delta: DeltaMessage, lp=None, reason=None, stop=None) -> str:
            choice = ChatCompletionStreamChoice(
                index=i, delta=delta, logprobs=lp, finish_reason=reason, stop_reason=stop
            )
            obj = ChatCompletionChunk(id=rid, created=created, model=model, choices=[choice])
            return sse(obj, exclude)

        # The common chunk (content only, not the last one) from a pre-rendered template.
        plain = TextChunks(lambda i, text: chunk(i, DeltaMessage(content=text)))
        try:
            # OpenAI's first chunk of each choice carries the role and an empty content.
            for i in range(req.n):
                yield chunk(i, DeltaMessage(role="assistant", content=""))
            async for ro in stream:
                cached = ro.num_cached_tokens
                for c in ro.outputs:
                    counts[c.index] += len(c.token_ids)
                    lp = self.logprobs(c.logprobs, k) if req.logprobs and c.logprobs else None
                    out = outputs[c.index]
                    if out is None and lp is None and c.finish_reason is None:
                        if c.text:  # else held back (a stop string prefix)
                            yield plain.render(c.index, c.text)
                        continue
                    if out is None:
                        delta, reason = DeltaMessage(content=c.text or None), c.finish_reason
                        empty = not c.text
                    else:
                        d = out.feed(c.text)
                        if c.finish_reason is not None:
                            d = join_deltas(d, out.finish())
                        delta = delta_message(d)
                        reason = finish_reason(c.finish_reason, out.tool_calls)
                        empty = not d
                    if empty and reason is None and lp is None:
                        continue  # text held back (a stop string or a parser tag prefix)
                    finished[c.index] = reason is not None
                    yield chunk(c.index, delta, lp, reason, c.stop_reason)
            if req.include_usage:
                last = ChatCompletionChunk(
                    id=rid,
                    created=created,
                    model=model,
                    choices=[],
                    usage=usage(n_prompt, sum(counts), cached),
                )
                yield sse(last)
        except Exception as e:
            yield stream_error_event(e)
        finally:
            # Runs on client disconnect too (cancellation): closing aborts the request.
            self.done(rid, finished.count(False))
            await stream.close()
        yield "data: [DONE]\n\n"
