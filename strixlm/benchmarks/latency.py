"""`strixlm bench latency`: the time a batch takes from submission to its last token.

    strixlm bench latency --model qwen3-0.6b --batch-size 1 --input-len 512 --output-len 128

This is what `vllm bench latency` measures, with three additions:
- the decode latency per output token;
- fresh prompts every run;
- an HF peer (--compare hf).

Each iteration runs one batch of --batch-size random prompts of --input-len tokens, twice:
- once for a single output token (the prefill's latency);
- once for --output-len tokens (end to end).

Decode ms per token = (median end to end - median prefill) / (output_len - 1). Every run
draws new prompts, so the prefix cache never serves one. The HF peer is `model.generate` with
a static cache, which compiles its decode step on CUDA. Its warm-up iterations absorb the
compile. It runs the same prompts greedily. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm import tqdm
from transformers import AutoConfig, GenerationConfig

from strixlm.benchmarks.hf_peer import free_device_memory, load_hf_model
from strixlm.benchmarks.report import result_header, run_main, write_json
from strixlm.benchmarks.throughput import add_model_args, resolve_model
from strixlm.benchmarks.workload import make_workload, special_token_ids
from strixlm.config import resolve_device, resolve_dtype

logger = logging.getLogger(__name__)

PERCENTILES = (10, 25, 50, 75, 90, 99)


def _positive(flag: str) -> Callable[[str], int]:
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects an integer, got {v!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1, got {n}")
        return n

    return parse


def add_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_model_args(parser)
    a = parser.add_argument
    a("--batch-size", type=_positive("--batch-size"), default=1)
    a("--input-len", type=_positive("--input-len"), default=512)
    # At least 2: the decode latency needs a token after the first.
    a("--output-len", type=_output_len, default=128)
    a("--num-iters-warmup", type=_positive("--num-iters-warmup"), default=3)
    a("--num-iters", type=_positive("--num-iters"), default=10)
    a("--seed", type=int, default=0)
    a("--gpu-memory-utilization", type=float, default=0.9)
    a("--enforce-eager", action="store_true", help="no CUDA graphs")
    a("--compare", choices=["hf"], default=None, help="also run this peer on the same prompts")
    a("--output-json", default=None, metavar="PATH")
    a("--no-tqdm", action="store_true", help="no progress bar")
    return parser


def _output_len(v: str) -> int:
    n = _positive("--output-len")(v)
    if n < 2:
        raise argparse.ArgumentTypeError(
            "--output-len must be at least 2 (the decode latency is measured after the first token)"
        )
    return n


@dataclass
class LatencyRuns:
    """One engine's timed runs: seconds per batch, prefill-only and end to end."""

    name: str
    batch_size: int
    output_len: int
    prefill_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    token_ids: list[list[int]] = field(default_factory=list)  # the first timed batch's
    config: dict = field(default_factory=dict)

    @property
    def decode_s_per_token(self) -> float:
        e2e, prefill = statistics.median(self.e2e_s), statistics.median(self.prefill_s)
        return max(e2e - prefill, 0.0) / (self.output_len - 1)

    def summary(self) -> dict:
        e2e = sorted(self.e2e_s)
        pct = {f"p{p}": _percentile(e2e, p) for p in PERCENTILES}
        mean = statistics.fmean(e2e)
        return {
            "name": self.name,
            "iterations": len(e2e),
            "e2e_mean_s": mean,
            "e2e_percentiles_s": pct,
            "prefill_median_s": statistics.median(self.prefill_s),
            "decode_ms_per_token": 1e3 * self.decode_s_per_token,
            "output_tok_s": self.batch_size * self.output_len / mean,
            "prefill_s": self.prefill_s,
            "e2e_s": self.e2e_s,
            "config": self.config,
        }


def _percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def prompt_batches(args: argparse.Namespace, vocab_size: int, avoid: set[int]) -> list:
    """Per run (warm-up, then timed), a (prefill batch, end-to-end batch) pair of fresh
    prompts; the same for every engine."""
    batches = []
    for i in range(args.num_iters_warmup + args.num_iters):
        pair = []
        for j in range(2):
            seed = args.seed * 1_000_003 + 2 * i + j
            w = make_workload(
                args.batch_size, (args.input_len,) * 2, (1, 1), vocab_size, seed, avoid
            )
            pair.append(w.prompts)
        batches.append(tuple(pair))
    return batches


def _time_runs(
    runs: LatencyRuns, batches: list, warmup: int, generate, sync, progress: bool
) -> None:
    """generate(prompts, n) -> token ids per prompt; the first `warmup` pairs untimed."""
    bar = tqdm(batches, desc=f"{runs.name}: warm-up, then timed runs", disable=not progress)
    for i, (prefill_prompts, e2e_prompts) in enumerate(bar):
        timed = []
        for prompts, n in ((prefill_prompts, 1), (e2e_prompts, runs.output_len)):
            sync()
            start = time.perf_counter()
            out = generate(prompts, n)
            sync()
            timed.append(time.perf_counter() - start)
            if any(len(t) != n for t in out):
                raise RuntimeError(
                    f"{runs.name}: a run gave {[len(t) for t in out]} tokens, not {n}"
                )
        if i >= warmup:
            runs.prefill_s.append(timed[0])
            runs.e2e_s.append(timed[1])
            if not runs.token_ids:
                runs.token_ids = out


