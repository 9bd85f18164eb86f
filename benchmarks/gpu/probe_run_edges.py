"""Where a timed LLM.generate spends the time the GPU is not stepping: before its first
step, after its last, and in Python's garbage collector.

python benchmarks/gpu/probe_run_edges.py [--rounds 3] [--json PATH]

Runs the standard throughput workload (as `strixlm bench throughput` times it: a warm-up
generate, then the timed one) several times in one process and, per timed run, prints the
time from the start of generate to its first engine step (request intake: validation,
Request objects), the first step's host time, the span of the steps, the time from the last
step to the return, and every garbage collection inside the run (generation, duration, and
whether it fell before the first step). An experiment for issue 3: the GPU idles whenever
the host is outside the step loop.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from strixlm.benchmarks.throughput import resolve_model  # noqa: E402
from strixlm.benchmarks.workload import make_workload, special_token_ids, warmup_workload  # noqa: E402
from strixlm.engine.gc_freeze import frozen_heap  # noqa: E402
from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402


class EdgeClock:
    """Timestamps (perf_counter) of the engine's steps and of every GC pass while armed."""

    def __init__(self, llm: LLM) -> None:
        self.steps: list[tuple[float, float]] = []
        self.gcs: list[tuple[int, float, float]] = []
        self._gc_start = 0.0
        self.armed = False
        engine = llm.engine
        step = engine.step

        def timed_step():
            t = time.perf_counter()
            out = step()
            if self.armed:
                self.steps.append((t, time.perf_counter()))
            return out

        engine.step = timed_step
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if not self.armed:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gcs.append((info["generation"], self._gc_start, time.perf_counter()))

    def reset(self) -> None:
        self.steps.clear()
        self.gcs.clear()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=1024, help="input and output lengths' top")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--alternate-freeze",
        action="store_true",
        help="odd rounds run generate inside gc_freeze.frozen_heap (the intake frozen too)",
    )
    args = ap.parse_args()
    folder, load_format = resolve_model(args.model, "dummy")
    hf = AutoConfig.from_pretrained(folder)
    avoid = special_token_ids(folder, hf)
    lens = (100, args.max_len)
    w = make_workload(args.num_prompts, lens, lens, hf.vocab_size, 0, avoid)
    warm = warmup_workload(hf.vocab_size, avoid, 0, n=8, input_len_range=lens)
    llm = LLM(
        folder, load_format=load_format, dtype="bfloat16", device=args.device, seed=0,
        max_num_seqs=256, max_num_batched_tokens=8192, skip_tokenizer_init=True,
    )  # fmt: skip

    def params(wl):
        return [
            SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in wl.output_lens
        ]

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    clock = EdgeClock(llm)
    results = []
    for r in range(args.rounds):
        # The same prompts every round: drop the last round's cached blocks so each round
        # prefills them again, as the benchmark's one timed run does.
        if not llm.engine.core.kv_manager.pool.reset_prefix_cache():
            raise RuntimeError("blocks still referenced between rounds")
        llm.generate(warm.prompts, params(warm), use_tqdm=False)
        sp = params(w)
        sync()
        clock.reset()
        clock.armed = True
        outer = frozen_heap() if args.alternate_freeze and r % 2 else contextlib.nullcontext()
        t0 = time.perf_counter()
        with outer:
            outs = llm.generate(w.prompts, sp, use_tqdm=False)
        sync()
        t1 = time.perf_counter()
        clock.armed = False
        n_out = sum(len(o.outputs[0].token_ids) for o in outs)
        first_s, first_e = clock.steps[0]
        last_e = clock.steps[-1][1]
        gcs = [(g, (b - a) * 1e3, a < first_s) for g, a, b in clock.gcs]
        rec = {
            "round": r,
            "intake_frozen": bool(args.alternate_freeze and r % 2),
            "elapsed_s": t1 - t0,
            "output_tok_s": n_out / (t1 - t0),
            "intake_ms": (first_s - t0) * 1e3,
            "first_step_ms": (first_e - first_s) * 1e3,
            "steps_span_s": last_e - first_s,
            "tail_ms": (t1 - last_e) * 1e3,
            "num_steps": len(clock.steps),
            "gc": [{"gen": g, "ms": ms, "before_first_step": pre} for g, ms, pre in gcs],
        }
        results.append(rec)
        gc_ms = sum(ms for _, ms, _ in gcs)
        big = [f"gen{g} {ms:.1f} ms{' (intake)' if pre else ''}" for g, ms, pre in gcs if ms > 2]
        print(
            f"round {r}{' (intake frozen)' if rec['intake_frozen'] else ''}: "
            f"{rec['elapsed_s']:.3f} s ({rec['output_tok_s']:,.0f} tok/s); intake "
            f"{rec['intake_ms']:.1f} ms, first step {rec['first_step_ms']:.1f} ms, steps "
            f"{rec['steps_span_s']:.3f} s over {rec['num_steps']}, after the last "
            f"{rec['tail_ms']:.1f} ms; GC {len(gcs)} passes, {gc_ms:.1f} ms; over 2 ms: {big}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
