"""Head-major KV blocks (STRIXLM_KV_HEAD_MAJOR, layers/attention/backend.allocate_kv_cache):
the same logical cache with each block's memory as [heads, block_size, head_dim]. Every
writer and reader takes the cache's strides, so under the Triton interpreter they give the
token-major cache's values bit for bit; greedy tokens through the engine match HF."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")

from test_paged_decode import ROWS, _args, _qk_batch, _with  # noqa: E402
from test_triton_attention import Batch  # noqa: E402

from strixlm.kernels import kv_write as kvw  # noqa: E402
from strixlm.kernels import paged_attention as pa  # noqa: E402
from strixlm.kernels import paged_decode as pdk  # noqa: E402
from strixlm.layers.attention import backend, torch_paged  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def head_major_copy(cache: torch.Tensor) -> torch.Tensor:
    """cache's values in a head-major cache of the same logical shape."""
    _, nb, bs, h, d = cache.shape
    out = backend.allocate_kv_cache(nb, bs, h, d, cache.dtype, cache.device, head_major=True)
    out.copy_(cache)
    return out


def test_allocation_layout():
    c = backend.allocate_kv_cache(5, 16, 8, 128, torch.bfloat16, "cpu", head_major=True)
    assert c.shape == backend.kv_cache_shape(5, 16, 8, 128) and not c.any()
    # One kv head's tokens of a block: one contiguous run of block_size x head_dim.
    assert c[0, 3, :, 2].is_contiguous() and c.stride()[2:] == (128, 16 * 128, 1)
    token_major = backend.allocate_kv_cache(5, 16, 8, 128, torch.bfloat16, "cpu")
    assert token_major.is_contiguous() and token_major.shape == c.shape


@pytest.mark.parametrize("cache_dtype", [None, kvw.FP8_DTYPE])
def test_writes_give_the_same_logical_cache(cache_dtype):
    """The Triton K/V write, its torch reference and the torch backend's write (graph
    padding's negative slots skipped where the writer skips them)."""
    b = Batch([(5, 3), (0, 6), (9, 1)], 4, 2, 32, 4, torch.float32, cache_dtype=cache_dtype,
              pad_tokens=3)  # fmt: skip
    scales = (0.03, 0.05) if cache_dtype else (1.0, 1.0)
    raw = torch.uint8 if cache_dtype else torch.int32
    for write in (kvw.write_kv, kvw.write_kv_ref):
        flat, hm = b.kv_cache.clone(), head_major_copy(b.kv_cache)
        write(flat, b.k, b.v, b.slots, *scales)
        write(hm, b.k, b.v, b.slots, *scales)
        assert torch.equal(hm.contiguous().view(raw), flat.view(raw)), write
    if cache_dtype is None:
        real = b.slots[: b.t]
        flat, hm = b.kv_cache.clone(), head_major_copy(b.kv_cache)
        torch_paged.write_kv(flat, b.k[: b.t], b.v[: b.t], real)
        torch_paged.write_kv(hm, b.k[: b.t], b.v[: b.t], real)
        assert torch.equal(hm, flat)
        kk, vv = torch_paged.gather_kv(hm, b.block_table, 9)
        assert torch.equal(kk, torch_paged.gather_kv(flat, b.block_table, 9)[0])
        assert torch.equal(vv, torch_paged.gather_kv(flat, b.block_table, 9)[1])


