"""models/weight_pack.py: the decoder layers' projection weights packed in one buffer in the
ping-pong GEMM lane's order, with the model's outputs unchanged."""

from __future__ import annotations

import torch

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.models import weight_pack


def test_packing_keeps_values_and_orders_the_lanes_reads(tiny_qwen3_dir):
    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", skip_tokenizer_init=True)
    model = llm.engine.core.runner.model
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    prompt = [{"prompt_token_ids": [5, 17, 99, 3]}]
    want = llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids
    weights = weight_pack.layer_weights
    before = [w.detach().clone() for layer in model.layers for w in weights(layer)]

    packed = weight_pack.pack_layer_weights(list(model.layers))
    after = [w for layer in model.layers for w in weights(layer)]
    buf = packed.buffer
    size = buf.element_size()
    for old, new in zip(before, after, strict=True):
        assert torch.equal(old, new) and new.shape == old.shape
        assert new.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
        assert (new.data_ptr() - buf.data_ptr()) % weight_pack.ALIGN_BYTES == 0
    # Each layer: qkv, then o_proj .. down; a chunk runs from o_proj to the next qkv's end.
    starts = [w.data_ptr() - buf.data_ptr() for w in after]
    assert starts == sorted(starts)
    n = len(model.layers)
    for i in range(n):
        qkv, o, gu, down = after[4 * i : 4 * i + 4]
        assert packed.qkv[i] == (starts[4 * i], starts[4 * i] + qkv.numel() * size)
        assert packed.post[i] == (starts[4 * i + 1], starts[4 * i + 3] + down.numel() * size)
        assert packed.layer(i) == (packed.qkv[i][0], packed.post[i][1])
        lo, hi = packed.chunk(i)
        assert lo == packed.post[i][0]
        assert hi == (packed.qkv[i + 1][1] if i + 1 < n else packed.post[i][1])
    assert packed.chunk(n - 1)[1] <= buf.numel() * size
    got = llm.generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids
    assert got == want
