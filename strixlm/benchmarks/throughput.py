"""`strixlm bench throughput`: offline throughput on the standard workload, with an HF peer.

    python -m strixlm.benchmarks.throughput --model qwen3-0.6b --load-format dummy --compare hf

strixlm is timed through the offline LLM API (construction excluded, a few warm-up requests
first); with --compare hf, HF transformers runs the same requests next (see hf_peer.py for its
configuration) and the ratio of output tok/s is reported. Beside it, the workload's memory
floor on this device (memory_floor.py: bytes the schedule must move over the measured copy
bandwidth) and the fraction of it strixlm achieved, and a compute-aware bound (roofline.py:
the same schedule with each step's linear layers and attention at the larger of their bytes'
and their FLOPs' time, at the measured copy bandwidth and matmul rate). Prints a table and
writes JSON.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import time
from pathlib import Path

import torch
from transformers import AutoConfig

from strixlm.benchmarks.memory_floor import measure_copy_bandwidth, workload_floor
from strixlm.benchmarks.report import result_header, run_main, write_json
from strixlm.benchmarks.roofline import measure_matmul_flops, workload_roofline
from strixlm.benchmarks.workload import (
    DEFAULT_INPUT_LEN_RANGE,
    DEFAULT_NUM_PROMPTS,
    DEFAULT_OUTPUT_LEN_RANGE,
    RunResult,
    Workload,
    make_workload,
    special_token_ids,
    warmup_workload,
)
from strixlm.config import resolve_device, resolve_dtype

logger = logging.getLogger(__name__)

CONFIGS_DIR = Path(__file__).parent / "configs"
SAMPLE = 4  # requests whose token ids go into the JSON and the greedy comparison
HF_MODE_HELP = (
    "HF peer: continuous batching (cb), padded model.generate, or auto (cb, falling back to "
    "generate if cb fails). --hf-subset K: the peer runs the first K requests and the ratio "
    "compares per-token rates"
)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model, --load-format, --dtype and --device, as every offline benchmark takes them."""
    a = parser.add_argument
    a(
        "--model",
        default=None,
        help="model folder, .gguf, a bundled config name "
        f"({', '.join(bundled_configs()) or 'none'}; implies --load-format dummy), "
        "or omit for the embedded default model",
    )
    a("--load-format", default="auto", choices=["auto", "safetensors", "gguf", "dummy"])
    a("--dtype", default="auto")
    a("--device", default="auto")


def add_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_model_args(parser)
    a = parser.add_argument
    a("--num-prompts", type=int, default=DEFAULT_NUM_PROMPTS)
    lohi = ("LO", "HI")
    a("--input-len-range", type=int, nargs=2, default=list(DEFAULT_INPUT_LEN_RANGE), metavar=lohi)
    a("--output-len-range", type=int, nargs=2, default=list(DEFAULT_OUTPUT_LEN_RANGE), metavar=lohi)
    a("--seed", type=int, default=0)
    a("--max-num-seqs", type=int, default=256)
    a("--max-num-batched-tokens", type=int, default=8192)
    a("--block-size", type=_block_size, default=16, help="tokens per KV cache block")
    a("--gpu-memory-utilization", type=float, default=0.9)
    a(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8", "fp8_e4m3"],
        help="auto: the model dtype; fp8: e4m3 with per-layer scales (the floor then counts "
        "1-byte KV)",
    )
    a(
        "--temperature",
        type=float,
        default=0.0,
        help="0: greedy (the standard workload); above: seeded random sampling per request",
    )
    a("--compare", choices=["hf"], default=None, help="also run this peer on the same requests")
    a("--hf-mode", choices=["auto", "cb", "generate"], default="auto", help=HF_MODE_HELP)
    a("--hf-max-batch-tokens", type=int, default=None, help="default: HF's own choice")
    a("--hf-max-memory-percent", type=float, default=None, help="default: 0.9 on CUDA")
    a("--hf-subset", type=int, default=None, metavar="K", help="run the peer on K requests only")
    a("--output-json", default=None, metavar="PATH")
    a("--no-tqdm", action="store_true", help="no progress bar")
    return parser


