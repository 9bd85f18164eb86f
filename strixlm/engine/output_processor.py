"""Engine core outputs (token ids) -> RequestOutputs (text), with stop strings and n > 1.

Runs where the user is: in the API process for the server, in-process for the offline API.
A stop string found here finishes the request; the caller aborts it in the engine core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from strixlm.engine.detokenizer import IncrementalDetokenizer
from strixlm.engine.request import (
    CompletionOutput,
    EngineCoreOutput,
    RequestOutput,
    SamplingParams,
    TokenLogprob,
)

OutputKind = Literal["cumulative", "delta", "final"]


@dataclass
class _Sample:
    index: int
    detok: IncrementalDetokenizer | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    cumulative_logprob: float | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sent_tokens: int = 0
    sent_logprobs: int = 0


@dataclass
class _Parent:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    kind: OutputKind
    samples: list[_Sample]
    num_cached_tokens: int = 0
    finished: bool = False  # every sample has its finish reason
    prompt_logprobs: list[TokenLogprob | None] | None = None
    sent_prompt_logprobs: bool = False


class OutputProcessor:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.parents: dict[str, _Parent] = {}
        self.child_to_parent: dict[str, tuple[str, int]] = {}

    def parent_id(self, child_id: str) -> str | None:
        """The request a live core request (one sample of it) belongs to; None once done."""
        ref = self.child_to_parent.get(child_id)
        return None if ref is None else ref[0]

    def add_request(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        child_ids: list[str],
        kind: OutputKind = "cumulative",
    ) -> None:
        samples = []
        for i, cid in enumerate(child_ids):
            detok = None
            if self.tokenizer is not None:
                detok = IncrementalDetokenizer(
                    self.tokenizer,
                    prompt_token_ids,
                    skip_special_tokens=params.skip_special_tokens,
                    stop=params.stop,
                    include_stop_str_in_output=params.include_stop_str_in_output,
                )
            samples.append(
                _Sample(
                    i,
                    detok,
                    logprobs=[] if params.logprobs is not None else None,
                    cumulative_logprob=0.0 if params.logprobs is not None else None,
                )
            )
            self.child_to_parent[cid] = (request_id, i)
        self.parents[request_id] = _Parent(
            request_id, prompt, prompt_token_ids, params, kind, samples
        )

    def has(self, request_id: str) -> bool:
        return request_id in self.parents

    def child_ids(self, request_id: str) -> list[str]:
        return [c for c, (p, _) in self.child_to_parent.items() if p == request_id]

    def abort(self, request_id: str) -> None:
        parent = self.parents.pop(request_id, None)
        if parent is None:
            return
        for cid in self.child_ids(request_id):
            del self.child_to_parent[cid]

    def process(self, outputs: list[EngineCoreOutput]) -> tuple[list[RequestOutput], list[str]]:
        """Returns the updated RequestOutputs and the child ids the engine core must abort."""
        touched: dict[str, set[int]] = {}
        to_abort: list[str] = []
        for out in outputs:
            ref = self.child_to_parent.get(out.request_id)
            if ref is None:
                continue  # already finished by a stop string, or aborted
            parent = self.parents[ref[0]]
            parent.num_cached_tokens = max(parent.num_cached_tokens, out.num_cached_tokens)
            if out.prompt_logprobs is not None and parent.prompt_logprobs is None:
                parent.prompt_logprobs = out.prompt_logprobs  # n > 1: the first sample's
            s = parent.samples[ref[1]]
            if self._apply(s, out):
                to_abort.append(out.request_id)
            touched.setdefault(parent.request_id, set()).add(ref[1])
            if s.finish_reason is not None:
                del self.child_to_parent[out.request_id]
                parent.finished = all(x.finish_reason is not None for x in parent.samples)
        results = []
        for pid, idxs in touched.items():
            parent = self.parents[pid]
            ro = self._make_output(parent, idxs)
            if ro is not None:
                results.append(ro)
            if parent.finished:
                del self.parents[pid]
        return results, to_abort

    def _apply(self, s: _Sample, out: EngineCoreOutput) -> bool:
        """Apply one core output to a sample; True if a stop string ended it here."""
        s.token_ids.extend(out.new_token_ids)
        if s.logprobs is not None and out.new_logprobs:
            s.logprobs.extend(out.new_logprobs)
            s.cumulative_logprob += sum(lp.logprob for lp in out.new_logprobs)
        stopped_here = False
        if s.detok is not None:
            ids = out.new_token_ids
            if isinstance(out.stop_reason, int) and not s.detok.include_stop_str_in_output:
                ids = ids[:-1]  # a stop token id ends the text without appearing in it
            stop = s.detok.update(ids, finished=out.finished)
            if stop is not None:
                s.finish_reason, s.stop_reason = "stop", stop
                stopped_here = not out.finished
        if s.finish_reason is None and out.finished:
            s.finish_reason, s.stop_reason = out.finish_reason, out.stop_reason
        return stopped_here

    def _make_output(self, p: _Parent, idxs: set[int]) -> RequestOutput | None:
        if p.kind == "final" and not p.finished:
            return None
        comps = []
        for s in p.samples:
            if p.kind == "delta":
                if s.index not in idxs:
                    continue
                text = s.detok.get_delta(streaming=s.finish_reason is None) if s.detok else ""
                toks = s.token_ids[s.sent_tokens :]
                lps = s.logprobs[s.sent_logprobs :] if s.logprobs is not None else None
                s.sent_tokens = len(s.token_ids)
                s.sent_logprobs = len(s.logprobs) if s.logprobs is not None else 0
            else:
                text = s.detok.output_text if s.detok else ""
                toks, lps = list(s.token_ids), s.logprobs
            comps.append(
                CompletionOutput(
                    s.index, text, toks, s.cumulative_logprob, lps, s.finish_reason, s.stop_reason
                )
            )
        plp = p.prompt_logprobs
        if p.kind == "delta":
            if p.sent_prompt_logprobs:
                plp = None
            elif plp is not None:
                p.sent_prompt_logprobs = True
        return RequestOutput(
            p.request_id,
            p.prompt,
            p.prompt_token_ids,
            comps,
            p.finished,
            p.num_cached_tokens,
            plp,
        )
