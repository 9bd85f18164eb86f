"""Split-K partials (strixlm/kernels/splitk_linear.py) and the add + RMSNorm that reduces
them (strixlm/kernels/rmsnorm.py, NUM_PARTS > 1), under the Triton interpreter; when
Linear hands out partials; the Llama decoder passing them from o_proj / down_proj to the
next norm; and sm90 compiles of both kernels.

fp32 and fp16 only in the interpreter (it is not a reference for bf16 GEMMs); bf16 gets
the sm90 compile and the torch paths.
"""

from __future__ import annotations

import os

# Must be set before triton is imported: @triton.jit picks the interpreter at decoration.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from aot_compile import assert_compiles  # noqa: E402
from interpreted_triton import reimport_interpreted  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)

_KERNEL_MODULES = ("strixlm.kernels.splitk_linear", "strixlm.kernels.rmsnorm")
reimport_interpreted(*_KERNEL_MODULES)
pytest.importorskip("triton", reason="triton is not installed")
ksplit, k_norm = (importlib.import_module(n) for n in _KERNEL_MODULES)

from strixlm.layers import linear  # noqa: E402
from strixlm.layers.norm import RMSNorm  # noqa: E402
from strixlm.layers.splitk_partials import SplitKPartials  # noqa: E402

Cfg = ksplit.SplitKConfig
# Interpreter-sized tiles, and the engine's own configs on small shapes.
SMALL = Cfg(16, 16, 16, 2, 4, 1)
SMALL4 = Cfg(16, 32, 16, 4, 4, 1)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _operands(m: int, n: int, k: int, dtype: torch.dtype, seed: int):
    g = _gen(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)
    return x, w


# ---- the partials kernel ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    "m,n,k,cfg",
    [
        (5, 48, 64, SMALL),  # rows and columns short of a tile
        (33, 40, 128, SMALL4),  # several row tiles, ragged N
        (16, 64, 512, ksplit._CFG_WIDE),
        (9, 96, 512, ksplit._CFG_NARROW),
    ],
)
def test_partials_kernel_matches_reference(dtype, m, n, k, cfg):
    x, w = _operands(m, n, k, dtype, m * n + k)
    got = ksplit.splitk_partials(x, w, cfg)
    assert isinstance(got, SplitKPartials) and got.dtype == dtype
    assert got.parts.shape == (cfg.split, m, n) and got.parts.dtype == torch.float32
    ref = ksplit.splitk_partials_ref(x, w, cfg.split)
    torch.testing.assert_close(got.parts, ref, rtol=1e-5, atol=1e-5)
    want = F.linear(x.float(), w.float()).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-3, "atol": 1e-3}
    torch.testing.assert_close(got.materialize(), want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,n,k", [(5, 48, 64), (33, 40, 128)])
def test_dense_linear_matches_torch(dtype, m, n, k):
    """Split 1, output in x's dtype: fp32 sums rounded once at the store."""
    x, w = _operands(m, n, k, dtype, m + n + k)
    got = ksplit.dense_linear(x, w, Cfg(16, 16, 16, 1, 4, 1))
    assert got.shape == (m, n) and got.dtype == dtype
    want = (x.float() @ w.float().t()).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-3, "atol": 1e-3}
    torch.testing.assert_close(got, want, **tol)
    with pytest.raises(ValueError, match="split 1"):
        ksplit.dense_linear(x, w, SMALL)


def test_partials_strided_x_and_bad_shapes():
    base, w = _operands(7, 32, 96, torch.float32, 3)
    x = base[:, :64]  # rows 96 apart: the kernel takes x's row stride
    got = ksplit.splitk_partials(x, w[:, :64].contiguous(), SMALL)
    torch.testing.assert_close(got.parts, ksplit.splitk_partials_ref(x, w[:, :64], 2))
    with pytest.raises(ValueError, match="multiple"):
        ksplit.splitk_partials(x[:, :48], w[:, :48].contiguous(), SMALL)  # 48 % 32
    with pytest.raises(ValueError, match="matching K"):
        ksplit.splitk_partials(x, w, SMALL)
    empty = ksplit.splitk_partials(x[:0], w[:, :64].contiguous(), SMALL)
    assert empty.parts.shape == (2, 0, 32)


