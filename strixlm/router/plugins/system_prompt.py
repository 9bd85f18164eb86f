"""System prompt plugin: put the configured system prompt in front of the conversation.

insert: prepend it to the first system message (or add one); replace: drop every system
message of the request and add the configured one."""

from __future__ import annotations

from typing import Any

from strixlm.router.config_plugins import SystemPromptPlugin


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return None


def apply_system_prompt(
    messages: list[dict[str, Any]], cfg: SystemPromptPlugin
) -> list[dict[str, Any]]:
    """A new message list; the request's own message dicts are not modified."""
    ours = {"role": "system", "content": cfg.prompt}
    if cfg.mode == "replace":
        return [ours, *(m for m in messages if m.get("role") not in ("system", "developer"))]
    if messages and messages[0].get("role") == "system":
        existing = _text(messages[0].get("content"))
        if existing is not None:
            merged = {
                **messages[0],
                "content": f"{cfg.prompt}\n\n{existing}" if existing else cfg.prompt,
            }
            return [merged, *messages[1:]]
    return [ours, *messages]
