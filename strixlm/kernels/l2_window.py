"""L2 persistence for a range of device memory: a stream's access-policy window, through the
CUDA driver (ctypes on libcuda; torch exposes neither the window nor the set-aside).

A window marks a stream's accesses to [base, base + num_bytes) as persisting: they are
kept in a set-aside part of L2 (cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE)), which
other accesses use only while persisting lines leave it free. Stream capture copies the
stream's window into each kernel node it records, so a window set between launches during
capture holds for exactly the launches after it, at every replay.

Used by the ping-pong (models/pingpong.py): each half-batch's GEMMs read a layer's weights,
and between the two halves the other half's attention streams ~0.5 GB through L2, so the
second half reads them from HBM again (~0.9 GB a decode step). Persisting the layer's
weights keeps them for the second half.
"""

from __future__ import annotations

import ctypes
import functools
import logging

_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit
_ATTR_MAX_PERSISTING_L2_CACHE_SIZE = 108  # CUdevice_attribute
_ATTR_MAX_ACCESS_POLICY_WINDOW_SIZE = 109
_STREAM_ATTR_ACCESS_POLICY_WINDOW = 1  # CUlaunchAttributeID / CUstreamAttrID
NORMAL, STREAMING, PERSISTING = 0, 1, 2  # CUaccessProperty

logger = logging.getLogger(__name__)


class AccessPolicyWindow(ctypes.Structure):
    """CUaccessPolicyWindow."""

    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class StreamAttrValue(ctypes.Union):
    """CUstreamAttrValue (CUlaunchAttributeValue): a 64-byte union."""

    _fields_ = [("accessPolicyWindow", AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


def window_value(base: int, num_bytes: int, hit_ratio: float) -> StreamAttrValue:
    """A window over [base, base + num_bytes): hit_ratio of its lines persisting, the rest
    streaming. num_bytes 0 is no window."""
    if not 0.0 <= hit_ratio <= 1.0:
        raise ValueError(f"hit_ratio must be in [0, 1], not {hit_ratio}")
    value = StreamAttrValue()
    w = value.accessPolicyWindow
    w.base_ptr, w.num_bytes, w.hitRatio = base, num_bytes, hit_ratio
    w.hitProp, w.missProp = (PERSISTING, STREAMING) if num_bytes else (NORMAL, NORMAL)
    return value


class Driver:
    """The few driver calls this needs. They act on the calling thread's current context:
    torch's primary context, once torch has used the device on this thread."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError("L2 windows need the CUDA driver (libcuda.so.1)") from e

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def _device_attribute(self, device_index: int, attr: int) -> int:
        dev, value = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device_index), "cuDeviceGet")
        rc = self.lib.cuDeviceGetAttribute(ctypes.byref(value), attr, dev)
        self._check(rc, f"cuDeviceGetAttribute({attr})")
        return value.value

    def max_persisting_bytes(self, device_index: int) -> int:
        return self._device_attribute(device_index, _ATTR_MAX_PERSISTING_L2_CACHE_SIZE)

    def max_window_bytes(self, device_index: int) -> int:
        return self._device_attribute(device_index, _ATTR_MAX_ACCESS_POLICY_WINDOW_SIZE)

    def set_persisting_limit(self, num_bytes: int) -> None:
        rc = self.lib.cuCtxSetLimit(_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(num_bytes))
        self._check(rc, "cuCtxSetLimit(PERSISTING_L2_CACHE_SIZE)")

    def set_window(self, stream: int, base: int, num_bytes: int, hit_ratio: float) -> None:
        value = window_value(base, num_bytes, hit_ratio)
        rc = self.lib.cuStreamSetAttribute(
            ctypes.c_void_p(stream), _STREAM_ATTR_ACCESS_POLICY_WINDOW, ctypes.byref(value)
        )
        self._check(rc, "cuStreamSetAttribute(ACCESS_POLICY_WINDOW)")


@functools.cache
def driver() -> Driver:
    return Driver()


class L2Windows:
    """Windows over parts of one weight buffer on one stream, with a set-aside of
    `set_aside` bytes (at most the device's own limit). A window larger than the set-aside
    marks that fraction of its lines persisting, so that they do not evict each other; one
    beyond the device's largest window is cut to it."""

    def __init__(self, device_index: int, set_aside: int, drv: Driver | None = None) -> None:
        self.drv = drv or driver()
        limit = self.drv.max_persisting_bytes(device_index)
        self.set_aside = min(set_aside, limit)
        if self.set_aside <= 0:
            raise RuntimeError(f"device {device_index} has no persisting L2 to set aside")
        self.drv.set_persisting_limit(self.set_aside)
        self.max_window = self.drv.max_window_bytes(device_index)
        logger.info(
            "L2: %.1f MiB set aside for persisting lines (asked %.1f, the device allows %.1f)",
            self.set_aside / 2**20, set_aside / 2**20, limit / 2**20,
        )  # fmt: skip

    def set(self, stream: int, base: int, num_bytes: int) -> None:
        num_bytes = min(num_bytes, self.max_window)
        self.drv.set_window(stream, base, num_bytes, min(1.0, self.set_aside / num_bytes))

    def clear(self, stream: int) -> None:
        self.drv.set_window(stream, 0, 0, 0.0)