def _block_size(v: str) -> int:
    """--block-size: a positive power of two, checked before any model is loaded."""
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--block-size expects an integer, got {v!r}") from None
    if n <= 0 or n & (n - 1):
        raise argparse.ArgumentTypeError(f"--block-size must be a positive power of two, got {n}")
    return n


def bundled_configs() -> list[str]:
    if not CONFIGS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in CONFIGS_DIR.glob("*/config.json"))


def resolve_model(model: str | None, load_format: str) -> tuple[str, str]:
    """(HF folder, load format) for --model."""
    if model is not None and not os.path.exists(model) and model in bundled_configs():
        if load_format not in ("auto", "dummy"):
            raise ValueError(f"{model} is a config without weights: use --load-format dummy")
        return str(CONFIGS_DIR / model), "dummy"
    if model is not None and os.path.isdir(model):
        return model, load_format
    from strixlm.models.default_model import resolve_model_path

    folder, _ = resolve_model_path(model)
    return str(folder), load_format


def run_strixlm(
    args: argparse.Namespace, folder: str, load_format: str, workload: Workload, warmup: Workload
) -> RunResult:
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    llm = LLM(
        folder,
        load_format=load_format,
        dtype=args.dtype,
        device=args.device,
        seed=args.seed,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_cache_dtype,
        skip_tokenizer_init=True,
    )

    def params(w: Workload) -> list[SamplingParams]:
        t = args.temperature
        return [
            SamplingParams(
                temperature=t, seed=args.seed + i if t > 0 else None, max_tokens=n, ignore_eos=True
            )
            for i, n in enumerate(w.output_lens)
        ]

    try:
        llm.generate(warmup.prompts, params(warmup), use_tqdm=False)
        sp = params(workload)
        device = llm.engine.config.device
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        # A marker in the log: kernel variants built after it stalled the timed run.
        logger.info("warm-up done; the timed run starts")
        start = time.perf_counter()
        outs = llm.generate(workload.prompts, sp, use_tqdm=not args.no_tqdm)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if device.startswith("cuda"):
            # Allocator retries free cached blocks with a device sync: a hidden step stall.
            stats = torch.cuda.memory_stats()
            retries = stats.get("num_alloc_retries", 0)
            logger.info(
                "CUDA allocator: %d alloc retries, %d device allocs",
                retries,
                stats.get("num_device_alloc", 0),
            )
    finally:
        del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    token_ids = [list(o.outputs[0].token_ids) for o in outs]
    config = {
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "block_size": args.block_size,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "api": "LLM.generate",
    }
    n_out = sum(len(t) for t in token_ids)
    w = workload
    return RunResult("strixlm", w.num_requests, w.input_tokens, n_out, elapsed, token_ids, config)


def format_bandwidth(bytes_per_s: float) -> str:
    """TB/s with two decimals on a GPU (a 3.00 vs 3.04 TB/s copy moves the floor by 1%);
    GB/s below 1 TB/s, where a CPU's rate would otherwise print as 0.01 TB/s."""
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:.2f} TB/s"
    return f"{bytes_per_s / 1e9:.1f} GB/s"


