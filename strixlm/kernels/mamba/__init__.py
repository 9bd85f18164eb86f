"""Mamba-2 kernels: causal conv1d and the SSD selective scan, Triton on CUDA, torch elsewhere.

    causal_conv1d_varlen / causal_conv1d_update   (causal_conv1d.py)
    ssd_scan_varlen / selective_state_update      (ssd.py; chunk table in ssd_chunks.py)

Each has a torch reference importable as `<name>_ref` and the Triton launcher as
`<name>_triton`; STRIXLM_DISABLE_TRITON=1 forces the references on CUDA too.
"""

from strixlm.kernels.mamba.causal_conv1d import (
    causal_conv1d_update,
    causal_conv1d_update_ref,
    causal_conv1d_update_triton,
    causal_conv1d_varlen,
    causal_conv1d_varlen_ref,
    causal_conv1d_varlen_triton,
)
from strixlm.kernels.mamba.ssd import (
    selective_state_update,
    selective_state_update_ref,
    selective_state_update_triton,
    ssd_scan_varlen,
    ssd_scan_varlen_ref,
    ssd_scan_varlen_triton,
)
from strixlm.kernels.mamba.ssd_chunks import SSDChunks, prepare_ssd_chunks

__all__ = [
    "SSDChunks",
    "causal_conv1d_update",
    "causal_conv1d_update_ref",
    "causal_conv1d_update_triton",
    "causal_conv1d_varlen",
    "causal_conv1d_varlen_ref",
    "causal_conv1d_varlen_triton",
    "prepare_ssd_chunks",
    "selective_state_update",
    "selective_state_update_ref",
    "selective_state_update_triton",
    "ssd_scan_varlen",
    "ssd_scan_varlen_ref",
    "ssd_scan_varlen_triton",
]
