"""fp8 decode attention on the Gluon kernel (strixlm/kernels/paged_decode_fp8.py): an sm90
compile of the launch variants the engine uses (K / V words straight into mma.sync operands:
no shared memory, no spills, vector loads, packed fp8 converts; the PDL wait only when
asked), the segment rule, and when paged_attention takes it. Gluon has no interpreter:
benchmarks/gpu/check_attention.py and probe_fp8_mma.py check its outputs against torch on
the GPU."""

from __future__ import annotations

import pytest
import torch
from aot_compile import assert_compiles

from strixlm.kernels import paged_decode_fp8 as pdf8

pytestmark = pytest.mark.skipif(not pdf8.HAS_GLUON, reason="this triton has no Gluon")

SCRIPT = r"""
import os, re, subprocess
from triton.experimental.gluon._runtime import GluonASTSource
import strixlm.kernels.paged_decode_fp8 as f

K = f._paged_decode_fp8_kernel
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
for segs, order, pdl, dec, fp8 in ((1, True, True, False, True), (8, True, True, False, True),
                                   (1, False, False, False, True), (1, False, True, True, True),
                                   (4, True, True, False, False)):  # the last: bf16 cache
    tile = f.TILE if fp8 else 16
    mma, k_ld, v_ld = f.layouts(128, fp8, tile)
    cache = "*i32" if fp8 else "*bf16"
    ptr = dict(out_ptr="*bf16", q_ptr="*bf16", k_cache_ptr=cache, v_cache_ptr=cache,
               block_table_ptr="*i32", seq_lens_ptr="*i32", qsl_ptr="*i32", order_ptr="*i32",
               segm_acc_ptr="*fp32", segm_max_ptr="*fp32", segm_sum_ptr="*fp32")
    c = dict(NUM_Q_HEADS=16, G=2, D=128, BLOCK_SIZE=16, TILE_=tile, NUM_SEGS=segs,
             HAS_ORDER=order, PDL=pdl, MMA=mma, K_LD=k_ld, V_LD=v_ld, DECODES_ONLY=dec,
             FP8=fp8, COLS=32 if fp8 else 128)
    names = K.arg_names
    sig = {n: "constexpr" if n in c else ptr.get(n, "fp32" if n.endswith("scale") else "i32")
           for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names
             if n.endswith("_ptr") or n.startswith("stride_")}
    k = triton.compile(GluonASTSource(K, sig, c, attrs), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=1))
    ptx = k.asm["ptx"].split(".section\t.debug")[0]
    assert k.metadata.shared == 0 and "ld.shared" not in ptx, (segs, k.metadata.shared)
    dt = "f16" if fp8 else "bf16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32" in ptx
    assert ptx.count("cvt.rn.f16x2.e4m3x2") >= (64 if fp8 else 0)  # a byte pair each
    assert ptx.count("ld.global.v4.b32") >= 16  # 16-byte word loads: K and V, two tiles
    assert ("griddepcontrol.wait" in ptx) == pdl
    if os.path.exists(ptxas):
        with open("/tmp/strixlm_fp8_decode.ptx", "w") as fh:
            fh.write(k.asm["ptx"])
        r = subprocess.run([ptxas, "-arch=sm_90a", "-v", "/tmp/strixlm_fp8_decode.ptx",
                            "-o", "/tmp/strixlm_fp8_decode.cubin"], capture_output=True, text=True)
        assert " 0 bytes spill stores" in r.stderr, r.stderr
print("compiled")
"""


def test_compiles_for_sm90_without_shared_memory():
    assert_compiles(SCRIPT)


@pytest.mark.parametrize(
    ("num_seqs", "max_seq_len", "segs"),
    [
        (256, 40960, 1),
        (200, 40960, 2),
        (128, 40960, 2),
        (96, 40960, 4),
        (48, 40960, 8),
        (16, 40960, 16),
        (1, 40960, 16),  # MAX_SEGS
        (1, 1500, 8),  # segments keep >= 4 tiles: 1500 tokens hold 11
        (4, 100, 1),
    ],
)
def test_segments_fill_the_grid_and_keep_four_tiles(num_seqs, max_seq_len, segs):
    assert pdf8.num_segments(num_seqs, 8, max_seq_len) == segs


def test_taken_only_where_it_applies(monkeypatch):
    q = torch.zeros(4, 16, 128, dtype=torch.bfloat16)
    cache = torch.zeros(2, 8, 16, 8, 128, dtype=torch.float8_e4m3fn)
    assert not pdf8.supports(q, cache, 16, 4)  # CPU tensors: the Triton kernels' interpreter
    if torch.cuda.is_available():
        qc, cc = q.cuda(), cache.cuda()
        sm90 = torch.cuda.get_device_capability()[0] == 9
        assert pdf8.supports(qc, cc, 16, 4) == sm90
        assert not pdf8.supports(qc, cc, 32, 4)  # 16-token blocks only
        assert not pdf8.supports(qc[..., :64], cc[..., :64], 16, 4)  # head dim 128 only
        monkeypatch.setattr(pdf8, "MIN_SEQS", 8)
        assert not pdf8.supports(qc, cc, 16, 4)
        monkeypatch.setattr(pdf8, "ENABLED", False)
        assert not pdf8.supports(qc, cc, 16, 8)
