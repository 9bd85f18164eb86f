"""The input-prep kernel against its torch reference at the engine's shapes, on CUDA.

Cases: a 256-row decode step padded on the dummy row with a block write for every 16th row,
and an admission step (8 prompts of up to 2,000 tokens, so up to 16 programs per row, plus
64 decodes) whose prompts' blocks are all written in the same launch. Each runs with the
host's packed arrays (StagedMeta) copied to the device first and read from pinned host
memory in place, and must match the reference exactly: inputs, positions, slots, sequence
lengths, the advanced counts, the block table after the writes, the gathered block-table
columns each row uses, and the device copies of rows / offsets / order.

    python benchmarks/gpu/check_input_prep.py
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from strixlm.kernels.input_prep import (
    StagedMeta,
    pack_step_meta,
    prepare_inputs,
    prepare_inputs_ref,
)

BS, ROWS, MAX_LEN = 16, 257, 40960  # 256 requests + the dummy row, Qwen3's max length
MAX_BLOCKS = MAX_LEN // BS


def case(name: str, starts: list[int], counts: list[int], writes_per_row, host_read: bool):
    dev = "cuda"
    g = torch.Generator().manual_seed(len(name))
    n = len(counts)
    rows = torch.randperm(ROWS - 1, generator=g)[:n].tolist()
    pad = 8 * (-(-n // 8)) - n
    rows_p = rows + [ROWS - 1] * pad
    counts_p = counts + [1] * pad
    token_ids = torch.randint(0, 150000, (ROWS, MAX_LEN + 1), generator=g, dtype=torch.int32)
    num_computed = torch.zeros(ROWS, dtype=torch.int32)
    for r, s in zip(rows, starts, strict=True):
        num_computed[r] = s
    table = torch.randint(1, 70000, (1, ROWS, MAX_BLOCKS), generator=g, dtype=torch.int32)
    table[:, ROWS - 1] = 0
    offsets, pairs = [0], []
    for b, (r, s, c) in enumerate(zip(rows, starts, counts, strict=True)):
        for col in writes_per_row(b, s, c):
            pairs.append((r * MAX_BLOCKS + col, 70000 + len(pairs)))
        offsets.append(len(pairs))
    offsets += [offsets[-1]] * pad
    qsl = [0]
    for c in counts_p:
        qsl.append(qsl[-1] + c)
    order = list(range(len(rows_p)))[::-1]
    e0 = 4 * (len(rows_p) + 1)
    buf = np.zeros(e0 + 2 * len(pairs), dtype=np.int32)
    writes = (np.array(offsets), np.array(pairs)) if pairs else None
    nw = pack_step_meta(buf, rows_p, np.array(qsl), np.array(order), writes, e0)
    results = []
    for use_kernel in (False, True):
        t = table.to(dev).clone()
        nc = num_computed.to(dev).clone()
        b = len(rows_p)
        rows_d = torch.full((b,), -1, dtype=torch.int32, device=dev)
        qsl_d = torch.full((b + 1,), -1, dtype=torch.int32, device=dev)
        order_d = torch.full((b,), -1, dtype=torch.int32, device=dev)
        pin = host_read and use_kernel
        src = torch.from_numpy(buf.copy())
        src = src.pin_memory() if pin else src.to(dev)
        staged = StagedMeta(src[:e0], src[e0:], nw, t, order_d)
        total = qsl[-1]
        outs = (
            torch.zeros(total, dtype=torch.int32, device=dev),
            torch.zeros(total, dtype=torch.int64, device=dev),
            torch.zeros(total, dtype=torch.int64, device=dev),
            torch.zeros(b, dtype=torch.int32, device=dev),
        )
        bt_out = torch.full((b, MAX_BLOCKS), -7, dtype=torch.int32, device=dev)
        args = (token_ids.to(dev), nc, t[0], rows_d, qsl_d, BS, *outs)
        kw = dict(num_real=n, block_table_out=bt_out, staged=staged)
        if use_kernel:
            prepare_inputs(*args, max_query_len=max(counts_p), use_kernel=True, **kw)
        else:
            prepare_inputs_ref(*args, **kw)
        torch.cuda.synchronize()
        results.append((outs, nc, t, bt_out, rows_d, qsl_d, order_d))
    (o_ref, nc_ref, t_ref, bt_ref, *meta_ref), (o, nc, t, bt, *meta) = results
    bad = [i for i, (a, c) in enumerate(zip(o_ref, o, strict=True)) if not torch.equal(a, c)]
    ok = not bad and torch.equal(nc_ref, nc) and torch.equal(t_ref, t)
    ok = ok and all(torch.equal(a, c) for a, c in zip(meta_ref, meta, strict=True))
    seq = o[3].tolist()
    cols_ok = all(
        torch.equal(bt[b, : -(-seq[b] // BS)], bt_ref[b, : -(-seq[b] // BS)])
        for b in range(len(rows_p))
    )
    print(
        f"{name:>9} host_read={int(host_read)}: rows {n}, tokens {qsl[-1]}, writes "
        f"{len(pairs)}: outputs {'equal' if not bad else f'DIFFER {bad}'}, counts / table / "
        f"meta {'equal' if ok else 'DIFFER'}, gathered columns {'equal' if cols_ok else 'DIFFER'}"
    )
    return ok and cols_ok


def main() -> int:
    g = torch.Generator().manual_seed(0)
    dec_starts = torch.randint(100, 2000, (256,), generator=g).tolist()
    pre_starts = [0] * 8 + torch.randint(100, 1500, (64,), generator=g).tolist()
    pre_counts = [2000, 1500, 900, 1024, 700, 600, 300, 1100] + [1] * 64
    every_16th = lambda b, s, c: [s // BS] if b % 16 == 0 else []  # noqa: E731
    whole_prompt = lambda b, s, c: list(range(s // BS, -(-(s + c) // BS)))  # noqa: E731
    ok = True
    for host_read in (False, True):
        ok &= case("decode", dec_starts, [1] * 256, every_16th, host_read)
        ok &= case("admission", pre_starts, pre_counts, whole_prompt, host_read)
    print("ALL EQUAL" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
