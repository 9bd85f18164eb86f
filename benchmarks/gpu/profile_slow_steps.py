"""Which host code makes some steps of the standard workload slow? cProfile per step.

python benchmarks/gpu/profile_slow_steps.py [--threshold-ms 20] [--top 18]

Runs the standard workload (Qwen3-0.6B shape, dummy weights, 256 requests) after the usual
warm-up, with every ModelRunner.execute call under its own cProfile; calls slower than the
threshold print their hottest functions (cumulative time). cProfile roughly doubles host
time, so read the ranking, not the absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from transformers import AutoConfig  # noqa: E402

from strixlm.benchmarks.throughput import resolve_model  # noqa: E402
from strixlm.benchmarks.workload import (  # noqa: E402
    make_workload,
    special_token_ids,
    warmup_workload,  # noqa: E402
)
from strixlm.engine.request import SamplingParams  # noqa: E402
from strixlm.entrypoints.llm import LLM  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threshold-ms", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--max-reports", type=int, default=3)
    args = ap.parse_args()
    folder, load_format = resolve_model("qwen3-0.6b", "dummy")
    hf = AutoConfig.from_pretrained(folder)
    avoid = special_token_ids(folder, hf)
    w = make_workload(256, (100, 1024), (100, 1024), hf.vocab_size, 0, avoid)
    warm = warmup_workload(hf.vocab_size, avoid, 0, n=8, input_len_range=(100, 1024))
    llm = LLM(folder, load_format=load_format, dtype="bfloat16", device="cuda", seed=0,
              max_num_seqs=256, max_num_batched_tokens=8192, skip_tokenizer_init=True)  # fmt: skip

    def params(wl):
        return [
            SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in wl.output_lens
        ]  # noqa: E501

    llm.generate(warm.prompts, params(warm), use_tqdm=False)
    runner = llm.engine.core.runner
    real = runner.execute
    reports: list[tuple[float, int, int, str]] = []

    def execute(sched):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        try:
            return real(sched)
        finally:
            prof.disable()
            ms = (time.perf_counter() - t0) * 1e3
            if ms > args.threshold_ms and len(reports) < args.max_reports:
                buf = io.StringIO()
                st = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
                st.print_stats("strixlm", args.top)  # our frames: which call led there
                st.print_stats(args.top)
                st.print_callers("compiler.py.*\\(compile\\)|jit.py.*\\(run\\)")  # who compiled
                n_new = len(sched.new_reqs)
                reports.append((ms, sched.total_num_scheduled_tokens, n_new, buf.getvalue()))

    runner.execute = execute
    llm.generate(w.prompts, params(w), use_tqdm=False)
    for ms, tokens, n_new, text in reports:
        print(f"=== execute {ms:.1f} ms, {tokens} tokens, {n_new} new requests")
        print("\n".join(text.splitlines()[: args.top + 12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