@pytest.mark.parametrize("cache_dtype", [None, kvw.FP8_DTYPE])
def test_attention_reads_the_same_values(cache_dtype):
    """Decode through the persistent grid (dealt, dynamic, two segments) and the unified
    kernel (split and not), and a prefill / mixed batch: bit-equal outputs."""
    dec = Batch(ROWS, 4, 2, 32, 4, torch.float32, cache_dtype=cache_dtype, seed=3,
                pad_tokens=3, pad_seqs=3)  # fmt: skip
    mixed = Batch([(40, 9), (3, 3), (70, 1), (17, 17)], 4, 2, 32, 4, torch.float32,
                  cache_dtype=cache_dtype, seed=4)  # fmt: skip
    kw = dict(k_scale=0.03, v_scale=0.05) if cache_dtype else {}

    def runs(dec_b: Batch, mixed_b: Batch) -> list[torch.Tensor]:
        outs = []
        for segs, frac in ((1, 0.0), (1, 0.5), (2, 0.3)):
            out = torch.full_like(dec_b.q, float("nan"))
            outs.append(pdk.paged_decode_persistent(
                *_args(dec_b), out, block_m=16, tile=16, num_warps=4, num_stages=2,
                k_rows=False, sms=132, num_programs=3, num_segs=segs, dynamic_frac=frac, **kw,
            )[: dec_b.t])  # fmt: skip
        for segs in (1, 2):
            cfg = pa.AttnConfig(16, 16, 4, 2, segs)
            outs.append(pa.paged_attention(
                *_args(dec_b), max_query_len=1, max_seq_len=72, config=cfg, **kw
            )[: dec_b.t])  # fmt: skip
        cfg = pa.AttnConfig(32, 16, 4, 2)
        outs.append(pa.paged_attention(
            *_args(mixed_b), max_query_len=17, max_seq_len=70, config=cfg, **kw
        )[: mixed_b.t])  # fmt: skip
        return outs

    want = runs(dec, mixed)
    got = runs(_with(dec, kv_cache=head_major_copy(dec.kv_cache)),
               _with(mixed, kv_cache=head_major_copy(mixed.kv_cache)))  # fmt: skip
    for w, g in zip(want, got, strict=True):
        assert torch.equal(w, g)


def test_qk_norm_rope_writes_the_same_cache():
    """The q/k norm + rotary kernel's K/V write, as its own launch and fused into the
    persistent kernel."""
    b, qkv, views, prologue, _ = _qk_batch()
    results = []
    for cache in (b.kv_cache.clone(), head_major_copy(b.kv_cache)):
        qkv1 = qkv.clone()
        q, k, v = views(qkv1)
        prologue(k, v).run(q, cache)
        qkv2 = qkv.clone()
        q2, k2, v2 = views(qkv2)
        fused_cache = cache.clone() if cache.is_contiguous() else head_major_copy(cache)
        fused_cache.copy_(b.kv_cache)
        out = torch.full_like(q2, float("nan"))
        out = pdk.paged_decode_persistent(
            *_args(_with(b, q=q2, kv_cache=fused_cache)), out, block_m=16, tile=16,
            num_warps=4, num_stages=2, k_rows=False, sms=132, num_programs=3,
            qk=prologue(k2, v2),
        )  # fmt: skip
        results.append((cache.contiguous(), fused_cache.contiguous(), out[: b.t]))
    for w, g in zip(*results, strict=True):
        assert torch.equal(w, g)


@pytest.mark.parametrize("attention", ["torch", "triton"])
def test_engine_greedy_tokens_match_hf(monkeypatch, tiny_qwen3_dir, attention):
    """The runner allocates head-major caches when asked, and greedy tokens (prefill, then
    decode over the cache) match HF's with either attention backend."""
    from test_correctness_hf import check_against_hf, encode, hf_reference

    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    monkeypatch.setattr(backend, "KV_HEAD_MAJOR", True)
    prompts = encode(tiny_qwen3_dir)[:3]
    n = 4
    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", max_model_len=256,
              attention_backend=attention, max_num_seqs=4, max_num_batched_tokens=64,
              enable_prefix_caching=False)  # fmt: skip
    cache = llm.engine.core.runner.kv_caches[0]
    assert not cache.is_contiguous() and cache[0, 0, :, 0].is_contiguous()
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logprobs=5)
    outs = llm.generate(prompts, params, use_tqdm=False)
    check_against_hf(outs, hf_reference(tiny_qwen3_dir, prompts, n))
