"""Host values to the device without blocking the host (the per-step path never syncs)."""

from __future__ import annotations

import numpy as np
import torch


def to_device(values, device: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A list or numpy array as a device tensor (dtype: the array's own if None), copied
    through pinned memory on CUDA so the copy is asynchronous; on CPU the tensor may share
    memory with a numpy input."""
    t = torch.as_tensor(np.ascontiguousarray(values), dtype=dtype)
    if device.startswith("cuda"):
        t = t.pin_memory()
    return t.to(device, non_blocking=True)
