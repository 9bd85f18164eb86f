"""The Mamba-2 selective scan: chunked SSD over packed prompts, and the one-token update.

Per head h (group g = h // (nheads // ngroups)), with dt' = clamp(softplus(dt + dt_bias))
and the state S of shape [headdim, dstate]:
    S <- exp(dt' * A[h]) * S + dt' * x (outer) B[g]        y = S @ C[g] + D[h] * x
The public functions run Triton on CUDA tensors and the torch references (`*_ref`) on CPU
or with STRIXLM_DISABLE_TRITON=1. States are read and written in place through their own
strides, so they may be views into a shared block pool. Math is fp32 throughout; y comes
back in x's dtype, and the states keep theirs (normally fp32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from strixlm.kernels.mamba.dispatch import check_dim, check_seq_args, check_shape, use_triton
from strixlm.kernels.mamba.ssd_chunks import SSDChunks, prepare_ssd_chunks

INF = float("inf")


# ---- argument checks (shapes only: no device sync) ---------------------------------------


def _check_params(
    nheads: int,
    ngroups: int,
    A: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
) -> None:
    if ngroups < 1 or nheads % ngroups:
        raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups})")
    check_shape("A", A, (nheads,))
    check_shape("D", D, (nheads,))
    check_shape("dt_bias", dt_bias, (nheads,))


def _check_states(ssm_states: torch.Tensor, nheads: int, headdim: int, dstate: int) -> None:
    check_dim("ssm_states", ssm_states, 4)
    if tuple(ssm_states.shape[1:]) != (nheads, headdim, dstate):
        raise ValueError(
            f"ssm_states has shape {tuple(ssm_states.shape)}, "
            f"expected [slots, {nheads}, {headdim}, {dstate}]"
        )


def _check_tokens(
    x: torch.Tensor, dt: torch.Tensor, B: torch.Tensor, C: torch.Tensor
) -> tuple[int, int, int, int, int]:
    """x [T, H, P], dt [T, H], B/C [T, G, N]; returns (T, H, P, G, N)."""
    check_dim("x", x, 3)
    check_dim("B", B, 3)
    t, h, p = x.shape
    g, n = B.shape[1], B.shape[2]
    check_shape("dt", dt, (t, h))
    check_shape("B", B, (t, g, n))
    check_shape("C", C, (t, g, n))
    if B.dtype != C.dtype:
        raise ValueError(f"B and C must have the same dtype, got {B.dtype} and {C.dtype}")
    return t, h, p, g, n


def _params_contiguous(*ts: torch.Tensor | None) -> list[torch.Tensor | None]:
    # Per-head vectors are indexed with stride 1 by the kernels; normally a no-op.
    return [t.contiguous() if t is not None else None for t in ts]


# ---- torch references --------------------------------------------------------------------


def process_dt_ref(
    dt: torch.Tensor,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    dt_limit: tuple[float, float],
) -> torch.Tensor:
    """clamp(softplus(dt + dt_bias), *dt_limit) in fp32."""
    out = dt.float()
    if dt_bias is not None:
        out = out + dt_bias.float()
    if dt_softplus:
        out = F.softplus(out)
    return out.clamp(dt_limit[0], dt_limit[1])


def _scan_chunk_ref(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of one sequence, all fp32: x [L,H,P], dt [L,H], B/C [L,H,N] (per head),
    state [H,P,N] entering the chunk. Returns (y without the D skip, state leaving it)."""
    cum = (dt * A).cumsum(0)  # [L, H]
    # The incoming state, decayed to each position.
    y = torch.einsum("lhn,hpn->lhp", C, state) * cum.exp()[..., None]
    # Positions of the chunk: causal "attention" C_t.B_s with decay exp(cum_t - cum_s).
    gap = cum[:, None, :] - cum[None, :, :]  # [t, s, H]
    causal = torch.ones(len(x), len(x), dtype=torch.bool, device=x.device).tril()[..., None]
    weights = torch.einsum("thn,shn->tsh", C, B) * gap.masked_fill(~causal, -INF).exp()
    y = y + torch.einsum("tsh,shp->thp", weights * dt[None], x)
    to_end = (cum[-1:] - cum).exp() * dt  # [L, H]: decay to the chunk end, times dt
    state = state * cum[-1].exp()[:, None, None] + torch.einsum("lh,lhp,lhn->hpn", to_end, x, B)
    return y, state


def ssd_scan_varlen_ref(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    ssm_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    chunk_size: int,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
    chunks: SSDChunks | None = None,
) -> torch.Tensor:
    """Torch reference of ssd_scan_varlen: chunked SSD, one sequence at a time.

    `chunks` is accepted for signature parity with the Triton path and ignored.
    """
    num_tokens, nheads, headdim, ngroups, dstate = _check_tokens(x, dt, B, C)
    _check_params(nheads, ngroups, A, D, dt_bias)
    _check_states(ssm_states, nheads, headdim, dstate)
    check_seq_args(query_start_loc, state_indices, has_initial_state)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    per_group = nheads // ngroups
    dtp = process_dt_ref(dt, dt_bias, dt_softplus, dt_limit)
    xf, a = x.float(), A.float()
    bh = B.float().repeat_interleave(per_group, dim=1)  # [T, H, N]: head h uses group h // pg
    ch = C.float().repeat_interleave(per_group, dim=1)
    y = torch.zeros(num_tokens, nheads, headdim, dtype=torch.float32, device=x.device)
    bounds = query_start_loc.tolist()  # host reads are fine here: this path never runs in a graph
    has_past = has_initial_state.tolist()
    for i, slot in enumerate(state_indices.tolist()):
        if has_past[i]:
            state = ssm_states[slot].float()
        else:
            state = xf.new_zeros(nheads, headdim, dstate)
        for c0 in range(bounds[i], bounds[i + 1], chunk_size):
            sl = slice(c0, min(c0 + chunk_size, bounds[i + 1]))
            y[sl], state = _scan_chunk_ref(xf[sl], dtp[sl], a, bh[sl], ch[sl], state)
        ssm_states[slot] = state.to(ssm_states.dtype)
    if D is not None:
        y = y + D.float()[:, None] * xf
    return y.to(x.dtype)


