"""One decode-attention launch per cache kind, for Nsight Compute: the engine's kernel at
b256 (contexts 100-2000) over a bf16 cache, an fp8 cache read as byte pairs (the default)
and an fp8 cache through Triton's conversion. Each is warmed up outside the profiled range.

ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats ... \
    python benchmarks/gpu/ncu_fp8_decode.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from check_attention import DTYPE, attn_call, make_batch  # noqa: E402
from sweep_decode_attn import SHAPES  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402


def main() -> None:
    ctxs = dict(SHAPES)["b256 spread100-2000"]
    rows = [(c - 1, 1) for c in ctxs]
    order = torch.tensor(sorted(range(len(ctxs)), key=lambda i: -ctxs[i]), dtype=torch.int32)
    order = order.cuda()
    for label, dt, pairs in (("bf16", DTYPE, False), ("fp8 pairs", kvw.FP8_DTYPE, True),
                             ("fp8 no pairs", kvw.FP8_DTYPE, False)):  # fmt: skip
        q, _, _, cache, md = make_batch(rows, dt)
        pa.FP8_PAIRS_ENABLED = pairs
        fn = attn_call(q, cache, md, dt == kvw.FP8_DTYPE, seq_order=order)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        print(f"profiling: {label}", flush=True)
        torch.cuda.profiler.start()
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del cache


if __name__ == "__main__":
    main()