def format_table(result: dict) -> str:
    rows = ["engine|requests|input tok|output tok|elapsed s|output tok/s|total tok/s".split("|")]
    for key in ("strixlm", "hf"):
        if (r := result.get(key)) is None:
            continue
        name = key if key == "strixlm" else f"hf ({r['config'].get('mode')})"
        nums = [str(r[k]) for k in ("num_requests", "input_tokens", "output_tokens")]
        rates = [f"{r['output_tok_s']:.1f}", f"{r['total_tok_s']:.1f}"]
        rows.append([name, *nums, f"{r['elapsed_s']:.2f}", *rates])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            [row[0].ljust(widths[0])]
            + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        )
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    w, hw = result["workload"], result["hardware"]
    out = [
        f"model {result['model']} ({result['load_format']}), {result['dtype']} on "
        f"{hw.get('gpu') or hw['cpu']}; {w['num_requests']} requests, input "
        f"{w['input_len_range']}, output {w['output_len_range']}, seed {w['seed']}",
        *lines,
    ]
    if (mf := result.get("memory_floor")) and "floor_output_tok_s" in mf:
        kv = " with 1-byte fp8 KV" if mf.get("kv_dtype_bytes") == 1 < mf["dtype_bytes"] else ""
        out.append(
            f"memory floor{kv}: {mf['floor_output_tok_s']:,.0f} output tok/s "
            f"({mf['bytes'] / 1e9:,.1f} GB moved at {format_bandwidth(mf['bandwidth'])} measured "
            "copy bandwidth)"
        )
        out.append(f"achieved: {100 * mf['achieved_fraction']:.1f}% of the floor")
    if (rl := result.get("roofline")) and "bound_output_tok_s" in rl:
        out.append(
            f"compute-aware bound: {rl['bound_output_tok_s']:,.0f} output tok/s (kernels in "
            f"sequence; matmul at {rl['matmul_flops'] / 1e12:.3g} TFLOP/s measured; "
            f"{rl['linear_compute_over_bytes_s'] + rl['attention_compute_over_bytes_s']:.3g} s "
            f"of compute the floor does not count); achieved: "
            f"{100 * rl['achieved_fraction']:.1f}% of it"
        )
    if "ratio" in result:
        ratio = "n/a" if result["ratio"] is None else f"{result['ratio']:.2f}x"
        note = ""
        if result["hf"]["num_requests"] != w["num_requests"]:
            note = (
                f" (HF ran the first {result['hf']['num_requests']} of {w['num_requests']} "
                "requests: ratio of per-token rates)"
            )
        out.append(f"ratio strixlm/HF, output tok/s: {ratio}{note}")
    if err := result.get("hf_error"):
        out.append(f"HF peer failed: {err}")
    if g := result.get("greedy_agreement"):
        out.append(
            f"greedy outputs identical on {g['identical']}/{g['requests']} sampled "
            f"requests (first diff at {g['first_diff']})"
        )
    return "\n".join(out)


def memory_floor(
    args: argparse.Namespace,
    hf_config,
    dtype: torch.dtype,
    device: str,
    workload: Workload,
    ours: RunResult,
) -> dict:
    """The workload's memory floor at the copy bandwidth measured on `device` (after the run,
    so the engine's memory is free), and the fraction of it strixlm achieved. The KV cache
    has the model's dtype, or one byte per element with --kv-cache-dtype fp8. A model the
    floor does not cover gets {"error": ...}, not a crash.
    """
    try:
        bandwidth = measure_copy_bandwidth(device)
        reqs = workload.lengths()
        itemsize = dtype.itemsize
        kv_itemsize = 1 if args.kv_cache_dtype != "auto" else itemsize
        floor = workload_floor(
            hf_config,
            itemsize,
            kv_itemsize,
            reqs,
            args.max_num_seqs,
            bandwidth,
            args.max_num_batched_tokens,
        )
    except (NotImplementedError, AttributeError, RuntimeError, ValueError) as e:
        logger.warning("memory floor not computed: %s", e)
        return {"error": str(e)}
    floor["dtype_bytes"], floor["kv_dtype_bytes"] = itemsize, kv_itemsize
    floor["achieved_fraction"] = ours.output_tok_s / floor["floor_output_tok_s"]
    floor["model"] = "memory_floor.workload_floor: weights once per step + KV read/write"
    return floor


def roofline(
    args: argparse.Namespace,
    hf_config,
    dtype: torch.dtype,
    device: str,
    workload: Workload,
    ours: RunResult,
    result: dict,
) -> dict:
    """The compute-aware bound at the floor's bandwidth and the matmul rate measured on
    `device` in the model dtype, and the fraction of it strixlm achieved ({"error": ...}
    where the floor has none)."""
    floor = result["memory_floor"]
    if "bandwidth" not in floor:
        return {"error": floor.get("error", "no memory floor")}
    try:
        flops = measure_matmul_flops(device, dtype)
        reqs = workload.lengths()
        bound = workload_roofline(
            hf_config,
            floor["dtype_bytes"],
            floor["kv_dtype_bytes"],
            reqs,
            args.max_num_seqs,
            floor["bandwidth"],
            flops,
            args.max_num_batched_tokens,
        )
    except (NotImplementedError, AttributeError, RuntimeError, ValueError) as e:
        logger.warning("compute-aware bound not computed: %s", e)
        return {"error": str(e)}
    bound["achieved_fraction"] = ours.output_tok_s / bound["bound_output_tok_s"]
    return bound


