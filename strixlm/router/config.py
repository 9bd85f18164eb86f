"""Router config: pydantic models, cross-reference checks, and `load_config`.

Errors come back as one line each, naming the file, the dotted path inside it and what is
wrong, e.g. ``router.yaml: decisions[2].rules.any[1].signal: unknown signal 'pi' (known:
jailbreak, pii)``. Signal, plugin and selection models live in `config_signals` and
`config_plugins`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from strixlm.router.config_plugins import (
    PLUGIN_TYPES,
    Plugin,
    Selection,
    StaticSelection,
)
from strixlm.router.config_signals import (
    SIGNAL_TYPES,
    JailbreakSignal,
    Name,
    PIISignal,
    Signal,
    Strict,
    Unit,
)

AUTO = "auto"  # a model ref / served model whose name is discovered from the backend
Loc = tuple[str | int, ...]


class RouterConfigError(ValueError):
    """Every problem found in a config, one line per problem."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("\n".join(messages))


class Rule(Strict):
    """One node of a rule tree: exactly one of all / any / not / signal."""

    all: list[Rule] | None = Field(default=None, min_length=1)
    any: list[Rule] | None = Field(default=None, min_length=1)
    not_: Rule | None = Field(default=None, alias="not")
    signal: str | None = None
    value: str | None = None  # for classifying signals: domain label, language, hard/easy...
    min_confidence: Unit | None = None

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        if isinstance(data, str):  # shorthand: a bare signal name
            return {"signal": data}
        if isinstance(data, dict):
            kinds = [k for k in ("all", "any", "not", "signal") if k in data]
            if len(kinds) != 1:
                got = ", ".join(kinds) if kinds else "none"
                raise ValueError(f"a rule needs exactly one of all, any, not, signal (got {got})")
            if kinds[0] != "signal":
                extra = [k for k in ("value", "min_confidence") if k in data]
                if extra:
                    raise ValueError(f"{extra[0]!r} is only allowed next to 'signal'")
        return data

    def leaves(self, loc: Loc) -> Iterator[tuple[Loc, Rule]]:
        if self.signal is not None:
            yield loc, self
        for key in ("all", "any"):
            for i, child in enumerate(getattr(self, key) or []):
                yield from child.leaves((*loc, key, i))
        if self.not_ is not None:
            yield from self.not_.leaves((*loc, "not"))


class ModelRef(Strict):
    model: str = AUTO
    backend: str | None = None  # restrict to one backend; None = any that serves the model
    use_reasoning: bool = False
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    weight: float = Field(default=1.0, gt=0)

    @model_validator(mode="after")
    def _effort_needs_reasoning(self) -> ModelRef:
        if self.reasoning_effort is not None and not self.use_reasoning:
            raise ValueError("reasoning_effort is set but use_reasoning is false")
        return self


class Decision(Strict):
    name: Name
    description: str | None = None
    priority: int = 0
    rules: Rule | None = None  # None = always matches (a catch-all)
    models: list[ModelRef] = Field(min_length=1)
    selection: Selection | None = None  # overrides the top-level selection


class Backend(Strict):
    name: Name
    base_url: str
    api_key: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    models: list[str] = Field(default_factory=list)  # empty = discover via GET /models
    weight: float = Field(default=1.0, gt=0)
    timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not re.match(r"^https?://[^\s/]+(/\S*)?$", v):
            raise ValueError("base_url must be an http:// or https:// URL")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _one_key(self) -> Backend:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("give api_key or api_key_env, not both")
        return self


class ServerSettings(Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8801, ge=1, le=65535)


class EmbedderSettings(Strict):
    model: str = "all-MiniLM-L6-v2"
    device: Literal["auto", "cpu", "cuda"] = "auto"


