"""GPU check of the fused MoE Triton kernels at real model shapes (bf16).

Models (from their config.json files):
  qwen3-30b-a3b   Qwen/Qwen3-30B-A3B: 128 experts, top 8, hidden 2048, moe_intermediate 768,
                  silu gated, softmax routing with norm_topk_prob.
  nemotron3-nano  nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: 128 experts, top 6, hidden 2688,
                  moe_intermediate 1856, relu2, sigmoid routing with a correction bias,
                  n_group 1, routed_scaling_factor 2.5.
  nemotron3-super (only with --models ...): 512 experts, top 22, experts at moe_latent_size
                  1024, moe_intermediate 2688, relu2 (LatentMoE: FusedMoE sees hidden 1024).

For each model and T in 1, 16, 256, 4096:
  * accuracy: Triton vs the torch reference (fused_moe_ref, same bf16 rounding points) and
    both vs an fp32 reference; PASS when the Triton output is finite, within 1e-2 relative
    L2 of the bf16 reference, and no less accurate against fp32 than the bf16 reference is;
  * time: median ms (triton.testing.do_bench) of the Triton path eagerly and, for T <= 256,
    replayed from a CUDA graph (also a check: the path must capture and give the same
    output), and of the torch reference eagerly;
  * weight-read bandwidth: bytes of the experts actually chosen / time (the decode bound),
    and TFLOP/s.
Also: the Triton alignment vs its torch reference at T = 4096, and the dispatch of
fused_moe (Triton on CUDA, the reference with STRIXLM_DISABLE_TRITON=1).
--sweep additionally times a few tile configurations per case and prints the fastest.

    python benchmarks/gpu/check_moe.py [--models qwen3-30b-a3b,nemotron3-nano] [--sweep]

Writes JSON to $OUT/check_moe.json when OUT is set (or --json). Exit status 0 when every
check passes. About 1-2 minutes on an H200 without --sweep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a plain checkout

import torch  # noqa: E402

from strixlm.kernels import fused_moe as fm  # noqa: E402
from strixlm.layers.moe import select_experts_sigmoid_bias, select_experts_softmax  # noqa: E402

MODELS: dict[str, dict[str, Any]] = {
    "qwen3-30b-a3b": dict(E=128, k=8, H=2048, I=768, act="silu_gated", routing="softmax"),
    "nemotron3-nano": dict(E=128, k=6, H=2688, I=1856, act="relu2", routing="sigmoid_bias"),
    "nemotron3-super": dict(E=512, k=22, H=1024, I=2688, act="relu2", routing="sigmoid_bias"),
}
DEFAULT_MODELS = "qwen3-30b-a3b,nemotron3-nano"
TOKENS = (1, 16, 256, 4096)
GRAPH_MAX_T = 256
REL_TOL = 1e-2  # relative L2, Triton vs the bf16 torch reference
H200_PEAK_GBPS = 4800.0

SWEEP: list[fm.MoEConfig] = [
    fm.MoEConfig(16, fm.GemmConfig(32, 128, 1, 4, 4), fm.GemmConfig(64, 128, 1, 4, 4)),
    fm.MoEConfig(16, fm.GemmConfig(64, 128, 1, 4, 4), fm.GemmConfig(64, 128, 1, 4, 4)),
    fm.MoEConfig(16, fm.GemmConfig(32, 256, 1, 4, 3), fm.GemmConfig(32, 256, 1, 4, 3)),
    fm.MoEConfig(16, fm.GemmConfig(64, 64, 1, 4, 5), fm.GemmConfig(128, 64, 1, 4, 5)),
    fm.MoEConfig(32, fm.GemmConfig(64, 64, 8, 4, 4), fm.GemmConfig(64, 64, 8, 4, 4)),
    fm.MoEConfig(32, fm.GemmConfig(64, 128, 8, 4, 3), fm.GemmConfig(128, 64, 8, 4, 3)),
    fm.MoEConfig(64, fm.GemmConfig(64, 64, 8, 4, 3), fm.GemmConfig(128, 64, 8, 4, 3)),
    fm.MoEConfig(64, fm.GemmConfig(128, 64, 8, 8, 3), fm.GemmConfig(128, 64, 8, 8, 3)),
    fm.MoEConfig(128, fm.GemmConfig(64, 64, 8, 8, 3), fm.GemmConfig(128, 64, 8, 8, 3)),
    fm.MoEConfig(128, fm.GemmConfig(128, 64, 8, 8, 3), fm.GemmConfig(128, 64, 8, 8, 4)),
]


def bench(fn: Callable[[], Any]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=50, return_mode="median"))


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _err(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]


class Weights:
    def __init__(self, m: dict[str, Any], dev: str) -> None:
        e, h, i = m["E"], m["H"], m["I"]
        n_up = 2 * i if m["act"] == "silu_gated" else i
        g = torch.Generator(device=dev).manual_seed(0)
        # Scaled so activations stay O(1) through both GEMMs.
        self.w_up = (torch.randn(e, n_up, h, device=dev, generator=g) * h**-0.5).bfloat16()
        self.w_down = (torch.randn(e, h, i, device=dev, generator=g) * i**-0.5).bfloat16()
        self.bias = torch.randn(e, device=dev, generator=g) * 0.1
        self.bytes_per_expert = (n_up * h + h * i) * 2
        self.flops_per_row = 2 * (n_up * h + h * i)


def route(m: dict[str, Any], w: Weights, t: int, dev: str) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(t, m["E"], device=dev) * 2
    if m["routing"] == "softmax":
        return select_experts_softmax(logits, m["k"], True)
    return select_experts_sigmoid_bias(logits, w.bias, m["k"], 1, 1, True, 2.5)


def check_case(
    name: str, m: dict[str, Any], w: Weights, t: int, dev: str, sweep: bool
) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "T": t}
    torch.manual_seed(t)
    x = torch.randn(t, m["H"], device=dev).bfloat16()
    weights, ids = route(m, w, t, dev)
    act = m["act"]
    args = (x, w.w_up, w.w_down, weights, ids, act)
    tri = fm.fused_moe_triton(*args)
    ref = fm.fused_moe_ref(*args)
    truth = fm.fused_moe_ref(x.float(), w.w_up.float(), w.w_down.float(), weights, ids, act)
    row["rel_err_vs_ref"] = rel_l2(tri, ref)
    row["max_abs_err_vs_ref"] = float((tri.float() - ref.float()).abs().max())
    row["rel_err_triton_vs_fp32"] = rel_l2(tri, truth)
    row["rel_err_ref_vs_fp32"] = rel_l2(ref, truth)
    row["finite"] = bool(torch.isfinite(tri).all())
    row["ok"] = bool(
        row["finite"]
        and row["rel_err_vs_ref"] <= REL_TOL
        and row["rel_err_triton_vs_fp32"] <= 1.5 * row["rel_err_ref_vs_fp32"] + 1e-3
    )
    experts_used = int(ids.unique().numel())
    row["experts_read"] = experts_used
    weight_bytes = experts_used * w.bytes_per_expert
    flops = t * m["k"] * w.flops_per_row
    row["triton_ms"] = bench(lambda: fm.fused_moe_triton(*args))
    row["ref_ms"] = bench(lambda: fm.fused_moe_ref(*args))
    best_ms = row["triton_ms"]
    if t <= GRAPH_MAX_T:
        try:
            graph_out, graph_ms = graph_replay(args)
            row["graph_ms"] = graph_ms
            row["graph_max_diff"] = float((graph_out.float() - tri.float()).abs().max())
            row["graph_bitwise"] = bool(torch.equal(graph_out, tri))
            row["ok"] = row["ok"] and row["graph_max_diff"] <= 1e-2 * float(tri.abs().max())
            best_ms = min(best_ms, graph_ms)
        except Exception as exc:
            row["ok"] = False
            row["graph_error"] = _err(exc)
    row["weight_GBps"] = weight_bytes / (best_ms * 1e-3) / 1e9
    row["peak_frac"] = row["weight_GBps"] / H200_PEAK_GBPS
    row["TFLOPs"] = flops / (best_ms * 1e-3) / 1e12
    if sweep:
        row["sweep"] = sweep_configs(args)
    return row


def graph_replay(args: tuple) -> tuple[torch.Tensor, float]:
    """Capture the Triton path in a CUDA graph (it must not sync), replay, time it."""
    fm.fused_moe_triton(*args)  # compile outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fm.fused_moe_triton(*args)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(g):
        out = fm.fused_moe_triton(*args)
    g.replay()
    torch.cuda.synchronize()
    return out.clone(), bench(g.replay)


def sweep_configs(args: tuple) -> list[dict[str, Any]]:
    results = []
    for cfg in SWEEP:
        try:
            ms = bench(lambda c=cfg: fm.fused_moe_triton(*args, config=c))
            results.append({"config": repr(cfg), "ms": ms})
        except Exception as exc:
            results.append({"config": repr(cfg), "error": _err(exc)})
    results.sort(key=lambda r: r.get("ms", float("inf")))
    return results


def _align_keys(a: fm.MoEAlignment, n: int) -> torch.Tensor:
    """Sorted (expert, flat id) keys of the first n aligned rows: order-free within experts."""
    rows = a.sorted_ids[:n].long()
    experts = a.block_expert.long().repeat_interleave(a.block_m)[:n]
    return torch.sort(experts * (a.sorted_ids.numel() + 1) + rows).values


def check_align(m: dict[str, Any], dev: str) -> dict[str, Any]:
    """Same used blocks, block experts and (expert, row) multiset as the torch reference."""
    t = 4096
    ids = torch.randint(0, m["E"], (t, m["k"]), device=dev, dtype=torch.int32)
    out: dict[str, Any] = {}
    for block_m in (16, 64, 128):
        got = fm.moe_align(ids, m["E"], block_m)
        ref = fm.moe_align_ref(ids, m["E"], block_m)
        n = int(ref.num_padded)
        same_len = int(got.num_padded) == n
        blocks = n // block_m
        same_experts = torch.equal(got.block_expert[:blocks], ref.block_expert[:blocks])
        out[f"block_m_{block_m}"] = bool(
            same_len and same_experts and torch.equal(_align_keys(got, n), _align_keys(ref, n))
        )
    out["ok"] = all(out.values())
    return out


def check_dispatch(dev: str) -> dict[str, Any]:
    m = MODELS["qwen3-30b-a3b"]
    e, h, i = 16, 256, 128
    x = torch.randn(32, h, device=dev).bfloat16()
    w_up = (torch.randn(e, 2 * i, h, device=dev) * 0.05).bfloat16()
    w_down = (torch.randn(e, h, i, device=dev) * 0.05).bfloat16()
    weights, ids = select_experts_softmax(torch.randn(32, e, device=dev), m["k"], True)
    args = (x, w_up, w_down, weights, ids, "silu_gated")
    out = {"triton_on_cuda": bool(torch.equal(fm.fused_moe(*args), fm.fused_moe_triton(*args)))}
    old = os.environ.get("STRIXLM_DISABLE_TRITON")
    os.environ["STRIXLM_DISABLE_TRITON"] = "1"
    try:
        out["reference_when_disabled"] = bool(
            torch.equal(fm.fused_moe(*args), fm.fused_moe_ref(*args))
        )
    finally:
        if old is None:
            os.environ.pop("STRIXLM_DISABLE_TRITON", None)
        else:
            os.environ["STRIXLM_DISABLE_TRITON"] = old
    out["ok"] = all(out.values())
    return out


HEADER = (
    f"{'model':<16}{'T':>6} {'ok':<5}{'rel_err':>9}{'max_abs':>9}{'tri/fp32':>10}{'ref/fp32':>10}"
    f"{'tri_ms':>9}{'graph_ms':>10}{'ref_ms':>9}{'experts':>8}{'wGB/s':>8}{'%peak':>7}{'TFLOP/s':>9}"
)


def fmt_row(r: dict[str, Any]) -> str:
    def f(key: str, spec: str) -> str:
        v = r.get(key)
        return format(v, spec) if isinstance(v, int | float) else "-"

    status = "PASS" if r.get("ok") else "FAIL"
    line = (
        f"{r['model']:<16}{r['T']:>6} {status:<5}{f('rel_err_vs_ref', '.1e'):>9}"
        f"{f('max_abs_err_vs_ref', '.1e'):>9}{f('rel_err_triton_vs_fp32', '.1e'):>10}"
        f"{f('rel_err_ref_vs_fp32', '.1e'):>10}{f('triton_ms', '.3f'):>9}{f('graph_ms', '.3f'):>10}"
        f"{f('ref_ms', '.3f'):>9}{f('experts_read', 'd'):>8}{f('weight_GBps', '.0f'):>8}"
        f"{100 * r['peak_frac'] if 'peak_frac' in r else float('nan'):>7.1f}{f('TFLOPs', '.1f'):>9}"
    )
    for key in ("error", "graph_error"):
        if key in r:
            line += f"\n    {key}: {r[key]}"
    if r.get("sweep"):
        best = r["sweep"][0]
        line += f"\n    sweep best: {best.get('ms', float('nan')):.3f} ms {best['config']}"
    return line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS, help=f"comma list of {list(MODELS)}")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--sweep", action="store_true", help="also time the SWEEP tile configs")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("FAIL: no CUDA device")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    dev = "cuda"
    t0 = time.perf_counter()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"FAIL: unknown --models {unknown}; choose from {list(MODELS)}")
        return 1
    tokens = [int(t) for t in args.tokens.split(",")]
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "rows": [], "align": {}}
    print(HEADER, flush=True)
    for name in names:
        m = MODELS[name]
        w = Weights(m, dev)
        for t in tokens:
            try:
                row = check_case(name, m, w, t, dev, args.sweep)
            except Exception as exc:
                traceback.print_exc()
                row = {"model": name, "T": t, "ok": False, "error": _err(exc)}
            report["rows"].append(row)
            print(fmt_row(row), flush=True)
        try:
            report["align"][name] = check_align(m, dev)
        except Exception as exc:
            report["align"][name] = {"ok": False, "error": _err(exc)}
        a = report["align"][name]
        print(f"{'PASS' if a['ok'] else 'FAIL'} align {name}: {a}", flush=True)
        del w
        torch.cuda.empty_cache()
    try:
        report["dispatch"] = check_dispatch(dev)
    except Exception as exc:
        report["dispatch"] = {"ok": False, "error": _err(exc)}
    d = report["dispatch"]
    print(f"{'PASS' if d['ok'] else 'FAIL'} dispatch: {d}", flush=True)
    report["seconds"] = time.perf_counter() - t0
    ok = (
        all(r.get("ok") for r in report["rows"])
        and all(a.get("ok") for a in report["align"].values())
        and report["dispatch"].get("ok", False)
    )
    failed = [f"{r['model']} T={r['T']}" for r in report["rows"] if not r.get("ok")]
    print(f"{'PASS' if ok else 'FAIL'} check_moe: {len(report['rows'])} cases", end="")
    print(f", failed: {', '.join(failed)}" if failed else "", f"({report['seconds']:.0f}s)")
    path = args.json or (
        os.path.join(os.environ["OUT"], "check_moe.json") if os.environ.get("OUT") else None
    )
    if path:
        with open(path, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
