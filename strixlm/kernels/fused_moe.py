"""Fused mixture-of-experts in Triton, with a torch reference beside it.

Weights use the stacked layout of HF's 3D experts: w_up [E, N_up, H], w_down [E, H, I].
For "silu_gated", w_up holds gate rows then up rows (N_up = 2 * I) and the expert computes
silu(x @ gate.T) * (x @ up.T); for "relu2" (NemotronH), N_up = I and it computes
relu(x @ up.T) ** 2. Each token's output is sum_j topk_weights[t, j] * expert_j(x_t).

The Triton path (graph-safe: no host reads of device values, fixed-size buffers):
  1. align: every (token, slot) pair, flat index token * top_k + slot, gets a row in its
     expert's segment of `sorted_ids`; segments are padded to BLOCK_M so each block of rows
     belongs to one expert (`block_expert`), and `num_padded` (on the device) says how many
     rows are used. Blocks past it exit at once, so at decode only the chosen experts'
     weights are ever read.
  2. up GEMM: hidden rows (flat // top_k) times w_up[e].T, activation fused in the epilogue
     (gate and up tiles of the same columns are accumulated side by side) -> act [T*k, I].
  3. down GEMM: act rows times w_down[e].T, times the routing weight -> partial [T*k, H].
  4. the k partial rows of each token are summed in fp32 and rounded once -> [T, H].

Numerics (shared with fused_moe_ref): each GEMM accumulates in fp32 and is rounded to the
input dtype as a torch linear would be; the activation follows torch's own ops on rounded
inputs (F.silu(g) * u, square(relu(h))); the routing weight multiplies in fp32 and the
product is rounded; the sum over slots is in fp32. An id outside [0, E) selects no expert:
that slot adds nothing (expert-parallel shards can mark foreign experts with -1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from strixlm.kernels.dispatch import use_triton

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - CPU-only installs without triton
    HAS_TRITON = False

ACTIVATIONS = ("silu_gated", "relu2")
_ACT_CODE = {"silu_gated": 1, "relu2": 2}
# Tokens per launch sequence: bounds the [T*k, I] and [T*k, H] scratch buffers at prefill.
MAX_CHUNK_TOKENS = 16384


# ---- validation ------------------------------------------------------------------------


def check_moe_inputs(
    hidden: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str,
) -> None:
    """Raise ValueError naming what is wrong; shapes only, never device values."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {ACTIVATIONS}")
    if hidden.dim() != 2 or w_up.dim() != 3 or w_down.dim() != 3:
        raise ValueError(
            "expected hidden [T, H], w_up [E, N_up, H], w_down [E, H, I]; got "
            f"{tuple(hidden.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}"
        )
    e, n_up, h = w_up.shape
    inter = w_down.shape[2]
    want_n_up = 2 * inter if activation == "silu_gated" else inter
    if hidden.shape[1] != h or w_down.shape[:2] != (e, h) or n_up != want_n_up:
        raise ValueError(
            f"shapes disagree for {activation}: hidden {tuple(hidden.shape)}, "
            f"w_up {tuple(w_up.shape)} (want [E, {want_n_up}, H]), w_down {tuple(w_down.shape)}"
        )
    if topk_ids.dim() != 2 or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights {tuple(topk_weights.shape)} and topk_ids {tuple(topk_ids.shape)} "
            "must both be [T, top_k]"
        )
    if topk_ids.shape[0] != hidden.shape[0]:
        raise ValueError(f"{topk_ids.shape[0]} routing rows for {hidden.shape[0]} tokens")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids must be int32 or int64, not {topk_ids.dtype}")
    if not topk_weights.is_floating_point():
        raise ValueError(f"topk_weights must be floating point, not {topk_weights.dtype}")
    if w_up.dtype != hidden.dtype or w_down.dtype != hidden.dtype:
        raise ValueError(
            f"dtypes differ: hidden {hidden.dtype}, w_up {w_up.dtype}, w_down {w_down.dtype}"
        )


# ---- torch reference -------------------------------------------------------------------


def apply_activation_ref(h: torch.Tensor, activation: str) -> torch.Tensor:
    """h = x @ w_up[e].T (already in the model dtype) -> the expert's intermediate."""
    if activation == "silu_gated":
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up
    return torch.square(F.relu(h))


