"""ModelState: the model-specific part of a step's inputs (attention or mamba metadata).

The runner's common path gathers tokens and positions; a ModelState turns the gathered
batch into whatever the model's forward needs beyond them, so a new model family touches
its own ModelState, not the runner.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from strixlm.worker.input_batch import InputBatch
from strixlm.worker.states import RequestStateTable


class ModelState(ABC):
    @abstractmethod
    def prepare(self, table: RequestStateTable, batch: InputBatch) -> object:
        """Return the metadata object passed to model.forward for this step."""
