"""The start-up heap is frozen while LLM.generate runs, and only then."""

from __future__ import annotations

import gc

from strixlm.engine import gc_freeze


def test_frozen_heap_is_scoped_and_nests(monkeypatch) -> None:
    # Count the freezes rather than compare freeze counts: frozen objects that die (a
    # leftover thread of an earlier test dropping its last reference) leave the frozen
    # generation, so the count may fall between two reads.
    monkeypatch.setattr(gc_freeze, "_depth", 0)
    calls: list[str] = []
    real_freeze, real_unfreeze = gc.freeze, gc.unfreeze
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze") or real_freeze())
    monkeypatch.setattr(gc, "unfreeze", lambda: calls.append("unfreeze") or real_unfreeze())
    assert gc.get_freeze_count() == 0
    with gc_freeze.frozen_heap():
        assert gc.get_freeze_count() > 0
        with gc_freeze.frozen_heap():  # nested: one freeze, undone by the outer exit only
            assert calls == ["freeze"]
        assert calls == ["freeze"] and gc.get_freeze_count() > 0
    assert calls == ["freeze", "unfreeze"]
    assert gc.get_freeze_count() == 0


def test_frozen_heap_off_by_env(monkeypatch) -> None:
    monkeypatch.setenv("STRIXLM_GC_FREEZE", "0")
    with gc_freeze.frozen_heap():
        assert gc.get_freeze_count() == 0


def test_generate_runs_frozen_and_unfreezes(tiny_qwen3_dir, monkeypatch) -> None:
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.llm import LLM

    llm = LLM(tiny_qwen3_dir, device="cpu", dtype="float32", skip_tokenizer_init=True)
    seen = []
    real_step = llm.engine.step
    monkeypatch.setattr(
        llm.engine, "step", lambda: seen.append(gc.get_freeze_count()) or real_step()
    )
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, temperature=0.0), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
    assert seen and min(seen) > 0  # every step ran with the heap frozen
    assert gc.get_freeze_count() == 0  # and the call left nothing frozen


def test_api_process_freezes_unless_turned_off(monkeypatch) -> None:
    for var in ("STRIXLM_API_GC_FREEZE", "STRIXLM_GC_FREEZE"):
        monkeypatch.setenv(var, "0")
        assert not gc_freeze.freeze_api_process() and gc.get_freeze_count() == 0
        monkeypatch.delenv(var)
    try:
        assert gc_freeze.freeze_api_process() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
