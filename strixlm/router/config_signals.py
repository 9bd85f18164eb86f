"""Signal models of the router config: one pydantic model per `type`, a discriminated union.

A signal is extracted from each request and yields a match (with a confidence and, for
signals that classify, a value such as a domain label). Decision rules refer to signals by
name; see `strixlm.router.config` for the rest of the config.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64)]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]


class Strict(BaseModel):
    """Base of every config model: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class SignalBase(Strict):
    name: Name
    description: str | None = None

    def values(self) -> list[str] | None:
        """The values a rule leaf may test with `value:`, or None when any is accepted."""
        return None


class KeywordSignal(SignalBase):
    type: Literal["keyword"]
    keywords: list[str] = Field(min_length=1)
    match: Literal["any", "all"] = "any"
    case_sensitive: bool = False
    mode: Literal["exact", "regex", "fuzzy", "bm25"] = "exact"
    fuzzy_threshold: Unit = 0.8
    bm25_threshold: float = Field(default=1.0, ge=0.0)

    @model_validator(mode="after")
    def _regexes_compile(self) -> KeywordSignal:
        if self.mode == "regex":
            flags = 0 if self.case_sensitive else re.IGNORECASE
            for i, kw in enumerate(self.keywords):
                try:
                    re.compile(kw, flags)
                except re.error as e:
                    raise ValueError(f"keywords[{i}]: invalid regex {kw!r}: {e}") from None
        return self


class EmbeddingSignal(SignalBase):
    type: Literal["embedding"]
    candidates: list[str] = Field(min_length=1)
    threshold: Unit = 0.75
    aggregation: Literal["max", "mean"] = "max"


class DomainSignal(SignalBase):
    """Nearest-centroid / logistic classifier over embeddings of labelled examples.

    Examples come inline (`examples: {label: [text, ...]}`) or from a file
    (`examples_path:`, JSONL of {"text", "label"} or YAML label -> texts), resolved relative
    to the config file.
    """

    type: Literal["domain"]
    examples: dict[Name, list[str]] | None = None
    examples_path: str | None = None
    classifier: Literal["centroid", "logistic"] = "centroid"
    threshold: Unit = 0.5

    @model_validator(mode="after")
    def _one_source(self) -> DomainSignal:
        if (self.examples is None) == (self.examples_path is None):
            raise ValueError("give exactly one of 'examples' (inline) or 'examples_path'")
        if self.examples is not None:
            if len(self.examples) < 2:
                raise ValueError("examples: need at least two labels to classify between")
            for label, texts in self.examples.items():
                if not texts:
                    raise ValueError(f"examples.{label}: no example texts")
        return self

    def values(self) -> list[str] | None:
        return sorted(self.examples) if self.examples is not None else None


class JailbreakSignal(SignalBase):
    type: Literal["jailbreak"]
    method: Literal["heuristic", "embedding", "classifier"] = "heuristic"
    threshold: Unit = 0.7
    include_history: bool = False


PIIType = Literal[
    "email", "phone", "credit_card", "ssn", "iban", "ip_address", "api_key", "person", "address"
]
PII_TYPES: tuple[str, ...] = PIIType.__args__  # type: ignore[attr-defined]
_VALIDATOR_TYPES = {"luhn": "credit_card", "iban_checksum": "iban", "ssn_area": "ssn"}


class PIISignal(SignalBase):
    type: Literal["pii"]
    types: list[PIIType] = Field(default_factory=lambda: list(PII_TYPES), min_length=1)
    allow_types: list[PIIType] = Field(default_factory=list)
    allow_values: list[str] = Field(default_factory=list)
    validators: list[Literal["luhn", "iban_checksum", "ssn_area"]] = Field(
        default_factory=lambda: ["luhn"]
    )
    threshold: Unit = 0.5

    @model_validator(mode="after")
    def _validators_fit_types(self) -> PIISignal:
        for i, v in enumerate(self.validators):
            if _VALIDATOR_TYPES[v] not in self.types:
                raise ValueError(
                    f"validators[{i}]: {v!r} checks {_VALIDATOR_TYPES[v]!r}, "
                    "which is not among the detected types"
                )
        return self

    def values(self) -> list[str] | None:
        return list(self.types)


class LanguageSignal(SignalBase):
    type: Literal["language"]
    languages: list[Annotated[str, Field(pattern=r"^[a-z]{2,3}$")]] = Field(min_length=1)
    threshold: Unit = 0.5

    def values(self) -> list[str] | None:
        return list(self.languages)


class ContextSignal(SignalBase):
    """Matches when the prompt's token count lies in [min_tokens, max_tokens)."""

    type: Literal["context"]
    min_tokens: int = Field(default=0, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _range(self) -> ContextSignal:
        if self.max_tokens is not None and self.max_tokens <= self.min_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be greater than min_tokens "
                f"({self.min_tokens})"
            )
        return self


class ComplexitySignal(SignalBase):
    """`hard` when the prompt is nearer the hard examples than the easy ones by `margin`."""

    type: Literal["complexity"]
    hard_examples: list[str] = Field(min_length=1)
    easy_examples: list[str] = Field(min_length=1)
    margin: float = Field(default=0.0, ge=-1.0, le=1.0)

    def values(self) -> list[str] | None:
        return ["hard", "easy"]


class FactCheckSignal(SignalBase):
    type: Literal["fact_check"]
    method: Literal["heuristic", "embedding"] = "heuristic"
    threshold: Unit = 0.6


FeedbackKind = Literal[
    "satisfied", "dissatisfied", "wrong_answer", "need_clarification", "want_different"
]


class UserFeedbackSignal(SignalBase):
    type: Literal["user_feedback"]
    kinds: list[FeedbackKind] = Field(default_factory=lambda: ["dissatisfied", "wrong_answer"])
    threshold: Unit = 0.6

    @field_validator("kinds")
    @classmethod
    def _nonempty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("list at least one feedback kind")
        return v

    def values(self) -> list[str] | None:
        return list(self.kinds)


Signal = Annotated[
    KeywordSignal
    | EmbeddingSignal
    | DomainSignal
    | JailbreakSignal
    | PIISignal
    | LanguageSignal
    | ContextSignal
    | ComplexitySignal
    | FactCheckSignal
    | UserFeedbackSignal,
    Field(discriminator="type"),
]
SIGNAL_TYPES = (
    "keyword",
    "embedding",
    "domain",
    "jailbreak",
    "pii",
    "language",
    "context",
    "complexity",
    "fact_check",
    "user_feedback",
)
