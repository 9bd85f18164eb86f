"""CUDA graphs for steps with prefill (prefill chunks beside decodes), by token count.

A step of at most the largest bucket's tokens is padded to the next bucket T: its requests
to B = min(T, max_num_seqs) rows (the extra rows are zero-length sequences on the dummy
row) and its tokens to T (the extra tokens belong to no sequence: slot -1, so nothing
reaches the cache and attention leaves their rows). The graph runs the model over T tokens
and the logits of every row's last token; the runner keeps the rows that sample.

The graph is captured with upper bounds as the attention kernel's host ints (max_query_len
= T, max_seq_len = max_model_len), so one capture serves every mix of prefill and decode
rows that fits. Pure decode steps keep their own graphs (cuda_graphs.py), whose decode
attention config is faster; steps past the largest bucket run eagerly. Hybrid (Mamba)
models are not captured here: their prefill kernels take per-step host metadata.

With cuda_graphs=False the same padded path runs eagerly on the capture-time metadata, as
DecodeGraphs does, so CPU tests check that every input is refreshed in place.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time

import torch

from strixlm.worker.input_batch import InputBatch, InputBuffers, gather_inputs
from strixlm.worker.model_states.default import DefaultModelState
from strixlm.worker.states import RequestStateTable

logger = logging.getLogger(__name__)

# Up to the default 8192-token budget: run eagerly, such a step is ~300 launches from Python
# and host-bound (15-28 ms on the H200 for Qwen3-0.6B, whose GPU work is ~11 ms at 8192
# tokens). Above 1024 tokens the buckets are spaced so a step pads by at most ~33%.
MIXED_GRAPH_TOKENS = (32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)


def mixed_buckets(max_num_batched_tokens: int, buffer_tokens: int) -> list[int]:
    limit = min(max_num_batched_tokens, buffer_tokens)
    return [t for t in MIXED_GRAPH_TOKENS if t <= limit]


class MixedGraphs:
    def __init__(
        self,
        model: torch.nn.Module,
        table: RequestStateTable,
        buffers: InputBuffers,
        model_state: DefaultModelState,
        block_size: int,
        max_model_len: int,
        max_num_seqs: int,
        buckets: list[int],
        cuda_graphs: bool = True,
        upcast_logits: bool = True,
        pool=None,
    ) -> None:
        self.model = model
        self.table = table
        self.buffers = buffers
        self.model_state = model_state
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.buckets = sorted(buckets)
        self.cuda_graphs = cuda_graphs
        self.upcast_logits = upcast_logits
        self.pool = pool  # shared with the decode graphs
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.calls: dict[int, tuple] = {}  # cuda_graphs=False: captured inputs per bucket
        self.num_replays = 0

    def rows_for(self, tokens: int) -> int:
        """Rows a bucket of `tokens` tokens is captured with: every request has a token."""
        return min(tokens, self.max_num_seqs)

    def bucket(self, num_tokens: int, num_reqs: int) -> int | None:
        """The smallest captured bucket that holds the step, or None (run eagerly)."""
        i = bisect.bisect_left(self.buckets, num_tokens)
        if i == len(self.buckets) or num_reqs > self.rows_for(self.buckets[i]):
            return None
        return self.buckets[i]

    def gather(self, request_ids: list[str], counts: list[int], tokens: int) -> InputBatch:
        return gather_inputs(
            self.table,
            self.buffers,
            request_ids,
            counts,
            self.block_size,
            num_reqs_padded=self.rows_for(tokens),
            num_tokens_padded=tokens,
        )

    def _metadata(self, batch: InputBatch):
        return self.model_state.prepare(self.table, batch, max_seq_len=self.max_model_len)

    def _forward(self, tokens: int, rows: int, input_ids, positions, md) -> torch.Tensor:
        hidden = self.model(input_ids, positions, md)
        # Each row's last token (padded rows point at the last real token; harmless).
        last = (self.buffers.query_start_loc[1 : rows + 1] - 1).clamp(min=0).long()
        return self.model.compute_logits(hidden[last], self.upcast_logits)

    @torch.inference_mode()
    def capture(self) -> None:
        t0 = time.perf_counter()
        for t in sorted(self.buckets, reverse=True):
            b = self.rows_for(t)
            batch = self.gather([], [], t)
            # Upper bounds: every real mix of rows fits the config chosen for T queries.
            md = dataclasses.replace(self._metadata(batch), max_query_len=t)
            args = (t, b, batch.input_ids, batch.positions, md)
            if not self.cuda_graphs:
                self.calls[t] = args
                continue
            self._forward(*args)  # warm-up outside the graph (compiles, lazy allocations)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self.logits[t] = self._forward(*args)
            if self.pool is None:
                self.pool = g.pool()
            self.graphs[t] = g
        if self.cuda_graphs:
            torch.cuda.synchronize()
        if self.buckets:
            logger.info(
                "%s %d mixed-step %s (%d..%d tokens) in %.1fs",
                "captured" if self.cuda_graphs else "prepared",
                len(self.buckets),
                "CUDA graphs" if self.cuda_graphs else "paths without graphs",
                self.buckets[0],
                self.buckets[-1],
                time.perf_counter() - t0,
            )

    def run(self, batch: InputBatch) -> torch.Tensor:
        """Replay for a batch from gather(); returns the logits of the real rows, in order."""
        t = batch.num_tokens_padded
        self._metadata(batch)  # refresh the static block table for this step's rows
        if self.cuda_graphs:
            self.graphs[t].replay()
        else:
            self.logits[t] = self._forward(*self.calls[t])
        self.num_replays += 1
        return self.logits[t][: batch.num_reqs]
