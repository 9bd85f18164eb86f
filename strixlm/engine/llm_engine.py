"""In-process engine: input processing, the engine core and output processing in one loop."""

from __future__ import annotations

import itertools

from strixlm.config import EngineConfig
from strixlm.engine.core import EngineCore, StepStats
from strixlm.engine.model_info import ModelInfo, load_model_info
from strixlm.engine.output_processor import OutputKind, OutputProcessor
from strixlm.engine.processor import InputProcessor
from strixlm.engine.request import RequestOutput, SamplingParams


class LLMEngine:
    def __init__(self, config: EngineConfig, info: ModelInfo | None = None) -> None:
        self.config = config
        self.info = info or load_model_info(config.model)
        self.core = EngineCore(config, self.info)
        self.processor = InputProcessor(self.info, config.model.seed)
        self.outputs = OutputProcessor(self.info.tokenizer)
        self._ids = itertools.count()
        self.last_stats: StepStats | None = None

    @property
    def tokenizer(self):
        return self.info.tokenizer

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        kind: OutputKind = "cumulative",
    ) -> str:
        rid = request_id or str(next(self._ids))
        if isinstance(prompt, str):
            text, ids = prompt, self.processor.tokenize(prompt)
        else:
            text, ids = None, list(prompt)
        reqs = self.processor.make_requests(rid, ids, params)
        self.outputs.add_request(rid, text, ids, params, [r.request_id for r in reqs], kind)
        for r in reqs:
            self.core.add_request(r)
        return rid

    def abort_request(self, request_id: str) -> None:
        self.core.abort_requests(self.outputs.child_ids(request_id))
        self.outputs.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.core.has_unfinished()

    def step(self) -> list[RequestOutput]:
        core_outputs, self.last_stats = self.core.step()
        results, to_abort = self.outputs.process(core_outputs)
        if to_abort:
            self.core.abort_requests(to_abort)
        return results
