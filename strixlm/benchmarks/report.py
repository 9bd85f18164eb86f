"""What every benchmark result carries (the hardware, the versions and the commit it ran
on) and how a benchmark command writes it and starts."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path

import torch

from strixlm.source_commit import source_commit


def hardware(device: str) -> dict:
    info: dict = {"device": device, "cpu_count": os.cpu_count(), "platform": platform.platform()}
    info["torch_threads"] = torch.get_num_threads()
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                platform.processor(),
            )
    except OSError:
        info["cpu"] = platform.processor()
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
        info["gpu_count"] = torch.cuda.device_count()
    return info


def versions() -> dict:
    import transformers

    import strixlm

    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "strixlm": getattr(strixlm, "__version__", None),
    }
    try:
        import triton

        v["triton"] = triton.__version__
    except ImportError:
        v["triton"] = None
    v["strixlm_git"] = source_commit()  # the commit the benchmarked code came from
    return v


def result_header(
    benchmark: str,
    args: argparse.Namespace,
    folder: str,
    load_format: str,
    hf_config,
    dtype: torch.dtype,
    device: str,
) -> dict:
    """What every offline benchmark's result starts with: what ran, where, on what."""
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": args.model or "(default)",
        "model_folder": folder,
        "architecture": (getattr(hf_config, "architectures", None) or ["?"])[0],
        "load_format": load_format,
        "dtype": str(dtype).removeprefix("torch."),
        "hardware": hardware(device),
        "versions": versions(),
        "args": {k: v for k, v in vars(args).items() if not callable(v)},
    }


def write_json(result: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2, default=str)
    print(f"wrote {path}")


def run_main(
    doc: str | None,
    add_args: Callable[[argparse.ArgumentParser], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace], dict],
    argv: list[str] | None,
) -> dict:
    """`python -m strixlm.benchmarks.NAME`: logging on, the module's flags, its run."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(
        description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    return run(add_args(parser).parse_args(argv))
