"""The small fused kernels against their torch references at real shapes, on CUDA:
q/k RMSNorm + rotary (Qwen3-0.6B), gated group RMSNorm and MoE routing (Nemotron 3 Nano,
Qwen3-30B-A3B). Prints PASS/FAIL per case and the kernel time next to the torch path's.

python benchmarks/gpu/check_glue_kernels.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))

from graph_timing import graph_time_us  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from strixlm.kernels.gated_rmsnorm import gated_rmsnorm, gated_rmsnorm_ref  # noqa: E402
from strixlm.kernels.moe_routing import route_sigmoid_bias, route_softmax  # noqa: E402
from strixlm.kernels.qk_norm_rope import qk_norm_rope_inplace, qk_norm_rope_ref  # noqa: E402
from strixlm.layers.moe import select_experts_sigmoid_bias, select_experts_softmax  # noqa: E402
from strixlm.layers.rotary import RotaryEmbedding  # noqa: E402


def us(fn) -> float:
    return do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3


def check_gated_rmsnorm() -> int:
    """Nano's Mamba output: 64 heads x 64 = 4096 channels in 8 groups of 512."""
    fails = 0
    for t in (1, 256, 8192):
        g = torch.Generator(device="cuda").manual_seed(t)
        wide = torch.randn(t, 3 * 4096, device="cuda", dtype=torch.bfloat16, generator=g)
        x, z = wide[:, :4096], wide[:, 4096:8192]
        w = (1 + 0.1 * torch.randn(4096, device="cuda", generator=g)).to(torch.bfloat16)
        got, ref = gated_rmsnorm(x, z, w, 512, 1e-5), gated_rmsnorm_ref(x, z, w, 512, 1e-5)
        err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        same = (got == ref).float().mean().item()
        ok = err <= 2 * torch.finfo(torch.bfloat16).eps and same >= 0.99
        fails += not ok
        t_k = us(lambda: gated_rmsnorm(x, z, w, 512, 1e-5))  # noqa: B023
        t_r = us(lambda: gated_rmsnorm_ref(x, z, w, 512, 1e-5))  # noqa: B023
        print(
            f"{'PASS' if ok else 'FAIL'} gated_rmsnorm T={t}: max rel err {err:.2e}, "
            f"{100 * same:.2f}% bit-identical; {t_k:.1f} us vs torch {t_r:.1f} us"
        )
    return fails


def check_moe_routing() -> int:
    """Nano: 128 experts, top 6, sigmoid + bias, scale 2.5; Qwen3-30B-A3B: softmax top 8."""
    fails = 0
    for t in (1, 64, 4096):
        g = torch.Generator(device="cuda").manual_seed(t)
        logits = torch.randn(t, 128, device="cuda", generator=g)
        bias = 0.1 * torch.randn(128, device="cuda", generator=g)
        cases = [
            (
                "sigmoid+bias E128 k6",
                lambda: route_sigmoid_bias(logits, bias, 6, True, 2.5),  # noqa: B023
                lambda: select_experts_sigmoid_bias(
                    logits,  # noqa: B023
                    bias,  # noqa: B023
                    6,
                    1,
                    1,
                    True,
                    2.5,
                    use_triton=False,
                ),
            ),
            (
                "softmax E128 k8",
                lambda: route_softmax(logits, 8, True),  # noqa: B023
                lambda: select_experts_softmax(logits, 8, True, use_triton=False),  # noqa: B023
            ),
        ]
        for name, kern, ref in cases:
            (w, i), (rw, ri) = kern(), ref()
            ids_ok = torch.equal(i.long(), ri.long())
            err = ((w - rw).abs().max() / rw.abs().max()).item()
            ok = ids_ok and err <= 1e-5
            fails += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} routing {name} T={t}: ids equal {ids_ok}, "
                f"weights rel err {err:.1e}; {us(kern):.1f} us vs torch {us(ref):.1f} us"
            )
    return fails