def test_materialize_sums_in_order():
    # Values whose fp32 sum depends on the order: (big + 1) - big is 0, big - big + 1 is 1.
    parts = torch.tensor([[[1e8]], [[1.0]], [[-1e8]]])
    p = SplitKPartials(parts, torch.float32)
    assert p.materialize().item() == 0.0
    assert p.shape == (1, 1)


# ---- the reducing add + RMSNorm --------------------------------------------------------------


def _norm_case(m: int, hidden: int, dtype: torch.dtype, split: int, seed: int):
    g = _gen(seed)
    k = 32 * split
    x = torch.randn(m, k, generator=g).to(dtype)
    w = (torch.randn(hidden, k, generator=g) / k**0.5).to(dtype)
    partials = SplitKPartials(ksplit.splitk_partials_ref(x, w, split), dtype)
    residual = (torch.randn(m, hidden, generator=g) * 2).to(dtype)
    layer = RMSNorm(hidden, eps=1e-5)
    layer.weight.data = (1.0 + 0.5 * torch.randn(hidden, generator=g)).to(dtype)
    return x, w, partials, residual, layer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,hidden,split", [(1, 64, 2), (7, 100, 4), (20, 256, 3)])
def test_reducing_norm_matches_torch(dtype, m, hidden, split):
    x, w, partials, residual, layer = _norm_case(m, hidden, dtype, split, m + hidden)
    parts_before = partials.parts.clone()
    res_plain, res_torch = residual.clone(), residual.clone()
    out = torch.full((m, hidden), float("nan"), dtype=dtype)  # every element must be written
    got, got_sum = k_norm.fused_add_rmsnorm(partials, residual, layer.weight.data, 1e-5, out=out)
    assert got is out and got_sum is residual, "the sum goes into residual, the norm into out"
    assert torch.equal(partials.parts, parts_before)
    # Bit for bit what the plain kernel does on the summed partials (same sum order, same ops).
    want, want_sum = k_norm.fused_add_rmsnorm(
        partials.materialize(), res_plain, layer.weight.data, 1e-5
    )
    assert torch.equal(got, want) and torch.equal(got_sum, want_sum)
    # Against the torch model path: F.linear, then the add and RMSNorm (HF's numerics).
    with torch.no_grad():
        ref, ref_sum = layer(F.linear(x, w), res_torch)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(got_sum, ref_sum, **tol)
    torch.testing.assert_close(got, ref, **tol)


