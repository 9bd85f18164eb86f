"""CUDA graphs for decode steps: captured over padded batch sizes, dispatched by size.

A decode step (one new token per request) is padded up to the next captured size with
one-token rows on the state table's dummy row (their K/V land in the never-used null block
0), and replays a graph that runs the model and the logits projection from the persistent
input buffers. Larger or mixed steps run eagerly. The attention backend must read only
device metadata during replay, so graphs are captured only with the Triton backend, with
max_seq_len passed as the upper bound max_model_len.
"""

from __future__ import annotations

import bisect
import logging
import time

import torch

from strixlm.worker.input_batch import InputBatch, InputBuffers, gather_inputs
from strixlm.worker.model_states.default import DefaultModelState
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
        model_state: DefaultModelState,
        block_size: int,
        max_model_len: int,
        sizes: list[int],
    ) -> None:
        self.model = model
        self.table = table
        self.buffers = buffers
        self.model_state = model_state
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.sizes = sizes
        max_b = max(sizes)
        device = buffers.device
        self.block_table = torch.zeros(
            max_b, table.block_table.shape[-1], dtype=torch.int32, device=device
        )
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.pool = None

    def padded_size(self, num_reqs: int) -> int | None:
        i = bisect.bisect_left(self.sizes, num_reqs)
        return self.sizes[i] if i < len(self.sizes) else None

    def _metadata(self, batch: InputBatch):
        return self.model_state.prepare(
            self.table, batch, max_seq_len=self.max_model_len, block_table_out=self.block_table
        )

    @torch.inference_mode()
    def capture(self) -> None:
        t0 = time.perf_counter()
        for b in sorted(self.sizes, reverse=True):
            batch = gather_inputs(self.table, self.buffers, [], [], self.block_size, b)
            md = self._metadata(batch)
            # Warm up outside the graph (autotuning, lazy allocations), then capture.
            self.model.compute_logits(self.model(batch.input_ids, batch.positions, md))
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=self.pool):
                hidden = self.model(batch.input_ids, batch.positions, md)
                self.logits[b] = self.model.compute_logits(hidden)
            if self.pool is None:
                self.pool = g.pool()
            self.graphs[b] = g
        torch.cuda.synchronize()
        logger.info(
            "captured %d decode CUDA graphs (batch sizes %d..%d) in %.1fs",
            len(self.graphs),
            min(self.sizes),
            max(self.sizes),
            time.perf_counter() - t0,
        )

    def run(self, batch: InputBatch) -> torch.Tensor:
        """Replay for a batch gathered with num_reqs_padded = padded_size(...); returns the
        logits of the real rows."""
        b = batch.num_reqs_padded
        self._metadata(batch)  # refresh the static block table for this step's rows
        self.graphs[b].replay()
        return self.logits[b][: batch.num_reqs]
