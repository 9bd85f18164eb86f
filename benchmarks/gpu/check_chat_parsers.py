"""Reasoning and tool-call parsing through `strixlm serve` on CUDA, with vLLM's Nemotron 3
Super command line (fp8 KV cache, -tp 1, --trust-remote-code, qwen3_coder, nemotron_v3).

The model is tests/scripted_model.py's tiny Llama, trained to write `<think>` blocks and
Qwen3-Coder XML tool calls for fixed prompts. Each check sends one chat request, plain and
streamed, and compares reasoning / content / tool calls / finish_reason with what the
script says; it prints PASS or FAIL per check and server config, and the raw output on a
failure (a token flipped by bf16 or fp8 numerics shows up there, not as a parser error).

python benchmarks/gpu/check_chat_parsers.py --model DIR     (a trained scripted model), or
python benchmarks/gpu/check_chat_parsers.py --tokenizer SMOLLM2_DIR   (trains it first, ~10 s)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from scripted_model import (  # noqa: E402
    HELLO_PY,
    MATH,
    WEATHER,
    WEATHER_ARGS,
    WEATHER_TOOL,
    WRITE,
    WRITE_FILE_TOOL,
    build_scripted_model,
)

NEMOTRON = [
    "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "1", "--trust-remote-code",
    "--served-model-name", "nemotron", "--enable-auto-tool-choice",
    "--tool-call-parser", "qwen3_coder", "--reasoning-parser", "nemotron_v3",
]  # fmt: skip
CONFIGS = {
    "nemotron command line (fp8 KV)": NEMOTRON,
    "same, auto KV dtype": [a for a in NEMOTRON if a not in ("--kv-cache-dtype", "fp8")],
}

# name -> (messages, request extras, expected reasoning, content, [(name, args)], finish)
CHECKS = {
    "reasoning": (MATH, {}, "Two plus two is four.", "The answer is 4.", [], "stop"),
    "thinking off": (
        MATH,
        {"chat_template_kwargs": {"enable_thinking": False}},
        None,
        "The answer is 4.",
        [],
        "stop",
    ),
    "xml tool call": (
        WEATHER,
        {"tools": [WEATHER_TOOL]},
        "I call get_weather.",
        None,
        [("get_weather", WEATHER_ARGS)],
        "tool_calls",
    ),
    "multi-line string argument": (
        WRITE,
        {"tools": [WRITE_FILE_TOOL, WEATHER_TOOL]},
        "I call write_file.",
        "I will write the file.",
        [("write_file", {"path": "hello.py", "content": HELLO_PY, "mode": 644})],
        "tool_calls",
    ),
}


def start_server(model: str, flags: list[str], port: int, device: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "strixlm.entrypoints.cli", "serve", model, "--device", device]
    cmd += ["--port", str(port), "--max-model-len", "1024", *flags]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = tempfile.NamedTemporaryFile("w+", prefix="check-chat-parsers-", suffix=".log")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(log.read()[-3000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("server did not become healthy")


def ask(base: str, messages, extra: dict, stream: bool) -> dict:
    body = {"model": "nemotron", "messages": messages, "temperature": 0.0, "max_tokens": 200}
    body.update(extra, stream=stream)
    if not stream:
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
        choice = r.json()["choices"][0]
        m = choice["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
        return dict(
            reasoning=m.get("reasoning_content"),
            content=m.get("content"),
            calls=calls,
            finish=choice["finish_reason"],
        )
    out = dict(reasoning="", content="", calls={}, finish=None)
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                d = choice["delta"]
                out["reasoning"] += d.get("reasoning_content") or ""
                out["content"] += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    name, args = out["calls"].get(tc["index"], ("", ""))
                    fn = tc.get("function") or {}
                    name += fn.get("name") or ""  # only the call's first delta has it
                    out["calls"][tc["index"]] = (name, args + (fn.get("arguments") or ""))
                out["finish"] = choice.get("finish_reason") or out["finish"]
    out["reasoning"] = out["reasoning"] or None
    out["content"] = out["content"] or None
    out["calls"] = [out["calls"][i] for i in sorted(out["calls"])]
    return out


def run_config(model: str, label: str, flags: list[str], port: int, device: str) -> int:
    proc = start_server(model, flags, port, device)
    failures = 0
    try:
        base = f"http://127.0.0.1:{port}"
        for name, (messages, extra, reasoning, content, calls, finish) in CHECKS.items():
            for stream in (False, True):
                t = time.monotonic()
                got = ask(base, messages, extra, stream)
                ms = (time.monotonic() - t) * 1000
                parsed = [(n, json.loads(a)) for n, a in got["calls"]]
                ok = (got["reasoning"], got["content"], parsed, got["finish"]) == (
                    reasoning,
                    content,
                    calls,
                    finish,
                )
                failures += not ok
                mode = "stream" if stream else "full"
                print(f"{'PASS' if ok else 'FAIL'} [{label}] {name} ({mode}, {ms:.0f} ms)")
                if not ok:
                    print(f"    got {got}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return failures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a trained scripted model folder")
    ap.add_argument("--tokenizer", help="SmolLM2 folder, to train the scripted model here")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", default="", help="run the configs whose label contains this")
    args = ap.parse_args()
    model = args.model
    if model is None:
        if not args.tokenizer:
            ap.error("give --model or --tokenizer")
        model = tempfile.mkdtemp(prefix="scripted-chat-")
        build_scripted_model(Path(model), args.tokenizer)
    failures = 0
    for i, (label, flags) in enumerate(CONFIGS.items()):
        if args.only in label:
            failures += run_config(model, label, flags, 18400 + i, args.device)
    verdict = "PASS" if failures == 0 else "FAIL"
    print(f"{verdict}: chat parsers on {args.device}, {failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
