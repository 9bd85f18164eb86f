"""Does an L2 access-policy window keep a layer's weights for the second half-batch?

The ping-pong (models/pingpong.py) runs each layer's GEMMs twice a step, once per half, with
the other half's attention streaming ~0.5 GB between them. Without help the second pass reads
the weights from HBM again; STRIXLM_PINGPONG_L2_MB marks them persisting
(kernels/l2_window.py). This times that pattern alone, on one stream, 28 layers of the
Qwen3-0.6B shape, the engine's own Linear layers (its Triton GEMMs) at --rows rows:

    per layer:  GEMMs(A) -> stream --stream-mb of other data -> GEMMs(B)

  plain     no window
  window    the layer's packed weights persisting (set-aside --set-aside-mb) before GEMMs(A)
  stream    the streaming reads alone (what the GEMMs add on top of them)

each eagerly and as a replayed CUDA graph (the window must reach the graph's kernel nodes).
If the window works, `window` is faster than `plain` by about one weight read a layer
(~31.5 MB, ~7.5 us at 4.2 TB/s). If they are equal, the window does not reach these
launches (or the set-aside is too small), and pingl2's step times mean nothing.

    python benchmarks/gpu/probe_l2_window.py [--rows 128] [--stream-mb 512] [--json PATH]

Written without a GPU (session 51): untested.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from graph_timing import batch_times_ms, replay_time_us  # noqa: E402

from strixlm.kernels.l2_window import L2Windows  # noqa: E402
from strixlm.layers.linear import Linear  # noqa: E402
from strixlm.models.weight_pack import pack_layer_weights  # noqa: E402

LAYERS, HIDDEN, Q, QKV, INTER = 28, 1024, 2048, 4096, 3072
DTYPE = torch.bfloat16


def make_layers(n: int = LAYERS, device: str = "cuda") -> list[SimpleNamespace]:
    """n layers' projections (random weights) in weight_pack's layer shape."""
    layers = []
    for _ in range(n):
        lin = {
            "qkv_proj": Linear(HIDDEN, QKV, bias=False),
            "o_proj": Linear(Q, HIDDEN, bias=False),
            "gate_up_proj": Linear(HIDDEN, 2 * INTER, bias=False),
            "down_proj": Linear(INTER, HIDDEN, bias=False),
        }
        for m in lin.values():
            m.to(device=device, dtype=DTYPE)
            torch.nn.init.uniform_(m.weight, -0.02, 0.02)
        layers.append(
            SimpleNamespace(
                self_attn=SimpleNamespace(qkv_proj=lin["qkv_proj"], o_proj=lin["o_proj"]),
                mlp=SimpleNamespace(gate_up_proj=lin["gate_up_proj"], down_proj=lin["down_proj"]),
            )
        )
    return layers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--stream-mb", type=int, default=512)
    ap.add_argument("--set-aside-mb", type=int, default=40)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    layers = make_layers()
    packed = pack_layer_weights(layers)
    x = torch.randn(args.rows, HIDDEN, device="cuda", dtype=DTYPE)
    o_in = torch.randn(args.rows, Q, device="cuda", dtype=DTYPE)
    d_in = torch.randn(args.rows, INTER, device="cuda", dtype=DTYPE)
    other = torch.empty(LAYERS, args.stream_mb << 19, device="cuda", dtype=DTYPE).uniform_()
    sink = torch.empty(LAYERS, device="cuda", dtype=torch.float32)
    l2 = L2Windows(torch.cuda.current_device(), args.set_aside_mb << 20)
    stream = torch.cuda.current_stream()

    def gemms(layer) -> None:
        layer.self_attn.qkv_proj(x)
        layer.self_attn.o_proj(o_in)
        layer.mlp.gate_up_proj(x)
        layer.mlp.down_proj(d_in)

    def run(window: bool, with_gemms: bool = True) -> None:
        for i, layer in enumerate(layers):
            if window:
                lo, hi = packed.layer(i)
                l2.set(stream.cuda_stream, packed.base + lo, hi - lo)
            if with_gemms:
                gemms(layer)
            sink[i].copy_(other[i].sum(dtype=torch.float32))  # the other half's attention
            if with_gemms:
                gemms(layer)
        if window:
            l2.clear(stream.cuda_stream)

    results: dict = {"rows": args.rows, "stream_mb": args.stream_mb, "set_aside": l2.set_aside}
    cases = {
        "plain": lambda: run(False),
        "window": lambda: run(True),
        "stream": lambda: run(False, False),
    }
    for name, fn in cases.items():
        fn()  # compile and warm
        torch.cuda.synchronize()
        results[f"{name}_eager_ms"] = sorted(batch_times_ms(fn, reps=10))[1]
        try:  # windows set between launches during capture: does the driver allow it?
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            results[f"{name}_graph_ms"] = replay_time_us(g, reps=10) / 1e3
        except Exception as e:
            results[f"{name}_graph_error"] = f"{type(e).__name__}: {e}"
            print(f"{name}: graph capture failed: {results[f'{name}_graph_error']}")
            l2.clear(stream.cuda_stream)
    layer_bytes = packed.layer(0)[1] - packed.layer(0)[0]
    for mode in ("eager", "graph"):
        if f"plain_{mode}_ms" not in results or f"window_{mode}_ms" not in results:
            continue
        saved = results[f"plain_{mode}_ms"] - results[f"window_{mode}_ms"]
        results[f"saved_{mode}_us_per_layer"] = 1e3 * saved / LAYERS
        print(
            f"{mode:5s}: plain {results[f'plain_{mode}_ms']:.3f} ms, window"
            f" {results[f'window_{mode}_ms']:.3f} ms, streaming alone"
            f" {results[f'stream_{mode}_ms']:.3f} ms: the window saves"
            f" {results[f'saved_{mode}_us_per_layer']:.2f} us a layer (one weight read of"
            f" {layer_bytes / 2**20:.1f} MiB is {layer_bytes / 4.2e6:.2f} us at 4.2 TB/s)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
