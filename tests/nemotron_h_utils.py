"""Tiny random NemotronH checkpoints from transformers (the numerical reference), and a
check of our greedy outputs against HF's logits.

The check is teacher-forced: HF runs once over prompt + our generated tokens, and at every
generated position our token must be HF's argmax (which makes it HF's greedy continuation)
and our logprobs must match HF's log-softmax. One HF forward per prompt instead of one per
generated token keeps the tests fast on a small CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

LOGPROB_ATOL = 2e-3


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """The tensors here are tiny: one intra-op thread is faster than two, and far faster
    on a shared, busy CPU (where a 2-thread conv1d waits ~100x longer). Restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tiny_nemotron_h_config(pattern: str, latent: int | None = None, chunk_size: int = 16, **kw):
    from transformers import NemotronHConfig

    cfg = dict(
        vocab_size=256,
        hidden_size=64,
        hybrid_override_pattern=pattern,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        mamba_num_heads=8,
        mamba_head_dim=8,
        n_groups=2,
        ssm_state_size=16,
        conv_kernel=4,
        chunk_size=chunk_size,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=48,
        moe_latent_size=latent,
        n_group=2,
        topk_group=1,
        routed_scaling_factor=2.5,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    cfg.update(kw)
    return NemotronHConfig(**cfg)


def save_tiny_nemotron_h(out: Path, pattern: str, latent: int | None = None, seed: int = 0):
    """A random NemotronH folder. Weights are scaled up (as conftest does for Llama) so the
    logits spread and greedy choices are not near-ties; the router correction bias is
    random so it takes part in the expert choice. dt_bias is raised so softplus(dt) stays
    well above time_step_min: transformers clamps dt there in prefill only, the released
    code and we use config.time_step_limit (0, inf) everywhere."""
    from transformers import NemotronHForCausalLM

    torch.manual_seed(seed)
    model = NemotronHForCausalLM(tiny_nemotron_h_config(pattern, latent)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and "norm" not in name:
                p.normal_(0, 0.2)
            elif name.endswith("dt_bias"):
                p.uniform_(0.0, 1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.uniform_(-0.3, 0.3)
    model.save_pretrained(out)
    return str(out)


def random_prompts(lengths: list[int], vocab: int = 256, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]


class HFReference:
    """HF NemotronH in fp32; log-softmax over prompt + continuation in one forward."""

    def __init__(self, folder: str) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}

    def logprobs(self, tokens: list[int]) -> torch.Tensor:
        key = tuple(tokens)
        if key not in self._cache:
            with torch.no_grad():
                logits = self.model(torch.tensor([tokens]), use_cache=False).logits[0]
            self._cache[key] = torch.log_softmax(logits.float(), -1)
        return self._cache[key]

    def check(self, prompts: list[list[int]], outputs, num_tokens: int) -> None:
        """Our outputs (RequestOutput per prompt, greedy, with logprobs) against HF."""
        for i, (prompt, out) in enumerate(zip(prompts, outputs, strict=True)):
            c = out.outputs[0]
            assert len(c.token_ids) == num_tokens, f"prompt {i}: {len(c.token_ids)} tokens"
            ref = self.logprobs(prompt + c.token_ids)
            for step, tok in enumerate(c.token_ids):
                row = ref[len(prompt) - 1 + step]
                assert tok == int(row.argmax()), f"prompt {i} (len {len(prompt)}) step {step}"
                if c.logprobs is None:
                    continue
                lp = c.logprobs[step]
                assert abs(lp.logprob - row[tok].item()) < LOGPROB_ATOL, f"prompt {i} step {step}"
                for tid, val in lp.top:
                    assert abs(val - row[tid].item()) < LOGPROB_ATOL, f"prompt {i} step {step}"
