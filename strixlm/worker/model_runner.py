"""The model runner: one step is prepare -> forward -> sample -> post-update.

Shaped after Model Runner V2: persistent per-request rows (states.py), per-step inputs
gathered from them (input_batch.py), model-specific metadata from a ModelState. This is the
synchronous reference path; the CUDA fast path (GPU-side gathers, async scheduling, CUDA
graphs) builds on the same shape.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

import numpy as np
import torch

from strixlm.config import EngineConfig
from strixlm.core.kv_cache_manager import MAMBA, KVCacheGroupSpec
from strixlm.core.scheduler import SchedulerOutput
from strixlm.layers.attention.backend import AttentionBackend, kv_cache_shape
from strixlm.layers.attention.torch_paged import TorchPagedAttention
from strixlm.models.loader import load_model
from strixlm.sample.forced_tokens import ThinkingBudgetTable
from strixlm.sample.metadata import SamplingMetadata
from strixlm.sample.sampler import Sampler, SamplerOutput
from strixlm.sample.triton_sampler import TritonSampler, compute_token_logprobs
from strixlm.worker.cuda_graphs import DecodeGraphs, capture_sizes
from strixlm.worker.host_copy import to_device
from strixlm.worker.input_batch import InputBuffers, gather_inputs
from strixlm.worker.mixed_graphs import MixedGraphs, mixed_buckets
from strixlm.worker.model_states.block_zeroing import BlockZeroer
from strixlm.worker.model_states.default import DefaultModelState
from strixlm.worker.model_states.hybrid import HybridModelState
from strixlm.worker.model_states.hybrid_layout import (
    AttentionShape,
    HybridCacheLayout,
    MambaStateShape,
    plan_hybrid_layout,
)
from strixlm.worker.sample_graphs import SAMPLE_GRAPHS_DISABLED, SampleGraphs
from strixlm.worker.sampling_table import SamplingTable
from strixlm.worker.states import RequestStateTable
from strixlm.worker.step_result import StepHandle, wait_host_copies

logger = logging.getLogger(__name__)

# Prompt positions whose logits (for prompt logprobs) are computed at once.
PROMPT_LOGPROBS_CHUNK = 1024


def select_attention_backend(config: EngineConfig) -> type[AttentionBackend]:
    name = config.attention_backend
    if name == "auto":
        # The torch backend has no fp8 cache; Triton's backend falls back to its fp8-aware
        # torch reference on CPU.
        fp8 = config.cache.kv_cache_dtype != "auto"
        name = "triton" if config.device.startswith("cuda") or fp8 else "torch"
    if name == "torch":
        return TorchPagedAttention
    from strixlm.layers.attention.triton_paged import TritonPagedAttention

    return TritonPagedAttention


class _RowsHost(NamedTuple):
    """Host-side facts about a step's sampled rows, read once a step: the sampling-graph
    decision and the eager sampler's metadata both use them."""

    rows: np.ndarray
    flags: tuple[np.ndarray, np.ndarray, np.ndarray]  # SamplingTable.flags
    suppress: list[tuple[int, list[int]]]  # SamplingTable.suppressed
    logit_bias: list[tuple[int, list[int], list[float]]]  # SamplingTable.biased
    budget: bool  # any row under a thinking budget


