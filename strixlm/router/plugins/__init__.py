"""Router plugins: semantic cache, system prompt, fast response, header mutation, replay.

`PluginSet` answers which enabled plugins apply to a decision (a plugin with no `decisions`
applies to all of them). The plugin behaviours live in one module each.
"""

from __future__ import annotations

from typing import TypeVar

from strixlm.router.config import RouterConfig
from strixlm.router.config_plugins import (
    FastResponsePlugin,
    HeaderMutationPlugin,
    PluginBase,
    RouterReplayPlugin,
    SemanticCachePlugin,
    SystemPromptPlugin,
)
from strixlm.router.plugins.semantic_cache import SemanticCache

P = TypeVar("P", bound=PluginBase)


class PluginSet:
    def __init__(self, cfg: RouterConfig) -> None:
        self.plugins = [p for p in cfg.plugins if p.enabled]
        self.caches = {
            p.name: SemanticCache(p) for p in self.plugins if isinstance(p, SemanticCachePlugin)
        }

    def applying(self, kind: type[P], decision: str | None) -> list[P]:
        """Enabled plugins of `kind` for `decision` (None = a request outside any decision,
        e.g. a named model passed through: only plugins without a decision list apply)."""
        return [
            p
            for p in self.plugins
            if isinstance(p, kind) and (not p.decisions or decision in p.decisions)
        ]

    def of_type(self, kind: type[P]) -> list[P]:
        return [p for p in self.plugins if isinstance(p, kind)]

    def fast_response(self, decision: str | None) -> FastResponsePlugin | None:
        found = self.applying(FastResponsePlugin, decision)
        return found[0] if found else None

    def semantic_cache(self, decision: str | None) -> SemanticCache | None:
        found = self.applying(SemanticCachePlugin, decision)
        return self.caches[found[0].name] if found else None

    def system_prompts(self, decision: str | None) -> list[SystemPromptPlugin]:
        return self.applying(SystemPromptPlugin, decision)

    def header_mutations(self, decision: str | None) -> list[HeaderMutationPlugin]:
        return self.applying(HeaderMutationPlugin, decision)

    def replay(self, decision: str | None) -> list[RouterReplayPlugin]:
        return self.applying(RouterReplayPlugin, decision)

    @property
    def needs_embedder(self) -> bool:
        return bool(self.caches)
