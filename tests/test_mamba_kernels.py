"""Mamba-2 kernels: Triton (interpreter) vs the torch references, and the references (and
Triton) vs HF transformers' NemotronHMamba2Mixer.

Part 1 runs the Triton kernels under TRITON_INTERPRET=1 at small shapes, fp32 and fp16
(the interpreter is not a reference for bf16), on varlen batches mixing lengths 1, shorter
than a chunk, exactly a chunk and several chunks, with and without initial states, with
state pools that are strided views and with x/B/C as views into one projection (as the
model passes them). Tolerances on ||out - ref|| / ||ref||: 2e-5 for fp32 (both sides
accumulate in fp32, only the order differs); 2e-3 for fp16 outputs (both compute in fp32
from the same inputs, the output rounding to fp16 is 2**-11 ~ 5e-4 relative).

Part 2 feeds HF's mixer weights through our functions (in_proj -> conv -> scan -> HF's own
gated norm and out_proj) and compares with HF's torch path: a full prompt, prompt then
decode steps through HF's cache, and a prompt split in two. GPU shapes and timings:
benchmarks/gpu/check_mamba.py.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, or kernels compile for GPU

from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")

from strixlm.kernels.mamba import causal_conv1d_triton as conv_kernels  # noqa: E402
from strixlm.kernels.mamba import (  # noqa: E402
    causal_conv1d_update_ref,
    causal_conv1d_update_triton,
    causal_conv1d_varlen_ref,
    causal_conv1d_varlen_triton,
    prepare_ssd_chunks,
    selective_state_update_ref,
    selective_state_update_triton,
    ssd_scan_varlen,
    ssd_scan_varlen_ref,
    ssd_scan_varlen_triton,
)

try:
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover
    InterpretedFunction = ()  # type: ignore[assignment]

if not isinstance(conv_kernels._conv_update_kernel, InterpretedFunction):
    pytest.skip(
        "strixlm kernels were imported before TRITON_INTERPRET=1 was set (compiled for GPU); "
        "run this module on its own or first",
        allow_module_level=True,
    )

# The interpreter warns on numpy scalar conversions in its own code; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOL = {torch.float32: 2e-5, torch.float16: 2e-3}
STATE_TOL = 2e-5  # fp32 states, both sides in fp32


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def starts(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def strided_pool(shape: tuple[int, ...], dtype: torch.dtype, pad: int = 5) -> torch.Tensor:
    """Random states as a view into a wider buffer: the row stride is not the row size.

    Every slot holds random values (past the view and in unused slots too), so reading a
    state that has_initial_state says to ignore, or writing outside the view, shows up.
    """
    numel = 1
    for s in shape[1:]:
        numel *= s
    buf = torch.randn(shape[0], numel + pad, dtype=torch.float32).to(dtype)
    return buf[:, :numel].view(shape)


def clone_pool(view: torch.Tensor) -> torch.Tensor:
    """A copy of a strided pool view with the same strides (the padding copied too)."""
    base = view._base if view._base is not None else view
    return base.clone()[:, : view[0].numel()].view(view.shape)


# ---- Part 1: Triton vs reference ----------------------------------------------------------

# Sequences mix: 1 token, shorter than the conv window, < chunk, == chunk, several chunks.
LENS = [1, 2, 9, 16, 37]
HAS_INIT = [True, False, True, False, True]
SLOTS = [6, 0, 3, 5, 1]  # shuffled, with unused slots between


def seq_args() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query_start_loc, state_indices, has_initial_state) of the LENS batch."""
    return (
        starts(LENS),
        torch.tensor(SLOTS, dtype=torch.int32),
        torch.tensor(HAS_INIT, dtype=torch.bool),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("with_bias,activation", [(True, "silu"), (False, None)])
def test_conv1d_varlen_triton_matches_ref(dtype, with_bias, activation):
    torch.manual_seed(0)
    dim, width = 40, 4
    qsl, slots, init = seq_args()
    t = int(qsl[-1])
    # x as a column slice of a wider projection, like the model's xBC.
    x = torch.randn(t, dim + 7, dtype=dtype)[:, 3 : 3 + dim]
    weight = (torch.randn(dim, width) * 0.5).to(dtype)
    bias = torch.randn(dim, dtype=dtype) if with_bias else None
    st_ref = strided_pool((8, dim, width - 1), dtype)
    st_tri = clone_pool(st_ref)
    ref = causal_conv1d_varlen_ref(x, weight, bias, st_ref, qsl, slots, init, activation)
    out = causal_conv1d_varlen_triton(x, weight, bias, st_tri, qsl, slots, init, activation)
    assert out.dtype == dtype and out.shape == (t, dim)
    assert rel_err(out, ref) < TOL[dtype]
    assert torch.equal(st_tri._base, st_ref._base)  # states are copies of inputs: exact


def test_conv1d_varlen_state_semantics():
    """The new state is the last width-1 inputs, reaching into the old state when short."""
    dim, width = 3, 4
    qsl, slots = starts([1, 5]), torch.tensor([0, 1], dtype=torch.int32)
    x = torch.arange(6 * dim, dtype=torch.float32).view(6, dim) + 100
    for has_init in (True, False):
        init = torch.tensor([has_init, has_init])
        states = torch.arange(2 * dim * 3, dtype=torch.float32).view(2, dim, 3)
        old = states.clone()
        causal_conv1d_varlen_ref(x, torch.ones(dim, width), None, states, qsl, slots, init)
        past = old[0] if has_init else torch.zeros(dim, 3)
        assert torch.equal(states[0], torch.cat([past[:, 1:], x[0:1].t()], dim=1))
        assert torch.equal(states[1], x[3:6].t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_conv1d_update_triton_matches_ref(dtype):
    torch.manual_seed(1)
    dim, width, batch = 40, 4, 5
    x = torch.randn(batch, dim, dtype=dtype)
    weight = (torch.randn(dim, width) * 0.5).to(dtype)
    bias = torch.randn(dim, dtype=dtype)
    slots = torch.tensor(SLOTS, dtype=torch.int32)
    st_ref = strided_pool((8, dim, width - 1), dtype)
    st_tri = clone_pool(st_ref)
    ref = causal_conv1d_update_ref(x, weight, bias, st_ref, slots)
    out = causal_conv1d_update_triton(x, weight, bias, st_tri, slots)
    assert rel_err(out, ref) < TOL[dtype]
    assert torch.equal(st_tri._base, st_ref._base)


@dataclass
class ScanInputs:
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None
    dt_bias: torch.Tensor | None

    def args(self) -> tuple:
        return self.x, self.dt, self.A, self.B, self.C, self.D, self.dt_bias


def scan_inputs(
    t: int,
    dtype: torch.dtype,
    nheads: int = 4,
    headdim: int = 16,
    ngroups: int = 2,
    dstate: int = 16,
    with_d: bool = True,
) -> ScanInputs:
    """Random inputs in realistic ranges; x, B, C, dt are views into one packed projection."""
    gn = ngroups * dstate
    width = nheads * headdim + 2 * gn + nheads
    proj = torch.randn(t, width + 3).to(dtype)
    x, b, c, dt = proj[:, :-3].split([nheads * headdim, gn, gn, nheads], dim=-1)
    return ScanInputs(
        x=x.view(t, nheads, headdim),
        dt=dt,
        A=-torch.empty(nheads).uniform_(0.5, 4.0),  # -exp(A_log) with A_log in [log .5, log 4]
        B=b.view(t, ngroups, dstate),
        C=c.view(t, ngroups, dstate),
        D=torch.randn(nheads) if with_d else None,
        dt_bias=torch.empty(nheads).uniform_(-3.0, 0.5) if with_d else None,
    )


@pytest.mark.parametrize(
    "dtype,chunk_size,limit,with_d",
    [
        (torch.float32, 16, (0.0, float("inf")), True),
        (torch.float16, 16, (0.0, float("inf")), True),
        (torch.float32, 24, (0.05, 0.7), False),  # binding dt_limit; no D, no dt_bias
    ],
)
def test_ssd_scan_triton_matches_ref(dtype, chunk_size, limit, with_d):
    torch.manual_seed(2)
    qsl, slots, init = seq_args()
    inp = scan_inputs(int(qsl[-1]), dtype, with_d=with_d)
    st_ref = strided_pool((8, 4, 16, 16), torch.float32)
    st_tri = clone_pool(st_ref)
    ref = ssd_scan_varlen_ref(*inp.args(), st_ref, qsl, slots, init, chunk_size, True, limit)
    out = ssd_scan_varlen_triton(*inp.args(), st_tri, qsl, slots, init, chunk_size, True, limit)
    assert out.dtype == dtype and out.shape == inp.x.shape
    assert rel_err(out, ref) < TOL[dtype]
    assert rel_err(st_tri, st_ref) < STATE_TOL
    # Slots no sequence uses are untouched, padding of the strided rows included.
    unused = [s for s in range(8) if s not in SLOTS]
    assert torch.equal(st_tri._base[unused], st_ref._base[unused])


def test_ssd_scan_triton_shared_chunk_table_and_empty_sequence():
    """A precomputed chunk table gives the same result; a 0-token sequence keeps its state
    (has_initial_state) or gets zeros (no past)."""
    torch.manual_seed(3)
    lens = [5, 0, 20, 0]
    qsl = starts(lens)
    slots = torch.tensor([2, 0, 1, 3], dtype=torch.int32)
    init = torch.tensor([False, True, True, False])
    inp = scan_inputs(int(qsl[-1]), torch.float32)
    st_ref = strided_pool((4, 4, 16, 16), torch.float32)
    st_tri = clone_pool(st_ref)
    old = st_ref.clone()
    chunks = prepare_ssd_chunks(qsl, int(qsl[-1]), 16)
    ref = ssd_scan_varlen_ref(*inp.args(), st_ref, qsl, slots, init, 16)
    out = ssd_scan_varlen_triton(*inp.args(), st_tri, qsl, slots, init, 16, chunks=chunks)
    assert rel_err(out, ref) < TOL[torch.float32]
    assert rel_err(st_tri, st_ref) < STATE_TOL
    assert torch.equal(st_tri[0], old[0]) and not st_tri[3].any()


def recurrent_scan(inp: ScanInputs, states: torch.Tensor, lens: list[int]) -> torch.Tensor:
    """The scan as a plain token-by-token recurrence (no chunks), from zero states."""
    ys, t = [], 0
    for i, n in enumerate(lens):
        states[i] = 0
        for _ in range(n):
            sl = slice(t, t + 1)
            ys.append(
                selective_state_update_ref(
                    states,
                    inp.x[sl],
                    inp.dt[sl],
                    inp.A,
                    inp.B[sl],
                    inp.C[sl],
                    inp.D,
                    inp.dt_bias,
                    torch.tensor([i], dtype=torch.int32),
                )
            )
            t += 1
    return torch.cat(ys)


@pytest.mark.parametrize("scan", [ssd_scan_varlen_ref, ssd_scan_varlen_triton])
def test_ssd_scan_is_independent_of_chunking_and_packing(scan):
    """Chunked (any chunk size, any position in the pack) == the token recurrence."""
    torch.manual_seed(4)
    lens = [3, 45, 16, 1]
    qsl, n = starts(lens), len(lens)
    inp = scan_inputs(int(qsl[-1]), torch.float32)
    slots = torch.arange(n, dtype=torch.int32)
    no_past = torch.zeros(n, dtype=torch.bool)
    st_rec = torch.zeros(n, 4, 16, 16)
    y_rec = recurrent_scan(inp, st_rec, lens)
    # One chunk size for Triton, to keep the interpreter run short (it matches the reference
    # at other chunk sizes in test_ssd_scan_triton_matches_ref).
    for chunk_size in (8, 16, 64) if scan is ssd_scan_varlen_ref else (16,):
        st = torch.randn(n, 4, 16, 16)
        y = scan(*inp.args(), st, qsl, slots, no_past, chunk_size)
        assert rel_err(y, y_rec) < 1e-5, chunk_size
        assert rel_err(st, st_rec) < 1e-5, chunk_size
    # The 45-token sequence alone (its chunks now start at token 0 of the batch).
    sl = slice(int(qsl[1]), int(qsl[2]))
    alone = ScanInputs(inp.x[sl], inp.dt[sl], inp.A, inp.B[sl], inp.C[sl], inp.D, inp.dt_bias)
    st = torch.zeros(1, 4, 16, 16)
    one = torch.tensor([0], dtype=torch.int32)
    y = scan(*alone.args(), st, starts([45]), one, torch.tensor([False]), 16)
    assert rel_err(y, y_rec[sl]) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_selective_state_update_triton_matches_ref(dtype):
    torch.manual_seed(5)
    inp = scan_inputs(5, dtype)
    slots = torch.tensor(SLOTS, dtype=torch.int32)
    st_ref = strided_pool((8, 4, 16, 16), torch.float32)
    st_tri = clone_pool(st_ref)
    ref = selective_state_update_ref(st_ref, *inp.args(), slots, True, (0.01, 5.0))
    out = selective_state_update_triton(st_tri, *inp.args(), slots, True, (0.01, 5.0))
    assert rel_err(out, ref) < TOL[dtype]
    assert rel_err(st_tri, st_ref) < STATE_TOL


def test_bad_shapes_are_clear_errors():
    inp = scan_inputs(4, torch.float32)
    qsl, slots, init = starts([4]), torch.tensor([0], dtype=torch.int32), torch.tensor([False])
    wrong_states = torch.zeros(2, 4, 16, 8)
    with pytest.raises(ValueError, match="ssm_states"):
        ssd_scan_varlen(*inp.args(), wrong_states, qsl, slots, init, 16)
    with pytest.raises(ValueError, match="state_indices"):
        ssd_scan_varlen(*inp.args(), torch.zeros(2, 4, 16, 16), qsl, slots[:0], init, 16)
    with pytest.raises(ValueError, match="conv_states"):
        causal_conv1d_varlen_triton(
            torch.zeros(4, 8), torch.zeros(8, 4), None, torch.zeros(2, 8, 4), qsl, slots, init
        )
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d_update_ref(
            torch.zeros(1, 8), torch.zeros(8, 4), None, torch.zeros(2, 8, 3), slots, "gelu"
        )


# ---- Part 2: against HF transformers' NemotronHMamba2Mixer --------------------------------


@dataclass
class Kernels:
    conv_varlen: Callable
    conv_update: Callable
    scan: Callable
    state_update: Callable


REF = Kernels(
    causal_conv1d_varlen_ref,
    causal_conv1d_update_ref,
    ssd_scan_varlen_ref,
    selective_state_update_ref,
)
TRITON = Kernels(
    causal_conv1d_varlen_triton,
    causal_conv1d_update_triton,
    ssd_scan_varlen_triton,
    selective_state_update_triton,
)
HF_TOL = 1e-5  # fp32 everywhere; observed ~1e-7


@pytest.fixture(scope="module")
def hf_mixer():
    """A tiny NemotronH Mamba-2 mixer with random weights (chunk_size 8: several chunks)."""
    from transformers import NemotronHConfig
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer

    cfg = NemotronHConfig(
        hidden_size=32,
        layers_block_type=["linear_attention"],
        mamba_num_heads=4,
        mamba_head_dim=8,
        ssm_state_size=16,
        n_groups=2,
        conv_kernel=4,
        chunk_size=8,
        vocab_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    torch.manual_seed(6)
    mixer = NemotronHMamba2Mixer(cfg, layer_idx=0).eval()
    with torch.no_grad():
        for name, p in mixer.named_parameters():
            if name == "A_log":
                p.uniform_(-1.0, 1.5)
            elif name == "dt_bias":
                p.uniform_(-3.0, 0.0)
            elif name == "norm.weight":
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.3)
    return mixer


class OurMixer:
    """HF's mixer weights run through our kernels; state pools are strided views."""

    def __init__(self, mixer, kernels: Kernels, num_slots: int) -> None:
        self.m, self.k = mixer, kernels
        cfg = mixer.config
        self.nh, self.hd, self.g = cfg.mamba_num_heads, cfg.mamba_head_dim, cfg.n_groups
        self.n, self.inter = cfg.ssm_state_size, mixer.intermediate_size
        self.conv_states = strided_pool(
            (num_slots, mixer.conv_dim, cfg.conv_kernel - 1), torch.float32
        )
        self.ssm_states = strided_pool((num_slots, self.nh, self.hd, self.n), torch.float32)

    def _split(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gate, xbc, dt = self.m.in_proj(hidden).split([self.inter, self.m.conv_dim, self.nh], dim=-1)
        return gate, xbc, dt

    def _finish(
        self, xbc_conv: torch.Tensor, gate: torch.Tensor, run_scan: Callable
    ) -> torch.Tensor:
        t, gn = xbc_conv.shape[0], self.g * self.n
        x, b, c = xbc_conv.split([self.inter, gn, gn], dim=-1)
        y = run_scan(
            x.view(t, self.nh, self.hd),
            b.view(t, self.g, self.n),
            c.view(t, self.g, self.n),
            -torch.exp(self.m.A_log.float()),
        )
        return self.m.out_proj(self.m.norm(y.reshape(t, self.inter), gate))

    def prefill(self, hidden, qsl, slots, has_init) -> torch.Tensor:
        """hidden [T, hidden] packed; returns the mixer output [T, hidden]."""
        gate, xbc, dt = self._split(hidden)
        w, bias = self.m.conv1d.weight[:, 0], self.m.conv1d.bias
        xbc = self.k.conv_varlen(xbc, w, bias, self.conv_states, qsl, slots, has_init)

        def scan(x, b, c, a):
            return self.k.scan(
                x,
                dt,
                a,
                b,
                c,
                self.m.D,
                self.m.dt_bias,
                self.ssm_states,
                qsl,
                slots,
                has_init,
                self.m.chunk_size,
                True,
                self.m.time_step_limit,
            )

        return self._finish(xbc, gate, scan)

    def decode(self, hidden, slots) -> torch.Tensor:
        """hidden [batch, hidden], one token per sequence."""
        gate, xbc, dt = self._split(hidden)
        w, bias = self.m.conv1d.weight[:, 0], self.m.conv1d.bias
        xbc = self.k.conv_update(xbc, w, bias, self.conv_states, slots)

        def scan(x, b, c, a):
            return self.k.state_update(
                self.ssm_states,
                x,
                dt,
                a,
                b,
                c,
                self.m.D,
                self.m.dt_bias,
                slots,
                True,
                self.m.time_step_limit,
            )

        return self._finish(xbc, gate, scan)


PROMPTS = [1, 7, 8, 21]  # chunk_size 8: one token, < chunk, == chunk, several chunks
PROMPT_SLOTS = torch.tensor([4, 0, 2, 1], dtype=torch.int32)


def hf_prompts(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, n + 3, 32, generator=g) for n in PROMPTS]  # + 3 decode tokens


@pytest.mark.parametrize("kernels", [REF, TRITON], ids=["ref", "triton"])
@torch.no_grad()
def test_prefill_then_decode_matches_hf(hf_mixer, kernels):
    """Packed prefill of 4 prompts, then 3 batched decode steps, vs HF per sequence with its
    cache (HF's decode path: its causal_conv1d_update and selective_state_update)."""
    from transformers.cache_utils import DynamicCache

    seqs = hf_prompts(7)
    ours = OurMixer(hf_mixer, kernels, num_slots=6)
    n = len(seqs)
    qsl = starts(PROMPTS)
    packed = torch.cat([s[0, :p] for s, p in zip(seqs, PROMPTS, strict=True)])
    out = ours.prefill(packed, qsl, PROMPT_SLOTS, torch.zeros(n, dtype=torch.bool))
    caches = [DynamicCache(config=hf_mixer.config) for _ in seqs]
    for i, (s, p) in enumerate(zip(seqs, PROMPTS, strict=True)):
        ref = hf_mixer(s[:, :p], cache=caches[i])[0]
        assert rel_err(out[qsl[i] : qsl[i + 1]], ref) < HF_TOL, f"prefill of seq {i}"
    for step in range(3):
        tokens = torch.stack([s[0, p + step] for s, p in zip(seqs, PROMPTS, strict=True)])
        out = ours.decode(tokens, PROMPT_SLOTS)
        for i, (s, p) in enumerate(zip(seqs, PROMPTS, strict=True)):
            ref = hf_mixer(s[:, p + step : p + step + 1], cache=caches[i])[0, 0]
            assert rel_err(out[i], ref) < HF_TOL, f"decode step {step} of seq {i}"
    for i, slot in enumerate(PROMPT_SLOTS.tolist()):
        layer = caches[i].layers[0]
        # HF keeps `width` inputs in its conv state; ours keeps the last width - 1.
        assert rel_err(ours.conv_states[slot], layer.conv_states[0][0, :, 1:]) < HF_TOL
        assert rel_err(ours.ssm_states[slot], layer.recurrent_states[0][0]) < HF_TOL


@pytest.mark.parametrize("kernels", [REF, TRITON], ids=["ref", "triton"])
@torch.no_grad()
def test_split_prefill_matches_one_pass_and_hf(hf_mixer, kernels):
    """Each prompt prefilled in two varlen calls (the second from the states the first left,
    has_initial_state True) equals one pass, and HF's output for the whole prompt."""
    seqs = [s[:, :-3] for s in hf_prompts(8)]
    cuts = [1, 3, 5, 13]  # first-part lengths; second parts: 0, 4, 3, 8
    rest = [p - c for p, c in zip(PROMPTS, cuts, strict=True)]
    n = len(seqs)
    one = OurMixer(hf_mixer, kernels, num_slots=6)
    full = torch.cat([s[0] for s in seqs])
    out_one = one.prefill(full, starts(PROMPTS), PROMPT_SLOTS, torch.zeros(n, dtype=torch.bool))
    two = OurMixer(hf_mixer, kernels, num_slots=6)
    first = torch.cat([s[0, :c] for s, c in zip(seqs, cuts, strict=True)])
    second = torch.cat([s[0, c:] for s, c in zip(seqs, cuts, strict=True)])
    out_a = two.prefill(first, starts(cuts), PROMPT_SLOTS, torch.zeros(n, dtype=torch.bool))
    out_b = two.prefill(second, starts(rest), PROMPT_SLOTS, torch.ones(n, dtype=torch.bool))
    qa, qb, q1 = starts(cuts), starts(rest), starts(PROMPTS)
    for i in range(n):
        joined = torch.cat([out_a[qa[i] : qa[i + 1]], out_b[qb[i] : qb[i + 1]]])
        assert rel_err(joined, out_one[q1[i] : q1[i + 1]]) < 1e-5, f"seq {i}"
        assert rel_err(joined, hf_mixer(seqs[i])[0]) < HF_TOL, f"seq {i} vs HF"
    for slot in PROMPT_SLOTS.tolist():
        assert rel_err(two.ssm_states[slot], one.ssm_states[slot]) < 1e-5
        assert torch.equal(two.conv_states[slot], one.conv_states[slot])
