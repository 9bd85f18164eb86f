"""Plugin and model-selection models of the router config (discriminated unions)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from strixlm.router.config_signals import Name, Strict, Unit

_HEADER = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"


class PluginBase(Strict):
    name: Name
    enabled: bool = True
    # Decisions the plugin applies to; empty = every decision.
    decisions: list[str] = Field(default_factory=list)


class SemanticCachePlugin(PluginBase):
    type: Literal["semantic_cache"]
    similarity_threshold: Unit = 0.92
    ttl_s: float = Field(default=3600.0, gt=0)
    max_entries: int = Field(default=10_000, gt=0)


class SystemPromptPlugin(PluginBase):
    type: Literal["system_prompt"]
    prompt: str = Field(min_length=1)
    mode: Literal["insert", "replace"] = "insert"


class FastResponsePlugin(PluginBase):
    """Answers without calling a backend (e.g. a refusal for jailbreak attempts)."""

    type: Literal["fast_response"]
    message: str = Field(min_length=1)
    status_code: int = Field(default=200, ge=200, le=599)


class HeaderMutationPlugin(PluginBase):
    type: Literal["header_mutation"]
    set: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)

    @field_validator("set")
    @classmethod
    def _header_names(cls, v: dict[str, str]) -> dict[str, str]:
        import re

        for k in v:
            if not re.match(_HEADER, k):
                raise ValueError(f"invalid header name {k!r}")
        return v


class RouterReplayPlugin(PluginBase):
    type: Literal["router_replay"]
    path: str = Field(default="router_replay.sqlite", min_length=1)
    max_records: int = Field(default=100_000, gt=0)
    store_bodies: bool = True


Plugin = Annotated[
    SemanticCachePlugin
    | SystemPromptPlugin
    | FastResponsePlugin
    | HeaderMutationPlugin
    | RouterReplayPlugin,
    Field(discriminator="type"),
]
PLUGIN_TYPES = (
    "semantic_cache",
    "system_prompt",
    "fast_response",
    "header_mutation",
    "router_replay",
)


class StaticSelection(Strict):
    """The decision's first model ref, on the first backend that serves it."""

    method: Literal["static"] = "static"


class WeightedSelection(Strict):
    """Random choice among the decision's model refs / endpoints by their `weight`."""

    method: Literal["weighted"]
    seed: int | None = None


class LatencySelection(Strict):
    """Pick the endpoint with the lowest smoothed latency (EWMA of TTFT or total time)."""

    method: Literal["latency"]
    metric: Literal["ttft", "total"] = "ttft"
    ewma_alpha: float = Field(default=0.3, gt=0.0, le=1.0)
    explore: Unit = 0.05


class EloSelection(Strict):
    """Pick the highest-rated model; ratings updated from POST /api/v1/feedback."""

    method: Literal["elo"]
    initial_rating: float = 1500.0
    k_factor: float = Field(default=32.0, gt=0)
    ratings_path: str | None = None


Selection = Annotated[
    StaticSelection | WeightedSelection | LatencySelection | EloSelection,
    Field(discriminator="method"),
]
