"""One block pool for Mamba state and attention KV: layout, allocation, and the zeroing of
blocks newly handed to attention (with the debug poison that shows why it is needed)."""

from __future__ import annotations

import math

import pytest
import torch
from nemotron_h_utils import (
    one_torch_thread,
    random_prompts,
    save_tiny_nemotron_h,
)

from strixlm.core.kv_cache_manager import FULL_ATTENTION, MAMBA, KVCacheGroupSpec, KVCacheManager
from strixlm.engine.request import Request, SamplingParams
from strixlm.entrypoints.llm import LLM
from strixlm.kernels.zero_blocks import HAS_TRITON, zero_blocks_ref
from strixlm.worker.model_states.block_zeroing import NO_ZERO_ENV, POISON_ENV
from strixlm.worker.model_states.hybrid_layout import (
    AttentionShape,
    MambaStateShape,
    plan_hybrid_layout,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)


@pytest.fixture(scope="module", autouse=True)
def _single_torch_thread():
    with one_torch_thread():
        yield


# ---- the zeroing kernel --------------------------------------------------------------------


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("words_per_block", [8, 40, 4100])
def test_zero_blocks_triton_matches_reference(words_per_block):
    from strixlm.kernels.zero_blocks import zero_blocks_triton

    num_regions, num_blocks = 6, 7
    gen = torch.Generator().manual_seed(words_per_block)
    words = torch.randint(1, 2**62, (num_regions * num_blocks * words_per_block,), generator=gen)
    # Regions 1, 2 and 5 of the pool, blocks 0, 3 and 6.
    offsets = torch.tensor([r * num_blocks * words_per_block for r in (1, 2, 5)])
    ids = torch.tensor([3, 0, 6], dtype=torch.int32)
    ours, ref = words.clone(), words.clone()
    zero_blocks_triton(ours, offsets, ids, words_per_block)
    zero_blocks_ref(ref, offsets, ids, words_per_block)
    assert torch.equal(ours, ref)
    pages = ref.view(num_regions, num_blocks, words_per_block)
    for r in range(num_regions):
        for b in range(num_blocks):
            hit = r in (1, 2, 5) and b in (0, 3, 6)
            assert bool((pages[r, b] == 0).all()) == hit, (r, b)


# ---- the layout ----------------------------------------------------------------------------


def nano_layout():
    """The bundled Nemotron 3 Nano 30B-A3B config: 6 attention layers (2 KV heads x 128,
    bf16 cache) and 23 Mamba layers (64 heads x 64, 8 groups, state 128, conv width 4)."""
    from transformers import AutoConfig

    from strixlm.benchmarks.throughput import CONFIGS_DIR
    from strixlm.models.nemotron_h import layer_pattern, mamba_dims

    cfg = AutoConfig.from_pretrained(CONFIGS_DIR / "nemotron-3-nano-30b-a3b")
    pattern, d = layer_pattern(cfg), mamba_dims(cfg)
    counts = {kind: pattern.count(kind) for kind in "*ME"}
    assert len(pattern) == 52 and counts == {"*": 6, "M": 23, "E": 23}
    attn = AttentionShape(cfg.num_key_value_heads, cfg.head_dim, torch.bfloat16)
    mamba = MambaStateShape(
        d.conv_dim, d.conv_kernel, d.num_heads, d.head_dim, d.state_size, torch.bfloat16
    )
    assert (attn.bytes_per_token_half, mamba.conv_dim) == (2 * 128 * 2, 64 * 64 + 2 * 8 * 128)
    return plan_hybrid_layout(attn, 6, mamba, 23, 16), mamba


def test_layout_of_nano_config():
    layout, mamba = nano_layout()
    # A K half-page (block_size x 2 heads x 128 x 2 bytes) must hold one Mamba state.
    assert layout.block_size % 16 == 0
    assert layout.half_page_bytes == layout.block_size * 2 * 128 * 2 >= mamba.nbytes
    assert (layout.block_size - 16) * 512 < mamba.nbytes  # the smallest such size
    kinds = [(g.kind, len(g.layer_names)) for g in layout.groups]
    assert kinds == [(FULL_ATTENTION, 6), (MAMBA, 12), (MAMBA, 11)]
    assert layout.num_slots == 6
    assert layout.bytes_per_block == 6 * 2 * layout.half_page_bytes


@pytest.mark.parametrize("num_attn,num_mamba", [(2, 5), (4, 3), (3, 9)])
def test_layer_views_of_one_block_never_overlap(num_attn, num_mamba):
    """Group g owns block g + 1; each of its layers writes its own id into its view of that
    block. Every write survives: layers of a group never share bytes of a block."""
    attn = AttentionShape(2, 4, torch.float16)
    mamba = MambaStateShape(12, 4, 2, 3, 5, torch.float16)
    layout = plan_hybrid_layout(attn, num_attn, mamba, num_mamba, 4)
    pool = layout.allocate(len(layout.groups) + 1, "cpu")
    views = [(p.group + 1, layout.attention_view(pool, i)) for i, p in enumerate(layout.attention)]
    for i, p in enumerate(layout.mamba):
        views += [(p.group + 1, v) for v in layout.mamba_views(pool, i)]
    for k, (block, v) in enumerate(views):
        v[:, block].fill_(k + 1) if v.shape[0] == 2 and v.dim() == 5 else v[block].fill_(k + 1)
    for k, (block, v) in enumerate(views):
        page = v[:, block] if v.shape[0] == 2 and v.dim() == 5 else v[block]
        assert bool((page == k + 1).all()), f"view {k} was overwritten"
    assert layout.attention_view(pool, 0).shape[2:] == (layout.block_size, 2, 4)


