"""Router config: the starter and default validate; broken configs name path and problem."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from strixlm.router.cli import STARTER, router_init, router_validate
from strixlm.router.config import (
    AUTO,
    RouterConfig,
    RouterConfigError,
    default_config,
    load_config,
    validate_data,
)
from strixlm.router.config_signals import SIGNAL_TYPES

BASE = """\
backends:
  - {name: local, base_url: "http://127.0.0.1:8000/v1", models: [small]}
  - {name: big, base_url: "https://api.example.com/v1", api_key_env: BIG_KEY, models: [large]}
signals:
  - {name: pii, type: pii}
  - {name: jailbreak, type: jailbreak}
  - {name: domain, type: domain, examples: {math: [x], code: [y]}}
decisions:
  - name: general
    models: [{model: small}]
"""


def _errors(tmp_path: Path, text: str) -> list[str]:
    f = tmp_path / "router.yaml"
    f.write_text(text)
    with pytest.raises(RouterConfigError) as ei:
        load_config(f)
    assert str(ei.value) == "\n".join(ei.value.messages)
    return [m.replace(str(f), "router.yaml") for m in ei.value.messages]


def _one(errors: list[str], prefix: str, *needles: str) -> None:
    hits = [e for e in errors if e.startswith(prefix)]
    assert hits, f"no error starting {prefix!r} in {errors}"
    for n in needles:
        assert n in hits[0], (n, hits[0])


def test_starter_validates_and_covers_everything():
    cfg = load_config(STARTER)
    assert {s.type for s in cfg.signals} == set(SIGNAL_TYPES)
    assert len(cfg.backends) == 2 and len(cfg.decisions) >= 3
    assert {p.type for p in cfg.plugins} == {
        "semantic_cache",
        "system_prompt",
        "fast_response",
        "header_mutation",
        "router_replay",
    }
    hard = next(d for d in cfg.decisions if d.name == "hard_math")
    assert hard.models[0].use_reasoning and hard.models[0].reasoning_effort == "high"
    # the shorthand leaf `- typo_tolerant_math` became {signal: typo_tolerant_math}
    assert hard.rules.all[1].any[1].signal == "typo_tolerant_math"


def test_default_config_validates():
    cfg = default_config()
    assert cfg.backends[0].base_url == "http://127.0.0.1:8000/v1"
    assert cfg.backends[0].models == []  # discovered at runtime
    assert cfg.decisions[0].name == "general" and cfg.decisions[0].models[0].model == AUTO
    assert {s.type for s in cfg.signals} == {"jailbreak", "pii"}
    assert cfg.default_decision == "general"
    # round trip through plain data
    again = RouterConfig.model_validate(cfg.model_dump(by_alias=True))
    assert again == cfg


def test_base_is_valid(tmp_path):
    (tmp_path / "ok.yaml").write_text(BASE)
    assert load_config(tmp_path / "ok.yaml").decisions[0].name == "general"


def test_unknown_signal_in_nested_rule(tmp_path):
    text = (
        BASE
        + """\
  - name: private
    rules:
      all:
        - jailbreak
        - any: [{signal: domain, value: math}, {not: {signal: pi}}]
    models: [{model: small}]
