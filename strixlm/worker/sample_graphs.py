"""CUDA graphs for a decode step's sampling: the sampler and the append of its tokens.

A decode graph (cuda_graphs.py) ends at the logits. Sampling them eagerly costs the host
some twenty launches a step (gathers of the rows' sampling parameters, the sampler's scratch
and kernels, the append into the state table), which is what bounds a small batch's step.
For the common feature set (temperature only: no penalties, top-k / top-p / min-p,
logprobs, min_tokens suppression or thinking budget) that tail is one more graph per padded
size, reading only persistent buffers: the scheduled rows (input buffers), their
temperature and seed (sampling table), their lengths (state table), the decode graph's
logits. Two variants per size: every row greedy (the argmax pass), and any temperatures.
Padded rows are sampled too (the dummy row's logits) but append nothing.

Same tokens as the eager sampler: the Gumbel noise is keyed by (seed, position), and argmax
ties resolve to the lowest index however the vocabulary is split among programs.

With cuda_graphs=False the same function runs eagerly on every call (CPU tests).
STRIXLM_DISABLE_SAMPLE_GRAPHS=1 (read at import) keeps sampling eager, for A/B runs.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from strixlm.kernels.append_tokens import append_tokens
from strixlm.worker.input_batch import InputBuffers
from strixlm.worker.sampling_table import SamplingTable
from strixlm.worker.states import RequestStateTable

logger = logging.getLogger(__name__)

SAMPLE_GRAPHS_DISABLED = os.environ.get("STRIXLM_DISABLE_SAMPLE_GRAPHS", "0") != "0"


class SampleGraphs:
    def __init__(
        self,
        sampler: torch.nn.Module,
        table: RequestStateTable,
        buffers: InputBuffers,
        sampling: SamplingTable,
        logits: dict[int, torch.Tensor],
        sizes: list[int],
        cuda_graphs: bool = True,
    ) -> None:
        self.sampler = sampler
        self.table = table
        self.buffers = buffers
        self.sampling = sampling
        # The decode graphs' logits by padded size; read at call time, since without
        # graphs each "replay" puts a new tensor there.
        self.logits = logits
        self.sizes = sizes
        self.cuda_graphs = cuda_graphs
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}
        self.tokens: dict[tuple[int, bool], torch.Tensor] = {}
        self.num_replays = 0  # for tests and checks

    def _sample(self, b: int, greedy: bool) -> torch.Tensor:
        """Sample the b padded rows and append the real rows' tokens: [b] int64."""
        rows = self.buffers.rows[:b]
        md = self.sampling.gather(rows, self.table.num_tokens, all_greedy=greedy)
        tokens = self.sampler(self.logits[b], md).sampled_token_ids
        t = self.table
        append_tokens(t.token_ids, t.num_tokens, rows, tokens, skip_row=t.dummy_row)
        return tokens

    @torch.inference_mode()
    def capture(self, pool=None) -> None:
        """Capture after the decode graphs: the rows buffer then holds only dummy rows,
        so the warm-up calls append nothing."""
        if not self.cuda_graphs:
            return
        t0 = time.perf_counter()
        for b in sorted(self.sizes, reverse=True):
            for greedy in (True, False):
                self._sample(b, greedy)  # compiles the kernels outside the capture
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    self.tokens[b, greedy] = self._sample(b, greedy)
                if pool is None:
                    pool = g.pool()
                self.graphs[b, greedy] = g
        torch.cuda.synchronize()
        logger.info(
            "captured %d sampling CUDA graphs in %.1fs", len(self.graphs), time.perf_counter() - t0
        )

    def run(self, b: int, greedy: bool) -> torch.Tensor:
        """Sample a replayed decode graph's b padded rows and append the real rows' tokens
        on the device; returns [b] int64 tokens (the first rows are the real ones)."""
        self.num_replays += 1
        if not self.cuda_graphs:
            return self._sample(b, greedy)
        self.graphs[b, greedy].replay()
        return self.tokens[b, greedy]
