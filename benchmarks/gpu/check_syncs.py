"""Count host syncs on the per-step decode path under CUDA's sync debug mode.

python benchmarks/gpu/check_syncs.py [--steps 20]   (JSON to $OUT/check_syncs.json when OUT set)

Qwen3-0.6B shape, dummy bf16 weights, 64 requests of 512 prompt tokens (EOS ignored). Once all
64 are decoding, N steps of the engine core (`llm.engine.core.step()`) run under
`torch.cuda.set_sync_debug_mode("warn")`; every "synchronizing CUDA operation" warning is
caught with the Python stack it was raised from and grouped by the innermost strixlm frame.
Paths: CUDA graphs + greedy, eager (enforce_eager) + greedy, CUDA graphs + sampling filters
(temperature 0.8, top_p 0.9, top_k 50).

The one intended wait per step is StepHandle.result() waiting on the previous step's event
(strixlm/worker/step_result.py). An event synchronize is not something sync debug mode is
known to flag, so torch.cuda.Event.synchronize is wrapped and counted separately ("event
syncs/step"): a clean path shows 0 flagged syncs and 1 event sync per step. The prefill
ramp (admission steps) is recorded too, separately, for information.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

from strixlm.engine.request import SamplingParams  # noqa: E402

SYNC_TEXT = "synchroniz"  # "called a synchronizing CUDA operation"
INSTRUMENTATION = "set_sync_debug_mode"  # the call that turns the warnings on
Frame = tuple[str, int, str]  # (file, line, function)


@dataclass
class Capture:
    """Stacks of the sync warnings and event synchronizes seen while capturing."""

    syncs: list[list[Frame]] = field(default_factory=list)
    events: list[list[Frame]] = field(default_factory=list)
    other: Counter = field(default_factory=Counter)  # other warnings: "message @ file:line"

    def clear(self) -> None:
        self.syncs.clear()
        self.events.clear()
        self.other.clear()


def _stack(skip_files: tuple[str, ...]) -> list[Frame]:
    """The caller's stack, outermost first, without the warnings machinery or this hook."""
    frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_stack()]
    while frames and (frames[-1][0] in skip_files or frames[-1][0].endswith("warnings.py")):
        frames.pop()
    return frames


@contextlib.contextmanager
def capture_syncs(cap: Capture, debug_mode: bool = True) -> Iterator[Capture]:
    """Sync debug mode "warn" on; each sync warning and each torch.cuda.Event.synchronize
    call is recorded with its stack. debug_mode=False records warnings without touching
    CUDA (to test the bookkeeping on a CPU machine)."""
    this_file = os.path.abspath(__file__)
    skip = (this_file, __file__)

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message)
        if SYNC_TEXT in text:
            frames = _stack(skip)
            # A warning raised from C++ reports the Python line that called the op; make
            # sure that line ends the stack even if the frames differ.
            if not frames or (frames[-1][0], frames[-1][1]) != (filename, lineno):
                frames.append((filename, lineno, "?"))
            if any(f[2] == INSTRUMENTATION for f in frames[-2:]):
                # Switching the debug mode on is flagged by the mode itself (torch 2.11,
                # once per process): this check's own set-up, not a sync of the step.
                cap.other[f"{INSTRUMENTATION} (this check's set-up)"] += 1
                return
            cap.syncs.append(frames)
        else:
            cap.other[f"{text[:80]} @ {filename}:{lineno}"] += 1

    event_cls = torch.cuda.Event
    orig_sync = event_cls.synchronize

    def counted_sync(self, *a, **k):
        cap.events.append(_stack(skip))
        return orig_sync(self, *a, **k)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show  # restored by catch_warnings on exit
        event_cls.synchronize = counted_sync
        if debug_mode:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            yield cap
        finally:
            if debug_mode:
                torch.cuda.set_sync_debug_mode("default")
            event_cls.synchronize = orig_sync


def _rel(path: str) -> str:
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def site(frames: list[Frame]) -> tuple[str, str]:
    """(innermost strixlm frame, the op's own line) of one stack, as 'file:line (func)'."""
    inner = frames[-1] if frames else ("?", 0, "?")
    ours = next(
        (f for f in reversed(frames) if f"{os.sep}strixlm{os.sep}" in os.path.abspath(f[0])),
        inner,
    )

    def fmt(f: Frame) -> str:
        return f"{_rel(f[0])}:{f[1]} ({f[2]})"

    return fmt(ours), fmt(inner)


def group_syncs(stacks: list[list[Frame]], steps: int, top: int = 8) -> list[dict]:
    """Stacks grouped by innermost strixlm frame, most frequent first, with the op line and
    the strixlm call chain (outermost first) of the group's first stack."""
    counts: Counter = Counter()
    first: dict[tuple[str, str], list[Frame]] = {}
    for frames in stacks:
        key = site(frames)
        counts[key] += 1
        first.setdefault(key, frames)
    out = []
    for (ours, op), n in counts.most_common(top):
        chain = [
            f"{_rel(f[0])}:{f[1]} ({f[2]})"
            for f in first[(ours, op)]
            if f"{os.sep}strixlm{os.sep}" in os.path.abspath(f[0])
        ]
        out.append(
            {
                "site": ours,
                "op_line": op,
                "count": n,
                "per_step": n / steps if steps else None,
                "chain": chain[-6:],
            }
        )
    return out


