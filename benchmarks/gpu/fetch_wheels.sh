#!/usr/bin/env bash
# Download the serving stack's wheels into .whl/ for the GPU machine, which has torch,
# triton and transformers but not these (lib.sh installs .whl/*.whl there into /tmp/site).
# Versions follow what this checkout runs locally (pip show), so the server on the card is
# the one the tests cover. The card runs CPython 3.12 on x86_64 manylinux.
# Usage (repo root, with network access to a package index): bash benchmarks/gpu/fetch_wheels.sh
set -euo pipefail
# fastapi >= 0.16x imports opentelemetry-api (session 34: a server that failed to start).
PKGS=(fastapi starlette uvicorn pydantic pydantic_core annotated-types typing-inspection
  annotated-doc opentelemetry-api gguf)
mkdir -p .whl
for pkg in "${PKGS[@]}"; do
  version=$(python3 -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p')
  if [[ -z "$version" ]]; then
    echo "fetch_wheels: $pkg is not installed here; install the project first (README)" >&2
    exit 1
  fi
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$pkg==$version" 2>&1 | grep -v -i "warning" || true
  ls .whl | grep -qi "^${pkg//-/_}-$version" || {
    echo "fetch_wheels: no wheel for $pkg==$version in .whl" >&2
    exit 1
  }
done
ls .whl
