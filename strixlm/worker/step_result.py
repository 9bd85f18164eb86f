"""A launched step's sampled tokens, on their way to the host without blocking the launch.

The sampled ids (and logprobs, when asked for) are copied into pinned host memory with
non-blocking copies right after the sampler, and an event marks their arrival. The engine
waits on that event only when it needs the tokens, one step later under async scheduling.

The copies run on a side stream that waits for the sampler, so the next step's launches
on the compute stream do not queue behind them (a copy between two kernels costs the GPU
a few microseconds of idle on each side). The sources are marked as used by that stream
for the caching allocator; a sampling graph's static output is overwritten by its next
replay, which must first `wait_host_copies`. STRIXLM_SIDE_COPY=0 (read at import) copies
on the compute stream, for A/B runs.
"""

from __future__ import annotations

import os

import torch

from strixlm.engine.request import TokenLogprob
from strixlm.sample.sampler import SamplerOutput

SIDE_COPY = os.environ.get("STRIXLM_SIDE_COPY", "1") != "0"
_side_streams: dict[torch.device, torch.cuda.Stream] = {}
_last_copy: dict[torch.device, torch.cuda.Event] = {}


def wait_host_copies(device: torch.device) -> None:
    """Make the current stream wait until the last step's side-stream copies have read
    their sources (call before overwriting a static buffer they copy from)."""
    ev = _last_copy.get(device)
    if ev is not None:
        torch.cuda.current_stream(device).wait_event(ev)


def _to_host(t: torch.Tensor) -> torch.Tensor:
    if not t.is_cuda:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host


def _copy_to_host(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.cuda.Event]:
    """Host copies of CUDA tensors, and the event that marks their arrival."""
    device = tensors[0].device
    event = torch.cuda.Event()
    if not SIDE_COPY:
        out = [_to_host(t) for t in tensors]
        event.record()
        return out, event
    side = _side_streams.get(device)
    if side is None:
        side = _side_streams[device] = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        out = [_to_host(t) for t in tensors]
        event.record(side)
    for t in tensors:
        t.record_stream(side)
    _last_copy[device] = event
    return out, event


class StepHandle:
    def __init__(
        self,
        request_ids: list[str],
        num_logprobs: list[int | None],
        out: SamplerOutput | None,
        prompt_lp: dict[str, tuple[int, tuple[torch.Tensor, ...]]] | None = None,
    ) -> None:
        # Request ids are captured at launch: a row may belong to another request by the
        # time the result is read.
        self.request_ids = request_ids
        self.num_logprobs = num_logprobs
        self.event: torch.cuda.Event | None = None
        self.tokens = self.lp = None
        # request id -> (first prompt position, host copies of (next-token ids, logprobs,
        # ranks, top ids, top logprobs)) for the prompt positions this step computed.
        self.prompt_lp = {
            rid: (start, tuple(_to_host(x) for x in ts))
            for rid, (start, ts) in (prompt_lp or {}).items()
        }
        if out is None:
            if any(ts[0].is_cuda for _, ts in (prompt_lp or {}).values()):
                self.event = torch.cuda.Event()
                self.event.record()
            return
        lp = out.logprobs
        sources = [out.sampled_token_ids]
        if lp is not None:
            sources += [lp.sampled_logprobs, lp.sampled_ranks, lp.top_ids, lp.top_logprobs]
        if out.sampled_token_ids.is_cuda:
            copies, self.event = _copy_to_host(sources)
        else:
            copies = sources
        self.tokens = copies[0]
        if lp is not None:
            self.lp = tuple(copies[1:])

    def prompt_logprobs(self) -> dict[str, tuple[int, list[TokenLogprob]]]:
        """Per request: the first prompt position computed this step, and for each
        position p from there the logprob of prompt token p + 1 (call after result())."""
        if not self.prompt_lp:
            return {}  # the common step: no second wait on the event
        if self.event is not None:
            self.event.synchronize()
        res = {}
        for rid, (start, ts) in self.prompt_lp.items():
            ids, lps, ranks, top_ids, top_lps = (x.tolist() for x in ts)
            res[rid] = (
                start,
                [
                    TokenLogprob(t, lp, r, list(zip(ti, tl, strict=True)))
                    for t, lp, r, ti, tl in zip(ids, lps, ranks, top_ids, top_lps, strict=True)
                ],
            )
        return res

    def result(self) -> tuple[dict[str, int], dict[str, TokenLogprob]]:
        if self.event is not None:
            self.event.synchronize()
        if self.tokens is None:
            return {}, {}
        tokens = self.tokens.tolist()
        sampled = dict(zip(self.request_ids, tokens, strict=True))
        logprobs: dict[str, TokenLogprob] = {}
        if self.lp is not None:
            s_lp, s_rank, top_ids, top_lp = (x.tolist() for x in self.lp)
            for i, (rid, k) in enumerate(zip(self.request_ids, self.num_logprobs, strict=True)):
                if k is not None:
                    top = list(zip(top_ids[i][:k], top_lp[i][:k], strict=True))
                    logprobs[rid] = TokenLogprob(tokens[i], s_lp[i], s_rank[i], top)
        return sampled, logprobs
