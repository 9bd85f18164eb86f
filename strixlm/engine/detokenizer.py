"""Incremental detokenization with stop strings.

Each step decodes only a small window of token ids (the prefix/read offset technique) and emits the
new, stable suffix of the text, so the work per step does not grow with the output length. Text
that ends in U+FFFD (an incomplete UTF-8 sequence split across byte-level tokens) is held back
until the next token completes it.
"""

from __future__ import annotations

from typing import Any

# Prompt tokens kept as left context of the first window, so that the first generated token
# decodes as it would in the middle of the text (e.g. its leading space is kept).
INITIAL_CONTEXT_TOKENS = 5
# A window that has not produced a complete character after this many tokens is emitted as is.
# Valid UTF-8 completes within 4 bytes, so this only triggers on garbage byte streams, where it
# keeps the work per step bounded.
MAX_PENDING_TOKENS = 32

REPLACEMENT_CHAR = "\ufffd"


def _backend_decode(tokenizer: Any):
    """The `tokenizers` decode that `tokenizer.decode` would end in, when calling it directly
    gives the same text (a plain fast tokenizer without space clean-up); else None. It skips
    transformers' per-call argument handling, which costs more than the decode itself."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    cls = type(tokenizer)
    backend = getattr(tokenizer, "_tokenizer", None)
    if (
        not isinstance(tokenizer, TokenizersBackend)
        or cls.decode is not PreTrainedTokenizerBase.decode
        or cls._decode is not TokenizersBackend._decode
        or getattr(tokenizer, "clean_up_tokenization_spaces", True) is not False
        or backend is None
    ):
        return None
    return backend.decode


class IncrementalDetokenizer:
    """Turns a growing list of generated token ids into text, one step at a time."""

    def __init__(
        self,
        tokenizer: Any,
        prompt_token_ids: list[int],
        *,
        skip_special_tokens: bool = True,
        stop: list[str] | None = None,
        include_stop_str_in_output: bool = False,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # Only slow tokenizers look at this flag; fast ones ignore the keyword.
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self._fast_decode = _backend_decode(tokenizer)
        self.include_stop_str_in_output = include_stop_str_in_output
        # An empty stop string would match everywhere.
        self.stop: list[str] = [s for s in (stop or []) if s]
        self._max_stop_len = max((len(s) for s in self.stop), default=0)

        # Special tokens that decode(skip_special_tokens=True) drops anyway. Leaving them out of
        # the window changes nothing in the text, keeps the window small, and keeps the context
        # of the ordinary tokens around them.
        self._skip_ids: frozenset[int] = frozenset()
        if skip_special_tokens:
            self._skip_ids = frozenset(
                i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special
            )

        self.token_ids: list[int] = []  # generated ids, as given
        # Window ids: a few prompt ids as context, then the generated ids minus skipped specials.
        self._ids: list[int] = [i for i in prompt_token_ids if i not in self._skip_ids][
            -INITIAL_CONTEXT_TOKENS:
        ]
        if self._ids and self._decode(self._ids).endswith(REPLACEMENT_CHAR):
            # The prompt ends inside a character: its bytes would merge with the first
            # generated token, whose text would then not match decode(generated ids).
            self._ids = []
        self._prefix_offset = 0  # window start
        self._read_offset = len(self._ids)  # text of ids[prefix:read] is already emitted
        self._prefix_text: str | None = None  # cached decode of ids[prefix:read]

        # Output text as chunks, so appending is O(delta) even if callers hold references.
        self._chunks: list[str] = []
        self._len = 0
        self._sent = 0  # characters already returned by get_delta
        self._finished = False
        self.stop_reason: str | None = None  # the stop string that matched, if any

    # -- decoding ---------------------------------------------------------------------------

    def _decode(self, ids: list[int]) -> str:
        if self._fast_decode is not None:
            return self._fast_decode(ids, skip_special_tokens=self.skip_special_tokens)
        return self.tokenizer.decode(
            ids,
            skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
        )

    def _step(self, force: bool) -> str:
        """Emit the new stable text of the window; `force` also emits an incomplete tail."""
        if self._read_offset >= len(self._ids):
            return ""
        if self._prefix_text is None:
            self._prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        prefix_text = self._prefix_text
        new_text = self._decode(self._ids[self._prefix_offset :])
        force = force or len(self._ids) - self._read_offset > MAX_PENDING_TOKENS
        if len(new_text) <= len(prefix_text) and not force:
            return ""  # nothing new yet (e.g. the first bytes of a multi-byte character)
        if new_text.endswith(REPLACEMENT_CHAR) and not force:
            return ""  # the last character may still be completed by the next token
        # The emitted ids become the left context of the next window.
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        self._prefix_text = None
        return new_text[len(prefix_text) :]

    # -- output text ------------------------------------------------------------------------

    def _tail(self, n: int) -> str:
        """The last n characters of the output text, without joining all of it."""
        if n <= 0:
            return ""
        parts: list[str] = []
        got = 0
        for chunk in reversed(self._chunks):
            parts.append(chunk)
            got += len(chunk)
            if got >= n:
                break
        text = "".join(reversed(parts))
        return text[-n:] if len(text) > n else text

    def _truncate(self, new_len: int) -> None:
        while self._chunks and self._len - len(self._chunks[-1]) >= new_len:
            self._len -= len(self._chunks.pop())
        if self._len > new_len:
            keep = len(self._chunks[-1]) - (self._len - new_len)
            self._chunks[-1] = self._chunks[-1][:keep]
            self._len = new_len

    def _append(self, delta: str) -> str | None:
        """Append text and look for a stop string that it completes; return that stop string."""
        if not delta:
            return None
        old_len = self._len
        # Only a match that ends inside the new text is new: search from old_len - max_len + 1.
        region = self._tail(self._max_stop_len - 1) + delta if self.stop else ""
        region_start = old_len - (len(region) - len(delta))
        self._chunks.append(delta)
        self._len += len(delta)
        best: tuple[int, str] | None = None
        for s in self.stop:
            idx = region.find(s)
            if idx != -1 and (best is None or idx < best[0]):
                best = (idx, s)  # the earliest match wins; list order breaks ties
        if best is None:
            return None
        idx, s = best
        end = region_start + idx + (len(s) if self.include_stop_str_in_output else 0)
        self._truncate(end)
        self._sent = min(self._sent, self._len)
        return s

    # -- public API ---------------------------------------------------------------------------

    def update(self, new_token_ids: list[int], finished: bool = False) -> str | None:
        """Append tokens; return the stop string if one matched (the output is then final).

        Tokens after the one that completes a stop string are ignored, so `token_ids` ends with
        that token.
        """
        if self.stop_reason is not None:
            return self.stop_reason
        for tid in new_token_ids:
            self.token_ids.append(tid)
            if tid in self._skip_ids:
                continue
            self._ids.append(tid)
            stop = self._append(self._step(force=False))
            if stop is not None:
                self.stop_reason = stop
                self._finished = True
                return stop
        if finished:
            self._finished = True
            stop = self._append(self._step(force=True))  # flush an incomplete tail
            if stop is not None:
                self.stop_reason = stop
                return stop
        return None

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def output_text(self) -> str:
        """Full text so far (truncated at a stop string)."""
        if len(self._chunks) > 1:
            # Collapse, so that repeated reads do not join again.
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    def get_delta(self, streaming: bool = True) -> str:
        """Text not yet returned.

        When streaming and not finished, hold back the trailing characters that could still be
        the beginning of a stop string, so a client never sees part of a stop string.
        """
        end = self._len
        if streaming and not self._finished and self.stop:
            end -= self._holdback()
        if end <= self._sent:
            return ""
        delta = self._tail(self._len - self._sent)[: end - self._sent]
        self._sent = end
        return delta

    def _holdback(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        tail = self._tail(self._max_stop_len - 1)
        for k in range(len(tail), 0, -1):
            suffix = tail[-k:]
            if any(len(s) > k and s.startswith(suffix) for s in self.stop):
                return k
        return 0
