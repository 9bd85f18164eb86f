"""Split-K attention's merge done by the last segment's program, not a launch of its own.

The unified kernel's split path (paged_attention.py) has NUM_SEGS programs per (query tile,
kv head), each writing a partial row (unnormalized output, running max and sum); a second
launch (_merge_segments_kernel) combined them. That launch and its kernel boundary sit on
every layer of every small-batch decode step. Here each segment program, after storing its
partial, counts itself on a per-(query tile, kv head) counter; the one that completes the
count reads all the partials back and writes the normalized rows, then resets the counter
for the next launch. A CTA barrier before the (release) add orders the program's partial
stores before it; the (acquire) add orders the other programs' stores before the loads,
which bypass L1 (.cg).

The combination is online over the segments in order (running max, rescaled sums), so it
rounds differently from the separate merge, which takes the global max first: results agree
to fp32 rounding, not bit for bit. STRIXLM_ATTN_MERGE_IN_KERNEL=1 turns it on (read at
import); off until measured on a GPU.
"""

from __future__ import annotations

import os

import torch

from strixlm.kernels.dispatch import HAS_TRITON

if HAS_TRITON:
    import triton
    import triton.language as tl

ENABLED = os.environ.get("STRIXLM_ATTN_MERGE_IN_KERNEL", "0") == "1"
# One int32 per (query tile, kv head) of a split launch: a decode step of 256 sequences and
# 8 kv heads takes 2,048.
_COUNTER_SLOTS = 1 << 16
_COUNTERS: dict[torch.device, torch.Tensor] = {}


def merge_counters(device: torch.device, slots: int) -> torch.Tensor | None:
    """Zeroed int32 counters (left at zero by every launch), or None: disabled, more slots
    than allocated, or first asked for during a CUDA graph capture (a zeroing inside the
    graph would not run before eager calls; the runners' eager warm-ups come first)."""
    if not ENABLED or slots > _COUNTER_SLOTS:
        return None
    device = torch.device(device)
    if device not in _COUNTERS:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        _COUNTERS[device] = torch.zeros(_COUNTER_SLOTS, dtype=torch.int32, device=device)
    return _COUNTERS[device]


if HAS_TRITON:

    @triton.jit
    def finish_segment(
        out_ptr, segm_acc_ptr, segm_max_ptr, segm_sum_ptr, ctr_ptr, ctr_idx, tok, head,
        row_ok, offs_d, out_scale, stride_ot, stride_oh, HEAD_DIM: tl.constexpr,
        NUM_Q_HEADS: tl.constexpr, NUM_SEGS: tl.constexpr, DIM_P: tl.constexpr,
    ):  # fmt: skip
        # tok, head, row_ok: [BLOCK_M] per row (token, q head), as the partials were stored.
        tl.debug_barrier()
        done = tl.atomic_add(ctr_ptr + ctr_idx, 1, sem="acq_rel")
        if done == NUM_SEGS - 1:
            base = (tok * NUM_Q_HEADS + head) * NUM_SEGS
            m = tl.full(row_ok.shape, float("-inf"), dtype=tl.float32)
            s = tl.zeros(row_ok.shape, dtype=tl.float32)
            acc = tl.zeros([row_ok.shape[0], DIM_P], dtype=tl.float32)
            for seg in range(NUM_SEGS):
                pm = tl.load(segm_max_ptr + base + seg, mask=row_ok, other=float("-inf"),
                             cache_modifier=".cg")  # fmt: skip
                live = row_ok & (pm > float("-inf"))  # an empty segment: no keys, acc unset
                ps = tl.load(segm_sum_ptr + base + seg, mask=live, other=0.0,
                             cache_modifier=".cg")  # fmt: skip
                pa = tl.load(
                    segm_acc_ptr + (base + seg)[:, None] * DIM_P + offs_d[None, :],
                    mask=live[:, None], other=0.0, cache_modifier=".cg",
                )  # fmt: skip
                m_new = tl.maximum(m, pm)
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                a_old = tl.exp2(m - m_safe)
                a_part = tl.where(live, tl.exp2(pm - m_safe), 0.0)
                s = s * a_old + ps * a_part
                acc = acc * a_old[:, None] + pa * a_part[:, None]
                m = m_new
            res = acc * (out_scale / tl.where(s > 0.0, s, float("inf")))[:, None]
            ptrs = out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh
            io_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
            tl.store(ptrs + offs_d[None, :], res.to(out_ptr.dtype.element_ty), mask=io_mask)
            tl.store(ctr_ptr + ctr_idx, 0)  # for the next launch