def _run_peer(
    args: argparse.Namespace,
    result: dict,
    folder: str,
    load_format: str,
    dtype: torch.dtype,
    device: str,
    workload: Workload,
    warm: Workload,
    ours: RunResult,
) -> None:
    """Run the HF peer on the same requests (or a prefix) and record it and the ratio; an
    error in the peer is recorded instead of ending the benchmark."""
    from strixlm.benchmarks.hf_peer import run_hf_peer

    sub = workload.subset(args.hf_subset) if args.hf_subset else workload
    mem = args.hf_max_memory_percent
    if mem is None and device.startswith("cuda"):
        mem = 0.9
    try:
        peer = run_hf_peer(
            folder,
            load_format,
            dtype,
            device,
            sub,
            warm,
            mode=args.hf_mode,
            max_batch_tokens=args.hf_max_batch_tokens,
            max_memory_percent=mem,
        )
    except (RuntimeError, torch.OutOfMemoryError) as e:  # OOM is a RuntimeError subclass
        logger.error("HF peer failed on %d requests: %s", sub.num_requests, str(e)[:300])
        result["hf_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return
    result["hf"] = peer.to_dict(SAMPLE)
    if bad := peer.check_lengths(sub.output_lens):
        logger.warning("hf: %d requests did not produce their output length", len(bad))
    result["ratio"] = ours.output_tok_s / peer.output_tok_s if peer.output_tok_s else None
    result["ratio_basis"] = (
        "output tok/s, same requests"
        if sub is workload
        else f"output tok/s, HF on the first {sub.num_requests} requests"
    )
    if load_format != "dummy":
        result["greedy_agreement"] = ours.agreement(peer, SAMPLE)


def run(args: argparse.Namespace) -> dict:
    if args.temperature < 0:
        raise SystemExit(f"--temperature must be non-negative, got {args.temperature}")
    if args.temperature > 0 and args.compare:
        raise SystemExit("--compare runs the peer greedy: leave --temperature at 0 with it")
    folder, load_format = resolve_model(args.model, args.load_format)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    hf_config = AutoConfig.from_pretrained(folder)
    avoid = special_token_ids(folder, hf_config)
    workload = make_workload(
        args.num_prompts,
        tuple(args.input_len_range),
        tuple(args.output_len_range),
        hf_config.vocab_size,
        args.seed,
        avoid,
    )
    limit = getattr(hf_config, "max_position_embeddings", None)
    longest = args.input_len_range[1] + args.output_len_range[1]
    if limit and longest > limit:
        raise ValueError(f"input + output up to {longest} tokens exceeds the model's {limit}")
    warm = warmup_workload(
        hf_config.vocab_size, avoid, args.seed, n=8, input_len_range=tuple(args.input_len_range)
    )

    result = result_header("throughput", args, folder, load_format, hf_config, dtype, device)
    result["workload"] = workload.describe()
    ours = run_strixlm(args, folder, load_format, workload, warm)
    result["strixlm"] = ours.to_dict(SAMPLE)
    if bad := ours.check_lengths(workload.output_lens):
        logger.warning("strixlm: %d requests did not produce their output length", len(bad))
    result["memory_floor"] = memory_floor(args, hf_config, dtype, device, workload, ours)
    result["roofline"] = roofline(args, hf_config, dtype, device, workload, ours, result)
    if args.compare == "hf":
        # Our figures first: a peer that fails (out of memory, say) must not lose them.
        print(format_table(result), flush=True)
        _run_peer(args, result, folder, load_format, dtype, device, workload, warm, ours)
    print(format_table(result))
    if args.output_json:
        write_json(result, args.output_json)
    return result


def main(argv: list[str] | None = None) -> dict:
    return run_main(__doc__, add_args, run, argv)


if __name__ == "__main__":
    main()
