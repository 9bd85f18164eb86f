"""The SM-partitioned ping-pong (strixlm/models/pingpong.py) at the real shape, on the GPU.

Qwen3-0.6B shape, dummy bf16 weights, `--batch` requests of `--prompt-len` tokens brought to
steady decoding on an eager engine. One decode step's model inputs are taken as the engine
calls the model (metadata cloned, so later steps cannot change them), then the model runs
on them again:
  off        the plain forward;
  on, twice  the ping-pong with attention on a green context of `--sms` SMs, eagerly;
  graph      the ping-pong captured in a CUDA graph and replayed.
The three ping-pong results must be bit-equal (same kernels, same order: a difference means
a race between the lanes), and close to the plain forward's (the halves' GEMMs may round
differently from the whole batch's). It also prints each way's eager time.

STRIXLM_PINGPONG_SMS=112 python benchmarks/gpu/check_pingpong.py [--batch 256] [--sms 112]
(JSON to $OUT/check_pingpong.json when OUT is set). Written without a GPU (session 50).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import time
from collections.abc import Iterator

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dummy_engine import dummy_llm, start_decoding  # noqa: E402

from strixlm.models import pingpong  # noqa: E402


def cloned(md):
    """The metadata with its device tensors copied: the engine refills the originals."""
    out = copy.copy(md)
    for name, value in vars(md).items():
        if isinstance(value, torch.Tensor):
            setattr(out, name, value.clone())
    return out


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, reps: int = 5) -> tuple[torch.Tensor, float]:
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        y = fn()
    sync()
    return y, (time.perf_counter() - t0) / reps * 1e3


def capture_decode_inputs(engine, model, batch: int) -> tuple:
    """Step the engine until the model is called on a pure decode step of `batch` rows;
    returns that call's (input_ids, positions, metadata), cloned."""
    seen: list[tuple] = []
    plain_forward = model.forward

    def spy(input_ids, positions, md):
        if md.is_pure_decode and md.seq_lens.shape[0] == batch and not seen:
            seen.append((input_ids.clone(), positions.clone(), cloned(md)))
        return plain_forward(input_ids, positions, md)

    model.forward = spy  # nn.Module.__call__ looks forward up on the instance first
    try:
        while not seen and engine.has_unfinished():
            engine.step()
    finally:
        del model.forward
    sync()
    if not seen:
        raise RuntimeError(f"no pure decode step of {batch} rows")
    return seen[0]


@contextlib.contextmanager
def split_on(sms: int) -> Iterator[None]:
    """The ping-pong on `sms` SMs (0: off) for every decode step of 2+ rows, restored after."""
    saved = pingpong.SMS, pingpong.MIN_ROWS
    pingpong.SMS, pingpong.MIN_ROWS = sms, 2
    try:
        yield
    finally:
        pingpong.SMS, pingpong.MIN_ROWS = saved


def run_model(model, inputs: tuple, sms: int) -> torch.Tensor:
    """The model's forward on the captured inputs, the ping-pong on `sms` SMs (0: off)."""
    with split_on(sms), torch.inference_mode():
        return model(*inputs).clone()


def graph_replay(model, inputs: tuple, sms: int) -> torch.Tensor:
    """The ping-pong captured in a CUDA graph (after an eager warm-up), replayed."""
    g = torch.cuda.CUDAGraph()
    with split_on(sms), torch.inference_mode():
        model(*inputs)
        sync()
        with torch.cuda.graph(g):
            hidden = model(*inputs)
    for _ in range(3):
        g.replay()
    sync()
    return hidden.clone()


def compare(model, inputs: tuple, sms: int, graphs: bool) -> dict:
    off, t_off = timed(lambda: run_model(model, inputs, 0))
    on1, t_on = timed(lambda: run_model(model, inputs, sms))
    on2 = run_model(model, inputs, sms)
    results: dict = {"eager_ms_off": t_off, "eager_ms_on": t_on}
    graph_out = None
    if graphs:
        try:
            graph_out = graph_replay(model, inputs, sms)
        except Exception as e:  # a green stream the capture refused: say so, keep the rest
            results["graph_error"] = f"{type(e).__name__}: {e}"
    diff = (on1.float() - off.float()).abs()
    results.update(
        on_runs_equal=bool(torch.equal(on1, on2)),
        graph_equal=None if graph_out is None else bool(torch.equal(graph_out, on1)),
        max_abs_diff_vs_plain=diff.max().item(),
        rel_diff_vs_plain=(diff.norm() / off.float().norm()).item(),
    )
    results["ok"] = (
        results["on_runs_equal"]
        and results["graph_equal"] is not False
        and "graph_error" not in results
        and results["rel_diff_vs_plain"] < 5e-2
    )
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=800)
    ap.add_argument("--sms", type=int, default=pingpong.SMS or 112)
    args = ap.parse_args()
    pingpong.SMS = 0  # the engine's own steps run plain; the check switches it per call
    llm = dummy_llm(args.batch, eager=True)
    model = llm.engine.core.runner.model
    with split_on(args.sms):  # STRIXLM_PINGPONG_L2_MB: the weights packed for the windows
        pingpong.prepare_model(model)
    start_decoding(llm.engine, args.batch, args.prompt_len)
    inputs = capture_decode_inputs(llm.engine, model, args.batch)
    results = {"batch": args.batch, "sms": args.sms, "l2_mb": pingpong.L2_MB}
    results.update(compare(model, inputs, args.sms, True))
    for k, v in results.items():
        print(f"{k:24s} {v}")
    print("PINGPONG OK" if results["ok"] else "PINGPONG MISMATCH")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "check_pingpong.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
