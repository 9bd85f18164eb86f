"""GPU check of the Mamba-2 kernels (strixlm/kernels/mamba) at Nemotron 3 Nano 30B-A3B shapes.

Shapes, from the model's config.json (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16): hidden
2688, mamba_num_heads 64, mamba_head_dim 64, ssm_state_size 128, n_groups 8, conv_kernel 4,
chunk_size 128, 23 Mamba layers of 52. So conv_dim = 64*64 + 2*8*128 = 6144 and a state is
64*64*128 fp32 = 2 MiB per sequence per layer.

For each case, Triton vs the torch reference (same inputs, reference math in fp32):
  prefill  causal_conv1d_varlen + ssd_scan_varlen on packed sequences up to 8k tokens,
           with and without initial states, state pools as strided views;
  decode   causal_conv1d_update + selective_state_update at batch 1..256;
plus: a CUDA graph of a prefill and of a 23-layer decode step (graph-safe = no host syncs;
the replayed 23-layer step gives the Mamba share of a decode step), and the dispatch
(Triton on CUDA, torch with STRIXLM_DISABLE_TRITON=1). Prints one PASS/FAIL line per check
with max errors and timings (ms, triton.testing.do_bench median).

    python benchmarks/gpu/check_mamba.py [--quick] [--sweep] [--json PATH]

--sweep also times a few SSDLaunchConfig tile choices on the 8k prefill. Exit status 0 when
every correctness check passes. JSON goes to $OUT/check_mamba.json when OUT is set.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a plain checkout

import torch  # noqa: E402

from strixlm.kernels.mamba import (  # noqa: E402
    causal_conv1d_update,
    causal_conv1d_update_ref,
    causal_conv1d_update_triton,
    causal_conv1d_varlen,
    causal_conv1d_varlen_ref,
    causal_conv1d_varlen_triton,
    prepare_ssd_chunks,
    selective_state_update,
    selective_state_update_ref,
    selective_state_update_triton,
    ssd_scan_varlen_ref,
    ssd_scan_varlen_triton,
)

NANO = dict(heads=64, headdim=64, dstate=128, groups=8, width=4, chunk=128, layers=23)
CONV_DIM = NANO["heads"] * NANO["headdim"] + 2 * NANO["groups"] * NANO["dstate"]
# Relative L2 error allowed vs the fp32 reference. bf16 outputs round at 2**-8 relative; the
# kernels' tf32 dots round fp32 operands at 2**-11, so states get ~1e-3.
TOL = {
    torch.bfloat16: {"out": 1e-2, "state": 3e-3},
    torch.float32: {"out": 1e-4, "state": 1e-4},
}
PREFILL = {
    "1x8192": ([8192], [False]),
    "mixed7": ([1, 100, 128, 129, 1000, 4096, 2538], [False, True, False, True, True, False, True]),
    "64x1": ([1] * 64, [True] * 64),
}
PREFILL_BIG = {"4x8192": ([8192] * 4, [False, True, False, True])}
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)


def bench(fn: Callable[[], Any], rep: int = 40) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=5, rep=rep, return_mode="median"))


def errs(got: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    g, r = got.float(), ref.float()
    d = (g - r).abs()
    return {
        "rel": float(d.norm() / r.norm().clamp_min(1e-30)),
        "max_abs": float(d.max()) if d.numel() else 0.0,
        "finite": bool(torch.isfinite(g).all()),
    }


def ok(e: dict[str, float], tol: float) -> bool:
    return e["finite"] and e["rel"] < tol


@dataclass
class StatePool:
    """States as a strided view into a wider buffer, like views into a block pool.

    The pool keeps its own handle on the buffer: a view made under inference_mode has no
    `._base` (torch records no view metadata for inference tensors), which is what broke
    this script on the H200."""

    base: torch.Tensor  # [slots, numel + 64]
    view: torch.Tensor  # [slots, *shape]: what the kernels see

    @classmethod
    def over(cls, base: torch.Tensor, shape: tuple[int, ...]) -> StatePool:
        return cls(base, base[:, : math.prod(shape)].view(base.shape[0], *shape))

    def clone(self) -> StatePool:
        return StatePool.over(self.base.clone(), tuple(self.view.shape[1:]))


def pool(slots: int, shape: tuple[int, ...], dtype: torch.dtype, dev: str) -> StatePool:
    """Random states in a buffer 64 elements wider per slot than they need."""
    buf = torch.randn(slots, math.prod(shape) + 64, device=dev).to(dtype)
    return StatePool.over(buf, shape)


class Layer:
    """Random Mamba-2 parameters in realistic ranges (mamba_ssm's init ranges)."""

    def __init__(self, dtype: torch.dtype, dev: str) -> None:
        h, w = NANO["heads"], NANO["width"]
        self.conv_w = (torch.randn(CONV_DIM, w, device=dev) * 0.3).to(dtype)
        self.conv_b = (torch.randn(CONV_DIM, device=dev) * 0.1).to(dtype)
        self.A = -torch.empty(h, device=dev).uniform_(1.0, 16.0)  # -exp(A_log)
        dt0 = torch.exp(torch.empty(h, device=dev).uniform_(-6.9, -2.3))  # dt in [1e-3, 0.1]
        self.dt_bias = (dt0 + torch.log(-torch.expm1(-dt0))).to(dtype)  # softplus^-1(dt0)
        self.D = torch.ones(h, device=dev).to(dtype)


def step_inputs(t: int, dtype: torch.dtype, dev: str) -> dict[str, torch.Tensor]:
    """xBC and dt as views into one in_proj-like output row, as the model passes them."""
    h = NANO["heads"]
    proj = torch.randn(t, CONV_DIM + h + 8, device=dev).to(dtype)
    return {"xbc": proj[:, :CONV_DIM], "dt": proj[:, CONV_DIM : CONV_DIM + h]}


def split_xbc(xbc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    t, g, n = xbc.shape[0], NANO["groups"], NANO["dstate"]
    x, b, c = xbc.split([NANO["heads"] * NANO["headdim"], g * n, g * n], dim=-1)
    return x.view(t, NANO["heads"], NANO["headdim"]), b.view(t, g, n), c.view(t, g, n)


# ---- prefill ----------------------------------------------------------------------------


def check_prefill(name: str, lens: list[int], init: list[bool], dtype, dev, sweep=False) -> dict:
    n, t = len(lens), sum(lens)
    slots = n + 3
    layer = Layer(dtype, dev)
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    sidx = torch.randperm(slots, device=dev)[:n].to(torch.int32)
    has_init = torch.tensor(init, device=dev)
    inp = step_inputs(t, dtype, dev)
    conv_st = pool(slots, (CONV_DIM, NANO["width"] - 1), dtype, dev)
    ssm_st = pool(slots, (NANO["heads"], NANO["headdim"], NANO["dstate"]), torch.float32, dev)
    row: dict[str, Any] = {"case": f"prefill {name}", "dtype": str(dtype), "tokens": t}
    tol = TOL[dtype]

    def conv(fn, states: StatePool):
        return fn(inp["xbc"], layer.conv_w, layer.conv_b, states.view, qsl, sidx, has_init)

    c_ref_st, c_tri_st = conv_st.clone(), conv_st.clone()
    xbc_ref = conv(causal_conv1d_varlen_ref, c_ref_st)
    xbc_tri = conv(causal_conv1d_varlen_triton, c_tri_st)
    row["conv_out"] = errs(xbc_tri, xbc_ref)
    row["conv_state_exact"] = bool(torch.equal(c_tri_st.base, c_ref_st.base))
    x, b, c = split_xbc(xbc_ref)  # both scans see the same inputs
    chunks = prepare_ssd_chunks(qsl, t, NANO["chunk"])
    params = (x, inp["dt"], layer.A, b, c, layer.D, layer.dt_bias)
    no_limit = (0.0, float("inf"))

    def scan(fn, states: StatePool, **kw):
        return fn(*params, states.view, qsl, sidx, has_init, NANO["chunk"], True, no_limit, **kw)

    s_ref, s_tri = ssm_st.clone(), ssm_st.clone()
    y_ref = scan(ssd_scan_varlen_ref, s_ref)
    y_tri = scan(ssd_scan_varlen_triton, s_tri, chunks=chunks)
    row["scan_out"] = errs(y_tri, y_ref)
    row["scan_state"] = errs(s_tri.view, s_ref.view)
    unused = sorted(set(range(slots)) - set(sidx.tolist()))
    row["unused_slots_untouched"] = bool(torch.equal(s_tri.base[unused], ssm_st.base[unused]))
    row["ok"] = (
        ok(row["conv_out"], tol["out"])
        and row["conv_state_exact"]
        and ok(row["scan_out"], tol["out"])
        and ok(row["scan_state"], tol["state"])
        and row["unused_slots_untouched"]
    )
    st_a, st_b = conv_st.clone(), ssm_st.clone()
    row["ms_conv_triton"] = bench(lambda: conv(causal_conv1d_varlen_triton, st_a))
    row["ms_scan_triton"] = bench(lambda: scan(ssd_scan_varlen_triton, st_b, chunks=chunks))
    row["ms_scan_triton_incl_table"] = bench(lambda: scan(ssd_scan_varlen_triton, st_b))
    row["ms_chunk_table"] = bench(lambda: prepare_ssd_chunks(qsl, t, NANO["chunk"]))
    row["ms_scan_ref"] = bench(lambda: scan(ssd_scan_varlen_ref, st_b), rep=5)
    if sweep:

        def launch(cfg, states: StatePool):
            from strixlm.kernels.mamba.ssd_triton import launch_ssd_scan

            args = (*params, states.view, sidx, has_init, chunks, True, no_limit, cfg)
            return launch_ssd_scan(*args)

        row["sweep"] = sweep_configs(launch, y_tri, ssm_st)
    return row


def sweep_configs(launch: Callable, y_default: torch.Tensor, states: StatePool) -> list[dict]:
    """Time a few tile choices of the chunk kernels (same math; outputs compared too)."""
    from strixlm.kernels.mamba.ssd_triton import SSDLaunchConfig

    variants = [
        SSDLaunchConfig(),
        SSDLaunchConfig(out_block_s=64),
        SSDLaunchConfig(out_warps=8, out_block_s=64),
        SSDLaunchConfig(out_block_m=128, out_block_s=32, out_warps=8),
        SSDLaunchConfig(out_block_p=32),
        SSDLaunchConfig(state_block_s=32),
        SSDLaunchConfig(state_block_n=128, state_warps=8),
        SSDLaunchConfig(num_stages=2),
        SSDLaunchConfig(num_stages=4, out_block_s=64),
    ]
    out = []
    for cfg in variants:
        try:
            y = launch(cfg, states.clone())  # from the same initial states as y_default
            ms = bench(functools.partial(launch, cfg, states.clone()))
            out.append({"config": repr(cfg), "ms": ms, "vs_default": errs(y, y_default)})
        except Exception as e:  # a config that does not compile is reported, not fatal
            out.append({"config": repr(cfg), "error": f"{type(e).__name__}: {e}"[:300]})
    return out


# ---- decode -----------------------------------------------------------------------------


def check_decode(batch: int, dtype, dev) -> dict:
    layer = Layer(dtype, dev)
    slots = batch + 5
    sidx = torch.randperm(slots, device=dev)[:batch].to(torch.int32)
    inp = step_inputs(batch, dtype, dev)
    conv_st = pool(slots, (CONV_DIM, NANO["width"] - 1), dtype, dev)
    ssm_st = pool(slots, (NANO["heads"], NANO["headdim"], NANO["dstate"]), torch.float32, dev)
    tol = TOL[dtype]
    row: dict[str, Any] = {"case": f"decode batch {batch}", "dtype": str(dtype)}

    def conv(fn, st: StatePool):
        return fn(inp["xbc"], layer.conv_w, layer.conv_b, st.view, sidx)

    c_ref, c_tri = conv_st.clone(), conv_st.clone()
    xbc_ref = conv(causal_conv1d_update_ref, c_ref)
    row["conv_out"] = errs(conv(causal_conv1d_update_triton, c_tri), xbc_ref)
    row["conv_state_exact"] = bool(torch.equal(c_tri.base, c_ref.base))
    x, b, c = split_xbc(xbc_ref)

    def ssu(fn, st: StatePool):
        return fn(st.view, x, inp["dt"], layer.A, b, c, layer.D, layer.dt_bias, sidx)

    s_ref, s_tri = ssm_st.clone(), ssm_st.clone()
    row["ssu_out"] = errs(
        ssu(selective_state_update_triton, s_tri), ssu(selective_state_update_ref, s_ref)
    )
    row["ssu_state"] = errs(s_tri.view, s_ref.view)
    row["ok"] = (
        ok(row["conv_out"], tol["out"])
        and row["conv_state_exact"]
        and ok(row["ssu_out"], tol["out"])
        and ok(row["ssu_state"], tol["state"])
    )
    st_c, st_s = conv_st.clone(), ssm_st.clone()
    row["ms_conv_update"] = bench(lambda: conv(causal_conv1d_update_triton, st_c))
    row["ms_state_update"] = bench(lambda: ssu(selective_state_update_triton, st_s))
    state_bytes = 2 * batch * NANO["heads"] * NANO["headdim"] * NANO["dstate"] * 4
    row["ssu_GBps"] = state_bytes / (row["ms_state_update"] * 1e-3) / 1e9
    row["ms_23_layers_graph"] = decode_graph_ms(batch, dtype, dev)
    return row


def decode_graph_ms(batch: int, dtype, dev) -> float:
    """Replay time of a CUDA graph holding conv update + state update for all 23 layers,
    each layer with its own state pool (so the state traffic is the real one)."""
    layers = [Layer(dtype, dev) for _ in range(NANO["layers"])]
    sidx = torch.arange(batch, device=dev, dtype=torch.int32)
    inp = step_inputs(batch, dtype, dev)
    conv_pools = [pool(batch, (CONV_DIM, NANO["width"] - 1), dtype, dev).view for _ in layers]
    shape = (NANO["heads"], NANO["headdim"], NANO["dstate"])
    ssm_pools = [pool(batch, shape, torch.float32, dev).view for _ in layers]

    def step():
        for lay, cst, sst in zip(layers, conv_pools, ssm_pools, strict=True):
            xbc = causal_conv1d_update(inp["xbc"], lay.conv_w, lay.conv_b, cst, sidx)
            x, b, c = split_xbc(xbc)
            selective_state_update(sst, x, inp["dt"], lay.A, b, c, lay.D, lay.dt_bias, sidx)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up compiles outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return bench(graph.replay)


# ---- graph safety and dispatch ------------------------------------------------------------


def check_prefill_graph(dtype, dev) -> dict:
    """Capture chunk table + conv + scan for fixed shapes, replay on new data, compare."""
    lens, init = [700, 1, 300], [False, True, True]
    t, n = sum(lens), len(lens)
    layer = Layer(dtype, dev)
    qsl = torch.tensor([0, 700, 701, 1001], dtype=torch.int32, device=dev)
    sidx = torch.tensor([2, 0, 1], dtype=torch.int32, device=dev)
    has_init = torch.tensor(init, device=dev)
    inp = step_inputs(t, dtype, dev)
    conv_st = pool(n, (CONV_DIM, NANO["width"] - 1), dtype, dev)
    ssm_st = pool(n, (NANO["heads"], NANO["headdim"], NANO["dstate"]), torch.float32, dev)
    c0, s0 = conv_st.base.clone(), ssm_st.base.clone()

    def run():
        xbc = causal_conv1d_varlen(
            inp["xbc"], layer.conv_w, layer.conv_b, conv_st.view, qsl, sidx, has_init
        )
        x, b, c = split_xbc(xbc)
        chunks = prepare_ssd_chunks(qsl, t, NANO["chunk"])
        return ssd_scan_varlen_triton(
            x,
            inp["dt"],
            layer.A,
            b,
            c,
            layer.D,
            layer.dt_bias,
            ssm_st.view,
            qsl,
            sidx,
            has_init,
            NANO["chunk"],
            chunks=chunks,
        )

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = run()
    inp["xbc"].copy_(torch.randn_like(inp["xbc"]))  # new data, same buffers
    conv_st.base.copy_(c0)
    ssm_st.base.copy_(s0)
    graph.replay()
    torch.cuda.synchronize()
    y_g, cs_g, ss_g = y_graph.clone(), conv_st.base.clone(), ssm_st.base.clone()
    conv_st.base.copy_(c0)
    ssm_st.base.copy_(s0)
    y_e = run()
    e = errs(y_g, y_e)
    same = bool(torch.equal(cs_g, conv_st.base)) and bool(torch.equal(ss_g, ssm_st.base))
    return {
        "case": "prefill CUDA graph",
        "out": e,
        "states_equal": same,
        "ok": e["finite"] and e["rel"] == 0.0 and same,
    }


def check_dispatch(dev) -> dict:
    """Public functions: Triton on CUDA; the reference with STRIXLM_DISABLE_TRITON=1."""
    layer = Layer(torch.bfloat16, dev)
    inp = step_inputs(4, torch.bfloat16, dev)
    sidx = torch.arange(4, device=dev, dtype=torch.int32)
    st = pool(4, (CONV_DIM, NANO["width"] - 1), torch.bfloat16, dev)
    res = {}
    for env, fn in (("0", causal_conv1d_update_triton), ("1", causal_conv1d_update_ref)):
        old = os.environ.get("STRIXLM_DISABLE_TRITON")
        os.environ["STRIXLM_DISABLE_TRITON"] = env
        try:
            a = causal_conv1d_update(inp["xbc"], layer.conv_w, layer.conv_b, st.clone().view, sidx)
        finally:
            if old is None:
                os.environ.pop("STRIXLM_DISABLE_TRITON", None)
            else:
                os.environ["STRIXLM_DISABLE_TRITON"] = old
        b = fn(inp["xbc"], layer.conv_w, layer.conv_b, st.clone().view, sidx)
        res[f"disable={env}"] = bool(torch.equal(a, b))
    return {"case": "dispatch", **res, "ok": all(res.values())}


# ---- driver -------------------------------------------------------------------------------


def fmt(row: dict) -> str:
    parts = [f"{'PASS' if row.get('ok') else 'FAIL'}  {row['case']:<22}"]
    for k, v in row.items():
        if isinstance(v, dict) and "rel" in v:
            parts.append(f"{k} rel={v['rel']:.1e} max={v['max_abs']:.1e}")
        elif k.startswith("ms_") or k.endswith("GBps"):
            parts.append(f"{k}={v:.3f}")
        elif isinstance(v, bool) and k != "ok":
            parts.append(f"{k}={v}")
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="skip the 4x8192 prefill and fp32 run")
    p.add_argument("--sweep", action="store_true", help="time SSDLaunchConfig variants")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("check_mamba: CUDA is not available; nothing to check", file=sys.stderr)
        return 2
    import triton

    dev = "cuda"
    env = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "shapes": NANO,
    }
    print(json.dumps(env), flush=True)
    torch.manual_seed(0)
    t0 = time.time()
    rows: list[dict] = []

    def record(fn: Callable[[], dict], label: str) -> None:
        try:
            row = fn()
        except Exception:
            row = {"case": label, "ok": False, "error": traceback.format_exc()[-1500:]}
            print(row["error"], file=sys.stderr)
        rows.append(row)
        print(fmt(row), flush=True)
        for s in row.get("sweep", []):
            print("      sweep", json.dumps(s))

    cases = dict(PREFILL) if args.quick else {**PREFILL, **PREFILL_BIG}
    with torch.inference_mode():
        for name, (lens, init) in cases.items():
            sweep = args.sweep and name == "1x8192"
            fn = functools.partial(check_prefill, name, lens, init, torch.bfloat16, dev, sweep)
            record(fn, name)
        if not args.quick:
            lens, init = PREFILL["mixed7"]
            fn = functools.partial(check_prefill, "mixed7", lens, init, torch.float32, dev)
            record(fn, "fp32")
        for batch in DECODE_BATCHES:
            record(functools.partial(check_decode, batch, torch.bfloat16, dev), f"decode {batch}")
        record(functools.partial(check_prefill_graph, torch.bfloat16, dev), "prefill graph")
        record(functools.partial(check_dispatch, dev), "dispatch")
    n_ok = sum(bool(r.get("ok")) for r in rows)
    dec1 = next((r for r in rows if r["case"] == "decode batch 1"), {})
    if "ms_23_layers_graph" in dec1:
        print(
            f"Mamba share of a batch-1 decode step (23 layers, graph): "
            f"{dec1['ms_23_layers_graph']:.3f} ms"
        )
    print(
        f"{'ALL OK' if n_ok == len(rows) else 'FAILURES'}: {n_ok}/{len(rows)} checks pass "
        f"in {time.time() - t0:.0f} s"
    )
    path = args.json or (
        os.path.join(os.environ["OUT"], "check_mamba.json") if os.environ.get("OUT") else None
    )
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"env": env, "rows": rows}, indent=1))
        print(f"wrote {path}")
    return 0 if n_ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
