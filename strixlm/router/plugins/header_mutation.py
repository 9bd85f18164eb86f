"""Header mutation plugin: set / remove headers of the request forwarded to the backend."""

from __future__ import annotations

from strixlm.router.config_plugins import HeaderMutationPlugin


def mutate_headers(headers: dict[str, str], cfg: HeaderMutationPlugin) -> dict[str, str]:
    """A new header dict (names compared case-insensitively, as HTTP does)."""
    drop = {h.lower() for h in cfg.remove} | {h.lower() for h in cfg.set}
    out = {k: v for k, v in headers.items() if k.lower() not in drop}
    out.update(cfg.set)
    return out