class RouterConfig(Strict):
    version: Literal[1] = 1
    server: ServerSettings = Field(default_factory=ServerSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    backends: list[Backend] = Field(min_length=1)
    signals: list[Signal] = Field(default_factory=list)
    decisions: list[Decision] = Field(min_length=1)
    decision_strategy: Literal["priority", "confidence"] = "priority"
    default_decision: str | None = None
    selection: Selection = Field(default_factory=StaticSelection)
    plugins: list[Plugin] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cross_references(self, info: ValidationInfo) -> RouterConfig:
        if not (info.context or {}).get("skip_cross_check"):
            problems = cross_check(self)
            if problems:
                raise ValueError("; ".join(f"{format_loc(loc)}: {m}" for loc, m in problems))
        return self

    def signal(self, name: str) -> Signal | None:
        return next((s for s in self.signals if s.name == name), None)


def _known(names: list[str]) -> str:
    return ", ".join(names) if names else "none defined"


def _unique(items: list[Any], section: str, kind: str) -> list[tuple[Loc, str]]:
    out, seen = [], {}
    for i, it in enumerate(items):
        if it.name in seen:
            first = f"{section}[{seen[it.name]}]"
            out.append(((section, i, "name"), f"duplicate {kind} name {it.name!r} (first {first})"))
        else:
            seen[it.name] = i
    return out


def cross_check(cfg: RouterConfig) -> list[tuple[Loc, str]]:
    """Checks that span sections: unique names and references that resolve."""
    out = _unique(cfg.backends, "backends", "backend")
    out += _unique(cfg.signals, "signals", "signal")
    out += _unique(cfg.decisions, "decisions", "decision")
    out += _unique(cfg.plugins, "plugins", "plugin")
    signals = {s.name: s for s in cfg.signals}
    backends = {b.name: b for b in cfg.backends}
    served = sorted({m for b in cfg.backends for m in b.models})
    discovers = [b.name for b in cfg.backends if not b.models]
    decisions = list(dict.fromkeys(d.name for d in cfg.decisions))
    for di, d in enumerate(cfg.decisions):
        for loc, leaf in d.rules.leaves(("decisions", di, "rules")) if d.rules else ():
            sig = signals.get(leaf.signal or "")
            if sig is None:
                msg = f"unknown signal {leaf.signal!r} (known: {_known(list(signals))})"
                out.append(((*loc, "signal"), msg))
                continue
            allowed = sig.values()
            if leaf.value is not None and allowed is not None and leaf.value not in allowed:
                msg = f"{leaf.value!r} is not a value of {sig.type} signal {sig.name!r} "
                out.append(((*loc, "value"), msg + f"(values: {_known(allowed)})"))
        for mi, ref in enumerate(d.models):
            loc = ("decisions", di, "models", mi)
            if ref.backend is not None:
                b = backends.get(ref.backend)
                if b is None:
                    msg = f"unknown backend {ref.backend!r} (known: {_known(list(backends))})"
                    out.append(((*loc, "backend"), msg))
                elif ref.model != AUTO and b.models and ref.model not in b.models:
                    msg = f"model {ref.model!r} is not served by backend {b.name!r} "
                    out.append(((*loc, "model"), msg + f"(serves: {_known(b.models)})"))
            elif ref.model != AUTO and ref.model not in served and not discovers:
                msg = f"model {ref.model!r} is not served by any backend (served: {_known(served)})"
                out.append(((*loc, "model"), msg))
    if cfg.default_decision is not None and cfg.default_decision not in decisions:
        msg = f"unknown decision {cfg.default_decision!r} (known: {_known(decisions)})"
        out.append((("default_decision",), msg))
    for pi, p in enumerate(cfg.plugins):
        for j, name in enumerate(p.decisions):
            if name not in decisions:
                msg = f"unknown decision {name!r} (known: {_known(decisions)})"
                out.append((("plugins", pi, "decisions", j), msg))
    return out


def format_loc(loc: Loc) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s or "(top level)"


def _clean_loc(loc: Loc, data: Any) -> Loc:
    """Drops the discriminator tags pydantic inserts (`signals.0.keyword.x` -> `signals[0].x`)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part not in node:
            if part in (node.get("type"), node.get("method")) or part.startswith("function-"):
                continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return tuple(out)


def _message(err: Any) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        known = SIGNAL_TYPES if "fact_check" in ctx.get("expected_tags", "") else PLUGIN_TYPES
        if ctx.get("discriminator") == "'method'":
            known = ("static", "weighted", "latency", "elo")
        what = {"signals": "signal type", "plugins": "plugin type"}.get(
            str(err["loc"][0]) if err["loc"] else "", "selection method"
        )
        return f"unknown {what} {ctx.get('tag')!r} (known: {', '.join(known)})"
    if kind == "union_tag_not_found":
        return "missing 'type'" if "type" in str(err.get("ctx")) else "missing 'method'"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "string_pattern_mismatch" and err["loc"] and err["loc"][-1] == "name":
        msg = "a name may use only letters, digits, '_', '.' and '-'"
    msg = msg.removeprefix("Value error, ")
    inp = err.get("input")
    if isinstance(inp, str | int | float) and not isinstance(inp, bool):
        msg += f" (got {inp!r})"
    return msg


def _loc_with_union_fix(err: Any, data: Any) -> Loc:
    loc = _clean_loc(tuple(err["loc"]), data)
    if err["type"] == "union_tag_invalid":
        ctx = err.get("ctx", {})
        loc = (*loc, str(ctx.get("discriminator", "'type'")).strip("'"))
    return loc


def _line_of(root: yaml.Node | None, loc: Loc) -> int | None:
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            break
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def validate_data(data: Any, source: str = "<config>", root: yaml.Node | None = None):
    """Validates parsed YAML/JSON data; raises RouterConfigError listing every problem."""
    if not isinstance(data, dict):
        raise RouterConfigError([f"{source}: top level must be a mapping"])
    problems: list[tuple[Loc, str]] = []
    try:
        cfg = RouterConfig.model_validate(data, context={"skip_cross_check": True})
    except ValidationError as e:
        problems = [(_loc_with_union_fix(err, data), _message(err)) for err in e.errors()]
    else:
        problems = cross_check(cfg)
    if problems:
        lines = []
        for loc, msg in problems:
            line = _line_of(root, loc) if root is not None else None
            where = f" (line {line})" if line else ""
            lines.append(f"{source}: {format_loc(loc)}: {msg}{where}")
        raise RouterConfigError(lines)
    return cfg


def load_config(path: str | Path) -> RouterConfig:
    """Reads and validates a YAML config file; raises RouterConfigError."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise RouterConfigError([f"{source}: cannot read: {e.strerror or e}"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise RouterConfigError([f"{where}: invalid YAML: {e.problem or e}"]) from None
    except yaml.YAMLError as e:
        raise RouterConfigError([f"{source}: invalid YAML: {e}"]) from None
    return validate_data(data, source, root)


def default_config() -> RouterConfig:
    """Zero configuration: one local `strixlm serve`, everything routed to its model."""
    return RouterConfig(
        backends=[Backend(name="local", base_url="http://127.0.0.1:8000/v1")],
        signals=[
            JailbreakSignal(type="jailbreak", name="jailbreak", threshold=0.9),
            PIISignal(type="pii", name="pii"),
        ],
        decisions=[
            Decision(name="general", description="everything", models=[ModelRef(model=AUTO)])
        ],
        default_decision="general",
    )


__all__ = [
    "AUTO",
    "Backend",
    "Decision",
    "ModelRef",
    "RouterConfig",
    "RouterConfigError",
    "Rule",
    "Name",
    "default_config",
    "load_config",
    "validate_data",
]