def test_reducing_norm_single_part_and_errors():
    x, w, partials, residual, layer = _norm_case(5, 64, torch.float32, 1, 0)
    got, _ = k_norm.fused_add_rmsnorm(partials, residual.clone(), layer.weight.data, 1e-5)
    want, _ = k_norm.fused_add_rmsnorm(
        partials.materialize(), residual.clone(), layer.weight.data, 1e-5
    )
    assert torch.equal(got, want)
    bad = SplitKPartials(torch.zeros(2, 5, 64), torch.float16)  # residual is fp32
    with pytest.raises(ValueError, match="same shape and dtype"):
        k_norm.fused_add_rmsnorm(bad, residual, layer.weight.data, 1e-5)
    strided = SplitKPartials(torch.zeros(2, 64, 5).transpose(1, 2), torch.float32)
    with pytest.raises(ValueError, match="contiguous"):
        k_norm.fused_add_rmsnorm(strided, residual, layer.weight.data, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_layer_torch_path_takes_partials(dtype):
    # CPU: the layer sums the partials and runs its torch code, with or without a residual.
    _, _, partials, residual, layer = _norm_case(6, 64, dtype, 4, 11)
    plain = partials.materialize()
    with torch.no_grad():
        got, got_sum = layer(partials, residual.clone())
        want, want_sum = layer(plain, residual.clone())
        assert torch.equal(got, want) and torch.equal(got_sum, want_sum)
        assert torch.equal(layer(partials), layer(plain))


def test_rmsnorm_layer_sends_partials_to_the_kernel(monkeypatch):
    # As on CUDA (use_triton true): the fused kernel receives the partials themselves.
    from strixlm.layers import norm

    _, _, partials, residual, layer = _norm_case(6, 64, torch.float16, 4, 12)
    monkeypatch.setattr(norm, "use_triton", lambda t: True)
    seen = []
    real = k_norm.fused_add_rmsnorm
    monkeypatch.setattr(k_norm, "fused_add_rmsnorm", lambda x, *a: seen.append(x) or real(x, *a))
    with torch.no_grad():
        got, _ = layer(partials, residual.clone())
    assert seen == [partials]
    want, _ = real(partials.materialize(), residual.clone(), layer.weight.data, layer.eps)
    assert torch.equal(got, want)


# ---- when Linear hands out partials -----------------------------------------------------------


def test_plan_follows_the_measured_window():
    half = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False, max_rows=128)
    plan = ksplit.plan
    assert plan(64, 1024, 2048, **half) == ksplit._CFG_WIDE  # o_proj
    assert plan(128, 1024, 2048, **half) == ksplit._CFG_WIDE
    assert plan(64, 1024, 3072, **half) == ksplit._CFG_NARROW  # down
    assert plan(128, 1024, 3072, **half) == ksplit._CFG_WIDE
    rows = ksplit.GEMV_MAX_ROWS
    assert plan(rows + 1, 1024, 2048, **half) is not None
    assert plan(rows, 1024, 2048, **half) is None  # the GEMV kernel's rows
    assert plan(129, 1024, 2048, **half) is None
    assert plan(64, 1024, 2048, **{**half, "max_rows": 0}) is None  # turned off
    assert plan(64, 4096, 2048, **half) is None  # wide output: enough tiles already
    assert plan(64, 1024, 2000, **half) is None  # K not a multiple of SPLIT * BLOCK_K
    assert plan(64, 1024, 2048, **{**half, "has_bias": True}) is None
    assert plan(64, 1024, 2048, **{**half, "w_dtype": torch.float32}) is None
    assert plan(64, 1024, 2048, **{**half, "x_dtype": torch.float16}) is None


def test_max_rows_env(monkeypatch):
    assert ksplit.splitk_max_rows() == ksplit._MAX_ROWS
    monkeypatch.delenv("STRIXLM_SPLITK_MAX_ROWS", raising=False)
    assert ksplit._env_max_rows() == 128
    monkeypatch.setenv("STRIXLM_SPLITK_MAX_ROWS", "0")
    assert ksplit._env_max_rows() == 0
    monkeypatch.setenv("STRIXLM_SPLITK_MAX_ROWS", "lots")
    with pytest.raises(ValueError, match="integer"):
        ksplit._env_max_rows()


def _linear(n: int, k: int, dtype: torch.dtype, bias: bool = False) -> linear.Linear:
    lin = linear.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=_gen(n + k)) / k**0.5)
    return lin.to(dtype)


def test_forward_partials_is_plain_on_cpu():
    lin = _linear(64, 512, torch.bfloat16)
    for m in (4, 16, 200):
        x = torch.randn(m, 512).to(torch.bfloat16)
        got = lin.forward_partials(x)
        assert isinstance(got, torch.Tensor) and torch.equal(got, lin(x))


def test_forward_partials_dispatch(monkeypatch):
    # As on CUDA: use_triton true, the interpreted kernel module in Linear's hands.
    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(linear, "splitk", ksplit)
    monkeypatch.setattr(ksplit, "_MAX_ROWS", 128)
    lin = _linear(64, 512, torch.float16)
    x = torch.randn(16, 512, generator=_gen(1)).to(torch.float16)
    got = lin.forward_partials(x)
    assert isinstance(got, SplitKPartials) and got.parts.shape == (4, 16, 64)
    want = F.linear(x.float(), lin.weight.float()).half()
    torch.testing.assert_close(got.materialize(), want, rtol=1e-3, atol=1e-3)
    for m in (ksplit.GEMV_MAX_ROWS, 129):  # the GEMV's rows; past the cap
        xm = torch.randn(m, 512).to(torch.float16)
        assert isinstance(lin.forward_partials(xm), torch.Tensor)
    fp32 = _linear(64, 512, torch.float32)  # split-K is for half-precision weights
    assert isinstance(fp32.forward_partials(x.float()), torch.Tensor)
    assert isinstance(lin.forward_partials(x[None]), torch.Tensor)  # 3-D x
    assert isinstance(_linear(64, 512, torch.float16, bias=True).forward_partials(x), torch.Tensor)
    assert isinstance(_linear(64, 500, torch.float16).forward_partials(x[:, :500]), torch.Tensor)
    monkeypatch.setattr(ksplit, "_MAX_ROWS", 0)
    assert isinstance(lin.forward_partials(x), torch.Tensor)


