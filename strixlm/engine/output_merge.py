"""Merging delta RequestOutputs that queued up for one request.

When the engine produces tokens faster than the API process can write them out, a request's
output queue holds several deltas. Sending them as one chunk costs one serialization and one
socket write instead of many, so a loaded server falls behind less (and the client still gets
every token, in order).
"""

from __future__ import annotations

from dataclasses import replace

from strixlm.engine.request import CompletionOutput, RequestOutput


def _merge_completion(a: CompletionOutput, b: CompletionOutput) -> CompletionOutput:
    logprobs = a.logprobs
    if b.logprobs is not None:
        logprobs = (a.logprobs or []) + b.logprobs
    return replace(
        b,
        text=a.text + b.text,
        token_ids=a.token_ids + b.token_ids,
        logprobs=logprobs,
        cumulative_logprob=b.cumulative_logprob
        if b.cumulative_logprob is not None
        else a.cumulative_logprob,
    )


def merge_delta_outputs(a: RequestOutput, b: RequestOutput) -> RequestOutput:
    """`a` then `b` as one delta: per-sample texts, tokens and logprobs concatenated; the
    finish state and cache figures are `b`'s (the later one)."""
    by_index = {c.index: c for c in a.outputs}
    for c in b.outputs:
        prev = by_index.get(c.index)
        by_index[c.index] = c if prev is None else _merge_completion(prev, c)
    outputs = [by_index[i] for i in sorted(by_index)]
    plp = a.prompt_logprobs if a.prompt_logprobs is not None else b.prompt_logprobs
    return replace(b, outputs=outputs, prompt_logprobs=plp)