def _sync_for(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def run_strixlm(args, folder: str, load_format: str, device: str, batches: list) -> LatencyRuns:
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    llm = LLM(
        folder,
        load_format=load_format,
        dtype=args.dtype,
        device=device,
        seed=args.seed,
        max_num_seqs=args.batch_size,
        max_model_len=args.input_len + args.output_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=args.enforce_eager,
        skip_tokenizer_init=True,
    )
    runs = LatencyRuns("strixlm", args.batch_size, args.output_len)
    runs.config = {"api": "LLM.generate", "enforce_eager": args.enforce_eager}

    def generate(prompts: list[list[int]], n: int) -> list[list[int]]:
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    try:
        _time_runs(
            runs, batches, args.num_iters_warmup, generate, _sync_for(device), not args.no_tqdm
        )
    finally:
        llm = None  # the engine's memory goes before the peer's model loads
        free_device_memory(device)
    return runs


def run_hf(args, folder: str, load_format: str, dtype, device: str, batches: list) -> LatencyRuns:
    model = load_hf_model(folder, load_format, dtype, device)
    runs = LatencyRuns("hf", args.batch_size, args.output_len)
    runs.config = {
        "api": "model.generate, static cache (its decode step compiled on CUDA), greedy",
        "attn_implementation": model.config._attn_implementation,
    }

    def generate(prompts: list[list[int]], n: int) -> list[list[int]]:
        ids = torch.tensor(prompts, dtype=torch.long, device=device)  # equal lengths: no pad
        gen = GenerationConfig(
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            cache_implementation="static",
            pad_token_id=0,
        )
        with torch.inference_mode():
            seqs = model.generate(input_ids=ids, generation_config=gen)
        return seqs[:, ids.shape[1] :].tolist()

    try:
        _time_runs(
            runs, batches, args.num_iters_warmup, generate, _sync_for(device), not args.no_tqdm
        )
    finally:
        model = None
        free_device_memory(device)
    return runs


def format_table(result: dict) -> str:
    head = "engine|e2e mean s|p50|p90|p99|prefill s|decode ms/token|output tok/s".split("|")
    rows = [head]
    for key in ("strixlm", "hf"):
        if (r := result.get(key)) is None:
            continue
        p = r["e2e_percentiles_s"]
        rows.append(
            [
                key,
                f"{r['e2e_mean_s']:.4f}",
                f"{p['p50']:.4f}",
                f"{p['p90']:.4f}",
                f"{p['p99']:.4f}",
                f"{r['prefill_median_s']:.4f}",
                f"{r['decode_ms_per_token']:.3f}",
                f"{r['output_tok_s']:.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    a, hw = result["args"], result["hardware"]
    out = [
        f"model {result['model']} ({result['load_format']}), {result['dtype']} on "
        f"{hw.get('gpu') or hw['cpu']}; batch {a['batch_size']}, input {a['input_len']}, "
        f"output {a['output_len']}, {a['num_iters']} timed iterations after "
        f"{a['num_iters_warmup']}",
        *lines,
    ]
    if "decode_ratio" in result:
        out.append(f"decode ms/token, hf / strixlm: {result['decode_ratio']:.2f}x")
    if "greedy_agreement" in result:
        g = result["greedy_agreement"]
        out.append(f"greedy outputs identical on {g['identical']}/{g['requests']} requests")
    return "\n".join(out)


def run(args: argparse.Namespace) -> dict:
    folder, load_format = resolve_model(args.model, args.load_format)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    hf_config = AutoConfig.from_pretrained(folder)
    limit = getattr(hf_config, "max_position_embeddings", None)
    if limit and args.input_len + args.output_len > limit:
        raise ValueError(
            f"--input-len + --output-len = {args.input_len + args.output_len} exceeds the "
            f"model's {limit} positions"
        )
    batches = prompt_batches(args, hf_config.vocab_size, special_token_ids(folder, hf_config))
    result = result_header("latency", args, folder, load_format, hf_config, dtype, device)
    ours = run_strixlm(args, folder, load_format, device, batches)
    result["strixlm"] = ours.summary()
    if args.compare == "hf":
        print(format_table(result), flush=True)  # ours first: a failing peer must not lose it
        hf = run_hf(args, folder, load_format, dtype, device, batches)
        result["hf"] = hf.summary()
        if ours.decode_s_per_token > 0:
            result["decode_ratio"] = hf.decode_s_per_token / ours.decode_s_per_token
        if load_format != "dummy":  # the same weights on both sides: greedy tokens agree
            same = sum(a == b for a, b in zip(ours.token_ids, hf.token_ids, strict=True))
            result["greedy_agreement"] = {"requests": len(ours.token_ids), "identical": same}
    print(format_table(result))
    if args.output_json:
        write_json(result, args.output_json)
    return result


def main(argv: list[str] | None = None) -> dict:
    return run_main(__doc__, add_args, run, argv)


if __name__ == "__main__":
    main()
