"""Decode steps as two half-batches whose layers interleave on two streams (opt-in).

At 129-256 decode rows a layer is ~100-200 us of attention that streams the KV cache at the
copy rate, then ~35 us of latency-bound GEMMs and small kernels, one after the other
(docs/benchmarks.md). Split the batch in two, and one half's GEMMs can run while the other
half's attention streams:

    attention lane:  attn A(L) | attn B(L)              | attn A(L+1)            | ...
    GEMM lane:                 | post A(L), pre A(L+1)  | post B(L), pre B(L+1)  | ...

Sessions 4 and 18 found no room for this on a shared GPU: the attention grid fills every SM,
and a smaller grid stops it streaming. Here the attention lane is a stream of a green
context of STRIXLM_PINGPONG_SMS SMs (0, the default: off), and attention sizes its grid for
that many (kernels.dispatch.attention_sm_budget); the GEMM lane is the caller's stream, whose
kernels find the other SMs free. STRIXLM_PINGPONG_MIN_ROWS (default 129) is the smallest
pure-decode step it takes; STRIXLM_PINGPONG_CTAS (default 0: the persistent grid's own four)
sets attention's programs an SM there. STRIXLM_PINGPONG_LANE=stream puts attention on an
ordinary high-priority stream instead of a green context (its grid still sized for the SMs
asked): where green streams are missing or fail, the overlap itself can still be measured,
with the hardware free to spread the smaller grid over every SM. STRIXLM_PINGPONG_L2_MB
(default 0: off) sets aside that much L2 for persisting lines, and the GEMM lane marks the
layer weights it reads as persisting (an access-policy window over the part of the packed
weights, models/weight_pack.py, that it reads next), so that the second half-batch finds
them in L2 rather than reading them from HBM again. All are read at import.

Each half is a decode batch of its own: rows [0, h) and [h, B), with views of the step's
metadata (a pure decode step's query_start_loc is 0..B, so each half's is its first rows)
and its own longest-first order, sorted on the device. The halves' rows meet the same
kernels as the whole batch's, so tokens match up to the GEMMs' row-count-dependent
roundings.

Lifetimes across the lanes: the caching allocator hands a freed block only to the stream
that allocated it, ordered after that stream's earlier work but not after the other lane's.
So each half holds its projections until its post has been queued (which waits for its
attention), and its attention output until its next attention is queued (by then the GEMM
lane has queued the post that reads it, before the event that next attention waits on).

Off CUDA the lanes are one (the CPU runs everything in order); the split and the order of
the work are the same, which is what the CPU tests check.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace

import torch

from strixlm.kernels.dispatch import attention_sm_budget
from strixlm.kernels.env_knobs import env_int
from strixlm.kernels.l2_window import L2Windows
from strixlm.layers.attention.metadata import AttentionMetadata
from strixlm.models.weight_pack import PackedWeights, pack_layer_weights

SMS = env_int("STRIXLM_PINGPONG_SMS", 0)
MIN_ROWS = env_int("STRIXLM_PINGPONG_MIN_ROWS", 129)
CTAS = env_int("STRIXLM_PINGPONG_CTAS", 0)  # attention's programs an SM there (0: default)
LANE = os.environ.get("STRIXLM_PINGPONG_LANE", "green")
L2_MB = env_int("STRIXLM_PINGPONG_L2_MB", 0)  # L2 set aside for the weights (0: off)
if SMS < 0 or MIN_ROWS < 2 or CTAS < 0 or L2_MB < 0:
    raise ValueError(
        "STRIXLM_PINGPONG_SMS, STRIXLM_PINGPONG_CTAS and STRIXLM_PINGPONG_L2_MB must be >= 0,"
        " STRIXLM_PINGPONG_MIN_ROWS >= 2"
    )
if LANE not in ("green", "stream"):
    raise ValueError(f"STRIXLM_PINGPONG_LANE must be 'green' or 'stream', not {LANE!r}")

# Green contexts must outlive their streams: kept for the process, one per (device, SMs).
_GREEN: dict[tuple[int, int], tuple[object, torch.cuda.Stream]] = {}


def green_stream(num_sms: int, device: torch.device) -> torch.cuda.Stream:
    """A stream whose kernels run on num_sms SMs of `device` (a CUDA green context).

    torch's API moved between releases: create(num_sms=...) or create(num_sms, device_id);
    the context's own streams (Stream(): cuGreenCtxStreamCreate, non-blocking, capturable)
    came later than set_context, whose stream is the context's default one, which graphs
    cannot capture. Raises RuntimeError where torch has no green-context streams. Hopper
    partitions SMs in groups of 8: ask for a multiple of 8."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, num_sms)
    if key not in _GREEN:
        try:
            from torch.cuda.green_contexts import GreenContext
        except ImportError as e:
            raise RuntimeError(f"torch {torch.__version__} has no CUDA green contexts") from e
        try:
            ctx = GreenContext.create(num_sms=num_sms, device_id=index)
        except TypeError:  # older signature: (num_sms, device_id)
            ctx = GreenContext.create(num_sms, index)
        if not hasattr(ctx, "Stream"):
            raise RuntimeError(f"torch {torch.__version__}'s GreenContext has no Stream()")
        stream = ctx.Stream()
        _GREEN[key] = (ctx, stream)
    return _GREEN[key][1]