def selective_state_update_ref(
    ssm_states: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    state_indices: torch.Tensor,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
) -> torch.Tensor:
    """Torch reference of selective_state_update (vectorised over the batch)."""
    batch, nheads, headdim, ngroups, dstate = _check_tokens(x, dt, B, C)
    _check_params(nheads, ngroups, A, D, dt_bias)
    _check_states(ssm_states, nheads, headdim, dstate)
    check_shape("state_indices", state_indices, (batch,))
    per_group = nheads // ngroups
    dtp = process_dt_ref(dt, dt_bias, dt_softplus, dt_limit)  # [batch, H]
    bh = B.float().repeat_interleave(per_group, dim=1)  # [batch, H, N]
    ch = C.float().repeat_interleave(per_group, dim=1)
    xf = x.float()
    idx = state_indices.long()
    decay = (dtp * A.float()).exp()[..., None, None]
    state = ssm_states[idx].float() * decay + (dtp[..., None] * xf)[..., None] * bh[:, :, None]
    ssm_states[idx] = state.to(ssm_states.dtype)
    y = torch.einsum("bhpn,bhn->bhp", state, ch)
    if D is not None:
        y = y + D.float()[:, None] * xf
    return y.to(x.dtype)


# ---- Triton launchers with the same checks ----------------------------------------------


def ssd_scan_varlen_triton(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    ssm_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    chunk_size: int,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
    chunks: SSDChunks | None = None,
) -> torch.Tensor:
    """Triton ssd_scan_varlen; graph-safe (no host reads of tensor values)."""
    from strixlm.kernels.mamba.ssd_triton import launch_ssd_scan

    num_tokens, nheads, headdim, ngroups, dstate = _check_tokens(x, dt, B, C)
    _check_params(nheads, ngroups, A, D, dt_bias)
    _check_states(ssm_states, nheads, headdim, dstate)
    check_seq_args(query_start_loc, state_indices, has_initial_state)
    if chunks is None:
        chunks = prepare_ssd_chunks(query_start_loc, num_tokens, chunk_size)
    elif chunks.chunk_size != chunk_size:
        raise ValueError(f"chunks were built for chunk_size {chunks.chunk_size}, not {chunk_size}")
    A, D, dt_bias = _params_contiguous(A, D, dt_bias)
    return launch_ssd_scan(
        x,
        dt,
        A,
        B,
        C,
        D,
        dt_bias,
        ssm_states,
        state_indices,
        has_initial_state,
        chunks,
        dt_softplus,
        dt_limit,
    )


def selective_state_update_triton(
    ssm_states: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    state_indices: torch.Tensor,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
) -> torch.Tensor:
    """Triton selective_state_update; graph-safe."""
    from strixlm.kernels.mamba.state_update_triton import launch_state_update

    batch, nheads, headdim, ngroups, dstate = _check_tokens(x, dt, B, C)
    _check_params(nheads, ngroups, A, D, dt_bias)
    _check_states(ssm_states, nheads, headdim, dstate)
    check_shape("state_indices", state_indices, (batch,))
    A, D, dt_bias = _params_contiguous(A, D, dt_bias)
    return launch_state_update(
        ssm_states, x, dt, A, B, C, D, dt_bias, state_indices, dt_softplus, dt_limit
    )


# ---- public entry points -----------------------------------------------------------------


def ssd_scan_varlen(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    ssm_states: torch.Tensor,
    query_start_loc: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor,
    chunk_size: int,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
    chunks: SSDChunks | None = None,
) -> torch.Tensor:
    """Chunked SSD scan over packed sequences; returns y [T, nheads, headdim] (with D x).

    x: [T, nheads, headdim]; dt: [T, nheads] (raw: dt_bias, softplus, dt_limit applied
    here); A: [nheads] (already -exp(A_log)); B, C: [T, ngroups, dstate]; D, dt_bias:
    [nheads] or None; ssm_states: [num_slots, nheads, headdim, dstate], read for sequences
    with has_initial_state and overwritten with every sequence's final state. Chunks of
    chunk_size restart at each sequence start. `chunks` (prepare_ssd_chunks) may be passed
    to share one chunk table across layers.
    """
    fn = ssd_scan_varlen_triton if use_triton(x) else ssd_scan_varlen_ref
    return fn(
        x,
        dt,
        A,
        B,
        C,
        D,
        dt_bias,
        ssm_states,
        query_start_loc,
        state_indices,
        has_initial_state,
        chunk_size,
        dt_softplus,
        dt_limit,
        chunks,
    )


def selective_state_update(
    ssm_states: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    state_indices: torch.Tensor,
    dt_softplus: bool = True,
    dt_limit: tuple[float, float] = (0.0, INF),
) -> torch.Tensor:
    """One decode step: x [batch, nheads, headdim], dt [batch, nheads], B/C [batch,
    ngroups, dstate]; updates ssm_states[state_indices] in place; returns y like x."""
    fn = selective_state_update_triton if use_triton(x) else selective_state_update_ref
    return fn(ssm_states, x, dt, A, B, C, D, dt_bias, state_indices, dt_softplus, dt_limit)
