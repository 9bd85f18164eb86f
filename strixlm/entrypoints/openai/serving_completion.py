"""/v1/completions: text or token-id prompts (one or many) -> text_completion (or SSE)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.engine.client import EngineDeadError
from strixlm.engine.request import TokenLogprob
from strixlm.entrypoints.openai.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from strixlm.entrypoints.openai.serving import (
    APIError,
    OutputStream,
    ServingBase,
    TextChunks,
    TokenStrings,
    bad_value,
    merge_streams,
    parse_body,
    server_error,
    sse,
    stream_error_event,
    unless_disconnected,
)
from strixlm.entrypoints.openai.serving_chat import clamp_logprob, usage

logger = logging.getLogger(__name__)

FIELDS = CompletionRequest.model_fields


class _Choice:
    """Accumulated state of one choice (prompt i, sample j -> index i * n + j)."""

    def __init__(self, echo: str) -> None:
        self.echo = echo  # prompt text still to prepend (echo=true)
        self.texts: list[str] = []
        self.lps: list[TokenLogprob] = []
        self.num_tokens = 0
        self.offset = 0  # text_offset of the next token
        self.finish: str | None = None
        self.stop: int | str | None = None


class ServingCompletion(ServingBase):
    def __init__(self, client, metrics=None) -> None:
        super().__init__(client, metrics)
        self.tokens = TokenStrings(client.info.tokenizer)

    async def create(self, raw: Request) -> Response:
        req = await parse_body(raw, CompletionRequest)
        self.check_common(req)
        if req.suffix:
            raise APIError("suffix is not supported", param="suffix")
        if req.best_of is not None and req.best_of != req.n:
            raise APIError("best_of other than n is not supported", param="best_of")
        if req.echo and req.logprobs is not None:
            raise APIError("echo with logprobs is not supported", param="echo")
        prompts = self.prompts(req)
        params = self.sampling_params(req, req.max_tokens, req.logprobs)
        rid = f"cmpl-{uuid.uuid4().hex}"
        sub_ids = [rid if len(prompts) == 1 else f"{rid}-{i}" for i in range(len(prompts))]
        streams: list[OutputStream] = []
        try:
            for sub_id, (ids, text) in zip(sub_ids, prompts, strict=True):
                logger.debug("%s: %d prompt tokens, %s", sub_id, len(ids), params)
                streams.append(await self.start(ids, params, sub_id, text, FIELDS))
        except Exception:
            # One bad prompt fails the whole call: abort the ones already queued.
            for sub_id, s in zip(sub_ids, streams, strict=False):
                self.done(sub_id, 0)
                await s.close()
            raise
        choices = [
            _Choice(self.echo_text(ids, text) if req.echo else "")
            for ids, text in prompts
            for _ in range(req.n)
        ]
        n_prompt = sum(len(ids) for ids, _ in prompts)
        if req.stream:
            body = self.stream(req, rid, sub_ids, streams, choices, n_prompt)
            return StreamingResponse(body, media_type="text/event-stream")
        work = self.full(req, rid, sub_ids, streams, choices, n_prompt)
        resp = await unless_disconnected(raw, work)
        if resp is None:
            return Response(status_code=499)
        return JSONResponse(resp.model_dump())

    def prompts(self, req: CompletionRequest) -> list[tuple[list[int], str | None]]:
        p = req.prompt
        if isinstance(p, str):
            p = [p]
        elif p and isinstance(p[0], int):
            p = [p]
        if not p:
            raise APIError("prompt must not be empty", param="prompt")
        out = []
        for item in p:
            try:
                out.append(
                    (self.client.processor.tokenize(item), item)
                    if isinstance(item, str)
                    else (list(item), None)
                )
            except ValueError as e:
                raise bad_value(e, FIELDS) from None
        return out

    def echo_text(self, ids: list[int], text: str | None) -> str:
        if text is not None:
            return text
        tok = self.client.info.tokenizer
        return tok.decode(ids) if tok is not None else ""

    def logprobs(self, ch: _Choice, lps: list[TokenLogprob], k: int) -> CompletionLogprobs:
        out = CompletionLogprobs()
        for lp in lps:
            text, _ = self.tokens.get(lp.token_id)
            out.tokens.append(text)
            out.token_logprobs.append(clamp_logprob(lp.logprob))
            out.text_offset.append(ch.offset)
            ch.offset += len(text)
            top = {self.tokens.get(t)[0]: clamp_logprob(v) for t, v in lp.top[:k]}
            # OpenAI always includes the sampled token, so there may be k + 1 entries.
            top.setdefault(text, clamp_logprob(lp.logprob))
            out.top_logprobs.append(top)
        return out

    def _apply(self, req: CompletionRequest, i: int, ro, choices: list[_Choice]):
        """Fold one RequestOutput of prompt i into its choices; yields (index, choice, delta)."""
        for c in ro.outputs:
            idx = i * req.n + c.index
            ch = choices[idx]
            ch.num_tokens += len(c.token_ids)
            if c.finish_reason is not None:
                ch.finish, ch.stop = c.finish_reason, c.stop_reason
            yield idx, ch, c

    def _finish(self, ids: list[str], choices: list[_Choice], n: int) -> None:
        for i, rid in enumerate(ids):
            self.done(rid, sum(ch.finish is None for ch in choices[i * n : (i + 1) * n]))

    async def full(
        self,
        req: CompletionRequest,
        rid: str,
        ids: list[str],
        streams: list[OutputStream],
        choices: list[_Choice],
        n_prompt: int,
    ) -> CompletionResponse:
        merged = merge_streams(streams)
        cached = 0
        try:
            async for i, ro in merged:
                cached += ro.num_cached_tokens if ro.finished else 0
                for _, ch, c in self._apply(req, i, ro, choices):
                    ch.texts.append(c.text)
                    ch.lps.extend(c.logprobs or [])
        except EngineDeadError as e:
            raise server_error(str(e)) from None
        finally:
            self._finish(ids, choices, req.n)
            await merged.aclose()
        k = req.logprobs or 0
        out = [
            CompletionChoice(
                index=idx,
                text=ch.echo + "".join(ch.texts),
                logprobs=self.logprobs(ch, ch.lps, k) if req.logprobs is not None else None,
                finish_reason=ch.finish,
                stop_reason=ch.stop,
            )
            for idx, ch in enumerate(choices)
        ]
        n_out = sum(ch.num_tokens for ch in choices)
        return CompletionResponse(
            id=rid, model=self.client.info.name, choices=out, usage=usage(n_prompt, n_out, cached)
        )

    async def stream(
        self,
        req: CompletionRequest,
        rid: str,
        ids: list[str],
        streams: list[OutputStream],
        choices: list[_Choice],
        n_prompt: int,
    ) -> AsyncIterator[str]:
        created = int(time.time())
        model = self.client.info.name
        exclude = None if req.include_usage else {"usage"}
        k = req.logprobs or 0
        merged = merge_streams(streams)
        cached = 0
        has_tokenizer = self.client.info.tokenizer is not None

        def render(idx: int, text: str) -> str:
            choice = CompletionChoice(index=idx, text=text)
            obj = CompletionResponse(id=rid, created=created, model=model, choices=[choice])
            return sse(obj, exclude)

        # The common chunk (text only, not the last one) from a pre-rendered template.
        plain = TextChunks(render)
        try:
            async for i, ro in merged:
                cached += ro.num_cached_tokens if ro.finished else 0
                for idx, ch, c in self._apply(req, i, ro, choices):
                    if req.logprobs is None and c.finish_reason is None:
                        text = ch.echo + c.text if ch.echo else c.text
                        ch.echo = ""
                        if text or not has_tokenizer:
                            yield plain.render(idx, text)
                        continue
                    lp = self.logprobs(ch, c.logprobs, k) if req.logprobs is not None else None
                    text = ch.echo + c.text
                    ch.echo = ""
                    held = not text and c.finish_reason is None and not (lp and lp.tokens)
                    if held and self.client.info.tokenizer is not None:
                        continue  # the detokenizer is holding text back (stop string prefix)
                    # Without a tokenizer every token still gets its (empty-text) chunk.
                    choice = CompletionChoice(
                        index=idx,
                        text=text,
                        logprobs=lp,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                    )
                    obj = CompletionResponse(id=rid, created=created, model=model, choices=[choice])
                    yield sse(obj, exclude)
            if req.include_usage:
                n_out = sum(ch.num_tokens for ch in choices)
                last = CompletionResponse(
                    id=rid,
                    created=created,
                    model=model,
                    choices=[],
                    usage=usage(n_prompt, n_out, cached),
                )
                yield sse(last)
        except Exception as e:
            yield stream_error_event(e)
        finally:
            # Runs on client disconnect too (cancellation): closing aborts the requests.
            self._finish(ids, choices, req.n)
            await merged.aclose()
        yield "data: [DONE]\n\n"
