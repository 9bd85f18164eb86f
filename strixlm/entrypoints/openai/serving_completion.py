"""/v1/completions: text or token-id prompts (one or many) -> text_completion (or SSE)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from strixlm.client_disconnect import unless_disconnected
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
    traced_body,
)
from strixlm.entrypoints.openai.serving_chat import clamp_logprob, usage

logger = logging.getLogger(__name__)

FIELDS = CompletionRequest.model_fields


class _Choice:
    """Accumulated state of one choice (prompt i, sample j -> index i * n + j)."""

    def __init__(self, echo: str, prompt_ids: list[int]) -> None:
        self.echo = echo  # prompt text still to prepend (echo=true)
        self.prompt_ids = prompt_ids
        self.prompt_lps: list[TokenLogprob | None] | None = None  # once they arrive
        self.prompt_lps_sent = False
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
        # echo with logprobs lists the prompt tokens' logprobs first (legacy format).
        plp = [x for x in (req.prompt_logprobs,) if x is not None]
        if req.echo and req.logprobs is not None:
            plp.append(req.logprobs)
        prompts = self.prompts(req)
        params = self.sampling_params(req, req.max_tokens, req.logprobs, max(plp) if plp else None)
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
            _Choice(self.echo_text(ids, text) if req.echo else "", ids)
            for ids, text in prompts
            for _ in range(req.n)
        ]
        n_prompt = sum(len(ids) for ids, _ in prompts)
        if req.stream:
            body = traced_body(rid, self.stream(req, rid, sub_ids, streams, choices, n_prompt))
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

    def prompt_logprobs_legacy(self, ch: _Choice, k: int) -> CompletionLogprobs:
        """The echoed prompt's tokens in the legacy format (null for the first token)."""
        out = CompletionLogprobs()
        for tid, lp in zip(ch.prompt_ids, ch.prompt_lps or [], strict=False):
            text, _ = self.tokens.get(tid)
            out.tokens.append(text)
            out.text_offset.append(ch.offset)
            ch.offset += len(text)
            if lp is None:
                out.token_logprobs.append(None)
                out.top_logprobs.append(None)
                continue
            out.token_logprobs.append(clamp_logprob(lp.logprob))
            top = {self.tokens.get(t)[0]: clamp_logprob(v) for t, v in lp.top[:k]}
            top.setdefault(text, clamp_logprob(lp.logprob))
            out.top_logprobs.append(top)
        return out

    def prompt_logprobs_vllm(self, ch: _Choice, k: int) -> list[dict | None]:
        """vLLM's prompt_logprobs: per prompt token None or {token_id: {logprob, rank,
        decoded_token}} holding the prompt token and the top-k."""
        out: list[dict | None] = []
        for lp in ch.prompt_lps or []:
            if lp is None:
                out.append(None)
                continue
            d = {
                str(lp.token_id): self._vllm_entry(lp.token_id, lp.logprob, lp.rank),
            }
            for r, (t, v) in enumerate(lp.top[:k], start=1):
                d.setdefault(str(t), self._vllm_entry(t, v, r))
            out.append(d)
        return out

    def _vllm_entry(self, token_id: int, logprob: float, rank: int) -> dict:
        return {
            "logprob": clamp_logprob(logprob),
            "rank": rank,
            "decoded_token": self.tokens.get(token_id)[0],
        }

    def _echo_parts(self, req: CompletionRequest, ch: _Choice):
        """(legacy logprobs of the echoed prompt, vLLM prompt_logprobs) for a choice whose
        prompt logprobs arrived and were not sent yet; (None, None) otherwise."""
        if ch.prompt_lps is None or ch.prompt_lps_sent:
            return None, None
        ch.prompt_lps_sent = True
        legacy = vllm = None
        if req.echo and req.logprobs is not None:
            legacy = self.prompt_logprobs_legacy(ch, req.logprobs)
        if req.prompt_logprobs is not None:
            vllm = self.prompt_logprobs_vllm(ch, req.prompt_logprobs)
        return legacy, vllm

    def _apply(self, req: CompletionRequest, i: int, ro, choices: list[_Choice]):
        """Fold one RequestOutput of prompt i into its choices; yields (index, choice, delta)."""
        for j in range(req.n):
            ch = choices[i * req.n + j]
            if ro.prompt_logprobs is not None and ch.prompt_lps is None:
                ch.prompt_lps = ro.prompt_logprobs
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
        out = []
        for idx, ch in enumerate(choices):
            echo_lp, plp = self._echo_parts(req, ch)
            lp = self.logprobs(ch, ch.lps, k) if req.logprobs is not None else None
            out.append(
                CompletionChoice(
                    index=idx,
                    text=ch.echo + "".join(ch.texts),
                    logprobs=_join(echo_lp, lp),
                    finish_reason=ch.finish,
                    stop_reason=ch.stop,
                    prompt_logprobs=plp,
                )
            )
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
                    if (
                        req.logprobs is None
                        and req.prompt_logprobs is None
                        and c.finish_reason is None
                    ):
                        text = ch.echo + c.text if ch.echo else c.text
                        ch.echo = ""
                        if text or not has_tokenizer:
                            yield plain.render(idx, text)
                        continue
                    echo_lp, plp = self._echo_parts(req, ch)
                    lp = self.logprobs(ch, c.logprobs, k) if req.logprobs is not None else None
                    lp = _join(echo_lp, lp)
                    text = ch.echo + c.text
                    ch.echo = ""
                    held = not text and c.finish_reason is None and not (lp and lp.tokens)
                    held = held and plp is None
                    if held and self.client.info.tokenizer is not None:
                        continue  # the detokenizer is holding text back (stop string prefix)
                    # Without a tokenizer every token still gets its (empty-text) chunk.
                    choice = CompletionChoice(
                        index=idx,
                        text=text,
                        logprobs=lp,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                        prompt_logprobs=plp,
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


def _join(a: CompletionLogprobs | None, b: CompletionLogprobs | None) -> CompletionLogprobs | None:
    """The echoed prompt's logprobs, then the generated tokens'."""
    if a is None or b is None:
        return b if a is None else a
    return CompletionLogprobs(
        text_offset=a.text_offset + b.text_offset,
        token_logprobs=a.token_logprobs + b.token_logprobs,
        tokens=a.tokens + b.tokens,
        top_logprobs=a.top_logprobs + b.top_logprobs,
    )
