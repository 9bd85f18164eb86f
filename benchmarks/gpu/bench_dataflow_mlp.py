"""Can tile-level dataflow inside one persistent launch beat the MLP's kernel chain? A
feasibility probe for issue 3 (the first piece of a persistent decode layer).

At 129-256 decode rows a layer's MLP runs gate_up (cuBLAS or our TMA tiles), SiLU-and-mul and
down as separate launches, each one wave of ~100 tiles: every boundary waits for the slowest
tile of the wave before it, and cuBLAS's launches take no part in PDL. Here one launch of one
program per SM walks a static list of tasks in dependency order:

    gate_up + SiLU tiles (m block, n tile)   -> act [M, I] (bf16, the fused kernel's roundings)
    down tiles (m block, K slice, n tile)     -> fp32 partials [SPLIT, M, H]

A down task waits (acquire spin on a per (m block, K slice) counter) only for the gate_up
tiles of its own rows and K slice, which release the counter after their store; programs
whose first task is a down task start on it while the gate_up wave still runs, and every
program moves to its next task without a kernel boundary. The partials go to the engine's
add + RMSNorm, which sums them (SplitKPartials), as split-K's do. The last program to finish
resets the counters, so a CUDA graph can replay the launch.

Timed in CUDA graphs of 28 layers (per-layer weights from HBM), each layer the engine's
add + RMSNorm then the MLP, against the engine's own MLP dispatch for the same rows. Every
config is checked against the torch chain first.

python benchmarks/gpu/bench_dataflow_mlp.py [--json PATH] [--rows M ...] [--configs I ...]
    [--variants]

H200, 2026-12-02 (session 21, docs/benchmarks.md): slower than the engine's chain at every
config and row count (x0.48-0.92 of its speed with atomic spins).
Under TRITON_INTERPRET=1 (tests/test_bench_dataflow_mlp.py) the grid is one program, which
walks every task in order, so no wait can block.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from strixlm.kernels.activation import silu_mul  # noqa: E402
from strixlm.kernels.pdl import pdl_enabled, pdl_prologue  # noqa: E402

HIDDEN, INTER, LAYERS, EPS = 1024, 3072, 28, 1e-6


@dataclass(frozen=True)
class FlowConfig:
    block_m: int
    block_n_gu: int  # gate_up tile width (per half: gate and up each this wide)
    block_n_d: int  # down tile width
    block_k: int
    split: int  # down's K slices (partials)
    num_warps: int
    num_stages: int


@triton.jit
def _dataflow_mlp_kernel(
    x_ptr, wgu_ptr, wd_ptr, act_ptr, part_ptr, sync_ptr, M, NUM_PROGRAMS,
    H: tl.constexpr, I: tl.constexpr, BM: tl.constexpr, BN_GU: tl.constexpr,
    BN_D: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, PDL: tl.constexpr,
    FLAG_STRIDE: tl.constexpr, SPIN_LOAD: tl.constexpr, NO_WAIT: tl.constexpr,
):  # fmt: skip
    # sync: [0] programs finished, [1 + (mb * SPLIT + s) * FLAG_STRIDE] gate_up tiles stored
    # for (mb, s). FLAG_STRIDE 32 puts each counter on its own 128-byte line; SPIN_LOAD spins
    # on volatile loads (no read-modify-write traffic) and acquires once; NO_WAIT (timing
    # only, wrong results) skips the waits, to show what the dependencies cost.
    pdl_prologue(PDL)
    GU_TILES: tl.constexpr = I // BN_GU
    D_TILES: tl.constexpr = H // BN_D
    K_PER: tl.constexpr = I // SPLIT
    GU_PER_SLICE: tl.constexpr = K_PER // BN_GU
    num_mb = tl.cdiv(M, BM)
    n_gu = num_mb * GU_TILES
    total = n_gu + num_mb * SPLIT * D_TILES
    ks = tl.arange(0, BK)
    for task in range(tl.program_id(0), total, NUM_PROGRAMS):
        if task < n_gu:
            mb = task // GU_TILES
            nt = task % GU_TILES
            rows = mb * BM + tl.arange(0, BM)
            cols = nt * BN_GU + tl.arange(0, BN_GU)
            row_ok = rows < M
            acc_g = tl.zeros([BM, BN_GU], dtype=tl.float32)
            acc_u = tl.zeros([BM, BN_GU], dtype=tl.float32)
            for k0 in range(0, H, BK):
                a = tl.load(x_ptr + rows[:, None] * H + (k0 + ks)[None, :], mask=row_ok[:, None])
                wg = wgu_ptr + cols[None, :].to(tl.int64) * H + (k0 + ks)[:, None]
                acc_g = tl.dot(a, tl.load(wg), acc_g)
                acc_u = tl.dot(a, tl.load(wg + I * H), acc_u)
            dt = act_ptr.dtype.element_ty
            h = silu_mul(acc_g.to(dt), acc_u.to(dt))
            tl.store(act_ptr + rows[:, None] * I + cols[None, :], h, mask=row_ok[:, None])
            tl.debug_barrier()  # every thread's store before the release
            flag = sync_ptr + 1 + (mb * SPLIT + nt // GU_PER_SLICE) * FLAG_STRIDE
            tl.atomic_add(flag, 1, sem="release")
        else:
            t = task - n_gu
            d_mb = t // (SPLIT * D_TILES)
            s = (t // D_TILES) % SPLIT
            d_nt = t % D_TILES
            d_rows = d_mb * BM + tl.arange(0, BM)
            d_cols = d_nt * BN_D + tl.arange(0, BN_D)
            d_row_ok = d_rows < M
            d_flag = sync_ptr + 1 + (d_mb * SPLIT + s) * FLAG_STRIDE
            if not NO_WAIT:
                if SPIN_LOAD:
                    ready = tl.load(d_flag, volatile=True)
                    while ready < GU_PER_SLICE:
                        ready = tl.load(d_flag, volatile=True)
                    tl.atomic_add(d_flag, 0, sem="acquire")
                else:
                    ready = tl.atomic_add(d_flag, 0, sem="acquire")
                    while ready < GU_PER_SLICE:
                        ready = tl.atomic_add(d_flag, 0, sem="acquire")
            tl.debug_barrier()  # no thread reads act before the acquire
            d_acc = tl.zeros([BM, BN_D], dtype=tl.float32)
            for k0 in range(s * K_PER, (s + 1) * K_PER, BK):
                d_a = tl.load(
                    act_ptr + d_rows[:, None] * I + (k0 + ks)[None, :],
                    mask=d_row_ok[:, None],
                    cache_modifier=".cg",  # written by other SMs in this launch: skip L1
                )
                d_w = tl.load(wd_ptr + d_cols[None, :].to(tl.int64) * I + (k0 + ks)[:, None])
                d_acc = tl.dot(d_a, d_w, d_acc)
            d_out = part_ptr + (s * M + d_rows[:, None]).to(tl.int64) * H + d_cols[None, :]
            tl.store(d_out, d_acc, mask=d_row_ok[:, None])
    tl.debug_barrier()
    done = tl.atomic_add(sync_ptr, 1, sem="acq_rel")
    if done == NUM_PROGRAMS - 1:  # the last one out: counters back to zero for the next launch
        idx = tl.arange(0, 64)
        n_sync = 1 + num_mb * SPLIT * FLAG_STRIDE
        for i in range(0, n_sync, 64):
            tl.store(sync_ptr + i + idx, 0, mask=i + idx < n_sync)


class DataflowMLP:
    """The probe's MLP: buffers sized for max_rows, one launch per call."""

    def __init__(
        self,
        cfg: FlowConfig,
        max_rows: int,
        device,
        dtype,
        programs: int,
        variant: tuple[int, bool, bool, bool] = (1, False, False, False),
    ) -> None:
        """variant: (flag stride, spin on loads, no waits, programs capped at the gate_up
        task count so that down tasks are every program's second task)."""
        self.cfg = cfg
        self.programs = programs
        self.variant = variant
        mb = triton.cdiv(max_rows, cfg.block_m)
        self.act = torch.empty(max_rows, INTER, device=device, dtype=dtype)
        self.parts = torch.empty(cfg.split, max_rows, HIDDEN, device=device, dtype=torch.float32)
        self.sync = torch.zeros(1 + mb * cfg.split * variant[0], device=device, dtype=torch.int32)

    def __call__(self, x: torch.Tensor, w_gu: torch.Tensor, w_d: torch.Tensor) -> torch.Tensor:
        m = x.shape[0]
        c = self.cfg
        if m != self.parts.shape[1]:
            raise ValueError(f"built for {self.parts.shape[1]} rows, called with {m}")
        parts = self.parts
        pdl = pdl_enabled(x)
        stride, spin_load, no_wait, cap = self.variant
        gu_tasks = triton.cdiv(m, c.block_m) * (INTER // c.block_n_gu)
        tasks = gu_tasks + triton.cdiv(m, c.block_m) * c.split * HIDDEN // c.block_n_d
        programs = min(self.programs, gu_tasks if cap else tasks)
        _dataflow_mlp_kernel[(programs,)](
            x, w_gu, w_d, self.act, parts, self.sync, m, programs,
            H=HIDDEN, I=INTER, BM=c.block_m, BN_GU=c.block_n_gu, BN_D=c.block_n_d,
            BK=c.block_k, SPLIT=c.split, PDL=pdl, FLAG_STRIDE=stride, SPIN_LOAD=spin_load,
            NO_WAIT=no_wait, num_warps=c.num_warps,
            num_stages=c.num_stages, launch_pdl=pdl,
        )  # fmt: skip
        return parts


def mlp_ref(x: torch.Tensor, w_gu: torch.Tensor, w_d: torch.Tensor, split: int) -> torch.Tensor:
    """The kernel's numbers in torch: gate and up rounded to x's dtype, silu_and_mul's
    roundings, then down's K slices as fp32 partials [split, M, H]."""
    g = (x.float() @ w_gu[:INTER].float().t()).to(x.dtype)
    u = (x.float() @ w_gu[INTER:].float().t()).to(x.dtype)
    act = (torch.nn.functional.silu(g.float()).to(x.dtype).float() * u.float()).to(x.dtype)
    xs, ws = act.float().chunk(split, dim=1), w_d.float().chunk(split, dim=1)
    return torch.stack([a @ w.t() for a, w in zip(xs, ws, strict=True)])


def check(flow: DataflowMLP, m: int, device, dtype, seed: int = 0) -> float:
    """Max relative error of the kernel's partials against mlp_ref (0 where both agree)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, HIDDEN, generator=g).to(device=device, dtype=dtype)
    w_gu = (torch.randn(2 * INTER, HIDDEN, generator=g) * 0.03).to(device=device, dtype=dtype)
    w_d = (torch.randn(HIDDEN, INTER, generator=g) * 0.03).to(device=device, dtype=dtype)
    got = flow(x, w_gu, w_d).float()
    ref = mlp_ref(x, w_gu, w_d, flow.cfg.split)
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


CONFIGS = [
    FlowConfig(64, 64, 64, 64, 2, 4, 3),
    FlowConfig(64, 64, 64, 64, 3, 4, 3),
    FlowConfig(64, 64, 32, 64, 2, 4, 4),
    FlowConfig(64, 128, 64, 64, 2, 8, 3),
    FlowConfig(128, 64, 64, 64, 2, 8, 3),
    FlowConfig(128, 64, 64, 64, 3, 8, 3),
    FlowConfig(128, 64, 32, 64, 4, 4, 3),
    FlowConfig(64, 64, 64, 128, 2, 4, 3),
    FlowConfig(128, 32, 64, 128, 2, 4, 3),
]


VARIANTS = [(1, False, False, False), (32, True, False, False), (32, True, False, True),
            (32, True, True, True)]  # fmt: skip


def args_configs(args) -> list[FlowConfig]:
    return [CONFIGS[i] for i in args.configs] if args.configs else CONFIGS


def args_variants(args) -> list[tuple[int, bool, bool, bool]]:
    return VARIANTS if args.variants else VARIANTS[:1]


def _layers(device, dtype):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(LAYERS):
        w_gu = (torch.randn(2 * INTER, HIDDEN, generator=g) * 0.02).to(device=device, dtype=dtype)
        w_d = (torch.randn(HIDDEN, INTER, generator=g) * 0.02).to(device=device, dtype=dtype)
        out.append((w_gu, w_d))
    return out


class MlpChains:
    """28 layers' MLP weights, the engine's MLPs over them and one add + RMSNorm, and the
    per-layer graph time of a chain [add + RMSNorm -> MLP] x 28 through either the engine's
    MLPs or a probe's kernel (fn(x, w_gu, w_d) -> fp32 partials [split, M, H])."""

    def __init__(self, dev, dt) -> None:
        from strixlm.layers.norm import RMSNorm
        from strixlm.models.llama import MLP

        self.dt = dt
        self.weights = _layers(dev, dt)
        self.mlps = []
        for w_gu, w_d in self.weights:
            mlp = MLP(HIDDEN, INTER).to(device=dev, dtype=dt)
            mlp.gate_up_proj.weight.data = w_gu
            mlp.down_proj.weight.data = w_d
            self.mlps.append(mlp)
        self.norm = RMSNorm(HIDDEN, EPS).to(device=dev, dtype=dt)

    def engine_us(self, x0: torch.Tensor, res: torch.Tensor) -> float:
        from graph_timing import graph_time_us

        def chain():
            h = x0
            for mlp in self.mlps:
                xn, _ = self.norm(h, res)
                h = mlp(xn, partials=True)

        return graph_time_us(chain) / LAYERS

    def probe_us(self, fn, x0: torch.Tensor, res: torch.Tensor) -> float:
        from graph_timing import graph_time_us

        from strixlm.layers.splitk_partials import SplitKPartials

        def chain():
            h = x0
            for w_gu, w_d in self.weights:
                xn, _ = self.norm(h, res)
                h = SplitKPartials(fn(xn, w_gu, w_d), self.dt)

        return graph_time_us(chain) / LAYERS


def gpu_main(args) -> dict:
    dev, dt = torch.device("cuda"), torch.bfloat16
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    chains = MlpChains(dev, dt)
    results: dict = {"sms": sms, "rows": {}}
    for m in args.rows:
        x0 = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        res = torch.randn(m, HIDDEN, device=dev, dtype=dt)
        row = {"engine_us": chains.engine_us(x0, res)}
        print(f"M {m}: engine MLP + add/RMSNorm {row['engine_us']:.2f} us/layer", flush=True)
        for cfg, variant in [(c, v) for c in args_configs(args) for v in args_variants(args)]:
            flow = DataflowMLP(cfg, m, dev, dt, sms, variant)
            try:
                err = check(flow, m, dev, dt)
            except Exception as e:  # noqa: BLE001 - a config that does not compile is a result
                print(f"  {cfg}: failed: {type(e).__name__}: {e}"[:300], flush=True)
                continue

            us = chains.probe_us(flow, x0, res)
            again = check(flow, m, dev, dt, seed=3)  # the counters reset across launches
            row[str((asdict(cfg), variant))] = {"us": us, "rel_err": err, "rel_err_after": again}
            print(
                f"  {cfg} {variant}: {us:.2f} us/layer (x{row['engine_us'] / us:.3f}), "
                f"rel err {err:.2e} / {again:.2e}",
                flush=True,
            )
        results["rows"][m] = row
    return results


def cpu_check() -> int:
    """Interpreter check at small shapes: one program walks every task; returns failures."""
    global HIDDEN, INTER
    saved = HIDDEN, INTER
    HIDDEN, INTER = 64, 128
    failures = 0
    try:
        cases = [
            (FlowConfig(16, 32, 32, 16, 2, 4, 1), (1, False, False, False)),
            (FlowConfig(32, 16, 16, 32, 4, 4, 1), (32, True, False, False)),
        ]
        for cfg, variant in cases:
            for m in (5, 33):
                cpu = torch.device("cpu")
                flow = DataflowMLP(cfg, m, cpu, torch.float16, programs=1, variant=variant)
                for seed in (0, 1):  # the second launch runs on the reset counters
                    err = check(flow, m, torch.device("cpu"), torch.float16, seed)
                    if not err < 2e-3:
                        print(f"{cfg} M {m}: rel err {err:.3e}")
                        failures += 1
                if int(flow.sync.abs().sum()) != 0:
                    print(f"{cfg} M {m}: counters not reset: {flow.sync.tolist()}")
                    failures += 1
    finally:
        HIDDEN, INTER = saved
    return failures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 128, 192, 256])
    ap.add_argument("--json", default=None)
    ap.add_argument("--configs", type=int, nargs="*", default=None, help="indices into CONFIGS")
    ap.add_argument("--variants", action="store_true", help="the sync variants too")
    args = ap.parse_args()
    results = gpu_main(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
