"""`strixlm router init [PATH] | validate FILE | serve [--config] | eval [--config] [--set]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from strixlm.cli_args import listen_socket, port_number

STARTER = Path(__file__).with_name("starter.yaml")


def router_init(
    path: str | Path = "router.yaml", force: bool = False, out: TextIO | None = None
) -> int:
    """Writes the starter config to `path`; refuses to overwrite unless `force`. Returns rc."""
    out = out or sys.stdout
    dest = Path(path)
    if dest.is_dir():
        dest = dest / "router.yaml"
    if dest.exists() and not force:
        print(f"strixlm router init: {dest} exists; pass --force to overwrite", file=sys.stderr)
        return 2
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(STARTER.read_text())
    print(f"wrote {dest}; check it with: strixlm router validate {dest}", file=out)
    return 0


def summarize(cfg: Any) -> str:
    models = sorted({m for b in cfg.backends for m in b.models})
    discover = sum(1 for b in cfg.backends if not b.models)
    served = f"{len(models)} models" + (f", {discover} discovering" if discover else "")
    return (
        f"{len(cfg.backends)} backends ({served}), {len(cfg.signals)} signals, "
        f"{len(cfg.decisions)} decisions ({cfg.decision_strategy}), "
        f"{len(cfg.plugins)} plugins, selection={cfg.selection.method}"
    )


def router_validate(path: str | Path, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Prints `OK <file>: <summary>` and returns 0, or prints every error line and returns 2."""
    from strixlm.router.config import RouterConfigError, load_config

    out, err = out or sys.stdout, err or sys.stderr
    try:
        cfg = load_config(path)
    except RouterConfigError as e:
        for line in e.messages:
            print(line, file=err)
        n = len(e.messages)
        print(f"{path}: {n} problem{'s' if n != 1 else ''}", file=err)
        return 2
    print(f"OK {path}: {summarize(cfg)}", file=out)
    return 0


def _load_or_default(path: str | None, command: str, err: TextIO):
    """The config at `path` (or the zero-config default), or None after printing problems."""
    from strixlm.router.config import RouterConfigError, default_config, load_config

    if path is None:
        return default_config()
    try:
        return load_config(path)
    except RouterConfigError as e:
        _print_problems(e.messages, path, command, err)
        return None


def _print_problems(messages: list[str], path: str | None, command: str, err: TextIO) -> None:
    for line in messages:
        where = f"{path or 'default config'}: "
        print(line if line.startswith(where) else where + line, file=err)
    n = len(messages)
    print(
        f"strixlm router {command}: {path or 'config'}: {n} problem{'s' if n != 1 else ''}",
        file=err,
    )


def router_serve(
    config: str | None = None,
    host: str | None = None,
    port: int | None = None,
    err: TextIO | None = None,
) -> int:
    """Serves until interrupted; returns 2 (after printing every problem) for a bad config."""
    from strixlm.router.config import RouterConfigError

    err = err or sys.stderr
    cfg = _load_or_default(config, "serve", err)
    if cfg is None:
        return 2
    from strixlm.router.server import run_router
    from strixlm.router.server_state import RouterRuntime

    host, port = host or cfg.server.host, port or cfg.server.port
    try:
        sock = listen_socket(host, port)
    except ValueError as e:
        print(f"strixlm router serve: {e}", file=err)
        return 2
    with sock:
        try:
            runtime = RouterRuntime(cfg, config)  # builds every signal (may take a while)
        except RouterConfigError as e:
            _print_problems(e.messages, config, "serve", err)
            return 2
        run_router(runtime, host, port, sock)
    return 0


def router_eval(
    config: str | None = None,
    rows_path: str | None = None,
    json_out: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Prints the evaluation tables; returns 2 for a bad config or labelled set."""
    import json

    from strixlm.router.config import RouterConfigError
    from strixlm.router.evaluation import evaluate, format_report, load_rows
    from strixlm.router.server_routing import RoutingCore

    out, err = out or sys.stdout, err or sys.stderr
    cfg = _load_or_default(config, "eval", err)
    if cfg is None:
        return 2
    try:
        core = RoutingCore.build(cfg, config)
    except RouterConfigError as e:
        _print_problems(e.messages, config, "eval", err)
        return 2
    try:
        rows = load_rows(rows_path)
    except ValueError as e:
        print(f"strixlm router eval: --set: {e}", file=err)
        return 2
    report = evaluate(core, rows)
    print(f"config: {config or 'default'}; set: {rows_path or 'shipped routing set'}", file=out)
    print(format_report(report), file=out)
    if json_out:
        Path(json_out).write_text(json.dumps(report.to_json(), indent=1))
        print(f"wrote {json_out}", file=out)
    return 0


def _serve_cmd(args: argparse.Namespace) -> None:
    rc = router_serve(args.config, args.host, args.port)
    if rc:
        raise SystemExit(rc)


def _eval_cmd(args: argparse.Namespace) -> None:
    rc = router_eval(args.config, args.set, args.json)
    if rc:
        raise SystemExit(rc)


def _init_cmd(args: argparse.Namespace) -> None:
    rc = router_init(args.path, force=args.force)
    if rc:
        raise SystemExit(rc)


def _validate_cmd(args: argparse.Namespace) -> None:
    rc = router_validate(args.file)
    if rc:
        raise SystemExit(rc)


def add_router_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `router init|validate|serve|eval` to the top-level `strixlm` subparsers."""
    router = subparsers.add_parser("router", help="semantic router in front of OpenAI backends")
    rsub = router.add_subparsers(dest="router_command", required=True)

    init = rsub.add_parser("init", help="write a commented starter config")
    init.add_argument("path", nargs="?", default="router.yaml", help="default: ./router.yaml")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=_init_cmd)

    val = rsub.add_parser("validate", help="check a config; exit 2 listing every problem")
    val.add_argument("file")
    val.set_defaults(func=_validate_cmd)

    serve = rsub.add_parser("serve", help="run the router (OpenAI API + management API)")
    serve.add_argument(
        "--config", default=None, help="router YAML; default: route all to 127.0.0.1:8000"
    )
    serve.add_argument("--host", default=None, help="default: server.host of the config")
    serve.add_argument("--port", type=port_number, default=None, help="default: server.port")
    serve.set_defaults(func=_serve_cmd)

    ev = rsub.add_parser("eval", help="accuracy of a config on a labelled routing set")
    ev.add_argument("--config", default=None, help="router YAML; default: zero-config routing")
    ev.add_argument("--set", default=None, help="JSONL of {prompt, expected_decision}")
    ev.add_argument("--json", default=None, help="also write the report as JSON here")
    ev.set_defaults(func=_eval_cmd)
    return router