def test_plan_dense_follows_the_table():
    half = dict(x_dtype=torch.bfloat16, w_dtype=torch.bfloat16, has_bias=False)
    plan = ksplit.plan_dense
    assert plan(12, 4096, 1024, **half).block_m == 16  # qkv
    assert plan(128, 4096, 1024, **half) == ksplit.SplitKConfig(64, 64, 128, 1, 4, 4)
    assert plan(129, 4096, 1024, **half) is None  # cuBLAS was as fast above 128 rows
    assert plan(64, 6144, 1024, **half).block_n == 64  # gate_up
    assert plan(65, 6144, 1024, **half) is None
    assert plan(256, 1024, 2048, **half).split == 1  # o_proj past split-K's rows
    assert plan(ksplit.GEMV_MAX_ROWS, 4096, 1024, **half) is None  # the GEMV's rows
    assert plan(ksplit.GEMV_MAX_ROWS + 1, 4096, 1024, **half).block_m == 16
    assert plan(64, 1024, 3072, **half) is None  # down: never measured faster
    assert plan(64, 4096, 2048, **half) is None  # an unmeasured shape
    assert plan(64, 4096, 1024, **{**half, "has_bias": True}) is None
    assert plan(64, 4096, 1024, **{**half, "w_dtype": torch.float32}) is None
    every = [c for rows in ksplit._DENSE.values() for _, c in rows]
    assert all(c.split == 1 and 1024 % c.block_k == 0 for c in every)


def test_forward_takes_the_dense_kernel_at_measured_shapes(monkeypatch):
    # As on CUDA: use_triton true; the table shrunk to this test's shape and tile.
    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(linear, "splitk", ksplit)
    monkeypatch.setattr(ksplit, "_DENSE", {(48, 64): [(32, Cfg(16, 16, 16, 1, 4, 1))]})
    seen = []
    real = ksplit.dense_linear
    monkeypatch.setattr(ksplit, "dense_linear", lambda *a: seen.append(a[2]) or real(*a))
    lin = _linear(48, 64, torch.float16)
    x = torch.randn(20, 64, generator=_gen(4)).to(torch.float16)
    got = lin(x)
    assert len(seen) == 1
    torch.testing.assert_close(
        got, F.linear(x.float(), lin.weight.float()).half(), rtol=1e-3, atol=1e-3
    )
    lin(torch.randn(33, 64).to(torch.float16))  # past the table's rows: cuBLAS's path
    lin(x[None])  # 3-D x: the plain path
    assert len(seen) == 1
    monkeypatch.setattr(ksplit, "_DENSE_ENABLED", False)
    lin(x)
    assert len(seen) == 1


def test_forward_silu_mul_dispatch(monkeypatch):
    """Linear.forward_silu_mul: the GEMV (M <= 8) with the activation in its loads; else
    silu_and_mul, then forward / forward_partials (split-K at 8 < M <= cap). Every route
    gives the plain route's numbers."""
    from strixlm.kernels.activation import silu_and_mul as kernel_silu
    from strixlm.layers.activation import silu_and_mul

    monkeypatch.setattr(linear, "use_triton", lambda t: True)
    monkeypatch.setattr(linear, "splitk", ksplit)
    monkeypatch.setattr(ksplit, "_MAX_ROWS", 128)
    lin = _linear(64, 512, torch.float16)
    gu = torch.randn(16, 1024, generator=_gen(2)).to(torch.float16)
    got = lin.forward_silu_mul(gu, partials=True)
    assert isinstance(got, SplitKPartials)
    assert torch.equal(got.parts, lin.forward_partials(silu_and_mul(gu)).parts)
    plain = lin.forward_silu_mul(gu)  # no partials wanted: silu_and_mul, then F.linear
    assert torch.equal(plain, lin(silu_and_mul(gu)))
    monkeypatch.setattr(linear, "_skinny", lambda x, w, dts: x.shape[0] <= 8)
    small = gu[:4]
    for partials in (False, True):
        out = lin.forward_silu_mul(small, partials)
        assert torch.equal(out, linear.gemv_kernel.gemv(kernel_silu(small), lin.weight))
    with pytest.raises(RuntimeError):  # a width that is not [gate | up]: the plain path's error
        lin.forward_silu_mul(gu[:, :1000])


