"""The tail rule: the tile and split target for one-query decode batches small enough to
run on the unified attention kernel (paged_attention.select_config asks tail_config).

The standard workload's last ~140 steps decode fewer than 40 sequences, in CUDA graphs
padded to 1-32 rows. There the general rule takes DECODE_TILE-token tiles (32) and splits
each sequence until SPLIT_TARGET_CTAS_PER_SM (2) programs an SM. H200 (sweep_decode_attn.py
--tail, session 48), us a launch at unpadded batches, that rule against 64-token tiles:
b26 49.1 vs 46.8 (1 segment), b20 44.2 vs 40.8 (2), b12 28.7 vs 27.7 (2), b6 17.4 vs 16.8
(4). The 64-token picks sit at 1.45-2.4 programs an SM, which a target of 1.5 gives.

Opt-in until measured as the engine runs it (padded graphs, batches 1-4 and the workload:
sweep_tail_padded.py, run_remeasure.sh tailpad / tailstep / tailpadab).
STRIXLM_ATTN_TAIL_TILE (read at import; 0, the default, keeps the general rule; 64 turns
this one on) and STRIXLM_ATTN_TAIL_CTAS (programs an SM to split to).
"""

from __future__ import annotations

from strixlm.kernels.env_knobs import env_float, env_int

TAIL_TILE = env_int("STRIXLM_ATTN_TAIL_TILE", 0)
TAIL_CTAS_PER_SM = env_float("STRIXLM_ATTN_TAIL_CTAS", 1.5)
if TAIL_TILE and (TAIL_TILE < 16 or TAIL_TILE & (TAIL_TILE - 1)):
    raise ValueError(f"STRIXLM_ATTN_TAIL_TILE must be 0 or a power of two >= 16, got {TAIL_TILE}")


def tail_config(max_query_len: int, dim_p: int, fp8: bool) -> tuple[int, float] | None:
    """(tile, programs an SM to split to) for a one-query decode batch the unified kernel
    takes; None where the general decode rule applies: multi-query batches (speculative
    verification), fp8 caches (their decodes run the Gluon kernel), head dims over 128, or
    either knob at 0 (TAIL_TILE is 0 by default)."""
    if max_query_len != 1 or fp8 or dim_p > 128 or TAIL_TILE <= 0 or TAIL_CTAS_PER_SM <= 0:
        return None
    return TAIL_TILE, TAIL_CTAS_PER_SM