class ModelRunner:
    def __init__(
        self, config: EngineConfig, hf_config, model_folder: str | None, max_model_len: int
    ) -> None:
        self.config = config
        self.hf_config = hf_config
        self.device = config.device
        self.dtype = config.torch_dtype
        self.kv_dtype = config.kv_torch_dtype
        self.max_model_len = max_model_len
        self.block_size = config.cache.block_size
        self.model = load_model(
            hf_config,
            model_folder,
            config.model.load_format,
            select_attention_backend(config),
            self.device,
            self.dtype,
            config.model.seed,
        )
        self.attn_layers = self.model.attention_layers()
        mamba = getattr(self.model, "mamba_layers", None)
        self.mamba_layers = mamba() if mamba is not None else []
        # Hybrid models keep Mamba state and attention KV in one pool (hybrid_layout.py).
        self.layout = self._plan_hybrid_layout() if self.mamba_layers else None
        if self.layout is not None:
            self.block_size = self.layout.block_size
        self.vocab_size = hf_config.vocab_size
        # Triton Gumbel-max on CUDA; the torch sampler (its reference) elsewhere.
        self.sampler = (
            TritonSampler(interpret=False) if self.device.startswith("cuda") else Sampler()
        )
        # The Triton sampler upcasts logits as it reads them: no float32 copy on its path.
        self.upcast_logits = not isinstance(self.sampler, TritonSampler)
        decode_rows = bool(self.attn_layers) and self.attn_layers[0].attn.name == "torch"
        if self.layout is None:
            self.model_state = DefaultModelState(self.block_size, self.device, decode_rows)
        else:
            self.model_state = HybridModelState(
                self.block_size, self.device, self.layout.mamba_group_range, decode_rows
            )
        self.table: RequestStateTable | None = None
        # Live requests that asked for prompt logprobs (most steps have none).
        self._plp_requests: set[str] = set()
        self.graphs: DecodeGraphs | None = None
        self.sample_graphs: SampleGraphs | None = None
        self.mixed_graphs: MixedGraphs | None = None
        self.kv_caches: list[torch.Tensor] = []
        self.pool: torch.Tensor | None = None  # hybrid models: the shared block pool
        self.zeroer: BlockZeroer | None = None

    # ---- KV cache ----------------------------------------------------------------------
    def _plan_hybrid_layout(self) -> HybridCacheLayout:
        attn = None
        if self.attn_layers:
            a = self.attn_layers[0]
            attn = AttentionShape(a.num_kv_heads, a.head_dim, self.kv_dtype)
        d = self.mamba_layers[0].dims
        state = MambaStateShape(
            d.conv_dim, d.conv_kernel, d.num_heads, d.head_dim, d.state_size, self.dtype
        )
        layout = plan_hybrid_layout(
            attn, len(self.attn_layers), state, len(self.mamba_layers), self.block_size
        )
        if layout.block_size != self.block_size:
            logger.info(
                "hybrid model: attention block size raised from %d to %d tokens so a block "
                "holds one Mamba layer's state (%d bytes)",
                self.block_size,
                layout.block_size,
                state.nbytes,
            )
        return layout

    def kv_cache_groups(self) -> list[KVCacheGroupSpec]:
        if self.layout is not None:
            return list(self.layout.groups)
        names = tuple(f"layers.{i}.self_attn" for i in range(len(self.attn_layers)))
        return [KVCacheGroupSpec("full_attention", names)]

    def bytes_per_block(self) -> int:
        if self.layout is not None:
            return self.layout.bytes_per_block
        a = self.attn_layers[0]
        elem = torch.tensor([], dtype=self.kv_dtype).element_size()
        return 2 * self.block_size * a.num_kv_heads * a.head_dim * elem * len(self.attn_layers)

    def determine_num_blocks(self) -> int:
        cache = self.config.cache
        if cache.num_gpu_blocks_override:
            return cache.num_gpu_blocks_override
        if not self.device.startswith("cuda"):
            return max(2, cache.cpu_kv_cache_bytes // self.bytes_per_block())
        peak = self._profile_peak_memory()
        _, total = torch.cuda.mem_get_info()
        avail = int(total * cache.gpu_memory_utilization) - peak
        if avail <= 0:
            raise RuntimeError(
                f"no memory left for the KV cache: the model takes {peak / 2**30:.1f} GiB at "
                "peak; raise --gpu-memory-utilization or lower --max-num-batched-tokens"
            )
        return avail // self.bytes_per_block()

    def _profile_peak_memory(self) -> int:
        """Peak device memory of the largest step: one full token budget plus sampling."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        n = min(self.config.scheduler.max_num_batched_tokens, self.max_model_len)
        nblk = -(-n // self.block_size) + 1
        block_ids = [list(range(1, nblk))]
        if self.layout is not None:
            # Every group's blocks: the attention ones, then one per Mamba group.
            groups = self.kv_cache_groups()
            extra = iter(range(nblk, nblk + len(groups)))
            block_ids = [[next(extra)] if g.kind == MAMBA else block_ids[0] for g in groups]
            nblk += len(groups)
        self.init_kv_cache(nblk)
        from strixlm.core.scheduler import NewRequestData
        from strixlm.engine.request import Request, SamplingParams

        req = Request("__profile__", [0] * n, SamplingParams(max_tokens=1))
        sched = SchedulerOutput(
            new_reqs=[NewRequestData(req, block_ids, 0)],
            num_scheduled_tokens={"__profile__": n},
        )
        self.execute(sched).result()
        # Logits of a full batch of sequences is the other large transient.
        # So is a sub-chunk of prompt-logprob logits.
        h = torch.zeros(
            max(self.config.scheduler.max_num_seqs, min(n, PROMPT_LOGPROBS_CHUNK)),
            self.hf_config.hidden_size,
            device=self.device,
            dtype=self.dtype,
        )
        self.model.compute_logits(h)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        self.table = None
        self.kv_caches = []
        for layer in self.attn_layers:
            layer.kv_cache = None
        for layer in self.mamba_layers:
            layer.conv_states = layer.ssm_states = None
        self.pool = None
        self.zeroer = None
        torch.cuda.empty_cache()
        return peak

    def init_kv_cache(self, num_blocks: int) -> None:
        if self.layout is not None:
            self._init_hybrid_cache(num_blocks)
        else:
            a = self.attn_layers[0]
            shape = kv_cache_shape(num_blocks, self.block_size, a.num_kv_heads, a.head_dim)
            self.kv_caches = []
            for layer in self.attn_layers:
                t = torch.zeros(shape, dtype=self.kv_dtype, device=self.device)
                layer.kv_cache = t
                self.kv_caches.append(t)
        sc = self.config.scheduler
        max_blocks = -(-self.max_model_len // self.block_size)
        self.table = RequestStateTable(
            sc.max_num_seqs,
            self.max_model_len,
            max_blocks,
            len(self.kv_cache_groups()),
            self.device,
        )
        max_tokens = max(sc.max_num_batched_tokens, sc.max_num_seqs)
        self.buffers = InputBuffers(max_tokens, sc.max_num_seqs, self.device, max_blocks)
        self.sampling = SamplingTable(sc.max_num_seqs + 1, self.vocab_size, self.device)
        self.thinking = ThinkingBudgetTable(sc.max_num_seqs + 1, self.device)

    def _init_hybrid_cache(self, num_blocks: int) -> None:
        """One pool for attention KV and Mamba state; each layer gets its view of it."""
        layout = self.layout
        self.pool = layout.allocate(num_blocks, self.device)
        self.kv_caches = []
        for i, layer in enumerate(self.attn_layers):
            layer.kv_cache = layout.attention_view(self.pool, i)
            self.kv_caches.append(layer.kv_cache)
        first_mamba_group = layout.mamba_group_range[0]
        for i, layer in enumerate(self.mamba_layers):
            layer.conv_states, layer.ssm_states = layout.mamba_views(self.pool, i)
            layer.state_group = layout.mamba[i].group - first_mamba_group
        self.zeroer = BlockZeroer(self.pool, layout, self.device)

    def capture_cuda_graphs(self, capture: bool = True) -> None:
        """Decode graphs need the device-only Triton attention; else steps run eagerly.
        Hybrid models replay their Mamba state slots from static buffers too.
        capture=False builds the same graph paths without capturing (any device): each
        "replay" runs the model on the capture-time metadata, which is how CPU tests check
        that every input of the graph path is refreshed in place."""
        if capture and (self.config.enforce_eager or not self.device.startswith("cuda")):
            return
        backend = type(self.attn_layers[0].attn) if self.attn_layers else None
        if backend is not None and not getattr(backend, "graph_safe", False):
            logger.info("attention backend %s is not graph-safe: running eagerly", backend.name)
            return
        self.graphs = DecodeGraphs(
            self.model,
            self.table,
            self.buffers,
            self.model_state,
            self.block_size,
            self.max_model_len,
            capture_sizes(self.config.scheduler.max_num_seqs),
            cuda_graphs=capture,
        )
        self.graphs.capture()
        if not SAMPLE_GRAPHS_DISABLED:
            self.sample_graphs = SampleGraphs(
                self.model,
                self.sampler,
                self.table,
                self.buffers,
                self.sampling,
                self.graphs.hidden,
                self.graphs.sizes,
                cuda_graphs=capture,
                upcast_logits=self.upcast_logits,
            )
            self.sample_graphs.capture()
        # Hybrid models' prefill needs per-step host metadata; the env knob is for A/B runs.
        if self.layout is None and os.environ.get("STRIXLM_DISABLE_MIXED_GRAPHS", "0") != "1":
            sc = self.config.scheduler
            self.mixed_graphs = MixedGraphs(
                self.model,
                self.table,
                self.buffers,
                self.model_state,
                self.block_size,
                self.max_model_len,
                sc.max_num_seqs,
                mixed_buckets(sc.max_num_batched_tokens, self.buffers.input_ids.numel()),
                cuda_graphs=capture,
                upcast_logits=self.upcast_logits,
                pool=self.graphs.pool,
            )
            try:
                self.mixed_graphs.capture()
            except (RuntimeError, torch.OutOfMemoryError) as e:  # an optimization: degrade
                logger.warning("mixed-step CUDA graphs not captured (%s): eager instead", e)
                self.mixed_graphs = None

    # ---- one step ----------------------------------------------------------------------
    def _update_states(self, sched: SchedulerOutput) -> list[int]:
        table = self.table
        for rid in sched.finished_req_ids:
            row = table.rows.get(rid)
            if row is not None:
                self.sampling.release(row)
            table.remove(rid)
            self._plp_requests.discard(rid)
        new_rows = [
            table.add(new.request, new.block_ids, new.num_computed_tokens) for new in sched.new_reqs
        ]
        for cached in sched.cached_reqs:
            table.append_blocks(table.rows[cached.request_id], cached.new_block_ids)
        for row, new in zip(new_rows, sched.new_reqs, strict=True):
            self.sampling.add(row, table.info[row])
            self.thinking.add(row, new.request)
            if new.request.sampling_params.prompt_logprobs is not None:
                self._plp_requests.add(new.request.request_id)
        table.flush(new_rows, defer_blocks=True)  # the step's input prep applies them
        self.sampling.flush()
        self.thinking.flush()
        return new_rows

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> StepHandle:
        """Launch one step; the handle yields its sampled tokens when they reach the host."""
        self._update_states(sched)
        if self.zeroer is not None:
            self.zeroer.before_forward(sched)
        if sched.is_empty:
            self.table.flush_blocks()
            return StepHandle([], [], None)
        rids = list(sched.num_scheduled_tokens)
        counts = [sched.num_scheduled_tokens[r] for r in rids]
        plp_plan = self._prompt_logprob_plan(rids, counts)
        padded = mixed = None
        total = sched.total_num_scheduled_tokens
        if self.graphs is not None and not plp_plan:
            if total == len(rids):
                padded = self.graphs.padded_size(len(rids))
            elif self.mixed_graphs is not None:
                mixed = self.mixed_graphs.bucket(total, len(rids))
        if mixed is not None:
            batch = self.mixed_graphs.gather(rids, counts, mixed)
        else:
            batch = gather_inputs(self.table, self.buffers, rids, counts, self.block_size, padded)
        idx = batch.logits_indices
        sample_rows = [r for r, s in zip(batch.rows, batch.sample_mask, strict=True) if s]
        all_sample = len(idx) == batch.num_reqs
        prompt_lp = None
        host: _RowsHost | None = None
        if padded is not None or mixed is not None:
            # One row per request, in order: the decode graphs' final hidden states, the
            # mixed graphs' logits.
            out = self.graphs.run(batch) if mixed is None else self.mixed_graphs.run(batch)
            if not idx:
                return StepHandle([], [], None)  # prefill chunks only: nothing to sample
            greedy = None
            if padded and all_sample:
                host = self._rows_host(sample_rows)
                greedy = self._graph_sample_kind(host)
            if greedy is not None:
                # Sampled and appended on the device by one more graph (sample_graphs.py),
                # into the static output the last step's host copy may still be reading.
                wait_host_copies(out.device)
                tokens = self.sample_graphs.run(padded, greedy)[: batch.num_reqs]
                self.table.num_tokens_cpu[sample_rows] += 1
                return StepHandle(rids, [None] * len(rids), SamplerOutput(tokens, None))
            if not all_sample:
                out = out[
                    to_device(
                        [i for i, s in enumerate(batch.sample_mask) if s], self.device, torch.int32
                    ).long()
                ]
            logits = self.model.compute_logits(out, self.upcast_logits) if mixed is None else out
        else:
            md = self.model_state.prepare(self.table, batch)
            hidden = self.model(batch.input_ids, batch.positions, md)
            if plp_plan:
                prompt_lp = self._prompt_logprobs(hidden, batch, plp_plan)
            if not idx:
                return StepHandle([], [], None, prompt_lp)
            if all_sample:
                idx_dev = batch.query_start_loc[1 : batch.num_reqs + 1] - 1
            else:
                idx_dev = to_device(idx, self.device, torch.int32)
            logits = self.model.compute_logits(hidden[idx_dev.long()], self.upcast_logits)
        if not idx:
            return StepHandle([], [], None, prompt_lp)
        if all_sample:
            rows_dev = batch.rows_dev[: batch.num_reqs]
        else:
            rows_dev = to_device(sample_rows, self.device, torch.int32)
        if host is None:
            host = self._rows_host(sample_rows)
        md = self._sampling_metadata(host, rows_dev)
        out = self.sampler(logits, md)
        self.table.append_sampled(sample_rows, rows_dev, out.sampled_token_ids)
        infos = [self.table.info[r] for r in sample_rows]
        return StepHandle(
            [i.request_id for i in infos], [i.params.logprobs for i in infos], out, prompt_lp
        )

    # ---- prompt logprobs ---------------------------------------------------------------
    def _prompt_logprob_plan(
        self, rids: list[str], counts: list[int]
    ) -> list[tuple[int, str, int, int, int]]:
        """(batch index, request id, k, start, end) for each request asking for prompt
        logprobs that computes prompt positions [start, end) this step; position p gives
        the logprob of prompt token p + 1, so the last prompt position has none."""
        if not self._plp_requests:
            return []  # the common case: no per-request loop on the step path
        table = self.table
        plan = []
        for i, (rid, n) in enumerate(zip(rids, counts, strict=True)):
            if rid not in self._plp_requests:
                continue
            row = table.rows[rid]
            info = table.info[row]
            k = info.params.prompt_logprobs
            if k is None:
                continue
            start = int(table.num_computed_cpu[row])
            end = min(start + n, info.prompt_len - 1)
            if end > start:
                plan.append((i, rid, k, start, end))
        return plan

    def _prompt_logprobs(
        self, hidden: torch.Tensor, batch, plan: list[tuple[int, str, int, int, int]]
    ) -> dict[str, tuple[int, tuple[torch.Tensor, ...]]]:
        """Logprobs of the next prompt token at each planned position, and the top-k, from
        logits computed PROMPT_LOGPROBS_CHUNK positions at a time (a long chunk never holds
        [chunk, vocab] float32 logits at once). Tensors stay on the device."""
        res = {}
        qsl = batch.query_start_loc_cpu
        for i, rid, k, start, end in plan:
            row = batch.rows[i]
            first = qsl[i]
            targets = self.table.token_ids[row, start + 1 : end + 1].long()
            parts = []
            for a in range(0, end - start, PROMPT_LOGPROBS_CHUNK):
                b = min(a + PROMPT_LOGPROBS_CHUNK, end - start)
                logits = self.model.compute_logits(hidden[first + a : first + b])
                parts.append(compute_token_logprobs(logits, targets[a:b], k))
            lps, ranks, top_ids, top_lps = (torch.cat(x) for x in zip(*parts, strict=True))
            res[rid] = (start, (targets, lps, ranks, top_ids, top_lps))
        return res

    def warmup_kernels(self) -> None:
        """Run a short and a mid-length prefill once, and one sampling each kind of batch,
        so the Triton kernels these select are compiled at startup rather than in the
        middle of the first requests (a first-time compile stalls a step for about a
        second; STRIXLM_VARIANT_WATCH=1 logs any that start-up still misses)."""
        if not self.device.startswith("cuda") or self.layout is not None:
            return
        self._run_warmup_steps()
        torch.cuda.synchronize()

    def _run_warmup_steps(self) -> None:
        from strixlm.core.scheduler import NewRequestData
        from strixlm.engine.request import Request, SamplingParams

        # Never longer than one step may be: the input buffers hold the token budget.
        budget = self.config.scheduler.max_num_batched_tokens
        # The sampler's kernels build a variant per kind of batch: all greedy, temperature
        # only, with filters (kernels/sampler.py); one warm-up prefill samples each kind.
        warmups = (
            (48, SamplingParams(temperature=0.0, max_tokens=1)),
            (600, SamplingParams(max_tokens=1)),
            (16, SamplingParams(top_p=0.9, max_tokens=1)),
        )
        for i, (n, params) in enumerate(warmups):
            n = min(n, budget, self.max_model_len - 1)
            rid = f"__warmup_{i}__"
            req = Request(rid, [0] * n, params)
            blocks = [list(range(1, 1 + -(-n // self.block_size)))]
            self.execute(
                SchedulerOutput(
                    new_reqs=[NewRequestData(req, blocks, 0)], num_scheduled_tokens={rid: n}
                )
            ).result()
            self.execute(SchedulerOutput(finished_req_ids={rid}))

    def _rows_host(self, rows: list[int]) -> _RowsHost:
        table, sampling = self.table, self.sampling
        rows_np = np.asarray(rows)
        return _RowsHost(
            rows_np,
            sampling.flags(rows_np),
            sampling.suppressed(rows_np, table.num_tokens_cpu, table.info),
            sampling.biased(rows_np),
            self.thinking.any_budget(rows_np),
        )

    def _graph_sample_kind(self, host: _RowsHost) -> bool | None:
        """Whether a decode step's rows can be sampled by a sampling graph, and which
        (True: all greedy, False: temperatures); None: the eager sampler."""
        if self.sample_graphs is None or host.budget or host.suppress or host.logit_bias:
            return None
        return self.sampling.plain_kind(host.rows, host.flags)

    def _sampling_metadata(self, host: _RowsHost, rows_dev: torch.Tensor) -> SamplingMetadata:
        table = self.table
        md = self.sampling.metadata(
            host.rows, rows_dev, table.num_tokens, table.num_tokens_cpu, table.token_ids,
            host.suppress, host.flags, host.logit_bias,
        )  # fmt: skip
        if host.budget:
            # Decided on the device from the rows' persistent state (no host sync).
            md.forced_token_ids = self.thinking.forced_tokens(
                table.token_ids, rows_dev, md.positions
            )
        return md
