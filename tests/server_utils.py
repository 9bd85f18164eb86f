"""Start the real `strixlm serve` as a subprocess for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0.0 if absent)."""
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return 0.0


class CliServer:
    """A `python -m strixlm.entrypoints.cli ... --port P` subprocess, healthy on return."""

    def __init__(
        self,
        cli: list[str],
        *,
        cwd: Path = REPO,
        extra_env: dict[str, str] | None = None,
        label: str = "server",
        timeout: float = 300.0,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "strixlm.entrypoints.cli", *cli, "--port", str(self.port)]
        env = dict(os.environ, **(extra_env or {}))
        # subprocess_site: its sitecustomize speeds up the Triton interpreter (conftest.py).
        site = str(Path(__file__).parent / "subprocess_site")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), site, env.get("PYTHONPATH")]))
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"strixlm-{label}-", suffix=".log")
        # Own session: teardown can kill the whole group (engine process included).
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                out = self.output()
                self.close()  # its engine process may still be starting
                raise RuntimeError(f"{label} exited with {self.proc.returncode}:\n{out}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                out = self.output()  # before close(), which deletes the log
                self.close()
                raise RuntimeError(f"{label} did not become healthy in {timeout:.0f} s:\n{out}")
            time.sleep(0.3)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-5000:]

    def engine_pid(self) -> int | None:
        """The engine core process (a spawn child of the server)."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        for pid in path.read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:
                return int(pid)
        return None

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=10).text

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever is left of the group
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


class RemoteServer(CliServer):
    """`strixlm serve [MODEL] ARGS...` in a subprocess."""

    def __init__(
        self,
        model: str | None,
        *args: str,
        timeout: float = 300.0,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            ["serve", *([model] if model else []), *args], timeout=timeout, extra_env=extra_env
        )


class EarlyServer:
    """A RemoteServer booting in a thread from now on, for tests that need it later: its
    imports and engine start-up overlap the tests before them (which leave a core free
    while Python runs the interpreted kernels). get() waits for it to be healthy."""

    def __init__(self, model: str | None, *args: str) -> None:
        self._pool = ThreadPoolExecutor(1)
        self._future = self._pool.submit(RemoteServer, model, *args)

    def get(self) -> RemoteServer:
        return self._future.result()

    def close(self) -> None:
        self._pool.shutdown()
        if self._future.exception() is None:
            self._future.result().close()


def boot_early_for(request, fixture: str, model: str | None, *args: str, first=()):
    """For a module-scoped autouse fixture: yields an EarlyServer (closed afterwards) when
    a selected test of the requesting module uses `fixture`, else None (nothing boots).
    first: fixtures to set up before it boots (e.g. a model it will look for)."""
    used = any(
        fixture in item.fixturenames
        for item in request.session.items
        if getattr(item, "module", None) is request.module
    )
    if not used:
        yield None
        return
    for name in first:
        request.getfixturevalue(name)
    early = EarlyServer(model, *args)
    try:
        yield early
    finally:
        early.close()


@contextlib.contextmanager
def openai_clients(
    model_dir: str, servers: dict[str, tuple[str, ...]], common: tuple[str, ...]
) -> Iterator[dict]:
    """Start one `strixlm serve` per entry (name -> extra flags) together, each loading its
    own engine process, and yield an `openai` client per name; stop them all afterwards."""
    import openai

    with ThreadPoolExecutor(len(servers)) as pool:
        futures = {
            name: pool.submit(RemoteServer, model_dir, *args, *common)
            for name, args in servers.items()
        }
        started = {name: f.result() for name, f in futures.items()}
    try:
        yield {
            name: openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
            for name, srv in started.items()
        }
    finally:
        with ThreadPoolExecutor(len(started) or 1) as pool:  # each waits for its shutdown
            list(pool.map(CliServer.close, started.values()))