# ---- allocation ----------------------------------------------------------------------------


def test_manager_gives_each_request_one_block_per_mamba_group():
    groups = [
        KVCacheGroupSpec(FULL_ATTENTION, ("a0",), 32),
        KVCacheGroupSpec(MAMBA, ("m0", "m1"), 32),
        KVCacheGroupSpec(MAMBA, ("m2",), 32),
    ]
    mgr = KVCacheManager(groups, num_blocks=20, block_size=16, enable_caching=True)
    assert mgr.block_size == 32 and not mgr.enable_caching  # hybrid: no prefix cache
    req = Request("r", list(range(70)), SamplingParams(max_tokens=100))
    assert mgr.allocate_slots(req, 70)
    assert mgr.num_blocks_of("r") == [3, 1, 1]
    req.num_computed_tokens = 70
    assert mgr.allocate_slots(req, 26) == KVCacheManager.FITS  # 96 tokens fit in 3 blocks
    assert mgr.allocate_slots(req, 27)
    assert mgr.num_blocks_of("r") == [4, 1, 1]
    assert mgr.num_free_blocks() == 19 - 6
    mgr.free(req)
    assert mgr.num_free_blocks() == 19


# ---- the engine: blocks cycling between Mamba and attention --------------------------------

PATTERN = "M*-M*-M"
PROMPTS = random_prompts([3, 50, 9, 77, 20, 41], seed=7)
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_tiny_nemotron_h(tmp_path_factory.mktemp("nemotron-h-cache"), PATTERN)


class BlockRoles:
    """Records, from the scheduler outputs the runner executes, which block ids served
    attention and which served Mamba state."""

    def __init__(self, llm: LLM) -> None:
        runner = llm.engine.core.runner
        self.kinds = [g.kind for g in runner.kv_cache_groups()]
        self.used: dict[str, set[int]] = {FULL_ATTENTION: set(), MAMBA: set()}
        execute = runner.execute

        def recording_execute(sched):
            for new in sched.new_reqs:
                self._add(new.block_ids)
            for cached in sched.cached_reqs:
                self._add(cached.new_block_ids)
            return execute(sched)

        runner.execute = recording_execute

    def _add(self, block_ids: list[list[int]]) -> None:
        for kind, ids in zip(self.kinds, block_ids, strict=True):
            self.used[kind].update(ids)

    def reset(self) -> dict[str, set[int]]:
        used = self.used
        self.used = {FULL_ATTENTION: set(), MAMBA: set()}
        return used


def run_twice(model_dir: str):
    llm = LLM(
        model_dir,
        device="cpu",
        dtype="float32",
        skip_tokenizer_init=True,
        max_model_len=256,
        num_gpu_blocks_override=12,
    )
    roles = BlockRoles(llm)
    first = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    used_first = roles.reset()
    second = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    used_second = roles.reset()
    # Some block held Mamba state in one pass and attention K/V in the other.
    cycled = (used_first[MAMBA] & used_second[FULL_ATTENTION]) | (
        used_first[FULL_ATTENTION] & used_second[MAMBA]
    )
    assert cycled, "no block changed roles between the passes; the test proves nothing"
    core = llm.engine.core
    assert core.kv_manager.num_free_blocks() == core.num_blocks - 1, "blocks leaked"
    assert all(b.ref_cnt == 0 for b in core.kv_manager.pool.blocks)
    return first, second, core.runner.zeroer


def tokens_and_logprobs(outs):
    return [(o.outputs[0].token_ids, [lp.logprob for lp in o.outputs[0].logprobs]) for o in outs]


def assert_same(first, second) -> None:
    pairs = zip(tokens_and_logprobs(first), tokens_and_logprobs(second), strict=True)
    for (t1, l1), (t2, l2) in pairs:
        assert t1 == t2
        assert all(abs(a - b) < 1e-4 for a, b in zip(l1, l2, strict=True)), (l1, l2)


def test_second_pass_over_reused_blocks_is_identical(model_dir, monkeypatch):
    monkeypatch.delenv(NO_ZERO_ENV, raising=False)
    monkeypatch.delenv(POISON_ENV, raising=False)
    first, second, zeroer = run_twice(model_dir)
    assert zeroer.num_zeroed > 0
    assert_same(first, second)


def test_poisoned_freed_blocks_are_harmless_when_zeroed(model_dir, monkeypatch):
    """Freed blocks become NaN; zeroing the new attention blocks (and never reading a
    fresh Mamba block's state) keeps the second pass identical to the first."""
    monkeypatch.delenv(NO_ZERO_ENV, raising=False)
    monkeypatch.setenv(POISON_ENV, "1")
    first, second, _ = run_twice(model_dir)
    assert_same(first, second)


def test_poisoned_blocks_corrupt_attention_without_zeroing(model_dir, monkeypatch):
    """The same run with the zeroing off: the check above can fail."""
    monkeypatch.setenv(NO_ZERO_ENV, "1")
    monkeypatch.setenv(POISON_ENV, "1")
    first, second, zeroer = run_twice(model_dir)
    assert zeroer.num_zeroed == 0
    second_lps = [lp for _, lps in tokens_and_logprobs(second) for lp in lps]
    assert any(math.isnan(lp) for lp in second_lps), "stale NaN blocks did not show"
