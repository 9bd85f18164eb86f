"""The CLI names the bad flag and exits 2 instead of crashing."""

from __future__ import annotations

import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "strixlm.entrypoints.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


BAD_FLAGS = [
    (["serve", "--max-num-seqs", "0"], "--max-num-seqs"),
    (["serve", "--block-size", "12"], "--block-size"),
    (["serve", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    (["serve", "--max-num-batched-tokens", "lots"], "--max-num-batched-tokens"),
    (["serve", "--dtype", "int3"], "--dtype"),
    (["serve", "--port", "99999"], "--port"),
]


@pytest.fixture(scope="module")
def bad_flag_runs() -> dict[str, subprocess.CompletedProcess]:
    """Each bad command line in its own process, all started at once: each spends seconds
    importing before it parses, and they overlap on several cores."""
    with ThreadPoolExecutor(len(BAD_FLAGS)) as pool:
        runs = {flag: pool.submit(run_cli, *args) for args, flag in BAD_FLAGS}
        return {flag: r.result() for flag, r in runs.items()}


@pytest.mark.parametrize("args, flag", BAD_FLAGS)
def test_bad_flags_name_the_flag(bad_flag_runs, args, flag):
    r = bad_flag_runs[flag]
    assert r.args[3:] == args
    assert r.returncode == 2
    assert flag in r.stderr
    assert "Traceback" not in r.stderr


def test_port_in_use_fails_before_the_model_loads(tiny_llama_dir):
    """The socket is bound first: a taken port is a one-line error naming the flag, not a
    traceback after a (possibly minutes-long) model load."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        r = run_cli("serve", tiny_llama_dir, "--device", "cpu", "--port", port)
        router = run_cli("router", "serve", "--port", port)
    for run in (r, router):
        assert run.returncode == 2, run.stderr
        assert f"--port {port}: cannot listen on 127.0.0.1" in run.stderr
        assert "Traceback" not in run.stderr
    assert "starting engine" not in r.stderr


def test_generate_runs_offline(tiny_llama_dir):
    r = run_cli(
        "generate",
        tiny_llama_dir,
        "--device",
        "cpu",
        "--prompt",
        "Hello",
        "--max-tokens",
        "5",
        "--kv-cache-memory",
        str(32 << 20),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()


def test_chat_in_process_replies_as_llm_chat(tiny_llama_dir, type_lines, capsys):
    """`strixlm chat` without --url: each reply is LLM.chat's greedy reply to the
    conversation so far (a system prompt kept through /reset)."""
    from strixlm.engine.request import SamplingParams
    from strixlm.entrypoints.chat_cli import run_chat
    from strixlm.entrypoints.cli import build_parser, engine_config_from_args
    from strixlm.entrypoints.llm import LLM

    flags = ["--device", "cpu", "--dtype", "float32", "--max-model-len", "256"]
    args = build_parser().parse_args(
        ["chat", tiny_llama_dir, *flags, "--temperature", "0", "--max-tokens", "6"]
        + ["--system", "Be brief."]
    )
    type_lines(["hi", "more", "/reset", "hi"])
    run_chat(args, engine_config_from_args)
    replies = capsys.readouterr().out.splitlines()[1:4]

    llm = LLM(tiny_llama_dir, device="cpu", dtype="float32", max_model_len=256)
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    system = {"role": "system", "content": "Be brief."}

    def reply(conv: list[dict]) -> str:
        return llm.chat(conv, greedy, use_tqdm=False)[0].outputs[0].text

    first = reply([system, {"role": "user", "content": "hi"}])
    second = reply(
        [
            system,
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "more"},
        ]
    )
    assert replies == [first, second, first]


def test_generate_without_a_prompt_is_a_usage_error():
    r = subprocess.run(
        [sys.executable, "-m", "strixlm.entrypoints.cli", "generate", "--max-tokens", "4"],
        input="\n  \n",  # blank lines are no prompts
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert "no prompt" in r.stderr and "--prompt" in r.stderr
    assert "Traceback" not in r.stderr and "engine ready" not in r.stderr  # no model loaded
