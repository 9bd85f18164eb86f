"""The request's tools (OpenAI function definitions) and typing of parameter values.

Formats such as Qwen3-Coder's XML write every parameter value as bare text; the tool's
JSON schema says what the text means (integer, number, boolean, object, array, string).
A value that does not convert to any of its declared types stays a string, which is also
what a parameter the schema does not declare becomes.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_INT_RE = re.compile(r"[+-]?\d+")

# Type names models and hand-written schemas use beside JSON Schema's own.
_TYPE_ALIASES = {
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "uint": "integer",
    "float": "number",
    "double": "number",
    "bool": "boolean",
    "dict": "object",
    "map": "object",
    "list": "array",
    "arr": "array",
    "str": "string",
    "text": "string",
    "enum": "string",
}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def param_schema(self, param: str) -> dict[str, Any] | None:
        props = self.parameters.get("properties")
        if not isinstance(props, dict):
            return None
        schema = props.get(param)
        return schema if isinstance(schema, dict) else None


class ToolSet:
    """The tools of one request, by name."""

    def __init__(self, specs: list[ToolSpec] | None = None) -> None:
        self.specs = {s.name: s for s in specs or []}

    def get(self, name: str) -> ToolSpec | None:
        return self.specs.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self.specs

    def __len__(self) -> int:
        return len(self.specs)

    @classmethod
    def from_openai(cls, tools: list[Any] | None) -> ToolSet:
        """Validate OpenAI `tools`; a ValueError names the bad entry (`tools.1.function.name`)."""
        specs: list[ToolSpec] = []
        for i, tool in enumerate(tools or []):
            where = f"tools.{i}"
            if not isinstance(tool, dict):
                raise ValueError(f"{where}: each tool must be an object")
            if tool.get("type", "function") != "function":
                raise ValueError(f"{where}.type: only 'function' tools are supported")
            fn = tool.get("function")
            if not isinstance(fn, dict):
                raise ValueError(f"{where}.function: must be an object with a name")
            name = fn.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"{where}.function.name: must be a non-empty string")
            params = fn.get("parameters", {})
            if params is None:
                params = {}
            if not isinstance(params, dict):
                raise ValueError(f"{where}.function.parameters: must be a JSON schema object")
            if any(s.name == name for s in specs):
                raise ValueError(f"{where}.function.name: duplicate tool name {name!r}")
            specs.append(ToolSpec(name, params))
        return cls(specs)


def schema_types(schema: Any) -> list[str]:
    """The JSON types a schema admits, in declared order (`type` lists, anyOf/oneOf)."""
    if not isinstance(schema, dict):
        return []
    declared = schema.get("type")
    raw = [declared] if isinstance(declared, str) else list(declared or [])
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            raw.extend(schema_types(sub))
    if not raw and isinstance(schema.get("enum"), list):
        raw = [_json_type(v) for v in schema["enum"]]
    if not raw and "properties" in schema:
        raw = ["object"]
    if not raw and "items" in schema:
        raw = ["array"]
    types: list[str] = []
    for t in raw:
        if isinstance(t, str):
            t = t.strip().lower()
            t = _TYPE_ALIASES.get(t, t)
            if t not in types:
                types.append(t)
    return types


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "object"


def is_plain_string(schema: Any) -> bool:
    """True when the value is text whatever it says (so it can stream as it arrives)."""
    types = schema_types(schema)
    return not types or types == ["string"]


# ---- conversions: (ok, value) --------------------------------------------------------
def _to_integer(text: str) -> tuple[bool, Any]:
    s = text.strip()
    if _INT_RE.fullmatch(s):
        return True, int(s)
    try:
        f = float(s)
    except ValueError:
        return False, None
    return (True, int(f)) if math.isfinite(f) and f.is_integer() else (False, None)


def _to_number(text: str) -> tuple[bool, Any]:
    s = text.strip()
    if _INT_RE.fullmatch(s):
        return True, int(s)
    try:
        f = float(s)
    except ValueError:
        return False, None
    return (True, f) if math.isfinite(f) else (False, None)  # JSON has no NaN/inf


def _to_boolean(text: str) -> tuple[bool, Any]:
    s = text.strip().lower()
    return (True, s == "true") if s in ("true", "false") else (False, None)


def _to_container(kind: type) -> Callable[[str], tuple[bool, Any]]:
    def convert(text: str) -> tuple[bool, Any]:
        s = text.strip()
        try:
            value = json.loads(s)
        except ValueError:
            # Models trained on Python-rendered templates write {'k': 'v'} or True.
            try:
                value = ast.literal_eval(s)
                json.dumps(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return False, None
        return (True, value) if isinstance(value, kind) else (False, None)

    return convert


_CONVERTERS: dict[str, Callable[[str], tuple[bool, Any]]] = {
    "string": lambda s: (True, s),
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "object": _to_container(dict),
    "array": _to_container(list),
}


def coerce_value(text: str, schema: Any) -> Any:
    """The typed value of a parameter written as bare text, per its JSON schema."""
    types = schema_types(schema)
    if "null" in types and text.strip().lower() in ("null", "none"):
        return None
    for t in types:
        convert = _CONVERTERS.get(t)
        if convert is None:
            continue
        ok, value = convert(text)
        if ok:
            return value
    return text
