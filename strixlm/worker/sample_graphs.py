"""CUDA graphs for a decode step's tail: the LM head, the sampler and the append of tokens.

A decode graph (cuda_graphs.py) ends at the final hidden states. Projecting and sampling
them eagerly costs the host some twenty launches a step (the LM head, gathers of the rows'
sampling parameters, the sampler's scratch and kernels, the append into the state table),
which is what bounds a small batch's step. For the common feature set (temperature only: no
penalties, top-k / top-p / min-p, logprobs, min_tokens suppression, logit bias or thinking
budget) that tail is one more graph per padded size, reading only persistent buffers: the
scheduled rows (input buffers), their temperature and seed (sampling table), their lengths
(state table), the decode graph's hidden states. Two variants per size:
- every row greedy: the LM head with an argmax epilogue (kernels/lm_head_argmax.py), so no
  logits are written or read back, then the append; the LM head + argmax pass where that
  kernel does not apply (float32 models, no Triton, STRIXLM_FUSED_GREEDY=0);
- any temperatures: the LM head with a Gumbel-max epilogue, which draws the sampler's
  tokens from the same noise without writing logits, at the row counts where it measured
  faster (every size on Hopper, up to 32 rows elsewhere; STRIXLM_FUSED_SAMPLE=N: up to N);
  the LM head, then the sampler, above them or where the kernel does not apply.
Padded rows are sampled too (the dummy row's hidden state) but append nothing.

Same tokens as the eager sampler: the Gumbel noise is keyed by (seed, position), and argmax
ties resolve to the lowest index however the vocabulary is split among programs (the fused
kernel compares the logits rounded to the model dtype, as the sampler reads them; only the
rounding of sums taken in another order can tell the two apart).

With cuda_graphs=False the same function runs eagerly on every call (CPU tests).
STRIXLM_DISABLE_SAMPLE_GRAPHS=1 (read at import) keeps sampling eager, for A/B runs.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from strixlm.kernels import lm_head_argmax
from strixlm.kernels.append_tokens import append_tokens
from strixlm.kernels.dispatch import use_triton
from strixlm.worker.input_batch import InputBuffers
from strixlm.worker.sampling_table import SamplingTable
from strixlm.worker.states import RequestStateTable

logger = logging.getLogger(__name__)

SAMPLE_GRAPHS_DISABLED = os.environ.get("STRIXLM_DISABLE_SAMPLE_GRAPHS", "0") != "0"
# STRIXLM_FUSED_GREEDY=0: no LM head epilogue at all (greedy graphs write logits and run
# the argmax pass; STRIXLM_FUSED_SAMPLE is ignored), for A/B runs.
FUSED_GREEDY = os.environ.get("STRIXLM_FUSED_GREEDY", "1") != "0"
# STRIXLM_FUSED_SAMPLE=N: temperature graphs of up to N rows sample in the LM head's epilogue
# (0: none). Unset: the row counts where it measured faster (lm_head_argmax).
_FUSED_SAMPLE_ENV = os.environ.get("STRIXLM_FUSED_SAMPLE")
FUSED_SAMPLE_MAX_ROWS = int(_FUSED_SAMPLE_ENV) if _FUSED_SAMPLE_ENV else None


class SampleGraphs:
    def __init__(
        self,
        model: torch.nn.Module,
        sampler: torch.nn.Module,
        table: RequestStateTable,
        buffers: InputBuffers,
        sampling: SamplingTable,
        hidden: dict[int, torch.Tensor],
        sizes: list[int],
        cuda_graphs: bool = True,
        upcast_logits: bool = True,
    ) -> None:
        self.model = model  # compute_logits and lm_head_weight
        self.sampler = sampler
        self.upcast_logits = upcast_logits  # False: logits stay in the model dtype
        self.table = table
        self.buffers = buffers
        self.sampling = sampling
        # The decode graphs' hidden states by padded size; read at call time, since
        # without graphs each "replay" puts a new tensor there.
        self.hidden = hidden
        self.sizes = sizes
        self.cuda_graphs = cuda_graphs
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}
        self.tokens: dict[tuple[int, bool], torch.Tensor] = {}
        self.num_replays = 0  # for tests and checks

    def _sample(self, b: int, greedy: bool) -> torch.Tensor:
        """Sample the b padded rows and append the real rows' tokens: [b] int64."""
        rows = self.buffers.rows[:b]
        hidden = self.hidden[b]
        t = self.table
        if greedy and self.fused(hidden):
            tokens = lm_head_argmax.lm_head_argmax(hidden, self.model.lm_head_weight())
        elif not greedy and b <= self._fused_sample_rows(hidden) and self.fused(hidden):
            # Each row's temperature, seed and position read in the kernel by table row.
            f, i = self.sampling.f, self.sampling.i
            tokens = lm_head_argmax.lm_head_sample(
                hidden, self.model.lm_head_weight(), rows, f[0], i[1], t.num_tokens
            )
        else:
            logits = self.model.compute_logits(hidden, self.upcast_logits)
            md = self.sampling.gather(rows, self.table.num_tokens, all_greedy=greedy)
            tokens = self.sampler(logits, md).sampled_token_ids
        append_tokens(t.token_ids, t.num_tokens, rows, tokens, skip_row=t.dummy_row)
        return tokens

    @staticmethod
    def _fused_sample_rows(hidden: torch.Tensor) -> int:
        if FUSED_SAMPLE_MAX_ROWS is not None:
            return FUSED_SAMPLE_MAX_ROWS
        return lm_head_argmax.fused_sample_max_rows(hidden.device)

    def fused(self, hidden: torch.Tensor) -> bool:
        """Whether the LM head's argmax / sampling epilogue can run: Triton runs here and the
        operands are half precision (float32 models keep the logits and the sampler)."""
        if not FUSED_GREEDY or not use_triton(hidden):
            return False
        return lm_head_argmax.supported(hidden, self.model.lm_head_weight())

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
        """Project and sample a replayed decode graph's b padded rows and append the real
        rows' tokens on the device; returns [b] int64 tokens (the first rows are the real
        ones)."""
        self.num_replays += 1
        if not self.cuda_graphs:
            return self._sample(b, greedy)
        self.graphs[b, greedy].replay()
        return self.tokens[b, greedy]
