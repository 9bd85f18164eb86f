"""The fused q/k RMSNorm + rotary kernel against its torch reference at Qwen3-0.6B shapes.

python benchmarks/gpu/check_qk_norm_rope.py     (CUDA; prints PASS/FAIL per case and a time)
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from strixlm.kernels.qk_norm_rope import qk_norm_rope_inplace, qk_norm_rope_ref  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402


def main() -> int:
    dev, hq, hkv, d = "cuda", 16, 8, 128
    rot = RotaryEmbedding(d, 40960, 1e6).to(dev)
    fails = 0
    for dtype in (torch.bfloat16, torch.float16):
        for t in (1, 256, 8192):
            g = torch.Generator(device=dev).manual_seed(t)
            qkv = torch.randn(t, (hq + 2 * hkv) * d, device=dev, dtype=dtype, generator=g)
            pos = torch.randint(0, 40960, (t,), device=dev, generator=g)
            wq = (1 + 0.1 * torch.randn(d, device=dev, generator=g)).to(dtype)
            wk = (1 + 0.1 * torch.randn(d, device=dev, generator=g)).to(dtype)
            q = qkv[:, : hq * d].view(t, hq, d)
            k = qkv[:, hq * d : (hq + hkv) * d].view(t, hkv, d)
            v_before = qkv[:, (hq + hkv) * d :].clone()
            rq, rk = qk_norm_rope_ref(pos, q, k, wq, wk, 1e-6, rot.cos, rot.sin)
            qk_norm_rope_inplace(pos, q, k, wq, wk, 1e-6, rot.cos, rot.sin)
            ulp = torch.finfo(dtype).eps
            errs = [
                ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                for a, b in ((q, rq), (k, rk))
            ]
            same = min((q == rq).float().mean().item(), (k == rk).float().mean().item())
            ok = (
                max(errs) <= ulp
                and same >= 0.99
                and torch.equal(qkv[:, (hq + hkv) * d :], v_before)
            )
            fails += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} {dtype} T={t}: max rel err {max(errs):.2e}, "
                f"{100 * same:.2f}% bit-identical"
            )
    if fails == 0:
        print("ALL PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