# ---- the Llama decoder passes partials to its norms -------------------------------------------


def test_llama_forward_with_partials_matches_plain(monkeypatch):
    """o_proj and down_proj hand out (torch-made) partials; the hidden states match the plain
    forward's, and Attention / MLP called on their own still return tensors."""
    from attention_inputs import one_prompt_metadata
    from transformers import LlamaConfig

    from strixlm.layers.attention.torch_paged import TorchPagedAttention
    from strixlm.models.llama import LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg, TorchPagedAttention)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, 0.2)
    t, block = 12, 16
    md = one_prompt_metadata(t, block)
    ids, pos = torch.randint(0, 128, (t,), generator=_gen(5)), torch.arange(t)

    def run() -> torch.Tensor:
        for attn in model.attention_layers():
            attn.kv_cache = torch.zeros(2, 2, block, attn.num_kv_heads, attn.head_dim)
        with torch.no_grad():
            return model(ids, pos, md)

    plain = run()
    calls = []

    def fake_partials(self, x):
        calls.append(self)
        return SplitKPartials(ksplit.splitk_partials_ref(x, self.weight, 4), x.dtype)

    monkeypatch.setattr(linear.Linear, "forward_partials", fake_partials)
    got = run()
    layers = model.layers
    assert calls == [m for layer in layers for m in (layer.self_attn.o_proj, layer.mlp.down_proj)]
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        h = torch.randn(t, 64)
        assert isinstance(layers[0].mlp(h), torch.Tensor)
        assert isinstance(layers[0].self_attn(pos, h, md), torch.Tensor)


# ---- sm90 compiles ------------------------------------------------------------------------------

AOT = r"""
from strixlm.kernels import rmsnorm as r, splitk_linear as s
target = GPUTarget("cuda", 90, 32)

def partials_kernel(sig, cfg):
    c = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PDL=True)
    src = ASTSource(s._splitk_partials_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
    triton.compile(src, target=target,
                   options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))

for dt in ("bf16", "fp16"):
    sig = dict(x_ptr=f"*{dt}", w_ptr=f"*{dt}", part_ptr="*fp32", M="i32", N="i32",
               stride_xm="i32", stride_wn="i32", K_PER="i32")
    for cfg in (s._CFG_WIDE, s._CFG_NARROW):
        partials_kernel(sig, cfg)
    # dense_linear: split 1, the store rounds to the 16-bit output
    sig["part_ptr"] = f"*{dt}"
    for cfg in {c for rows in s._DENSE.values() for _, c in rows}:
        partials_kernel(sig, cfg)
sig = dict(x_ptr="*fp32", res_ptr="*bf16", w_ptr="*bf16", out_ptr="*bf16", n_inner="i32",
           x_s0="i32", x_s1="i32", r_s0="i32", r_s1="i32", o_s0="i32", o_s1="i32",
           n_cols="i32", eps="fp32")
c = dict(HAS_RESIDUAL=True, BLOCK=1024, NUM_PARTS=4, PDL=True)
src = ASTSource(r._rmsnorm_kernel, {**sig, **{k: "constexpr" for k in c}}, c)
triton.compile(src, target=target, options=dict(num_warps=4))
print("compiled")
"""


def test_kernels_compile_for_sm90():
    """The partials GEMM (both engine configs, bf16 and fp16), its dense configs with a 16-bit
    output, and the reducing norm variant."""
    assert_compiles(AOT)
