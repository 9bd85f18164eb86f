"""The engine core in its own process: a busy loop fed and drained through two queues.

Messages in:  ("add", [Request, ...]) | ("abort", [request_id, ...]) | ("shutdown", None)
Messages out: ("ready", num_blocks) | ("error", text) | ("outputs", [EngineCoreOutput], StepStats)
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import signal
import traceback

from strixlm.config import EngineConfig
from strixlm.engine.gc_freeze import freeze_for_process
from strixlm.engine.model_info import ModelInfo


def _parent_alive() -> bool:
    parent = mp.parent_process()
    return parent is None or parent.is_alive()


def _on_sigterm(signum, frame) -> None:
    if _parent_alive():
        return  # the API process got it too: it drains its requests, then says shutdown
    raise SystemExit(0)


def run_engine_core(config: EngineConfig, info: ModelInfo, in_q, out_q, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(levelname)s %(asctime)s [engine] %(message)s")
    # A SIGTERM to the whole process group (GNU timeout, systemd's stop) reaches this process
    # too. Dying at once would fail the requests the API process is still draining, and
    # skip the exit handlers (the resource tracker then reports leaked semaphores): the
    # engine leaves the shutdown to its parent, or exits through Python without one.
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        from strixlm.engine.core import EngineCore

        core = EngineCore(config, info)
    except Exception:
        out_q.put(("error", traceback.format_exc()))
        return
    freeze_for_process()  # this process lives as long as the engine
    out_q.put(("ready", core.num_blocks))
    while True:
        # Block only when idle: a busy engine polls the queue between steps.
        block = not core.has_unfinished()
        handled = False
        try:
            while True:
                # Idle waits wake every second to notice an API process that died
                # without saying goodbye (e.g. SIGKILL): the engine must not outlive it.
                try:
                    kind, payload = in_q.get(block=block, timeout=1.0 if block else None)
                except queue.Empty:
                    if block and not _parent_alive():
                        return
                    raise
                block = False
                handled = True
                if kind == "shutdown":
                    return
                if kind == "add":
                    for req in payload:
                        core.add_request(req)
                elif kind == "abort":
                    core.abort_requests(payload)
        except queue.Empty:
            pass
        if handled and not core.has_unfinished():
            # Aborts can empty the engine without a step: report the freed cache anyway.
            out_q.put(("outputs", [], core.stats(0, 0)))
        if core.has_unfinished():
            try:
                outputs, stats = core.step()
            except Exception:
                out_q.put(("error", traceback.format_exc()))
                return
            out_q.put(("outputs", outputs, stats))