"""
    )
    errs = _errors(tmp_path, text)
    assert len(errs) == 1
    assert errs[0].startswith(
        "router.yaml: decisions[1].rules.all[1].any[1].not.signal: unknown signal 'pi' "
        "(known: pii, jailbreak, domain)"
    )
    assert errs[0].endswith("(line 15)")


def test_unknown_rule_value(tmp_path):
    text = BASE + "  - {name: m, rules: {signal: domain, value: law}, models: [{model: small}]}\n"
    _one(_errors(tmp_path, text), "router.yaml: decisions[1].rules.value:", "'law'", "math")


def test_rule_with_two_operators(tmp_path):
    text = BASE + "  - {name: m, rules: {any: [pii], signal: pii}, models: [{model: small}]}\n"
    _one(_errors(tmp_path, text), "router.yaml: decisions[1].rules:", "exactly one of")


def test_duplicate_names(tmp_path):
    text = BASE.replace("{name: jailbreak,", "{name: pii,") + (
        "  - {name: general, models: [{model: large}]}\n"
    )
    errs = _errors(tmp_path, text)
    _one(errs, "router.yaml: signals[1].name: duplicate signal name 'pii'", "signals[0]")
    _one(errs, "router.yaml: decisions[1].name: duplicate decision name 'general'")


def test_threshold_out_of_range(tmp_path):
    text = BASE.replace(
        "{name: jailbreak, type: jailbreak}", "{name: j, type: jailbreak, threshold: 1.5}"
    )
    errs = _errors(tmp_path, text)
    assert errs == [
        "router.yaml: signals[1].threshold: Input should be less than or equal to 1 (got 1.5) "
        "(line 6)"
    ]


def test_unknown_plugin_and_signal_type(tmp_path):
    text = BASE + "plugins:\n  - {name: c, type: cache}\n"
    text = text.replace("type: jailbreak}", "type: jailbrake}")
    errs = _errors(tmp_path, text)
    _one(errs, "router.yaml: plugins[0].type: unknown plugin type 'cache'", "semantic_cache")
    _one(errs, "router.yaml: signals[1].type: unknown signal type 'jailbrake'", "jailbreak")


def test_plugin_field_errors(tmp_path):
    text = BASE + (
        "plugins:\n"
        "  - {name: s, type: system_prompt, mode: append}\n"
        "  - {name: c, type: semantic_cache, ttl: 5}\n"
        "  - {name: r, type: router_replay, decisions: [nope]}\n"
    )
    errs = _errors(tmp_path, text)
    _one(errs, "router.yaml: plugins[0].prompt: required field is missing")
    _one(errs, "router.yaml: plugins[0].mode:", "'append'")
    _one(errs, "router.yaml: plugins[1].ttl: unknown field")
    # cross references are checked once the structure is valid
    text = BASE + "plugins:\n  - {name: r, type: router_replay, decisions: [nope]}\n"
    _one(_errors(tmp_path, text), "router.yaml: plugins[0].decisions[0]: unknown decision 'nope'")


def test_model_not_served(tmp_path):
    text = BASE.replace(
        "[{model: small}]", "[{model: small}, {model: medium}, {model: large, backend: local}]"
    )
    errs = _errors(tmp_path, text)
    _one(
        errs,
        "router.yaml: decisions[0].models[1].model: model 'medium' is not served by any backend",
        "(served: large, small)",
    )
    _one(
        errs,
        "router.yaml: decisions[0].models[2].model: model 'large' is not served by backend 'local'",
    )


def test_model_allowed_when_a_backend_discovers(tmp_path):
    text = BASE.replace("models: [large]}", "}") + "  - {name: m, models: [{model: whatever}]}\n"
    (tmp_path / "d.yaml").write_text(text)
    assert load_config(tmp_path / "d.yaml").decisions[1].models[0].model == "whatever"


def test_backend_errors(tmp_path):
    text = BASE.replace('"http://127.0.0.1:8000/v1"', "127.0.0.1:8000").replace(
        "api_key_env: BIG_KEY", "api_key_env: BIG_KEY, api_key: sk"
    )
    errs = _errors(tmp_path, text)
    _one(errs, "router.yaml: backends[0].base_url:", "http")
    _one(errs, "router.yaml: backends[1]:", "not both")


def test_reasoning_effort_needs_reasoning(tmp_path):
    text = BASE.replace("{model: small}", "{model: small, reasoning_effort: high}")
    _one(_errors(tmp_path, text), "router.yaml: decisions[0].models[0]:", "use_reasoning")


def test_malformed_yaml_reports_line(tmp_path):
    text = BASE.replace("decisions:\n", "decisions:\n\t- name: tabbed\n", 1)
    errs = _errors(tmp_path, text)
    assert len(errs) == 1 and errs[0].startswith("router.yaml:9:1: invalid YAML: "), errs
    assert "cannot start any token" in errs[0]


def test_not_a_mapping_and_missing_file(tmp_path):
    errs = _errors(tmp_path, "- just\n- a list\n")
    assert errs == ["router.yaml: top level must be a mapping"]
    with pytest.raises(RouterConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_validate_data_without_file():
    data = yaml.safe_load(BASE)
    data["decisions"][0]["rules"] = {"signal": "nope"}
    with pytest.raises(RouterConfigError, match=r"^<config>: decisions\[0\]\.rules\.signal"):
        validate_data(data)


def test_direct_model_validate_runs_cross_checks():
    data = yaml.safe_load(BASE)
    data["decisions"][0]["rules"] = {"signal": "nope"}
    with pytest.raises(ValueError, match="unknown signal 'nope'"):
        RouterConfig.model_validate(data)


def test_init_validate_round_trip(tmp_path, capsys):
    dest = tmp_path / "conf" / "router.yaml"
    assert router_init(dest) == 0
    assert dest.read_text() == STARTER.read_text()
    out = io.StringIO()
    assert router_validate(dest, out=out) == 0
    assert out.getvalue().startswith(f"OK {dest}: 2 backends")
    # refuses to overwrite without --force
    dest.write_text("edited")
    assert router_init(dest) == 2
    assert "--force" in capsys.readouterr().err
    assert dest.read_text() == "edited"
    assert router_init(dest, force=True) == 0
    assert dest.read_text() == STARTER.read_text()
    # a broken file: every error line, then a count, rc 2
    dest.write_text(BASE.replace("{model: small}", "{model: tiny}"))
    err = io.StringIO()
    assert router_validate(dest, err=err) == 2
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"{dest}: decisions[0].models[0].model: model 'tiny'")
    assert lines[-1] == f"{dest}: 1 problem"


def test_argparse_wiring(tmp_path):
    import argparse

    from strixlm.router.cli import add_router_parser

    parser = argparse.ArgumentParser()
    add_router_parser(parser.add_subparsers(dest="command", required=True))
    f = tmp_path / "r.yaml"
    args = parser.parse_args(["router", "init", str(f)])
    args.func(args)
    assert f.exists()
    with pytest.raises(SystemExit) as ei:
        args.func(args)  # exists, no --force
    assert ei.value.code == 2
    args = parser.parse_args(["router", "validate", str(f)])
    args.func(args)  # OK: no exit
    f.write_text("backends: []\ndecisions: []\n")
    with pytest.raises(SystemExit) as ei:
        args.func(args)
    assert ei.value.code == 2