_PLAIN: dict[int, torch.cuda.Stream] = {}


def attention_stream(num_sms: int, device: torch.device, lane: str) -> torch.cuda.Stream:
    """The attention lane's stream: a green context's ("green"), or an ordinary stream of
    high priority ("stream"), so that its blocks are dispatched ahead of the GEMM
    lane's when both wait for room. One a process and device, as graphs replay on them."""
    if lane == "green":
        return green_stream(num_sms, device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _PLAIN:
        _PLAIN[index] = torch.cuda.Stream(device=index, priority=-1)  # torch's "high"
    return _PLAIN[index]


def applies(md: AttentionMetadata, num_tokens: int) -> bool:
    """On, and a pure decode step (one token a row, graph padding included) of MIN_ROWS+."""
    if SMS <= 0:
        return False
    rows = md.seq_lens.shape[0]
    return md.is_pure_decode and num_tokens == rows and rows >= MIN_ROWS


def _padded(values: list[int], n: int, fill: int) -> list[int]:
    """A host list of the real rows padded to n (graph padding rows are one-token rows)."""
    return list(values[:n]) + [fill] * (n - len(values))


def half_metadata(md: AttentionMetadata, lo: int, hi: int) -> AttentionMetadata:
    """Rows [lo, hi) of a pure decode step's metadata, as a decode batch of their own."""
    n, rows = hi - lo, md.seq_lens.shape[0]
    seq_lens = md.seq_lens[lo:hi]
    order = None
    if md.seq_order is not None:  # longest first within the half, as the host orders steps
        order = torch.argsort(seq_lens, descending=True, stable=True).to(torch.int32)
    decode_rows = None
    if md.decode_rows is not None:
        decode_rows = torch.arange(n, device=md.decode_rows.device, dtype=md.decode_rows.dtype)
    seq_lens_cpu = _padded(md.seq_lens_cpu, rows, 1)[lo:hi]
    return replace(
        md,
        num_tokens=n,
        query_start_loc=md.query_start_loc[: n + 1],  # 0..B in a pure decode step
        seq_lens=seq_lens,
        block_table=md.block_table[lo:hi],
        slot_mapping=md.slot_mapping[lo:hi],
        query_start_loc_cpu=list(range(n + 1)),
        query_lens_cpu=[1] * n,
        seq_lens_cpu=seq_lens_cpu,
        decode_rows=decode_rows,
        max_decode_seq_len=max(seq_lens_cpu, default=0) if md.decode_rows is not None else 0,
        seq_order=order,
    )


def prepare_model(model) -> None:
    """After loading: with the L2 window on, pack the decoder layers' projection weights in
    the GEMM lane's order (before any graph records their pointers)."""
    if SMS > 0 and L2_MB > 0 and splittable(model):
        model.pingpong_weights = pack_layer_weights(list(model.layers))


def splittable(model) -> bool:
    """Whether forward can split the model: Llama-family decoder layers (pre / attend /
    post). A model's layers are all of one class."""
    from strixlm.models.llama import DecoderLayer  # llama imports this module

    layers = getattr(model, "layers", None)
    return bool(layers) and isinstance(layers[0], DecoderLayer)


_L2: dict[int, L2Windows] = {}


class WeightWindows:
    """The GEMM lane's L2 windows over the packed weights, each holding for the launches
    queued after it: first() over the first layer's qkv, after(i) over what the lane reads
    after layer i's attention (o_proj .. the next qkv); clear() ends them."""

    def __init__(self, packed: PackedWeights, stream: torch.cuda.Stream) -> None:
        index = packed.buffer.device.index or 0
        if index not in _L2:
            _L2[index] = L2Windows(index, L2_MB << 20)
        self.l2, self.packed, self.stream = _L2[index], packed, stream.cuda_stream

    def _set(self, lo: int, hi: int) -> None:
        self.l2.set(self.stream, self.packed.base + lo, hi - lo)

    def first(self) -> None:
        self._set(*self.packed.qkv[0])

    def after(self, layer: int) -> None:
        self._set(*self.packed.chunk(layer))

    def clear(self) -> None:
        self.l2.clear(self.stream)


def weight_windows(model, lanes: Lanes) -> WeightWindows | None:
    """The GEMM lane's windows, where the weights were packed for them and lanes are CUDA's."""
    packed = getattr(model, "pingpong_weights", None)
    if packed is None or not lanes.cuda:
        return None
    return WeightWindows(packed, lanes.gemm)


class Lanes:
    """The attention lane (a green-context stream, or a high-priority one with
    STRIXLM_PINGPONG_LANE=stream) and the GEMM lane (the caller's stream), with the events
    between them; one lane, and no events, off CUDA."""

    def __init__(self, device: torch.device, sms: int) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.gemm = torch.cuda.current_stream(device)
            self.attn = attention_stream(sms, device, LANE)

    def fork(self) -> None:
        if self.cuda:
            self.attn.wait_stream(self.gemm)

    def join(self) -> None:
        if self.cuda:
            self.gemm.wait_stream(self.attn)

    def on_attn(self):
        return torch.cuda.stream(self.attn) if self.cuda else contextlib.nullcontext()

    def mark(self, on_attn: bool) -> torch.cuda.Event | None:
        """An event after the work queued so far on one lane."""
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record(self.attn if on_attn else self.gemm)
        return ev

    def wait(self, ev: torch.cuda.Event | None, on_attn: bool) -> None:
        if ev is not None:
            (self.attn if on_attn else self.gemm).wait_event(ev)


@dataclass
class _Half:
    positions: torch.Tensor
    md: AttentionMetadata
    x: object  # the layer input: a tensor, or the previous MLP's split-K partials
    residual: torch.Tensor | None = None
    projected: object = None  # held until this half's post is queued
    out: torch.Tensor | None = None  # held until this half's next attention is queued
    ready: torch.cuda.Event | None = None  # projections done (GEMM lane)
    done: torch.cuda.Event | None = None  # attention done (attention lane)


def forward(model, input_ids: torch.Tensor, positions: torch.Tensor, md) -> torch.Tensor:
    """The Llama-family forward (embedding to final norm) of a pure decode step, split in two
    half-batches whose layers interleave on the two lanes. Returns [B, hidden]."""
    rows = md.seq_lens.shape[0]
    h = rows // 2
    x = model.embed_tokens(input_ids)
    halves = [
        _Half(positions[lo:hi], half_metadata(md, lo, hi), x[lo:hi])
        for lo, hi in ((0, h), (h, rows))
    ]
    lanes = Lanes(input_ids.device, SMS)
    windows = weight_windows(model, lanes)
    lanes.fork()
    layers = model.layers
    try:
        if windows is not None:
            windows.first()
        for s in halves:
            s.projected, s.residual = layers[0].pre(s.positions, s.x, None, s.md)
            s.ready = lanes.mark(on_attn=False)
        for i, layer in enumerate(layers):
            with lanes.on_attn(), attention_sm_budget(SMS, CTAS):
                for s in halves:
                    lanes.wait(s.ready, on_attn=True)
                    s.out = layer.self_attn.attend(s.projected, s.md)
                    s.done = lanes.mark(on_attn=True)
            if windows is not None:  # both halves read the same weights: keep them for B
                windows.after(i)
            for s in halves:
                lanes.wait(s.done, on_attn=False)
                s.x, s.residual = layer.post(s.out, s.residual)
                if i + 1 < len(layers):
                    s.projected, s.residual = layers[i + 1].pre(s.positions, s.x, s.residual, s.md)
                    s.ready = lanes.mark(on_attn=False)
    finally:
        if windows is not None:
            windows.clear()
    lanes.join()
    return torch.cat([model.norm(s.x, s.residual)[0] for s in halves])
