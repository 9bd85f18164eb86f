"""benchmarks/gpu/probe_l2_window.py's layers pack as the engine's do (the probe itself
times CUDA streams and graphs, so it runs on the GPU only)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu"))

import probe_l2_window as probe  # noqa: E402

from strixlm.models.weight_pack import pack_layer_weights  # noqa: E402


def test_probe_layers_pack_into_one_window_a_layer():
    layers = probe.make_layers(2, device="cpu")
    packed = pack_layer_weights(layers)
    lo, hi = packed.layer(1)
    # qkv 4096x1024, o 1024x2048, gate_up 6144x1024, down 1024x3072, bf16: 31.5 MiB a layer.
    assert hi - lo == (4096 + 2048 + 6144 + 3072) * 1024 * 2
    assert packed.layer(0)[1] <= lo
    x = layers[1].mlp.down_proj.weight
    assert x.data_ptr() - packed.base + x.numel() * 2 == hi
