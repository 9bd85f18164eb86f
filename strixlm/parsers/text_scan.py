"""Small text helpers for parsers that must decide on tags arriving in arbitrary pieces."""

from __future__ import annotations


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`: the part of
    a streamed buffer that must wait, since the next delta may complete the tag."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def held_tail_len(text: str, tags: tuple[str, ...]) -> int:
    """The longest held-back suffix over several tags."""
    return max((partial_tag_len(text, t) for t in tags), default=0)


def could_become(text: str, tag: str) -> bool:
    """True if more text could still make `text` start with `tag`."""
    return tag.startswith(text) if len(text) < len(tag) else text.startswith(tag)
