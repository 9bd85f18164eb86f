"""Greedy decode tail: the LM head + the sampler's greedy graph against the fused LM head
with an argmax epilogue (strixlm/kernels/lm_head_argmax.py), Qwen3-0.6B shapes.

Per row count M, each captured in a CUDA graph behind the final RMSNorm (the producer the
engine has there), 10 launches per graph:
  unfused   RMSNorm -> cuBLAS logits (bf16) -> SamplingTable.gather -> TritonSampler
            (all greedy) -> append_tokens: what a greedy decode step runs today
  lmhead    RMSNorm -> cuBLAS logits alone (the share the LM head has)
  fused     RMSNorm -> fused kernel (each config of a small sweep) -> finalize -> append
Tokens of every fused config are compared with torch.argmax over cuBLAS's bf16 logits;
a difference is reported with the two logits' gap (rounding of a different sum order).

--sample: the temperature tail instead (every row at temperature 0.8 with its own seed):
the sampler without the all-greedy flag against the Gumbel-max epilogue (lm_head_sample),
whose tokens are compared with the sampler's over cuBLAS's logits.

python benchmarks/gpu/bench_lm_head_argmax.py [--rows 1 8 ... 256] [--sample] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import lm_head_argmax as lha  # noqa: E402
from strixlm.kernels.append_tokens import append_tokens  # noqa: E402
from strixlm.kernels.rmsnorm import rmsnorm  # noqa: E402
from strixlm.sample.triton_sampler import TritonSampler  # noqa: E402
from strixlm.worker.sampling_table import SamplingTable  # noqa: E402

V, H = 151936, 1024
LAUNCHES = 10
ROWS = [1, 16, 32, 64, 128, 192, 256]


def configs(m: int, persistent: str = "") -> list[lha.LmHeadConfig]:
    """persistent "pick": the engine's tiles at m rows, one program a tile and walked by a
    persistent grid, only; "sweep": also the sweep's TMA tiles (64 rows and up, so below 64
    rows too: the tail's LM head only streams its weight) walked by a persistent grid of one
    and of two programs an SM. (Session 27 also walked pointer tiles below 96 rows: at most
    3.7 us faster than the table at 8-24 rows, and 1 us faster than the 64-row TMA walk now in
    the engine, so that walk was removed.)"""
    if not persistent:
        return sweep_configs(m)
    base = dataclasses.replace(lha.config_for_rows(m, tma=True), persistent=False)
    out = [base, dataclasses.replace(base, persistent=True)] if base.tma else [base]
    if persistent == "sweep":
        walks = [c for c in sweep_configs(max(m, 64)) if c.tma]
        out += [
            dataclasses.replace(c, persistent=True, programs_per_sm=p)
            for c in walks
            for p in (1, 2)
            if p == 1 or (c.num_stages * (c.block_m + c.block_n) * c.block_k * 2 <= 110 * 1024)
        ]
    return out


def sweep_configs(m: int) -> list[lha.LmHeadConfig]:
    """Row tiles from 16 up to the next power of two of M (at most 256), 128- or 256-wide
    vocabulary tiles, 4 or 8 warps (8 for tiles of 128 x 256 and up); tiles of 64 rows and
    up also with TMA loads."""
    out = []
    bms = sorted({16, 32, 64, 128, 256} & set(range(16, max(16, triton.next_power_of_2(m)) + 1)))
    for bm, bn, bk, st, warps in itertools.product(bms, (128, 256), (64, 128), (3, 4), (4, 8)):
        smem = st * (bm + bn) * bk * 2
        if bm * bn > 128 * 256 or smem > 220 * 1024:
            continue  # too many registers / too much shared memory
        if (bm * bn >= 128 * 256 and warps == 4) or (bm * bn <= 32 * 128 and warps == 8):
            continue
        out.append(lha.LmHeadConfig(bm, bn, bk, warps, st))
        if bm >= 64:  # the same tiles by TMA (wgmma needs 64-row tiles)
            out.append(lha.LmHeadConfig(bm, bn, bk, warps, st, tma=True))
    return out


def time_rows(
    m, w, norm_w, table, token_ids, sampler, g, max_rows, sample: bool, persistent: str = ""
) -> dict:
    """The unfused tail, the LM head alone and every fused config at m rows."""
    dev = w.device
    x = torch.randn(m, H, device=dev, generator=g).to(torch.bfloat16)
    hidden = torch.empty_like(x)
    rows = torch.arange(m, dtype=torch.int32, device=dev)
    num_tokens = torch.zeros(max_rows + 1, dtype=torch.int32, device=dev)

    def unfused():
        logits = torch.matmul(rmsnorm(x, norm_w, 1e-6, out=hidden), w.t())
        md = table.gather(rows, num_tokens, all_greedy=not sample)
        tok = sampler(logits, md).sampled_token_ids
        append_tokens(token_ids, num_tokens, rows, tok, skip_row=max_rows)
        return tok

    def lmhead():
        return torch.matmul(rmsnorm(x, norm_w, 1e-6, out=hidden), w.t())

    def fused(cfg):
        h = rmsnorm(x, norm_w, 1e-6, out=hidden)
        if sample:
            tok = lha.lm_head_sample(h, w, rows, table.f[0], table.i[1], num_tokens, cfg)
        else:
            tok = lha.lm_head_argmax(h, w, cfg)
        append_tokens(token_ids, num_tokens, rows, tok, skip_row=max_rows)
        return tok

    def per_launch(fn):
        # Each launch appends a token per row: start from empty rows, so ~330 appends stay
        # inside token_ids' 4096 columns.
        num_tokens.zero_()
        return graph_time_us(lambda: [fn() for _ in range(LAUNCHES)], 10) / LAUNCHES

    ref_logits = lmhead().float()
    num_tokens.zero_()
    if sample:  # the sampler's draw over cuBLAS's logits at positions 0, as fused() sees them
        md = table.gather(rows, num_tokens, all_greedy=False)
        ref = sampler(ref_logits.to(torch.bfloat16), md).sampled_token_ids
    else:
        ref = ref_logits.argmax(-1)
    t_unfused = per_launch(unfused)
    t_lmhead = per_launch(lmhead)
    best = (float("inf"), None)
    timed = {}
    for cfg in configs(m, persistent):
        try:
            num_tokens.zero_()
            got = fused(cfg)
        except Exception as e:  # noqa: BLE001 - a config that cannot build (shared memory)
            print(f"  M={m} {cfg}: {type(e).__name__} {str(e)[:80]}")
            continue
        bad = (got != ref).nonzero().flatten().tolist()
        if bad and sample:
            print(f"  M={m} {cfg}: {len(bad)} of {m} draws differ")
            if len(bad) > max(1, m // 50):
                continue  # more than rounding at a near tie: wrong
        elif bad:
            gaps = [float(ref_logits[i, ref[i]] - ref_logits[i, got[i]]) for i in bad[:4]]
            print(f"  M={m} {cfg}: {len(bad)} rows differ, logit gaps {gaps}")
            if max(gaps) > 0.05:
                continue  # more than rounding: wrong
        t = per_launch(lambda cfg=cfg: fused(cfg))
        timed[str(cfg)] = t
        if persistent:
            print(f"  M={m} {t:6.1f} us  {cfg}")
        if t < best[0]:
            best = (t, cfg)
    dflt = lha.config_for_rows(m, tma=lha._has_tma(dev), sample=sample)  # the engine's pick
    t_default = per_launch(lambda: fused(dflt))
    gb = V * H * 2 / 1e9
    print(
        f"M={m:4d} unfused {t_unfused:6.1f} us (LM head alone {t_lmhead:6.1f}, "
        f"{gb / t_lmhead * 1e3:.2f} TB/s)  fused default {t_default:6.1f}  "
        f"best {best[0]:6.1f} {best[1]}  gain {t_unfused - best[0]:+.1f} us"
    )
    return dict(rows=m, unfused_us=t_unfused, lm_head_us=t_lmhead, fused_default_us=t_default,
                fused_best_us=best[0], best=str(best[1]), timed=timed)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=ROWS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sample", action="store_true", help="the temperature tail")
    ap.add_argument(
        "--persistent",
        nargs="?",
        const="pick",
        default="",
        choices=["pick", "sweep"],
        help="pick: the engine's TMA tiles, one program a tile vs a persistent walk; sweep: "
        "also every TMA tile config walked by one or two programs an SM",
    )
    args = ap.parse_args()
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    w = (torch.randn(V, H, device=dev, generator=g) * 0.02).to(torch.bfloat16)
    norm_w = torch.ones(H, device=dev, dtype=torch.bfloat16)
    max_rows = max(args.rows)
    table = SamplingTable(max_rows + 1, V, dev)  # zero temperature: every row greedy
    if args.sample:
        table.f[0] = 0.8
        table.i[1] = torch.randint(0, 2**62, (max_rows + 1,), device=dev, generator=g)
    token_ids = torch.zeros(max_rows + 1, 4096, dtype=torch.int32, device=dev)
    sampler = TritonSampler()
    results = []
    for m in args.rows:
        results.append(
            time_rows(
                m, w, norm_w, table, token_ids, sampler, g, max_rows, args.sample, args.persistent
            )  # fmt: skip
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
