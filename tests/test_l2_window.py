"""kernels/l2_window.py: the access-policy window's C layout, and the set-aside and hit
ratios L2Windows asks the driver for (a recording driver stands in; CPU has no libcuda)."""

from __future__ import annotations

import ctypes

import pytest

from strixlm.kernels import l2_window as l2


def test_window_value_has_the_drivers_layout():
    """CUaccessPolicyWindow: base_ptr, num_bytes, hitRatio, hitProp, missProp at 0 / 8 / 16
    / 20 / 24, inside the 64-byte CUstreamAttrValue union."""
    assert ctypes.sizeof(l2.StreamAttrValue) == 64
    w = l2.AccessPolicyWindow
    offsets = [getattr(w, f).offset for f in ("base_ptr", "num_bytes", "hitRatio", "hitProp")]
    assert offsets + [w.missProp.offset] == [0, 8, 16, 20, 24]
    value = l2.window_value(0x7F00_0000_0000, 32 << 20, 0.75)
    raw = bytes(value)
    assert int.from_bytes(raw[0:8], "little") == 0x7F00_0000_0000
    assert int.from_bytes(raw[8:16], "little") == 32 << 20
    assert ctypes.c_float.from_buffer_copy(raw[16:20]).value == 0.75
    assert int.from_bytes(raw[20:24], "little") == l2.PERSISTING == 2
    assert int.from_bytes(raw[24:28], "little") == l2.STREAMING == 1
    off = l2.window_value(0, 0, 0.0).accessPolicyWindow
    assert (off.num_bytes, off.hitProp, off.missProp) == (0, l2.NORMAL, l2.NORMAL)
    with pytest.raises(ValueError, match="hit_ratio"):
        l2.window_value(0, 1, 1.5)


class RecordingDriver:
    def __init__(self, max_persisting: int, max_window: int = 128 << 20) -> None:
        self.max_persisting, self.max_window = max_persisting, max_window
        self.calls: list[tuple] = []

    def max_persisting_bytes(self, device_index: int) -> int:
        return self.max_persisting

    def max_window_bytes(self, device_index: int) -> int:
        return self.max_window

    def set_persisting_limit(self, num_bytes: int) -> None:
        self.calls.append(("limit", num_bytes))

    def set_window(self, stream, base, num_bytes, hit_ratio) -> None:
        self.calls.append(("window", stream, base, num_bytes, hit_ratio))


def test_set_aside_is_capped_and_large_windows_persist_a_fraction():
    drv = RecordingDriver(max_persisting=30 << 20)
    windows = l2.L2Windows(0, 40 << 20, drv)
    assert windows.set_aside == 30 << 20
    windows.set(7, 4096, 20 << 20)  # fits: every line persists
    windows.set(7, 4096, 60 << 20)  # twice the set-aside: half of them
    windows.clear(7)
    assert drv.calls == [
        ("limit", 30 << 20),
        ("window", 7, 4096, 20 << 20, 1.0),
        ("window", 7, 4096, 60 << 20, 0.5),
        ("window", 7, 0, 0, 0.0),
    ]
    assert l2.L2Windows(0, 8 << 20, RecordingDriver(30 << 20)).set_aside == 8 << 20
    small = RecordingDriver(30 << 20, max_window=40 << 20)
    l2.L2Windows(0, 20 << 20, small).set(7, 0, 100 << 20)  # cut to the largest window
    assert small.calls[-1] == ("window", 7, 0, 40 << 20, 0.5)
    with pytest.raises(RuntimeError, match="no persisting L2"):
        l2.L2Windows(0, 8 << 20, RecordingDriver(0))
