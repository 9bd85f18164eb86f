"""Decode attention with the q/k norm + rotary + K/V write inside the persistent kernel vs
the separate launch before it, at the standard workload's persistent-grid batch sizes.

python benchmarks/gpu/bench_fused_qk.py [--json PATH]

Qwen3-0.6B heads (16 q, 8 kv, dim 128), q/k/v as views of one qkv projection buffer as
the model makes them, blocks shuffled over the pool. Per shape: both paths once from the
same inputs (q, k, the cache bytes and the output compared: equal or within bf16
rounding), then each captured in a CUDA graph (as a layer's decode runs) and replayed:
"separate" is qk_norm_rope_inplace + the persistent kernel, "fused" the persistent kernel
alone with its prologue. Also fp8 cache at one shape (correctness and time).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from check_attention import DTYPE, FP8_SCALE, HKV, HQ, SCALE, D, make_batch, rel_err  # noqa: E402
from graph_timing import graph_time_us  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels.qk_norm_rope import QKNormRopeWrite  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402


def _spread(b: int, lo: int, hi: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(b)]


SHAPES = [
    ("b256 spread100-2000", _spread(256, 100, 2000, 0), None),
    ("b192 spread200-2000", _spread(192, 200, 2000, 1), None),
    ("b128 spread300-2000", _spread(128, 300, 2000, 2), None),
    ("b96 spread500-2000", _spread(96, 500, 2000, 3), None),
    ("b256 spread100-2000 fp8", _spread(256, 100, 2000, 0), kvw.FP8_DTYPE),
]


def run_shape(name: str, ctxs: list[int], cache_dtype) -> dict:
    rows = [(c - 1, 1) for c in ctxs]
    _, _, _, cache, md = make_batch(rows, cache_dtype or DTYPE)
    dev = cache.device
    t = len(ctxs)
    g = torch.Generator(device=dev).manual_seed(7)
    qkv = torch.randn((t, (HQ + 2 * HKV) * D), device=dev, generator=g, dtype=DTYPE)
    rot = RotaryEmbedding(D, 4096, 1e6).to(dev)
    qw = (1 + 0.3 * torch.randn(D, device=dev, generator=g)).to(DTYPE)
    kw = (1 + 0.3 * torch.randn(D, device=dev, generator=g)).to(DTYPE)
    positions = torch.tensor([c - 1 for c in ctxs], dtype=torch.int64, device=dev)
    fp8 = cache_dtype == kvw.FP8_DTYPE
    ks, vs = (FP8_SCALE, FP8_SCALE) if fp8 else (1.0, 1.0)
    sms = pa.num_sms(dev)
    cfg = pa.select_config(HQ, HKV, D, t, 1, max(ctxs), sms)
    assert cfg.persistent and cfg.num_splits == 1, cfg
    order = torch.tensor(sorted(range(t), key=lambda i: -ctxs[i]), dtype=torch.int32, device=dev)

    def views(buf):
        q, k, v = buf.split([HQ * D, HKV * D, HKV * D], dim=-1)
        return q.view(t, HQ, D), k.view(t, HKV, D), v.view(t, HKV, D)

    def call(buf, kv, fused: bool):
        q, k, v = views(buf)
        pro = QKNormRopeWrite(k, v, positions, qw, kw, 1e-6, rot.cos, rot.sin,
                              md.slot_mapping, ks, vs)  # fmt: skip
        saved = pa.FUSED_QK_ENABLED
        pa.FUSED_QK_ENABLED = fused
        try:
            return pa.paged_attention(
                q, kv, md.query_start_loc, md.seq_lens, md.block_table, SCALE,
                max_query_len=1, max_seq_len=max(ctxs), k_scale=ks, v_scale=vs,
                config=cfg, seq_order=order, qk_prologue=pro,
            )  # fmt: skip
        finally:
            pa.FUSED_QK_ENABLED = saved

    bufs = [qkv.clone(), qkv.clone()]
    caches = [cache.clone(), cache.clone()]
    outs = [call(bufs[0], caches[0], False), call(bufs[1], caches[1], True)]
    torch.cuda.synchronize()
    raw = torch.uint8 if fp8 else torch.int16
    same_cache = torch.equal(caches[0].view(raw), caches[1].view(raw))
    same_qk = torch.equal(bufs[0], bufs[1])
    err = rel_err(outs[1], outs[0])[0]
    bit_equal = torch.equal(outs[0], outs[1])
    # Timed on fresh copies (each replay re-norms q/k in place: the timing is unaffected).
    t_sep = graph_time_us(lambda b=qkv.clone(), c=cache.clone(): call(b, c, False))
    t_fused = graph_time_us(lambda b=qkv.clone(), c=cache.clone(): call(b, c, True))
    print(f"{name}: separate {t_sep:7.1f} us, fused {t_fused:7.1f} us (x{t_sep / t_fused:.3f});"
          f" q/k equal {same_qk}, cache equal {same_cache}, output bit-equal {bit_equal}"
          f" rel {err:.1e}")  # fmt: skip
    ok = same_qk and same_cache and err < 1e-2
    return dict(shape=name, separate_us=t_sep, fused_us=t_fused, qk_equal=same_qk,
                cache_equal=same_cache, out_bit_equal=bit_equal, rel_err=err, ok=ok)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [run_shape(*s) for s in SHAPES]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r["shape"] for r in rows if not r["ok"]]
    print("all equal" if not bad else f"MISMATCH: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
