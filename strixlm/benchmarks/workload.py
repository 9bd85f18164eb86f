"""The standard benchmark workload, and what one engine's run over it measured.

A workload is N requests of random token ids (from a seeded generator, never a special id)
with input and output lengths drawn uniformly from inclusive ranges. Every request is meant
to produce exactly its output length: engines run it with EOS ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

# DESIGN.md "Measuring": 256 requests, input and output lengths uniform in [100, 1024].
DEFAULT_NUM_PROMPTS = 256
DEFAULT_INPUT_LEN_RANGE = (100, 1024)
DEFAULT_OUTPUT_LEN_RANGE = (100, 1024)


@dataclass
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]
    input_len_range: tuple[int, int]
    output_len_range: tuple[int, int]
    seed: int

    @property
    def num_requests(self) -> int:
        return len(self.prompts)

    @property
    def input_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)

    def subset(self, k: int) -> Workload:
        """The first k requests (the same prompts and lengths, in order)."""
        return Workload(
            self.prompts[:k],
            self.output_lens[:k],
            self.input_len_range,
            self.output_len_range,
            self.seed,
        )

    def lengths(self) -> list[tuple[int, int]]:
        """(input_len, output_len) per request, in order."""
        return [(len(p), o) for p, o in zip(self.prompts, self.output_lens, strict=True)]

    def describe(self) -> dict:
        return {
            "num_requests": self.num_requests,
            "input_len_range": list(self.input_len_range),
            "output_len_range": list(self.output_len_range),
            "seed": self.seed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


def special_token_ids(folder: str | os.PathLike[str] | None, hf_config=None) -> set[int]:
    """Ids a random prompt must avoid: bos/eos/pad/unk from the config and generation config,
    and every token marked special in tokenizer.json, when the folder has one."""
    ids: set[int] = set()

    def add(v) -> None:
        if isinstance(v, int) and v >= 0:
            ids.add(v)
        elif isinstance(v, list | tuple):
            for x in v:
                add(x)

    names = (
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "decoder_start_token_id",
    )
    if hf_config is not None:
        for name in names:
            add(getattr(hf_config, name, None))
    if folder is None:
        return ids
    for fname in ("generation_config.json", "tokenizer.json"):
        path = os.path.join(folder, fname)
        if not os.path.isfile(path):
            continue
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if fname == "generation_config.json":
            for name in names:
                add(data.get(name))
        else:
            for tok in data.get("added_tokens") or []:
                if tok.get("special"):
                    add(tok.get("id"))
    return ids


def make_workload(
    num_prompts: int,
    input_len_range: tuple[int, int],
    output_len_range: tuple[int, int],
    vocab_size: int,
    seed: int = 0,
    avoid_ids: set[int] | None = None,
) -> Workload:
    """num_prompts random requests; lengths uniform in the inclusive ranges."""
    for name, (lo, hi) in (("input", input_len_range), ("output", output_len_range)):
        if lo < 1 or hi < lo:
            raise ValueError(f"--{name}-len-range: need 1 <= lo <= hi, got [{lo}, {hi}]")
    if num_prompts < 1:
        raise ValueError("--num-prompts must be at least 1")
    allowed = np.setdiff1d(np.arange(vocab_size), np.fromiter(avoid_ids or (), dtype=np.int64))
    if allowed.size == 0:
        raise ValueError("no token ids left to sample from")
    rng = np.random.default_rng(seed)
    in_lens = rng.integers(input_len_range[0], input_len_range[1] + 1, size=num_prompts)
    out_lens = rng.integers(output_len_range[0], output_len_range[1] + 1, size=num_prompts)
    prompts = [allowed[rng.integers(0, allowed.size, size=int(n))].tolist() for n in in_lens]
    return Workload(
        prompts, [int(n) for n in out_lens], tuple(input_len_range), tuple(output_len_range), seed
    )


def warmup_workload(
    vocab_size: int,
    avoid_ids: set[int] | None = None,
    seed: int = 0,
    n: int = 4,
    input_len_range: tuple[int, int] = (16, 32),
) -> Workload:
    """A few requests with short outputs run before timing (another seed than the timed
    ones); prompts drawn like the timed ones compile the kernel variants their prefill steps
    select before the clock starts."""
    return make_workload(
        n, input_len_range, (8, 16), vocab_size, seed=seed + 1_000_003, avoid_ids=avoid_ids
    )


@dataclass
class RunResult:
    """What one engine did on (a prefix of) the workload."""

    name: str
    num_requests: int
    input_tokens: int
    output_tokens: int  # tokens actually generated, counted from the outputs
    elapsed_s: float
    token_ids: list[list[int]] = field(repr=False)
    config: dict = field(default_factory=dict)

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def total_tok_s(self) -> float:
        tokens = self.input_tokens + self.output_tokens
        return tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def check_lengths(self, expected: list[int]) -> list[int]:
        """Indices of requests whose output length differs from the one asked for."""
        return [
            i for i, (t, n) in enumerate(zip(self.token_ids, expected, strict=False)) if len(t) != n
        ]

    def agreement(self, other: RunResult, k: int = 4) -> dict:
        """Among the first k requests: per request, the index of the first token where the two
        runs differ (None where identical)."""
        first_diff: list[int | None] = []
        for x, y in zip(self.token_ids[:k], other.token_ids[:k], strict=False):
            d = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), None)
            first_diff.append(d if d is not None or len(x) == len(y) else min(len(x), len(y)))
        identical = sum(d is None for d in first_diff)
        return {"requests": len(first_diff), "identical": identical, "first_diff": first_diff}

    def to_dict(self, sample: int = 4) -> dict:
        return {
            "name": self.name,
            "num_requests": self.num_requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "elapsed_s": self.elapsed_s,
            "output_tok_s": self.output_tok_s,
            "total_tok_s": self.total_tok_s,
            "config": self.config,
            "sample_token_ids": self.token_ids[:sample],
        }
