"""CUDA graphs for decode steps: captured over padded batch sizes, dispatched by size.

A decode step (one new token per request) is padded up to the next captured size with
one-token rows on the state table's dummy row (their K/V land in the never-used null block
0), and replays a graph that runs the model from the persistent input buffers up to the
final hidden states. A step whose rows need only temperatures is then projected and sampled
by one more graph (sample_graphs.py: all-greedy rows take the LM head's argmax without
writing logits); other steps project their logits eagerly. Small mixed steps have their
own graphs (mixed_graphs.py); larger steps run eagerly. The attention backend must read
only device metadata during replay, so graphs are captured only with the Triton backend,
with max_seq_len passed as the upper bound max_model_len.

Hybrid (Mamba) models also replay their Mamba metadata from static buffers (state slot of
each row per Mamba group; see model_states/hybrid.py): padded rows' slot is the null block
0 too, and a captured step always runs the one-token recurrent kernels.

With cuda_graphs=False the same path runs without capturing: every "replay" calls the
model eagerly on the metadata objects built at capture time. Only the static buffers are
refreshed per step, exactly as for a real replay, so CPU tests check the graph path's
inputs (a tensor that is not refreshed in place shows up as a wrong result).
"""

from __future__ import annotations

import bisect
import logging
import time

import torch

from strixlm.worker.input_batch import InputBatch, InputBuffers, gather_inputs
from strixlm.worker.model_states.default import DefaultModelState
from strixlm.worker.model_states.hybrid import HybridModelState
from strixlm.worker.states import RequestStateTable

logger = logging.getLogger(__name__)


def capture_sizes(max_num_seqs: int) -> list[int]:
    sizes = [1, 2, 4, 8] + list(range(16, 513, 8))
    return [s for s in sizes if s <= max_num_seqs]


class DecodeGraphs:
    def __init__(
        self,
        model: torch.nn.Module,
        table: RequestStateTable,
        buffers: InputBuffers,
        model_state: DefaultModelState | HybridModelState,
        block_size: int,
        max_model_len: int,
        sizes: list[int],
        cuda_graphs: bool = True,
    ) -> None:
        self.model = model
        self.table = table
        self.buffers = buffers
        self.model_state = model_state
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.sizes = sizes
        self.cuda_graphs = cuda_graphs
        max_b = max(sizes)
        self.hybrid = isinstance(model_state, HybridModelState)
        self.mamba_buffers = model_state.graph_buffers(max_b) if self.hybrid else None
        self.mamba_layers = model.mamba_layers() if self.hybrid else []
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.hidden: dict[int, torch.Tensor] = {}  # final hidden states by padded size
        # cuda_graphs=False: (input_ids, positions, metadata) captured per size.
        self.calls: dict[int, tuple] = {}
        self.pool = None
        # Counters for tests and checks: steps replayed, padded rows, fresh-state rows.
        self.num_replays = 0
        self.num_padded_rows = 0
        self.num_fresh_rows = 0

    def padded_size(self, num_reqs: int) -> int | None:
        i = bisect.bisect_left(self.sizes, num_reqs)
        return self.sizes[i] if i < len(self.sizes) else None

    def _metadata(self, batch: InputBatch):
        if not self.hybrid:
            return self.model_state.prepare(self.table, batch, max_seq_len=self.max_model_len)
        return self.model_state.prepare_graph(
            self.table, batch, self.max_model_len, self.mamba_buffers
        )

    @torch.inference_mode()
    def capture(self) -> None:
        t0 = time.perf_counter()
        for b in sorted(self.sizes, reverse=True):
            batch = gather_inputs(self.table, self.buffers, [], [], self.block_size, b)
            md = self._metadata(batch)
            if not self.cuda_graphs:
                self.calls[b] = (batch.input_ids, batch.positions, md)
                continue
            # Warm up outside the graph (autotuning, lazy allocations), then capture.
            self.model(batch.input_ids, batch.positions, md)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                self.hidden[b] = self.model(batch.input_ids, batch.positions, md)
            if self.pool is None:
                self.pool = g.pool()
            self.graphs[b] = g
        if self.cuda_graphs:
            torch.cuda.synchronize()
        logger.info(
            "%s %d decode %s (batch sizes %d..%d%s) in %.1fs",
            "captured" if self.cuda_graphs else "prepared",
            len(self.sizes),
            "CUDA graphs" if self.cuda_graphs else "steps without graphs",
            min(self.sizes),
            max(self.sizes),
            ", with Mamba state slots" if self.hybrid else "",
            time.perf_counter() - t0,
        )

    def run(self, batch: InputBatch) -> torch.Tensor:
        """Replay for a batch gathered with num_reqs_padded = padded_size(...); returns the
        final hidden states of the real rows."""
        b = batch.num_reqs_padded
        md = self._metadata(batch)  # refresh the static buffers for this step's rows
        if self.hybrid:
            self.num_fresh_rows += self.model_state.zero_fresh_states(batch, md, self.mamba_layers)
        if self.cuda_graphs:
            self.graphs[b].replay()
        else:
            input_ids, positions, captured_md = self.calls[b]
            self.hidden[b] = self.model(input_ids, positions, captured_md)
        self.num_replays += 1
        self.num_padded_rows += b - batch.num_reqs
        return self.hidden[b][: batch.num_reqs]
