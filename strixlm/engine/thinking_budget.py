"""Thinking budget: once a request has written `thinking_token_budget` reasoning tokens without
closing its reasoning, the engine writes the closing tag for it and the answer follows.

Semantics, over the output token ids of one sequence:

- Where reasoning starts. If the output opens with the start tag (`<think>`), reasoning
  begins right after it. Otherwise it begins at the first output token when the prompt left
  reasoning open (`starts_in_reasoning`, decided from the prompt text by the reasoning
  parser), and never when it did not (e.g. `enable_thinking=false` closed an empty block in
  the prompt): then the output is the answer and the budget does nothing. While the output
  so far is part of the start tag nothing is forced.
- Counting. Every token after the start of reasoning counts, the model's own closing tag
  included. If the model completes the closing tag (`end_token_ids`) before the budget runs
  out, reasoning is over and nothing is ever forced.
- Forcing. At the first position where the count reaches the budget, the engine emits
  `forced_token_ids` (the closing tag plus the whitespace the chat template writes after it)
  one token per step instead of sampling, then the model continues normally. If the last
  tokens are already the beginning of that sequence (the model was writing `</think>` when
  the budget ran out), forcing continues it rather than starting over. Budget 0 closes
  reasoning at once.

Design: why the decision runs on the device. Under async scheduling the host plans step N+1
before step N's token reaches it, and the token sampled at step N is exactly what decides
step N+1: it may complete the model's own `</think>` (nothing to force) or the opening tag
(counting starts). So the decision cannot be made on the host at planning time. Instead each
live request's budget, markers and two words of state (`closed`; how many forced tokens
were emitted) sit in persistent per-row device columns (strixlm/sample/forced_tokens.py),
and each sampling step runs a few fixed-shape tensor ops over the state table's token ids:
a window at the start of the output and one at its end, [B, T] and [B, T, T] gathers with
T = MAX_MARKER_TOKENS. They yield one forced token per row (-1: sample), which the sampler
substitutes for its draw before logprobs are gathered, and update the state in place. No
host sync, no data-dependent shapes, so it runs unchanged under async scheduling and beside
CUDA graph replay; batches with no budget skip it (a host-side check of numpy mirrors).

Forced tokens are ordinary sampled tokens from then on: appended to the state table, sent
to the host, detokenized, counted in usage, with the logprob the model gave them. They
consume no randomness: the stateless sampler keys its noise on (seed, position), so later
tokens draw the same as in any replay. A preempted request restarts from its token history:
the row's state is rebuilt on the host by `ThinkingBudgetTracker.replay`, the pure-Python
reference of the same decision that the tests compare the device path against.

Matching is on token ids: a model that writes the closing text with a different tokenization
than `end_token_ids` is not seen closing it. The reasoning families supported here
(deepseek_r1, qwen3, nemotron_v3) have `<think>` / `</think>` as single added tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# Longest start, end or forced sequence (token ids) a request may give.
MAX_MARKER_TOKENS = 16


@dataclass(frozen=True)
class ReasoningMarkers:
    """How one request's reasoning looks in token ids."""

    start_token_ids: tuple[int, ...]  # the opening tag; () if the model never writes one
    end_token_ids: tuple[int, ...]  # the closing tag the model writes itself
    forced_token_ids: tuple[int, ...]  # what the budget forces: closing tag + framing
    starts_in_reasoning: bool = True  # the prompt left reasoning open

    def __post_init__(self) -> None:
        for name in ("start_token_ids", "end_token_ids", "forced_token_ids"):
            ids = tuple(getattr(self, name))
            object.__setattr__(self, name, ids)
            if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
                raise ValueError(f"reasoning markers: {name} must be token ids, got {ids}")
            if len(ids) > MAX_MARKER_TOKENS:
                raise ValueError(
                    f"reasoning markers: {name} has {len(ids)} tokens, at most "
                    f"{MAX_MARKER_TOKENS} are supported"
                )
        if not self.end_token_ids or not self.forced_token_ids:
            raise ValueError("reasoning markers: end_token_ids and forced_token_ids are required")

    @property
    def all_token_ids(self) -> tuple[int, ...]:
        return self.start_token_ids + self.end_token_ids + self.forced_token_ids

    @classmethod
    def from_parser(
        cls,
        tokenizer,
        parser,
        prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> ReasoningMarkers:
        """The markers of a reasoning parser (a name or class) for a chat model's tokenizer.
        With a prompt, `starts_in_reasoning` follows the parser's reading of it."""
        from strixlm.parsers.reasoning import get_reasoning_parser

        if isinstance(parser, str):
            parser = get_reasoning_parser(parser)
        end = parser(True).reasoning_end
        framing = template_framing(tokenizer, end)
        starts = parser.starts_in_reasoning(prompt or "", chat_template_kwargs or {})

        def encode(text: str) -> tuple[int, ...]:
            return tuple(tokenizer.encode(text, add_special_tokens=False))

        return cls(encode(parser.start_tag), encode(end), encode(end + framing), starts)

    def for_prompt(self, starts_in_reasoning: bool) -> ReasoningMarkers:
        return replace(self, starts_in_reasoning=starts_in_reasoning)


def template_framing(tokenizer, end_tag: str) -> str:
    """The whitespace a chat template writes after the closing tag, read from the generation
    prompt it renders with thinking off (`<think>\\n\\n</think>\\n\\n` gives "\\n\\n"), so a
    forced close looks like the template's own. "" when the template shows none."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return ""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}],
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=False,
        )
    except Exception:  # a template that needs other inputs: no framing, the model continues
        return ""
    at = text.rfind(end_tag)
    if at < 0:
        return ""
    tail = text[at + len(end_tag) :]
    return tail if not tail.strip() else ""


@dataclass
class ThinkingBudgetTracker:
    """The budget decision for one sequence, in plain Python: the reference the device path
    (strixlm/sample/forced_tokens.py) is tested against, and what rebuilds a row's state
    from its token history when a request (re)enters the runner."""

    budget: int
    markers: ReasoningMarkers
    prompt_len: int
    closed: bool = False  # reasoning is over (or never began): nothing more to force
    forced: int = -1  # forced tokens emitted so far; -1 before forcing began
    _end: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._end = list(self.markers.end_token_ids)

    def step(self, tokens: Sequence[int], pos: int) -> int | None:
        """The token to force at position `pos` given tokens[:pos], or None to sample.
        Called once per sampled position, in order."""
        if self.closed:
            return None
        m = self.markers
        start, forced_ids = m.start_token_ids, m.forced_token_ids
        p0 = self.prompt_len
        out_len = pos - p0
        k = min(out_len, len(start))
        head_ok = all(tokens[p0 + j] == start[j] for j in range(k))
        opened = bool(start) and head_ok and out_len >= len(start)
        in_tag = bool(start) and head_ok and out_len < len(start)
        if not m.starts_in_reasoning and not opened and not in_tag:
            self.closed = True  # the output is the answer: there is no reasoning to cap
            return None
        if in_tag and (out_len > 0 or not m.starts_in_reasoning):
            return None  # inside the opening tag, or before the tag that opens reasoning
        n = out_len - (len(start) if opened else 0)  # reasoning tokens so far
        e = len(self._end)
        if self.forced < 0 and n >= e and list(tokens[pos - e : pos]) == self._end:
            self.closed = True  # the model closed its reasoning itself
            return None
        if self.forced < 0:
            if n < self.budget:
                return None
            self.forced = _partial_prefix(tokens, pos, n, forced_ids)
        if self.forced >= len(forced_ids):
            self.closed = True
            return None
        token = forced_ids[self.forced]
        self.forced += 1
        return token

    def replay(self, tokens: Sequence[int]) -> ThinkingBudgetTracker:
        """Advance over a token history (prompt + outputs so far), e.g. after preemption."""
        for pos in range(self.prompt_len, len(tokens)):
            if self.closed:
                break
            self.step(tokens, pos)
        return self


def _partial_prefix(tokens: Sequence[int], pos: int, n: int, forced: Sequence[int]) -> int:
    """The longest k < len(forced), k <= n, with tokens[pos - k : pos] == forced[:k]."""
    best = 0
    for k in range(1, min(len(forced) - 1, n) + 1):
        if list(tokens[pos - k : pos]) == list(forced[:k]):
            best = k
    return best
