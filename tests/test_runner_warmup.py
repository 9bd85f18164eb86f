"""The startup warm-up steps (run before any request) leave the runner clean."""

from __future__ import annotations

import pytest

from strixlm.engine.request import SamplingParams
from strixlm.entrypoints.llm import LLM


@pytest.mark.parametrize("budget", [None, 256])
def test_warmup_steps_leave_no_trace(tiny_llama_dir, budget):
    """With a token budget below the 600-token warm-up prompt, the warm-up must stay within
    the budget-sized input buffers (on CUDA it wrote past them: an illegal address)."""
    prompts = [[5, 6, 7, 8, 9], list(range(100, 160))]
    params = SamplingParams(temperature=0.0, max_tokens=8)

    def run(warm: bool) -> list[list[int]]:
        extra = {} if budget is None else {"max_num_batched_tokens": budget}
        llm = LLM(tiny_llama_dir, device="cpu", dtype="float32", max_model_len=1024, **extra)
        runner = llm.engine.core.runner
        if warm:
            # At startup, as EngineCore does on CUDA: before the KV manager hands out blocks.
            runner._run_warmup_steps()
            assert not [r for r in runner.table.rows if r.startswith("__warmup")]
        return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]

    assert run(warm=True) == run(warm=False)
