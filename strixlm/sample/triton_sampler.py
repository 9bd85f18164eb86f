"""TritonSampler: the Triton path of `Sampler` (same inputs, same tokens), and chunked logprobs.

On CUDA the kernels in `strixlm.kernels.sampler` run; elsewhere the torch `Sampler` does,
unless TRITON_INTERPRET=1 (tests run the kernels on CPU that way).

Same tokens as the reference: the Gumbel noise is the same float32 bits (same hash, same
libdevice logf as torch.log on CUDA), the row values go through the same float32 ops, and
the filters are the same per-row thresholds. The one inexact spot: the top-p boundary is a
float32 mass comparison summed in another order than the reference's cumsum, so the two may
disagree when the mass before the boundary value is within rounding (~1e-6) of p.

Tie rules (both paths): ties at a top-k / top-p / min-p threshold are all kept; argmax takes
the lowest index; top-K logprobs order equal values by lower token id (torch.topk leaves the
order of ties unspecified, so ids can differ from the reference only among equal values).

Host syncs: none in forward; outputs stay on the device. CUDA graphs: capturable for a fixed
B after one eager call (which compiles the kernels and allocates the penalty stats buffer),
except when `suppress_token_ids` is non-empty: those lists are copied host-to-device (pinned,
non-blocking) each call, which a replay would not redo. The launch sequence depends only on
B, V, the history width and the metadata flags.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from strixlm.kernels.dispatch import sm_count
from strixlm.sample.logprobs import LogprobsTensors, gather_logprobs, raw_logprobs
from strixlm.sample.metadata import SamplingMetadata
from strixlm.sample.penalties import apply_logit_bias
from strixlm.sample.sampler import Sampler, SamplerOutput

try:
    import triton

    from strixlm.kernels import sampler as kern
    from strixlm.kernels import sampler_topp as ktp

    HAS_TRITON = True
except ImportError:  # pragma: no cover - triton is optional on CPU-only installs
    HAS_TRITON = False

BLOCK = 1024  # elements per tile
INTERPRET_BLOCK = 4096  # the interpreter's cost is per op: fewer, larger tiles
STATS_BLOCK = 1024  # history / suppress entries per program
MAX_SPLITS = 64  # chunks per row; each pass reduces S x 256 partials per program
RS = 16  # partial rows reduced per step
NUM_WARPS = 8
# Programs per SM the vocab is split for: each program's loop over its chunk is latency-bound
# (no pipelined loads), so many must be resident (2/SM ran 256 rows in 159 us on the H200;
# one program per row read the float32 logits at a quarter of the bandwidth).
PROGRAMS_PER_SM = 8


def kernels_interpreted() -> bool:
    """Whether the kernels were built for the interpreter (TRITON_INTERPRET=1 at import)."""
    return HAS_TRITON and not isinstance(kern.sample_kernel, triton.runtime.JITFunction)


def triton_enabled(t: torch.Tensor, interpret: bool | None = None) -> bool:
    """Run the kernels for tensor t? On CUDA yes; on CPU only under the interpreter, which
    needs TRITON_INTERPRET=1 now (or interpret=True) and kernels built for it."""
    if not HAS_TRITON:
        return False
    if t.is_cuda:
        return True
    if interpret is None:
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
    return interpret and kernels_interpreted()


def _block(block: int | None) -> int:
    if block is not None:
        return block
    return INTERPRET_BLOCK if kernels_interpreted() else BLOCK


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# Lanes of the per-row reductions over the S chunk partials. A constant, not pow2(S): S
# follows the step's row count, and every new value compiled (or loaded, which synchronizes
# the device) a kernel variant in the middle of a run: 28 ms host stalls on the H200.
SP = _pow2(MAX_SPLITS)


def _splits(
    num_rows: int, vocab: int, requested: int | None, device: torch.device, block: int
) -> tuple[int, int]:
    """(S, CHUNK): enough programs to fill the GPU; CHUNK is a multiple of the block."""
    tiles = _cdiv(vocab, block)
    if requested is None:
        if device.type == "cuda":
            target = PROGRAMS_PER_SM * sm_count(device)
        else:
            target = 1  # the interpreter runs programs one by one
        requested = max(1, target // max(num_rows, 1))
    s = max(1, min(requested, tiles, MAX_SPLITS))
    chunk = _cdiv(tiles, s) * block
    return _cdiv(vocab, chunk), chunk


def _hi_mask(nbits: int) -> int:
    """uint32 mask of the top nbits, as the int32 with the same bits."""
    v = (((1 << nbits) - 1) << (32 - nbits)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


class _StatsBuffer:
    """A zeroed int32 [B, V] scratch for penalty counts and suppress flags.

    Kept all-zero between calls: every entry a call sets is cleared again by the same
    call, which is cheaper than a [B, V] memset each step. It grows by doubling and old
    buffers are kept (at most the size of the current one in all), so a captured CUDA
    graph never points at released memory.
    """

    def __init__(self) -> None:
        self.buf: torch.Tensor | None = None
        self.retired: list[torch.Tensor] = []
        self.dirty = False

    def get(self, num_rows: int, vocab: int, device: torch.device) -> torch.Tensor:
        n = num_rows * vocab
        if self.buf is None or self.buf.numel() < n or self.buf.device != device:
            size = max(n, 1)
            if self.buf is not None:
                self.retired.append(self.buf)
                if self.buf.device == device:
                    size = max(size, 2 * self.buf.numel())
            self.buf = torch.zeros(size, dtype=torch.int32, device=device)
        elif self.dirty:  # a previous call died between marking and clearing
            self.buf.zero_()
        return self.buf[:n].view(num_rows, vocab)


def mark_stats(
    buffers: _StatsBuffer, logits: torch.Tensor, md: SamplingMetadata
) -> tuple[torch.Tensor | None, Callable[[], None]]:
    """Fill the stats buffer from the history / suppress lists; returns (stats, clear)."""
    num_rows, vocab = logits.shape
    pairs = [(r, t) for r, ids in md.suppress_token_ids for t in ids if 0 <= t < vocab]
    if md.no_penalties and not pairs:
        return None, lambda: None
    stats = buffers.get(num_rows, vocab, logits.device)
    buffers.dirty = True
    launches: list[Callable[[bool], None]] = []
    if not md.no_penalties:
        if md.token_ids is None or md.prompt_lens is None or md.seq_lens is None:
            raise ValueError("penalties need token_ids, prompt_lens and seq_lens")
        tok = md.token_ids.contiguous()
        width = tok.shape[1]
        if width > 0:
            grid = (num_rows, _cdiv(width, STATS_BLOCK))

            def hist(clear: bool) -> None:
                kern.history_stats_kernel[grid](
                    stats,
                    tok,
                    tok.stride(0),
                    md.prompt_lens,
                    md.seq_lens,
                    vocab,
                    CLEAR=clear,
                    BLOCK=STATS_BLOCK,
                )

            launches.append(hist)
    if pairs:
        # Pinned + non_blocking: a pageable host-to-device copy would wait for the GPU.
        flat = [[r for r, _ in pairs], [t for _, t in pairs]]
        host = torch.tensor(flat, dtype=torch.int32, pin_memory=logits.is_cuda)
        rows, cols = host.to(logits.device, non_blocking=True)
        n = len(pairs)

        def sup(clear: bool) -> None:
            kern.suppress_kernel[(_cdiv(n, STATS_BLOCK),)](
                stats, rows, cols, n, vocab, CLEAR=clear, BLOCK=STATS_BLOCK
            )

        launches.append(sup)
    for launch in launches:
        launch(False)

    def clear() -> None:
        for launch in launches:
            launch(True)
        buffers.dirty = False

    return stats, clear


def topp_rejection_default() -> bool:
    """Top-p by rejection (kernels/sampler_topp.py) unless STRIXLM_SAMPLER_TOPP_REJECTION=0.

    H200, benchmarks/gpu/check_sampler.py (2026-12-01): token-identical to the torch
    reference in every config, and batch-256 top_p=0.9 took 0.72 ms against the radix
    passes' 4.80 ms (0.68 vs 6.32 ms at top_p=0.95 with T=3). =0 keeps the radix passes.
    """
    return os.environ.get("STRIXLM_SAMPLER_TOPP_REJECTION", "1") != "0"


def sample_tokens(
    logits: torch.Tensor,
    md: SamplingMetadata,
    stats: torch.Tensor | None,
    num_splits: int | None = None,
    block: int | None = None,
    topp_rejection: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[B] int64 sampled tokens and [B] float32 filter thresholds (-inf: none; NaN: a top-p
    row the rejection draw settled, whose cutoff was never computed) on the device."""
    num_rows, vocab = logits.shape
    dev = logits.device
    block = _block(block)
    s, chunk = _splits(num_rows, vocab, num_splits, dev, block)
    f32, i32 = torch.float32, torch.int32
    filt = not md.all_greedy and not md.no_top_k_top_p_min_p
    # Optional finer flags (not in SamplingMetadata yet) let a batch skip whole passes.
    has_topk = filt and not getattr(md, "no_top_k", False)
    has_topp = filt and not getattr(md, "no_top_p", False)
    has_stats = stats is not None
    stats_arg = stats if stats is not None else logits
    part_max = torch.empty(num_rows, s, dtype=f32, device=dev)
    hist = torch.empty((4, num_rows, s, 256) if has_topk else (1,), dtype=i32, device=dev)
    tks = torch.empty(4, num_rows, 2, dtype=i32, device=dev)
    rowbuf = torch.empty(num_rows, 2, dtype=f32, device=dev)
    mass = torch.empty((8, num_rows, s, 16) if has_topp else (1,), dtype=f32, device=dev)
    cnt = torch.empty((8, num_rows, s, 16) if has_topp else (1,), dtype=i32, device=dev)
    tps = torch.empty(8, num_rows, dtype=i32, device=dev)
    tpf = torch.empty(8, num_rows, 2, dtype=f32, device=dev)
    out_val = torch.empty(num_rows, s, dtype=f32, device=dev)
    out_idx = torch.empty(num_rows, s, dtype=i32, device=dev)
    thr = torch.full((num_rows,), float("-inf"), dtype=f32, device=dev)
    if topp_rejection is None:
        topp_rejection = topp_rejection_default()
    rejection = has_topp and topp_rejection and ktp.ROUNDS > 0
    # Per-row result of the rejection rounds (unread without them: any int32 pointer will do).
    state = torch.full((num_rows,), ktp.UNRESOLVED, dtype=i32, device=dev) if rejection else tks
    # log(min_p) by torch, bit-identical to the reference's cutoff.
    lmp = torch.log(md.min_p.to(f32)) if filt else md.min_p
    row_args = (
        logits,
        logits.stride(0),
        stats_arg,
        md.temperature,
        md.top_k,
        md.top_p,
        md.repetition_penalty,
        md.frequency_penalty,
        md.presence_penalty,
    )
    scratch = (part_max, hist, tks, rowbuf, mass, cnt, tps, tpf)
    flags = dict(HAS_STATS=has_stats, HAS_PEN=not md.no_penalties)
    launch = dict(BLOCK=block, RS=RS, num_warps=NUM_WARPS, enable_fp_fusion=False)
    grid = (num_rows, s)
    precise = logits.is_cuda and not kernels_interpreted()

    def filter_pass(phase: int, j: int, bits: int) -> None:
        shift = 32 - bits * (j + 1)
        kern.filter_pass_kernel[grid](
            *row_args,
            *scratch,
            state,
            num_rows,
            vocab,
            s,
            chunk,
            j,
            _hi_mask(bits * j),
            shift,
            shift + bits,
            PHASE=phase,
            HAS_TOPK=has_topk,
            TOPP_STATE=rejection,
            **flags,
            **launch,
        )

    if filt:
        filter_pass(0, 0, kern.TK_BITS)
        if has_topk:
            for j in range(1, 32 // kern.TK_BITS):
                filter_pass(1, j, kern.TK_BITS)
        if has_topp:
            if rejection:
                _topp_rejection_rounds(row_args, lmp, md, scratch, state, s, chunk, has_topk,
                                       flags, launch, precise)  # fmt: skip
            for j in range(32 // kern.TP_BITS):  # only rows the rounds left unresolved
                filter_pass(2, j, kern.TP_BITS)
    kern.sample_kernel[grid](
        *row_args[:6],
        lmp,
        *row_args[6:],
        md.seeds,
        md.positions,
        *scratch,
        out_val,
        out_idx,
        thr,
        state,
        num_rows,
        vocab,
        s,
        chunk,
        FILTER=filt,
        HAS_TOPK=has_topk,
        HAS_TOPP=has_topp,
        ALL_GREEDY=md.all_greedy,
        PRECISE=precise,
        TOPP_STATE=rejection,
        **flags,
        **launch,
    )
    tokens = torch.empty(num_rows, dtype=torch.int64, device=dev)
    kern.argmax_finalize_kernel[(num_rows,)](out_val, out_idx, tokens, s, SP=SP)
    return tokens, thr


def _topp_rejection_rounds(row_args, lmp, md, scratch, state, s, chunk, has_topk, flags,
                           launch, precise) -> None:  # fmt: skip
    """ktp.ROUNDS draw / check rounds, then settle: rows whose draw landed in the nucleus
    get their token in `state`; the radix passes and the sampling pass skip them."""
    logits = row_args[0]
    num_rows, vocab = logits.shape
    dev = logits.device
    part_max, hist, tks = scratch[:3]
    f32 = torch.float32
    cand = torch.zeros(num_rows, dtype=torch.int32, device=dev)
    cand_s = torch.empty(num_rows, dtype=f32, device=dev)
    zpart = torch.empty(num_rows, s, dtype=f32, device=dev)
    mpart = torch.empty(num_rows, s, dtype=f32, device=dev)
    cval = torch.empty(num_rows, s, dtype=f32, device=dev)
    cidx = torch.empty(num_rows, s, dtype=torch.int32, device=dev)
    grid = (num_rows, s)
    rows6, pens = row_args[:6], row_args[6:]
    for r in range(ktp.ROUNDS):
        ktp.topp_draw_kernel[grid](
            *rows6, lmp, *pens, md.seeds, md.positions, part_max, hist, tks,
            state, cand, cand_s, zpart, mpart, cval, cidx, num_rows, vocab, s, chunk,
            ROUND=r, HAS_TOPK=has_topk, PRECISE=precise, **flags, **launch,
        )  # fmt: skip
        ktp.topp_check_kernel[grid](
            *rows6, lmp, *pens, part_max, hist, tks, state, cand, cand_s, mpart, cval, cidx,
            num_rows, vocab, s, chunk, HAS_TOPK=has_topk, SP=SP, **flags, **launch,
        )  # fmt: skip
    ktp.topp_settle_kernel[(num_rows,)](
        state, md.temperature, md.top_p, cand, zpart, mpart, s, RS=RS
    )


def _triton_token_logprobs(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    k: int,
    num_splits: int | None,
    block: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    num_rows, vocab = logits.shape
    dev = logits.device
    block = _block(block)
    k = min(k, vocab)
    s, chunk = _splits(num_rows, vocab, num_splits, dev, block)
    kp = _pow2(max(k, 1))
    f32 = torch.float32
    pm = torch.empty(num_rows, s, dtype=f32, device=dev)
    pz = torch.empty(num_rows, s, dtype=f32, device=dev)
    pc = torch.empty(num_rows, s, dtype=torch.int32, device=dev)
    ptv = torch.empty(num_rows, s, kp, dtype=f32, device=dev)
    pti = torch.empty(num_rows, s, kp, dtype=torch.int32, device=dev)
    token_ids = token_ids.to(torch.int64)
    parts = (pm, pz, pc, ptv, pti)
    kern.logprobs_partial_kernel[(num_rows, s)](
        logits,
        logits.stride(0),
        token_ids,
        *parts,
        vocab,
        s,
        chunk,
        k,
        TOP=k > 0,
        KP=kp,
        BLOCK=block,
        num_warps=NUM_WARPS,
    )
    out_lp = torch.empty(num_rows, dtype=f32, device=dev)
    rank = torch.empty(num_rows, dtype=torch.int64, device=dev)
    top_ids = torch.empty(num_rows, k, dtype=torch.int64, device=dev)
    top_lp = torch.empty(num_rows, k, dtype=f32, device=dev)
    kern.logprobs_finalize_kernel[(num_rows,)](
        logits,
        logits.stride(0),
        token_ids,
        *parts,
        out_lp,
        rank,
        top_ids,
        top_lp,
        vocab,
        s,
        k,
        TOP=k > 0,
        KP=kp,
        SP=SP,
        num_warps=4,
    )
    return out_lp, rank, top_ids, top_lp


def compute_token_logprobs(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    k: int,
    num_splits: int | None = None,
    block: int | None = None,
    interpret: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logprob and rank of token_ids[i] in row i of raw logits [N, V], and the top-k.

    Returns (token_logprob [N] f32, rank [N] i64, top_ids [N, k] i64, top_logprobs [N, k]
    f32) without materializing a [N, V] log-softmax: call it chunk by chunk over a long
    prompt. rank = 1 + #(logits strictly greater than the token's).
    """
    if not triton_enabled(logits, interpret) or logits.shape[0] == 0:
        lp = gather_logprobs(raw_logprobs(logits), token_ids, k)
        return lp.sampled_logprobs, lp.sampled_ranks, lp.top_ids, lp.top_logprobs
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return _triton_token_logprobs(logits, token_ids, k, num_splits, block)


class TritonSampler(torch.nn.Module):
    """Drop-in for `Sampler`: forward(logits [B, V], md) -> SamplerOutput, same tokens."""

    def __init__(
        self,
        num_splits: int | None = None,
        block: int | None = None,
        interpret: bool | None = None,
        topp_rejection: bool | None = None,
    ) -> None:
        super().__init__()
        self.reference = Sampler()
        # Top-p by rejection (True), the radix passes (False), None: topp_rejection_default().
        self.topp_rejection = topp_rejection
        self.num_splits = num_splits  # chunks per row; None: fill the GPU
        self.block = block  # elements per tile; None: the default
        # CPU tensors: None follows TRITON_INTERPRET=1; False always uses the torch Sampler
        # (an engine on CPU wants that even inside a test run that set the variable).
        self.interpret = interpret
        self._stats = _StatsBuffer()
        # [B] float32 filter thresholds of the last call (-inf: no filter), for tests.
        self.last_thresholds: torch.Tensor | None = None

    def forward(self, logits: torch.Tensor, md: SamplingMetadata) -> SamplerOutput:
        if not triton_enabled(logits, self.interpret) or 0 in logits.shape:
            return self.reference(logits, md)
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        values = logits  # what the kernels sample from; logprobs stay on the raw logits
        if md.logit_bias:
            # The reference adds biases to its float32 copy: so do we, and the kernels'
            # float32 conversion of these values is exact.
            values = apply_logit_bias(logits.to(torch.float32, copy=True), md.logit_bias)
        stats, clear = mark_stats(self._stats, values, md)
        tokens, self.last_thresholds = sample_tokens(
            values, md, stats, self.num_splits, self.block, self.topp_rejection
        )
        clear()
        tokens = md.apply_forced(tokens)
        lp = None
        if md.max_num_logprobs is not None:
            out = _triton_token_logprobs(
                logits, tokens, md.max_num_logprobs, self.num_splits, self.block
            )
            lp = LogprobsTensors(*out)
        return SamplerOutput(sampled_token_ids=tokens, logprobs=lp)


__all__ = ["TritonSampler", "compute_token_logprobs", "sample_tokens", "triton_enabled"]