def summarize(cap: Capture, steps: int) -> dict:
    return {
        "steps": steps,
        "flagged": len(cap.syncs),
        "flagged_per_step": len(cap.syncs) / steps if steps else None,
        "event_syncs": len(cap.events),
        "event_syncs_per_step": len(cap.events) / steps if steps else None,
        "locations": group_syncs(cap.syncs, steps),
        "event_sync_locations": group_syncs(cap.events, steps, top=4),
        "other_warnings": dict(cap.other.most_common(10)),
    }


def all_decoding(core, n: int) -> bool:
    sched = core.scheduler
    return (
        not sched.waiting
        and len(sched.running) == n
        and all(r.num_computed_tokens >= r.num_prompt_tokens for r in sched.running)
    )


def run_path(llm, name: str, params: SamplingParams, args: argparse.Namespace) -> dict:
    """Add the requests, ramp them into decode (recorded apart), warm up, then count."""
    engine, core = llm.engine, llm.engine.core
    n = args.num_requests
    rids = [
        engine.add_request(list(range(1000 + i, 1000 + i + args.prompt_len)), params, kind="delta")
        for i in range(n)
    ]
    result: dict = {"path": name}
    try:
        ramp = Capture()
        ramp_steps = 0
        with capture_syncs(ramp):
            while not all_decoding(core, n) and ramp_steps < 200:
                core.step()
                ramp_steps += 1
        if not all_decoding(core, n):
            raise RuntimeError(f"requests not all decoding after {ramp_steps} steps")
        result["ramp"] = summarize(ramp, ramp_steps)
        for _ in range(args.warmup):  # first decode shapes: compiles, graph dispatch
            core.step()
        torch.cuda.synchronize()
        cap = Capture()
        t0 = time.perf_counter()
        with capture_syncs(cap):
            for _ in range(args.steps):
                core.step()
        torch.cuda.synchronize()
        result["ms_per_step_under_debug_mode"] = (time.perf_counter() - t0) / args.steps * 1e3
        result.update(summarize(cap, args.steps))
    finally:
        for rid in rids:
            engine.abort_request(rid)
        for _ in range(5):  # let the in-flight step land
            if not core.has_unfinished():
                break
            core.step()
    return result


def build(eager: bool, num_requests: int):
    from dummy_engine import dummy_llm

    return dummy_llm(num_requests, eager=eager, mem_frac=0.3)


def format_table(rows: list[dict]) -> str:
    lines = [
        f"{'path':<24} {'steps':>5} {'flagged/step':>12} {'event syncs/step':>16}  top locations",
        "-" * 100,
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['path']:<24} ERROR {r['error']}")
            continue
        for phase, d in (("", r), (" (ramp)", r.get("ramp"))):
            if not d:
                continue
            locs = "; ".join(f"{x['site']} x{x['count']}" for x in d["locations"][:3]) or "-"
            lines.append(
                f"{r['path'] + phase:<24} {d['steps']:>5} {d['flagged_per_step']:>12.2f} "
                f"{d['event_syncs_per_step']:>16.2f}  {locs}"
            )
    lines.append("")
    for r in rows:
        for phase, d in (("decode", r), ("ramp", r.get("ramp"))):
            if not d or "locations" not in d:
                continue
            lines.append(f"[{r['path']} / {phase}] flagged syncs by site:")
            for x in d["locations"]:
                lines.append(f"  {x['count']:>5}  {x['site']}  <- op at {x['op_line']}")
                lines.append(f"         chain: {' > '.join(x['chain'])}")
            for x in d["event_sync_locations"]:
                lines.append(f"  event sync {x['count']:>5}  {x['site']}")
            for msg, k in d["other_warnings"].items():
                lines.append(f"  other warning x{k}: {msg}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    args = ap.parse_args()
    greedy = SamplingParams(temperature=0.0, max_tokens=4_000, ignore_eos=True)
    filters = SamplingParams(
        temperature=0.8, top_p=0.9, top_k=50, max_tokens=4_000, ignore_eos=True
    )
    plan = [
        (False, [("graphs greedy", greedy), ("graphs top-p/top-k", filters)]),
        (True, [("eager greedy", greedy)]),
    ]
    rows: list[dict] = []
    t_start = time.perf_counter()
    for eager, paths in plan:
        llm = None
        try:
            t0 = time.perf_counter()
            llm = build(eager, args.num_requests)
            kind = "eager" if eager else "graphs"
            print(f"built {kind} engine in {time.perf_counter() - t0:.1f}s", flush=True)
            for name, params in paths:
                try:
                    rows.append(run_path(llm, name, params, args))
                except Exception as e:  # keep going: the other paths still tell something
                    traceback.print_exc()
                    rows.append({"path": name, "error": f"{type(e).__name__}: {e}"})
        except Exception as e:
            traceback.print_exc()
            rows.extend({"path": n, "error": f"build: {type(e).__name__}: {e}"} for n, _ in paths)
        finally:
            del llm
            gc.collect()
            torch.cuda.empty_cache()
    print(format_table(rows))
    print(f"total {time.perf_counter() - t_start:.0f}s")
    result = {
        "benchmark": "check_syncs",
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "args": vars(args),
        "paths": rows,
    }
    if out := os.environ.get("OUT"):
        with open(os.path.join(out, "check_syncs.json"), "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {out}/check_syncs.json")


if __name__ == "__main__":
    main()
