"""GPU check of the fused Triton kernels (RMSNorm, fused add+RMSNorm, silu_and_mul, rotary).

For each kernel at real shapes: relative error vs the torch reference (the layers' own CPU
code path, run on the GPU with STRIXLM_DISABLE_TRITON=1), then median time (triton.testing
.do_bench, L2 flushed between runs) of Triton vs torch eager vs torch.compile of the same
torch code, with the achieved memory bandwidth. Also checks that the layer classes really
dispatch to Triton on CUDA and to torch when STRIXLM_DISABLE_TRITON=1.

    python benchmarks/gpu/check_fused.py [--no-compile] [--dtype bf16] [--json PATH]

Prints a table; writes JSON to $OUT/check_fused.json when OUT is set (or to --json).
Exit status 0 when every correctness check passes, 1 otherwise. Takes < 2 minutes on an
H200 (torch.compile stops being measured once --compile-budget seconds are spent on it).
Times at T = 1 are launch-bound (no CUDA graph here): they show launch cost, not bandwidth.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a plain checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from strixlm.layers.activation import silu_and_mul as layer_silu_and_mul  # noqa: E402
from strixlm.layers.norm import RMSNorm  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402

TOKENS = (1, 256, 2048, 8192)
# Shapes of two real models: Qwen3-0.6B (hidden 1024) and Llama-3-8B (hidden 4096).
MODELS: dict[str, dict[str, int]] = {
    "h1024": {"hidden": 1024, "inter": 3072, "hq": 16, "hk": 8, "head_dim": 128},
    "h4096": {"hidden": 4096, "inter": 14336, "hq": 32, "hk": 8, "head_dim": 128},
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Relative (L2) error allowed vs the torch reference; a dtype ulp or two on a few elements.
REL_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}
EPS = 1e-6
MAX_POS = 32768


@contextlib.contextmanager
def torch_path() -> Iterator[None]:
    """Force the layers' torch code (the reference) for the duration."""
    old = os.environ.get("STRIXLM_DISABLE_TRITON")
    os.environ["STRIXLM_DISABLE_TRITON"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("STRIXLM_DISABLE_TRITON", None)
        else:
            os.environ["STRIXLM_DISABLE_TRITON"] = old


def bench(fn: Callable[[], Any]) -> float:
    """Median milliseconds of fn (L2 flushed before each run)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=40, return_mode="median"))


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    g, r = got.float(), ref.float()
    diff = (g - r).abs()
    return {
        "rel_err": float(diff.norm() / r.norm().clamp_min(1e-30)),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "exact_frac": float((g == r).float().mean()) if diff.numel() else 1.0,
        "finite": bool(torch.isfinite(g).all()),
    }


# ---- the cases -------------------------------------------------------------------------
# The torch references take tensors only, so one torch.compile per kernel serves all shapes;
# each is the layer's torch code op for op, and check() asserts it equals the layer bitwise.


def ref_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()  # RMSNorm._norm
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def ref_fused_add_rmsnorm(
    x: torch.Tensor, res: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    s = x + res  # RMSNorm.forward's residual branch
    return ref_rmsnorm(s, w, eps), s


def ref_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)  # layers.activation.silu_and_mul
    return F.silu(gate) * up


def ref_rotary(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_t: torch.Tensor,
    sin_t: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    cos = cos_t[positions].unsqueeze(1)  # RotaryEmbedding.forward
    sin = sin_t[positions].unsqueeze(1)
    return RotaryEmbedding._rotate(q, cos, sin), RotaryEmbedding._rotate(k, cos, sin)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a.dtype == b.dtype and torch.equal(a, b))


def _worst(*errs: dict[str, Any]) -> dict[str, Any]:
    return max(errs, key=lambda e: e["rel_err"])


def _norm_layer(hidden: int, dtype: torch.dtype, dev: str) -> RMSNorm:
    layer = RMSNorm(hidden, EPS).to(device=dev, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(1.0 + 0.1 * torch.randn(hidden, device=dev))
    return layer


class Case:
    """tri(): the Triton call; ref_fn(*ref_args): the torch reference; check(): errors."""

    tri: Callable[[], Any]
    ref_fn: Callable[..., Any]
    ref_args: tuple
    nbytes: int

    def check(self) -> dict[str, Any]:
        raise NotImplementedError


class RMSNormCase(Case):
    def __init__(self, t: int, m: dict, dtype: torch.dtype, dev: str, heads: bool = False):
        from strixlm.kernels.rmsnorm import rmsnorm

        if heads:
            # Qwen3's q-norm: over head_dim, on a strided [T, Hq, D] view of the qkv output.
            hq, hk, d = m["hq"], m["hk"], m["head_dim"]
            qkv = torch.randn(t, (hq + 2 * hk) * d, device=dev, dtype=dtype)
            x = qkv[:, : hq * d].view(t, hq, d)
            h = d
        else:
            h = m["hidden"]
            x = torch.randn(t, h, device=dev, dtype=dtype)
        self.layer = layer = _norm_layer(h, dtype, dev)
        self.x = x
        self.tri = lambda: rmsnorm(x, layer.weight, layer.eps)
        self.ref_fn, self.ref_args = ref_rmsnorm, (x, layer.weight, layer.eps)
        self.nbytes = (2 * x.numel() + h) * x.element_size()

    def check(self) -> dict[str, Any]:
        with torch_path():
            ref = self.layer(self.x)
        return dict(rel_err(self.tri(), ref), ref_is_layer=_same(self.ref_fn(*self.ref_args), ref))


class FusedAddCase(Case):
    def __init__(self, t: int, m: dict, dtype: torch.dtype, dev: str):
        from strixlm.kernels.rmsnorm import fused_add_rmsnorm

        h = m["hidden"]
        self.layer = layer = _norm_layer(h, dtype, dev)
        self.x = x = torch.randn(t, h, device=dev, dtype=dtype)
        self.res = res = torch.randn(t, h, device=dev, dtype=dtype)
        self.kernel = fused_add_rmsnorm
        # Timing re-adds x into res each run (it is in place); harmless for speed.
        self.tri = lambda: fused_add_rmsnorm(x, res, layer.weight, layer.eps)
        self.ref_fn, self.ref_args = ref_fused_add_rmsnorm, (x, res, layer.weight, layer.eps)
        self.nbytes = (4 * t * h + h) * x.element_size()

    def check(self) -> dict[str, Any]:
        r_tri = self.res.clone()
        out_t, sum_t = self.kernel(self.x, r_tri, self.layer.weight, self.layer.eps)
        with torch_path():
            ref = self.layer(self.x, self.res.clone())
        return dict(
            _worst(rel_err(out_t, ref[0]), rel_err(sum_t, ref[1])),
            in_place=bool(sum_t.data_ptr() == r_tri.data_ptr()),
            ref_is_layer=_same(self.ref_fn(*self.ref_args), ref),
        )


class SiluCase(Case):
    def __init__(self, t: int, m: dict, dtype: torch.dtype, dev: str):
        from strixlm.kernels.activation import silu_and_mul

        i = m["inter"]
        self.x = x = torch.randn(t, 2 * i, device=dev, dtype=dtype) * 3
        self.tri = lambda: silu_and_mul(x)
        self.ref_fn, self.ref_args = ref_silu_and_mul, (x,)
        self.nbytes = 3 * t * i * x.element_size()

    def check(self) -> dict[str, Any]:
        with torch_path():
            ref = layer_silu_and_mul(self.x)
        return dict(rel_err(self.tri(), ref), ref_is_layer=_same(self.ref_fn(self.x), ref))


class RotaryCase(Case):
    def __init__(self, t: int, m: dict, dtype: torch.dtype, dev: str):
        from strixlm.kernels.rotary import rotary_inplace

        hq, hk, d = m["hq"], m["hk"], m["head_dim"]
        self.shape = (t, hq, hk, d)
        self.rot = rot = RotaryEmbedding(d, MAX_POS, 1e6).to(dev)  # the tables stay fp32
        self.qkv = qkv = torch.randn(t, (hq + 2 * hk) * d, device=dev, dtype=dtype)
        q, k = self._qk(qkv)
        self.positions = pos = torch.randint(0, MAX_POS, (t,), device=dev)
        self.kernel = rotary_inplace
        # Timing rotates the same q/k again each run (in place); harmless for speed.
        self.tri = lambda: rotary_inplace(pos, q, k, rot.cos, rot.sin)
        self.ref_fn, self.ref_args = ref_rotary, (pos, q, k, rot.cos, rot.sin)
        e = qkv.element_size()
        self.nbytes = 2 * t * (hq + hk) * d * e + t * d * 4 + t * pos.element_size()

    def _qk(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t, hq, hk, d = self.shape
        return qkv[:, : hq * d].view(t, hq, d), qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)

    def check(self) -> dict[str, Any]:
        t, hq, hk, d = self.shape
        buf = self.qkv.clone()
        q, k = self._qk(buf)
        with torch_path():
            ref = self.rot(self.positions, q.clone(), k.clone())
        v_before = buf[:, (hq + hk) * d :].clone()
        self.kernel(self.positions, q, k, self.rot.cos, self.rot.sin)
        q0, k0 = self._qk(self.qkv)
        return dict(
            _worst(rel_err(q, ref[0]), rel_err(k, ref[1])),
            v_untouched=bool(torch.equal(buf[:, (hq + hk) * d :], v_before)),
            ref_is_layer=_same(ref_rotary(self.positions, q0, k0, self.rot.cos, self.rot.sin), ref),
        )


CASES: dict[str, Callable[..., Case]] = {
    "rmsnorm": RMSNormCase,
    "fused_add_rmsnorm": FusedAddCase,
    "rmsnorm_heads": lambda t, m, dtype, dev: RMSNormCase(t, m, dtype, dev, heads=True),
    "silu_and_mul": SiluCase,
    "rotary": RotaryCase,
}


# ---- layer dispatch ----------------------------------------------------------------------


def check_dispatch(dtype: torch.dtype, dev: str) -> dict[str, Any]:
    """The layers must run Triton on CUDA, and torch with STRIXLM_DISABLE_TRITON=1.

    The in-place results of the Triton path (residual sum, rotary) tell the paths apart.
    """
    from strixlm.kernels.activation import silu_and_mul
    from strixlm.kernels.rmsnorm import rmsnorm

    out: dict[str, Any] = {}
    layer = _norm_layer(1024, dtype, dev)
    x = torch.randn(64, 1024, device=dev, dtype=dtype)
    out["rmsnorm_is_triton"] = _same(layer(x), rmsnorm(x, layer.weight, layer.eps))
    res = torch.randn_like(x)
    out["fused_residual_in_place"] = layer(x, res)[1].data_ptr() == res.data_ptr()
    with torch_path():
        out["disabled_residual_not_in_place"] = layer(x, res)[1].data_ptr() != res.data_ptr()
    g = torch.randn(64, 2 * 1536, device=dev, dtype=dtype)
    out["silu_is_triton"] = _same(layer_silu_and_mul(g), silu_and_mul(g))
    rot = RotaryEmbedding(128, 4096, 1e4).to(dev)
    q = torch.randn(64, 8, 128, device=dev, dtype=dtype)
    k = torch.randn(64, 2, 128, device=dev, dtype=dtype)
    pos = torch.randint(0, 4096, (64,), device=dev)
    out["rotary_in_place"] = rot(pos, q, k)[0].data_ptr() == q.data_ptr()
    with torch_path():
        out["disabled_rotary_not_in_place"] = rot(pos, q, k)[0].data_ptr() != q.data_ptr()
    return out


# ---- driver ----------------------------------------------------------------------------


def _err(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]


def _time(fn: Callable[[], Any]) -> tuple[float | None, str | None]:
    try:
        return bench(fn), None
    except Exception as exc:  # keep going: one bad case must not lose the table
        return None, _err(exc)


def run(args: argparse.Namespace) -> dict[str, Any]:
    dev, dtype = args.device, DTYPES[args.dtype]
    t_start = time.perf_counter()
    compile_spent = 0.0
    rows: list[dict[str, Any]] = []
    compiled: dict[str, Callable[..., Any]] = {}
    for name, make in CASES.items():
        for mname, m in MODELS.items():
            for t in args.tokens:
                row: dict[str, Any] = {"kernel": name, "model": mname, "T": t}
                rows.append(row)
                try:
                    torch.manual_seed(t)
                    case = make(t, m, dtype, dev)
                    row["bytes"] = case.nbytes
                    row.update(case.check())
                    row["ok"] = bool(
                        row["finite"]
                        and row["rel_err"] <= REL_TOL[dtype]
                        and row.get("in_place", True)
                        and row.get("v_untouched", True)
                        and row.get("ref_is_layer", True)
                    )
                except Exception as exc:
                    row["ok"] = False
                    row["error"] = _err(exc)
                    traceback.print_exc()
                    print(_fmt_row(row), flush=True)
                    continue
                row["triton_ms"], err = _time(case.tri)
                if err:
                    row["error"] = err
                row["eager_ms"], _ = _time(lambda c=case: c.ref_fn(*c.ref_args))
                if args.compile and compile_spent < args.compile_budget:
                    c0 = time.perf_counter()
                    try:
                        # One compiled reference per kernel, dynamic in the shapes.
                        if name not in compiled:
                            compiled[name] = torch.compile(case.ref_fn, dynamic=True)
                        fn = compiled[name]
                        fn(*case.ref_args)  # compile (or recompile) outside the timing
                        compile_spent += time.perf_counter() - c0
                        row["compile_ms"], _ = _time(lambda c=case, f=fn: f(*c.ref_args))
                    except Exception as exc:
                        compile_spent += time.perf_counter() - c0
                        row["compile_error"] = _err(exc)
                elif args.compile:
                    row["compile_error"] = "skipped: compile budget spent"
                for impl in ("triton", "eager", "compile"):
                    ms = row.get(f"{impl}_ms")
                    if ms:
                        row[f"{impl}_GBps"] = case.nbytes / (ms * 1e-3) / 1e9
                print(_fmt_row(row), flush=True)
    dispatch: dict[str, Any] = {}
    if dev.startswith("cuda"):
        try:
            dispatch = check_dispatch(dtype, dev)
        except Exception as exc:
            dispatch = {"error": _err(exc)}
    return {
        "rows": rows,
        "dispatch": dispatch,
        "seconds": time.perf_counter() - t_start,
        "compile_seconds": compile_spent,
    }


HEADER = (
    f"{'kernel':<18}{'model':<7}{'T':>6} {'ok':<3}{'rel_err':>9}{'exact':>7}"
    f"{'triton_us':>11}{'eager_us':>10}{'comp_us':>9}{'tri_GB/s':>10}{'eag_GB/s':>10}"
    f"{'cmp_GB/s':>10}{'x_eager':>9}{'x_comp':>8}"
)


def _fmt_row(r: dict[str, Any]) -> str:
    def us(key: str) -> str:
        v = r.get(key)
        return f"{v * 1e3:.1f}" if v else "-"

    def gb(key: str) -> str:
        v = r.get(key)
        return f"{v:.0f}" if v else "-"

    def ratio(key: str) -> str:
        a, b = r.get(key), r.get("triton_ms")
        return f"{a / b:.2f}" if a and b else "-"

    line = (
        f"{r['kernel']:<18}{r['model']:<7}{r['T']:>6} {'Y' if r.get('ok') else 'N':<3}"
        f"{r.get('rel_err', float('nan')):>9.1e}{r.get('exact_frac', float('nan')):>7.3f}"
        f"{us('triton_ms'):>11}{us('eager_ms'):>10}{us('compile_ms'):>9}"
        f"{gb('triton_GBps'):>10}{gb('eager_GBps'):>10}{gb('compile_GBps'):>10}"
        f"{ratio('eager_ms'):>9}{ratio('compile_ms'):>8}"
    )
    if r.get("error"):
        line += f"  ERROR {r['error']}"
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--compile-budget", type=float, default=45.0, help="seconds")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", default=None, help="default: $OUT/check_fused.json if OUT set")
    args = p.parse_args(argv)

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dtype": args.dtype,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print("check_fused: CUDA is not available; nothing to check", file=sys.stderr)
            return 2
        env["gpu"] = torch.cuda.get_device_name()
    print(json.dumps(env))
    print(HEADER, flush=True)
    with torch.inference_mode():
        result = run(args)
    result["env"] = env
    rows = result["rows"]
    n_ok = sum(bool(r.get("ok")) for r in rows)
    dispatch_ok = all(v is True for k, v in result["dispatch"].items() if k != "error") and (
        "error" not in result["dispatch"]
    )
    print(f"\ndispatch: {json.dumps(result['dispatch'])}")
    print(
        f"correct: {n_ok}/{len(rows)}  dispatch ok: {dispatch_ok}  "
        f"time: {result['seconds']:.1f}s (compile {result['compile_seconds']:.1f}s)"
    )
    path = args.json
    if path is None and os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "check_fused.json")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1))
        print(f"wrote {path}")
    return 0 if n_ok == len(rows) and dispatch_ok else 1


if __name__ == "__main__":
    sys.exit(main())