def fused_moe_ref(
    hidden: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu_gated",
) -> torch.Tensor:
    """Expert by expert, as HF does; reads ids back to the host, so never in a CUDA graph."""
    check_moe_inputs(hidden, w_up, w_down, topk_weights, topk_ids, activation)
    t, h = hidden.shape
    top_k = topk_ids.shape[1]
    num_experts = w_up.shape[0]
    flat_ids = topk_ids.reshape(-1).long()
    flat_w = topk_weights.reshape(-1).float()
    partial = hidden.new_zeros(t * top_k, h)
    for e in flat_ids.unique().tolist():
        if not 0 <= e < num_experts:
            continue  # no expert: the slot adds nothing
        rows = (flat_ids == e).nonzero().squeeze(1)
        act = apply_activation_ref(hidden[rows // top_k] @ w_up[e].t(), activation)
        y = act @ w_down[e].t()
        partial[rows] = (y.float() * flat_w[rows, None]).to(hidden.dtype)
    return partial.view(t, top_k, h).float().sum(dim=1).to(hidden.dtype)


# ---- alignment (tokens sorted by expert, padded to blocks) -----------------------------


@dataclass
class MoEAlignment:
    sorted_ids: torch.Tensor  # [num_blocks * block_m] int32 flat ids; padding rows = T * k
    block_expert: torch.Tensor  # [num_blocks] int32 expert of each block (used blocks only)
    num_padded: torch.Tensor  # [1] int32 rows in use (a multiple of block_m)
    block_m: int

    @property
    def num_blocks(self) -> int:
        return self.block_expert.shape[0]


def max_num_blocks(num_rows: int, num_experts: int, block_m: int) -> int:
    """Blocks needed in the worst case: every non-empty expert pads up to block_m - 1 rows,
    and at most min(E, rows) experts are non-empty. A bound from shapes alone."""
    worst_rows = num_rows + min(num_experts, num_rows) * (block_m - 1)
    return max(1, -(-worst_rows // block_m))


def moe_align_ref(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> MoEAlignment:
    """Torch reference of the alignment; within an expert, rows keep flat-index order."""
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    valid = (flat >= 0) & (flat < num_experts)
    counts = torch.bincount(flat[valid], minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    ends = padded.cumsum(0)
    starts = ends - padded
    num_blocks = max_num_blocks(n, num_experts, block_m)
    sorted_ids = torch.full((num_blocks * block_m,), n, dtype=torch.int32, device=flat.device)
    key = torch.where(valid, flat, num_experts)  # invalid ids sort last and are dropped
    order = torch.argsort(key, stable=True)[: int(valid.sum())]
    experts = flat[order]
    rank = torch.arange(order.numel(), device=flat.device) - (counts.cumsum(0) - counts)[experts]
    sorted_ids[starts[experts] + rank] = order.to(torch.int32)
    block_starts = torch.arange(num_blocks, device=flat.device) * block_m
    block_expert = torch.searchsorted(ends, block_starts, right=True).to(torch.int32)
    num_padded = ends[-1:].to(torch.int32) if num_experts else torch.zeros(1, dtype=torch.int32)
    return MoEAlignment(sorted_ids, block_expert, num_padded, block_m)


# ---- kernel configuration --------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class MoEConfig:
    block_m: int  # shared by both GEMMs: the alignment pads to it
    up: GemmConfig
    down: GemmConfig


def default_config(num_tokens: int, top_k: int, num_experts: int, dtype: torch.dtype) -> MoEConfig:
    """Tiles by the expected rows per expert: small tiles and many programs when decode is
    bound by reading weights, bigger tiles when prefill is bound by math."""
    rows = num_tokens * top_k / max(1, num_experts)
    wide = torch.tensor([], dtype=dtype).element_size() >= 4  # fp32: half-depth K tiles
    if rows <= 16:
        bk = 64 if wide else 128
        return MoEConfig(16, GemmConfig(32, bk, 1, 4, 4), GemmConfig(64, bk, 1, 4, 4))
    if rows <= 64:
        return MoEConfig(32, GemmConfig(64, 64, 8, 4, 4), GemmConfig(64, 64, 8, 4, 4))
    if rows <= 512:
        return MoEConfig(64, GemmConfig(64, 64, 8, 4, 3), GemmConfig(128, 64, 8, 4, 3))
    return MoEConfig(128, GemmConfig(64, 64, 8, 8, 3), GemmConfig(128, 64, 8, 8, 3))


# ---- Triton kernels --------------------------------------------------------------------

if HAS_TRITON:

    @triton.jit
    def _count_kernel(ids_ptr, counts_ptr, ranks_ptr, n, num_experts, BLOCK: tl.constexpr):
        # The atomic's old value is the row's rank inside its expert (order is arbitrary,
        # which changes nothing: every row's result is independent of its neighbours).
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        e = tl.load(ids_ptr + offs, mask=ok, other=-1)
        ok = ok & (e >= 0) & (e < num_experts)
        rank = tl.atomic_add(counts_ptr + e, 1, mask=ok)
        tl.store(ranks_ptr + offs, rank, mask=ok)

    @triton.jit
    def _prefix_kernel(
        counts_ptr,
        starts_ptr,
        num_padded_ptr,
        block_expert_ptr,
        sorted_ids_ptr,
        num_experts,
        num_blocks,
        pad_value,
        E_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_B: tl.constexpr,
        PAD_CHUNK: tl.constexpr,
    ):
        # One program: padded segment starts, the padding rows, and each block's expert.
        e = tl.arange(0, E_PAD)
        e_ok = e < num_experts
        count = tl.load(counts_ptr + e, mask=e_ok, other=0)
        padded = (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        ends = tl.cumsum(padded, axis=0)
        starts = ends - padded
        tl.store(starts_ptr + e, starts, mask=e_ok)
        tl.store(num_padded_ptr, tl.sum(padded, axis=0))
        # Padding rows of each segment, PAD_CHUNK columns at a time (keeps registers low).
        pad_from = starts + count
        pad_len = padded - count
        pad = tl.zeros([E_PAD, PAD_CHUNK], dtype=tl.int32) + pad_value
        for j0 in tl.static_range(0, BLOCK_M, PAD_CHUNK):
            j = j0 + tl.arange(0, PAD_CHUNK)
            pad_ok = e_ok[:, None] & (j[None, :] < pad_len[:, None])
            tl.store(sorted_ids_ptr + pad_from[:, None] + j[None, :], pad, mask=pad_ok)
        # A block's expert = how many segments end at or before the block's first row.
        for b0 in range(0, num_blocks, BLOCK_B):
            b = b0 + tl.arange(0, BLOCK_B)
            before = (ends[None, :] <= (b * BLOCK_M)[:, None]) & e_ok[None, :]
            tl.store(block_expert_ptr + b, tl.sum(before.to(tl.int32), axis=1), mask=b < num_blocks)

    @triton.jit
    def _align_small_kernel(
        ids_ptr,
        sorted_ids_ptr,
        block_expert_ptr,
        num_padded_ptr,
        n,
        num_experts,
        num_blocks,
        N_P: tl.constexpr,
        E_PAD: tl.constexpr,
        BLOCK_M: tl.constexpr,
        P_CHUNK: tl.constexpr,
    ):
        # Decode-sized alignment in one program, no atomics and no memset: counts, each row's
        # rank among the earlier rows of its expert, then every output slot gathered from
        # the row that belongs there (rows keep flat order within an expert, as the ref).
        i = tl.arange(0, N_P)
        e = tl.load(ids_ptr + i, mask=i < n, other=-1)
        ok = (i < n) & (e >= 0) & (e < num_experts)
        e = tl.where(ok, e, -1)
        ex = tl.arange(0, E_PAD)
        count = tl.sum((e[None, :] == ex[:, None]).to(tl.int32), axis=1)  # [E_PAD]
        padded = (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        ends = tl.cumsum(padded, axis=0)
        starts = ends - padded
        tl.store(num_padded_ptr, tl.sum(padded, axis=0))
        same = (e[:, None] == e[None, :]) & (i[None, :] < i[:, None])
        rank = tl.sum(same.to(tl.int32), axis=1)  # [N_P]
        # Slot of each valid row: its expert's start plus its rank.
        row_start = tl.sum(tl.where(e[:, None] == ex[None, :], starts[None, :], 0), axis=1)
        slot = tl.where(ok, row_start + rank, -1)
        for p0 in range(0, num_blocks * BLOCK_M, P_CHUNK):
            p = p0 + tl.arange(0, P_CHUNK)
            hit = slot[None, :] == p[:, None]  # [P_CHUNK, N_P]: at most one row per slot
            row = tl.sum(tl.where(hit, i[None, :], 0), axis=1)
            any_hit = tl.sum(hit.to(tl.int32), axis=1) > 0
            tl.store(sorted_ids_ptr + p, tl.where(any_hit, row, n), mask=p < num_blocks * BLOCK_M)
        # A block's expert = how many segments end at or before the block's first row.
        b = tl.arange(0, N_P)  # num_blocks <= n: each used block holds a row
        before = (ends[None, :] <= (b * BLOCK_M)[:, None]) & (ex < num_experts)[None, :]
        tl.store(block_expert_ptr + b, tl.sum(before.to(tl.int32), axis=1), mask=b < num_blocks)

    @triton.jit
    def _scatter_kernel(
        ids_ptr, ranks_ptr, starts_ptr, sorted_ids_ptr, n, num_experts, BLOCK: tl.constexpr
    ):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        e = tl.load(ids_ptr + offs, mask=ok, other=-1)
        ok = ok & (e >= 0) & (e < num_experts)
        rank = tl.load(ranks_ptr + offs, mask=ok, other=0)
        start = tl.load(starts_ptr + e, mask=ok, other=0)
        tl.store(sorted_ids_ptr + start + rank, offs, mask=ok)

    @triton.jit
    def _moe_gemm_kernel(
        a_ptr,
        w_ptr,
        out_ptr,
        topk_w_ptr,
        sorted_ids_ptr,
        block_expert_ptr,
        num_padded_ptr,
        num_rows,
        N,
        K,
        stride_am,
        stride_we,
        stride_wn,
        stride_wk,
        stride_om,
        num_blocks,
        A_ROW_DIV: tl.constexpr,
        ACTIVATION: tl.constexpr,
        MUL_ROUTING_WEIGHT: tl.constexpr,
        IEEE_FP32: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr,
    ):
        """out[flat, n] = epilogue(sum_k a[flat // A_ROW_DIV, k] * w[e, n, k]) for the rows
        of one expert block. ACTIVATION: 0 none, 1 silu gated (up rows at n + N), 2 relu2."""
        pid = tl.program_id(0)
        num_n_blocks = tl.cdiv(N, BLOCK_N)
        # Grouped order: GROUP_M row blocks sweep the columns together, so the weight tiles
        # of an expert with many blocks are reused from L2.
        per_group = GROUP_M * num_n_blocks
        first_m = (pid // per_group) * GROUP_M
        group_rows = min(num_blocks - first_m, GROUP_M)
        pid_m = first_m + (pid % per_group) % group_rows
        pid_n = (pid % per_group) // group_rows
        if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
            return
        flat = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
        row_ok = flat < num_rows
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        a_rows = (flat // A_ROW_DIV).to(tl.int64)
        # Wrapped columns: the tail block recomputes valid columns; the store masks them.
        cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + a_rows[:, None] * stride_am + offs_k[None, :]
        w_ptrs = (
            w_ptr + expert * stride_we + cols[None, :] * stride_wn + offs_k[:, None] * stride_wk
        )
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(0, tl.cdiv(K, BLOCK_K)):
            k_ok = offs_k < K - kb * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None], other=0.0)
            if IEEE_FP32:
                acc = tl.dot(a, w, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, w, acc)
            if ACTIVATION == 1:
                w_up = tl.load(w_ptrs + N * stride_wn, mask=k_ok[:, None], other=0.0)
                if IEEE_FP32:
                    acc_up = tl.dot(a, w_up, acc_up, input_precision="ieee")
                else:
                    acc_up = tl.dot(a, w_up, acc_up)
            a_ptrs += BLOCK_K
            w_ptrs += BLOCK_K * stride_wk
        out_ty = out_ptr.dtype.element_ty
        h = acc.to(out_ty).to(tl.float32)  # the linear's output, rounded as torch rounds it
        if ACTIVATION == 1:
            up = acc_up.to(out_ty).to(tl.float32)
            silu = (h / (1.0 + tl.exp(-h))).to(out_ty).to(tl.float32)
            h = silu * up
        elif ACTIVATION == 2:
            h = tl.maximum(h, 0.0)
            h = h * h
        if MUL_ROUTING_WEIGHT:
            rw = tl.load(topk_w_ptr + flat, mask=row_ok, other=0.0)
            h = h.to(out_ty).to(tl.float32) * rw[:, None]
        out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        out_ptrs = out_ptr + flat.to(tl.int64)[:, None] * stride_om + out_cols[None, :]
        tl.store(out_ptrs, h.to(out_ty), mask=row_ok[:, None] & (out_cols < N)[None, :])

    @triton.jit
    def _sum_slots_kernel(
        partial_ptr, ids_ptr, out_ptr, H, num_experts, TOP_K: tl.constexpr, BLOCK: tl.constexpr
    ):
        # out[t] = sum over valid slots j of partial[t * TOP_K + j], in fp32.
        t = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < H
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for j in range(TOP_K):
            e = tl.load(ids_ptr + t * TOP_K + j)
            slot_ok = ok & (e >= 0) & (e < num_experts)
            row = tl.load(partial_ptr + (t * TOP_K + j) * H + cols, mask=slot_ok, other=0.0)
            acc += row.to(tl.float32)
        tl.store(out_ptr + t * H + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)


_ALIGN_BLOCK = 256


# Rows (tokens x top_k) up to which one program aligns them (decode batches): [E, rows] and
# [rows, rows] comparisons fit its registers, and two launches and a memset are saved.
_ALIGN_SMALL_ROWS = 64
_ALIGN_SMALL_EXPERTS = 256


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> MoEAlignment:
    """Triton alignment, no host reads: one launch for decode-sized inputs, else one memset
    and three launches."""
    flat = topk_ids.reshape(-1)
    if flat.dtype != torch.int32:
        flat = flat.to(torch.int32)
    flat = flat.contiguous()
    n = flat.numel()
    dev = flat.device
    num_blocks = max_num_blocks(n, num_experts, block_m)
    if 0 < n <= _ALIGN_SMALL_ROWS and num_experts <= _ALIGN_SMALL_EXPERTS:
        sorted_ids = torch.empty(num_blocks * block_m, dtype=torch.int32, device=dev)
        block_expert = torch.empty(num_blocks, dtype=torch.int32, device=dev)
        num_padded = torch.empty(1, dtype=torch.int32, device=dev)
        n_p = max(16, triton.next_power_of_2(n))
        assert num_blocks <= n_p  # max_num_blocks(n, E, bm) <= n
        _align_small_kernel[(1,)](
            flat,
            sorted_ids,
            block_expert,
            num_padded,
            n,
            num_experts,
            num_blocks,
            N_P=n_p,
            E_PAD=max(16, triton.next_power_of_2(num_experts)),
            BLOCK_M=block_m,
            P_CHUNK=64,
            num_warps=4,
        )
        return MoEAlignment(sorted_ids, block_expert, num_padded, block_m)
    scratch = torch.zeros(2 * num_experts + 1, dtype=torch.int32, device=dev)
    counts, starts = scratch[:num_experts], scratch[num_experts : 2 * num_experts]
    num_padded = scratch[2 * num_experts :]
    ranks = torch.empty(n, dtype=torch.int32, device=dev)
    sorted_ids = torch.empty(num_blocks * block_m, dtype=torch.int32, device=dev)
    block_expert = torch.empty(num_blocks, dtype=torch.int32, device=dev)
    grid = (triton.cdiv(n, _ALIGN_BLOCK),)
    e_pad = triton.next_power_of_2(num_experts)
    _count_kernel[grid](flat, counts, ranks, n, num_experts, BLOCK=_ALIGN_BLOCK)
    _prefix_kernel[(1,)](
        counts,
        starts,
        num_padded,
        block_expert,
        sorted_ids,
        num_experts,
        num_blocks,
        n,
        E_PAD=e_pad,
        BLOCK_M=block_m,
        BLOCK_B=max(16, 8192 // e_pad),  # [BLOCK_B, E_PAD] comparisons per step
        PAD_CHUNK=min(16, block_m),
        num_warps=8 if num_experts >= 256 else 4,
    )
    _scatter_kernel[grid](flat, ranks, starts, sorted_ids, n, num_experts, BLOCK=_ALIGN_BLOCK)
    return MoEAlignment(sorted_ids, block_expert, num_padded, block_m)


def _launch_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    topk_w: torch.Tensor,
    align: MoEAlignment,
    num_rows: int,
    n_out: int,
    a_row_div: int,
    activation_code: int,
    mul_weight: bool,
    cfg: GemmConfig,
) -> None:
    k = w.shape[2]
    grid = (align.num_blocks * triton.cdiv(n_out, cfg.block_n),)
    _moe_gemm_kernel[grid](
        a,
        w,
        out,
        topk_w,
        align.sorted_ids,
        align.block_expert,
        align.num_padded,
        num_rows,
        n_out,
        k,
        a.stride(0),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        out.stride(0),
        align.num_blocks,
        A_ROW_DIV=a_row_div,
        ACTIVATION=activation_code,
        MUL_ROUTING_WEIGHT=mul_weight,
        IEEE_FP32=a.dtype == torch.float32,
        BLOCK_M=align.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def fused_moe_triton(
    hidden: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu_gated",
    config: MoEConfig | None = None,
) -> torch.Tensor:
    """The Triton path (CUDA, or CPU tensors under TRITON_INTERPRET=1)."""
    check_moe_inputs(hidden, w_up, w_down, topk_weights, topk_ids, activation)
    if w_up.stride(2) != 1 or w_down.stride(2) != 1:
        raise ValueError("expert weights must be contiguous along their last dim")
    t, h = hidden.shape
    out = torch.empty_like(hidden)
    if t == 0:
        return out
    if hidden.stride(1) != 1:
        hidden = hidden.contiguous()
    ids = topk_ids.to(torch.int32).contiguous()
    weights = topk_weights.to(torch.float32).contiguous()
    for s in range(0, t, MAX_CHUNK_TOKENS):
        e = min(t, s + MAX_CHUNK_TOKENS)
        _fused_moe_chunk(
            hidden[s:e], w_up, w_down, weights[s:e], ids[s:e], activation, config, out[s:e]
        )
    return out


def _fused_moe_chunk(
    hidden: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    activation: str,
    config: MoEConfig | None,
    out: torch.Tensor,
) -> None:
    t, h = hidden.shape
    top_k = ids.shape[1]
    num_experts, _, inter = w_down.shape
    cfg = config or default_config(t, top_k, num_experts, hidden.dtype)
    align = moe_align(ids, num_experts, cfg.block_m)
    rows = t * top_k
    act = torch.empty(rows, inter, dtype=hidden.dtype, device=hidden.device)
    _launch_gemm(
        hidden, w_up, act, weights, align, rows, inter, top_k, _ACT_CODE[activation], False, cfg.up
    )
    partial = torch.empty(rows, h, dtype=hidden.dtype, device=hidden.device)
    _launch_gemm(act, w_down, partial, weights, align, rows, h, 1, 0, True, cfg.down)
    block = min(1024, triton.next_power_of_2(h))
    _sum_slots_kernel[(t, triton.cdiv(h, block))](
        partial, ids, out, h, num_experts, TOP_K=top_k, BLOCK=block, num_warps=4
    )


# ---- dispatch --------------------------------------------------------------------------


def fused_moe(
    hidden: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu_gated",
) -> torch.Tensor:
    """hidden [T, H] -> [T, H]: sum_j topk_weights[:, j] * expert_{topk_ids[:, j]}(hidden)."""
    if use_triton(hidden):  # Triton on CUDA unless disabled; the torch reference elsewhere
        return fused_moe_triton(hidden, w_up, w_down, topk_weights, topk_ids, activation)
    return fused_moe_ref(hidden, w_up, w_down, topk_weights, topk_ids, activation)
