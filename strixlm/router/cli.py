"""`strixlm router init [PATH]` and `strixlm router validate FILE`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

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


def _init_cmd(args: argparse.Namespace) -> None:
    rc = router_init(args.path, force=args.force)
    if rc:
        raise SystemExit(rc)


def _validate_cmd(args: argparse.Namespace) -> None:
    rc = router_validate(args.file)
    if rc:
        raise SystemExit(rc)


def add_router_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `router init` and `router validate` to the top-level `strixlm` subparsers."""
    router = subparsers.add_parser("router", help="semantic router in front of OpenAI backends")
    rsub = router.add_subparsers(dest="router_command", required=True)

    init = rsub.add_parser("init", help="write a commented starter config")
    init.add_argument("path", nargs="?", default="router.yaml", help="default: ./router.yaml")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(func=_init_cmd)

    val = rsub.add_parser("validate", help="check a config; exit 2 listing every problem")
    val.add_argument("file")
    val.set_defaults(func=_validate_cmd)
    return router
