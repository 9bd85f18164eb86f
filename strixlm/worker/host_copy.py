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


class PinnedStaging:
    """A ring of pinned host buffers for a per-step upload into one device tensor.

    `to_device` pins a fresh tensor per call: the pinning and the caching host allocator's
    bookkeeping cost the host tens of microseconds a step. Here the host writes the next
    buffer of the ring in place and one non-blocking copy moves it. A buffer is written
    again only after the copy that read it has run (an event per buffer; with the engine
    at most a step ahead of the GPU, that wait is already over). On CPU the copy is plain.
    """

    def __init__(self, size: int, dtype: torch.dtype, device: str, depth: int = 4) -> None:
        self.device = device
        pin = device.startswith("cuda")
        self._bufs = [torch.zeros(size, dtype=dtype, pin_memory=pin) for _ in range(depth)]
        self._events: list[torch.cuda.Event | None] = [None] * depth
        self._next = 0

    def buffer(self) -> np.ndarray:
        """The next buffer to fill (a numpy view), free once its last copy has run."""
        ev = self._events[self._next]
        if ev is not None and not ev.query():
            ev.synchronize()  # the GPU is a whole ring behind: wait rather than overwrite
        return self._bufs[self._next].numpy()

    def pinned(self) -> torch.Tensor:
        """The buffer being filled, as a tensor: a kernel may read it in place (zero-copy)
        before `commit`."""
        return self._bufs[self._next]

    def upload(self, dst: torch.Tensor, length: int) -> None:
        """Copy the first `length` values of the buffer just filled into dst[:length]."""
        dst[:length].copy_(self._bufs[self._next][:length], non_blocking=True)
        self.commit()

    def commit(self) -> None:
        """The buffer's readers are enqueued: move on, and mark when they will have run."""
        i = self._next
        self._next = (i + 1) % len(self._bufs)
        if self.device.startswith("cuda"):
            ev = self._events[i] or torch.cuda.Event()
            ev.record()
            self._events[i] = ev