def check_gemv_epilogues() -> int:
    """Nano's shared expert up-projection with relu^2 in the store, and its fp32 router."""
    from strixlm.kernels.gemv import gemv, gemv_ref

    fails = 0
    g = torch.Generator(device="cuda").manual_seed(0)
    for m in (1, 4):
        x = torch.randn(m, 2688, device="cuda", generator=g).bfloat16()
        w = (0.02 * torch.randn(3712, 2688, device="cuda", generator=g)).bfloat16()
        got, ref = gemv(x, w, relu2=True), gemv_ref(x, w, None, relu2=True)
        err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        wr = torch.randn(128, 2688, device="cuda", generator=g)
        lg, lr = gemv(x, wr, out_dtype=torch.float32), x.float() @ wr.t()
        err_r = ((lg - lr).abs().max() / lr.abs().max()).item()
        ok = err <= 2e-2 and err_r <= 1e-5
        fails += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} gemv M={m}: relu2 rel err {err:.1e}, fp32 router rel "
            f"err {err_r:.1e}; relu2 {us(lambda: gemv(x, w, relu2=True)):.1f} us"  # noqa: B023
        )
    return fails


def check_qk_cache_write(rot: RotaryEmbedding) -> int:
    """qk_norm_rope with the K/V cache write (v by a program of its own or by k's, as
    STRIXLM_QK_SEPARATE_V picks) at the decode step's shape: the cache rows at each slot
    hold the kernel's own rotated k and the untouched v; padding slots (-1) write nothing;
    every other row keeps its contents. Also the graph replay time of the launch."""
    import strixlm.kernels.qk_norm_rope as qknr

    dev, hq, hkv, d, bs, blocks = "cuda", 16, 8, 128, 16, 4096
    fails, saved = 0, qknr.SEPARATE_V_ENABLED
    for t in (1, 256):
        for separate_v in (True, False):
            qknr.SEPARATE_V_ENABLED = separate_v
            g = torch.Generator(device=dev).manual_seed(100 + t)
            qkv = torch.randn(t, (hq + 2 * hkv) * d, device=dev, dtype=torch.bfloat16, generator=g)
            q = qkv[:, : hq * d].view(t, hq, d)
            k = qkv[:, hq * d : (hq + hkv) * d].view(t, hkv, d)
            v = qkv[:, (hq + hkv) * d :].view(t, hkv, d)
            pos = torch.randint(0, 40960, (t,), device=dev, generator=g)
            slots = torch.randperm(blocks * bs, device=dev, generator=g)[:t]
            if t > 1:
                slots[-3:] = -1  # graph padding rows
            wq = (1 + 0.1 * torch.randn(d, device=dev, generator=g)).bfloat16()
            wk = (1 + 0.1 * torch.randn(d, device=dev, generator=g)).bfloat16()
            cache = torch.randn(2, blocks, bs, hkv, d, device=dev, generator=g).bfloat16()
            before = cache.clone()
            args = (pos, q, k, wq, wk, 1e-6, rot.cos, rot.sin)
            kw = dict(v=v, kv_cache=cache, slot_mapping=slots)
            qk_norm_rope_inplace(*args, **kw)
            live = slots >= 0
            expect = before.clone()
            expect[0].view(-1, hkv, d)[slots[live]] = k[live]
            expect[1].view(-1, hkv, d)[slots[live]] = v[live]
            ok = torch.equal(cache, expect)
            fails += not ok
            t_us = graph_time_us(lambda a=args, kw=kw: qk_norm_rope_inplace(*a, **kw))
            print(
                f"{'PASS' if ok else 'FAIL'} qk_norm_rope + cache write T={t} separate v "
                f"{separate_v}: cache rows equal {ok}; {t_us:.2f} us per call (graph replay)"
            )
    qknr.SEPARATE_V_ENABLED = saved
    return fails


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
            # Graph replay, as the decode step runs it (the in-place op is idempotent enough
            # to time: it keeps normalizing and rotating the same buffer).
            args = (pos, q, k, wq, wk, 1e-6, rot.cos, rot.sin)
            t_us = graph_time_us(lambda a=args: qk_norm_rope_inplace(*a))
            print(
                f"{'PASS' if ok else 'FAIL'} {dtype} T={t}: max rel err {max(errs):.2e}, "
                f"{100 * same:.2f}% bit-identical; {t_us:.1f} us per call (graph replay)"
            )
    fails += check_qk_cache_write(rot) + check_gated_rmsnorm() + check_moe_routing()
    fails += check_gemv_epilogues()
    if fails == 0:
        print("ALL PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
